// SR-SWA selection of one decode step and layer on the device, the CPU's rule
// (uocr::SparseReference::select_step, decoder/sparse_reference.hpp) bit for bit: one workgroup per
// query head runs the page gate (beam search down the gate tree), the token selector over the
// gated pages' blocks, and writes the head's reference spans, merged by row, for the attention
// shader (attention.comp, SPANS). No host round trip.
//
// Same bits as the CPU: a Quest bound is summed in the CPU's order (8 lanes, then the lanes in
// order, then the tail; max(a, b) as the CPU's std::max); "keep the best n" sorts the candidates by
// (score descending, id ascending) and keeps the first n: the set the CPU's nth_element keeps.
// Scores go to order-preserving integer keys (+0 for -0, so equal scores tie as on the CPU) and a
// bitonic sort in the head's scratch orders (key, id) pairs, any count (padded to a power of two).
//
// Buffers (laid out by uocr/decoder/sparse_tables.hpp, shared with CUDA's sparse_select.cu): bounds
// of the layer ([kv_head][block or node][min d, max d]); tables (uint words):
//   blocks [2B] (first row, rows), page_first_block [P + 1], level_first [L + 1], always [2A];
// scratch per head: cand [2C] (key, id) pairs, spans [2S] (row, rows) pairs, kept [K];
// sel per (layer, head), `sel_stride` words: count, total rows, bounds, then count x (row, rows,
// first key index) (attention.comp finds a key's row from the running first key index);
// counts: [0] rows attended, [1] bounds evaluated, summed over heads and layers (atomics).
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer Qb { float q[]; };
layout(std430, binding = 1) readonly buffer Blk { float blk[]; };
layout(std430, binding = 2) readonly buffer Nod { float nod[]; };
layout(std430, binding = 3) readonly buffer Tab { uint tab[]; };
layout(std430, binding = 4) coherent buffer Scr { uint scr[]; };
layout(std430, binding = 5) writeonly buffer Sel { uint sel[]; };
layout(std430, binding = 6) buffer Cnt { uint counts[]; };
layout(push_constant) uniform P {
  uint heads, group, head_dim, layer;
  uint blocks, pages, levels, nodes;       // B, P, gate levels L, gate nodes (all levels)
  uint fan, beam, page_budget, block_budget;
  uint gates, always;                      // A
  uint cand_cap, span_cap, kept_cap;       // C, S, K (powers of two for C and S)
  uint sel_stride;
} p;

const uint WG = 256u;
const uint PAD = 0xffffffffu;
const uint MAX_DIM = 256u;
shared float qs[MAX_DIM];
shared uint n_real;   // real candidates (slots may hold padding)
shared uint n_kept;

// Set at the start of main(): this invocation, its query head and KV head, the head's scratch.
uint tid, head, kvh, CAND, SPAN, KEPT;
// Table offsets: page_first_block, level_first, always.
uint T_PFB, T_LF, T_ALW;

#define QUEST(NAME, BUF)                                                      \
  float NAME(uint at) {                                                      \
    precise float acc[8];                                                    \
    for (uint l = 0u; l < 8u; ++l) acc[l] = 0.0;                             \
    const uint d = p.head_dim;                                               \
    uint i = 0u;                                                             \
    for (; i + 8u <= d; i += 8u)                                             \
      for (uint l = 0u; l < 8u; ++l) {                                       \
        precise float a = qs[i + l] * BUF[at + i + l];                       \
        precise float b = qs[i + l] * BUF[at + d + i + l];                   \
        acc[l] += a < b ? b : a;                                             \
      }                                                                      \
    precise float s = 0.0;                                                   \
    for (uint l = 0u; l < 8u; ++l) s += acc[l];                              \
    for (; i < d; ++i) {                                                     \
      precise float a = qs[i] * BUF[at + i];                                 \
      precise float b = qs[i] * BUF[at + d + i];                             \
      s += a < b ? b : a;                                                    \
    }                                                                        \
    return s;                                                                \
  }
