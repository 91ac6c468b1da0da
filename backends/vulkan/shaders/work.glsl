// The rows and weights a mat-vec workgroup works on: work(first, m, wbase, g) gives the first
// input/output row, the row count, the weight element offset and the column-tile index; false:
// nothing to do (uniform over the workgroup). Plain: p.m rows from row 0 over the whole grid.
// STACKED (MoE decode step): p.tiles workgroups per grouped routing slot, one row each (the slot's
// row of the grouped buffers), the weights of the slot's expert (route[p.slot_expert + slot]) in a
// stack of p.stack_experts [n, k] matrices starting at expert p.expert0; slots whose expert lies
// in another stack chunk are skipped.
bool work(out uint first, out uint m, out uint wbase, out uint g) {
#ifdef STACKED
  const uint slot = group_index() / p.tiles;
  first = slot;
  m = 1u;
  wbase = 0u;
  g = group_index() % p.tiles;
  if (slot >= p.slots) return false;
  const uint e = route[p.slot_expert + slot];
  if (e < p.expert0 || e - p.expert0 >= p.stack_experts) return false;
  wbase = (e - p.expert0) * p.n * p.k;
  return true;
#else
  first = 0u;
  m = p.m;
  wbase = 0u;
  g = group_index();
  return true;
#endif
}