QUEST(node_bound, nod)
QUEST(block_bound, blk)

// Ascending key = descending score; -0 counts as +0 (the CPU compares them equal).
uint score_key(float s) {
  const uint u = floatBitsToUint(s == 0.0 ? 0.0 : s);
  const uint ordered = (u & 0x80000000u) != 0u ? ~u : (u | 0x80000000u);
  return ~ordered;
}

bool pair_less(uvec2 a, uvec2 b) { return a.x < b.x || (a.x == b.x && a.y < b.y); }
uvec2 load_pair(uint base, uint i) { return uvec2(scr[base + 2u * i], scr[base + 2u * i + 1u]); }
void store_pair(uint base, uint i, uvec2 v) {
  scr[base + 2u * i] = v.x;
  scr[base + 2u * i + 1u] = v.y;
}

void sync() {
  memoryBarrierBuffer();
  memoryBarrierShared();
  barrier();
}

uint pow2_at_least(uint n) {
  uint m = 1u;
  while (m < n) m <<= 1u;
  return m;
}

// Ascending bitonic sort of the pairs [0, n) at base (n: a power of two).
void sort_pairs(uint base, uint n) {
  for (uint k = 2u; k <= n; k <<= 1u)
    for (uint j = k >> 1u; j > 0u; j >>= 1u) {
      for (uint i = tid; i < n; i += WG) {
        const uint o = i ^ j;
        if (o > i) {
          const uvec2 a = load_pair(base, i), b = load_pair(base, o);
          if (pair_less(b, a) == ((i & k) == 0u)) {
            store_pair(base, i, b);
            store_pair(base, o, a);
          }
        }
      }
      sync();
    }
}

// Pads the candidate slots past `slots` up to a power of two and sorts them.
void sort_candidates(uint slots) {
  const uint n = pow2_at_least(max(slots, 1u));
  for (uint i = slots + tid; i < n; i += WG) store_pair(CAND, i, uvec2(PAD, PAD));
  sync();
  sort_pairs(CAND, n);
}

uint node_at(uint node) { return (kvh * p.nodes + node) * 2u * p.head_dim; }
uint block_at(uint b) { return (kvh * p.blocks + b) * 2u * p.head_dim; }

void main() {
  tid = gl_LocalInvocationID.x;
  head = gl_WorkGroupID.x;
  if (head >= p.heads) return;
  kvh = head / p.group;
  CAND = head * (2u * p.cand_cap + 2u * p.span_cap + p.kept_cap);
  SPAN = CAND + 2u * p.cand_cap;
  KEPT = SPAN + 2u * p.span_cap;
  T_PFB = 2u * p.blocks;
  T_LF = T_PFB + p.pages + 1u;
  T_ALW = T_LF + p.levels + 1u;
  for (uint d = tid; d < p.head_dim; d += WG) qs[d] = q[head * p.head_dim + d];
  if (tid == 0u) n_real = 0u;
  sync();
  uint bounds = 0u;

  // 1. Page gate: the pages that pass go to kept[0, n_pages).
  uint n_pages;
  if (p.gates != 0u) {
    const uint top = p.levels - 1u;
    const uint top_first = tab[T_LF + top], top_nodes = tab[T_LF + top + 1u] - top_first;
    for (uint i = tid; i < top_nodes; i += WG) store_pair(CAND, i, uvec2(score_key(node_bound(node_at(top_first + i))), i));
    uint slots = top_nodes, real = top_nodes;
    bounds += top_nodes;
    for (uint lv = top; lv > 0u; --lv) {
      sort_candidates(slots);
      const uint keep = min(p.beam, real);
      for (uint i = tid; i < keep; i += WG) scr[KEPT + i] = scr[CAND + 2u * i + 1u];
      if (tid == 0u) n_real = 0u;
      sync();
      // Children of the kept nodes: slot k*F + c is child c of kept node k (padding past the level's end).
      const uint first = tab[T_LF + lv - 1u], nodes = tab[T_LF + lv] - first;
      slots = keep * p.fan;
      for (uint s = tid; s < slots; s += WG) {
        const uint child = scr[KEPT + s / p.fan] * p.fan + s % p.fan;
        if (child < nodes) {
          store_pair(CAND, s, uvec2(score_key(node_bound(node_at(first + child))), child));
          atomicAdd(n_real, 1u);
        } else {
          store_pair(CAND, s, uvec2(PAD, PAD));
        }
      }
      sync();
      real = n_real;
      bounds += real;
    }
    sort_candidates(slots);
    n_pages = min(p.page_budget, real);
    for (uint i = tid; i < n_pages; i += WG) scr[KEPT + i] = scr[CAND + 2u * i + 1u];
    sync();
  } else {
    n_pages = p.pages;
  }

  // 2. Token selector: the gated pages' blocks as candidates (slot order: page by page).
  uint gated = 0u;
  if (p.gates != 0u)
    for (uint i = 0u; i < n_pages; ++i) {
      const uint pg = scr[KEPT + i];
      const uint b0 = tab[T_PFB + pg], b1 = tab[T_PFB + pg + 1u];
      for (uint t = tid; t < b1 - b0; t += WG) store_pair(CAND, gated + t, uvec2(0u, b0 + t));
      gated += b1 - b0;
    }
  else {
    for (uint b = tid; b < p.blocks; b += WG) store_pair(CAND, b, uvec2(0u, b));
    gated = p.blocks;
  }
  sync();
  const bool choose = p.block_budget != 0u && gated > p.block_budget;
  uint n_blocks = gated;
  if (choose) {
    for (uint s = tid; s < gated; s += WG) {
      const uint b = scr[CAND + 2u * s + 1u];
      scr[CAND + 2u * s] = score_key(block_bound(block_at(b)));
    }
    sync();
    bounds += gated;
    sort_candidates(gated);
    n_blocks = p.block_budget;
  }

  // 3. Spans: the always-visible rows + the selected blocks, sorted by row and merged.
  const uint n_spans = p.always + n_blocks;
  for (uint i = tid; i < p.always; i += WG) store_pair(SPAN, i, uvec2(tab[T_ALW + 2u * i], tab[T_ALW + 2u * i + 1u]));
  for (uint i = tid; i < n_blocks; i += WG) {
    const uint b = scr[CAND + 2u * i + 1u];
    store_pair(SPAN, p.always + i, uvec2(tab[2u * b], tab[2u * b + 1u]));
  }
  const uint n_sorted = pow2_at_least(max(n_spans, 1u));
  for (uint i = n_spans + tid; i < n_sorted; i += WG) store_pair(SPAN, i, uvec2(PAD, PAD));
  sync();
  sort_pairs(SPAN, n_sorted);
  if (tid == 0u) {
    const uint at = (p.layer * p.heads + head) * p.sel_stride;
    uint count = 0u, total = 0u, row = 0u, rows = 0u;
    for (uint i = 0u; i < n_spans; ++i) {
      const uvec2 s = load_pair(SPAN, i);
      if (s.y == 0u) continue;
      if (count > 0u && row + rows >= s.x) {
        rows = max(row + rows, s.x + s.y) - row;
        continue;
      }
      if (count > 0u) {  // close the previous span
        sel[at + 3u * count] = row;
        sel[at + 3u * count + 1u] = rows;
        sel[at + 3u * count + 2u] = total;
        total += rows;
      }
      ++count;
      row = s.x;
      rows = s.y;
    }
    if (count > 0u) {
      sel[at + 3u * count] = row;
      sel[at + 3u * count + 1u] = rows;
      sel[at + 3u * count + 2u] = total;
      total += rows;
    }
    sel[at] = count;
    sel[at + 1u] = total;
    sel[at + 2u] = bounds;
    atomicAdd(counts[0], total);
    atomicAdd(counts[1], bounds);
  }
}
