// Scaled dot-product attention, one workgroup per (query row, head): softmax(q.k^T * scale) . v
// over the keys of set A (rows [0, na)) followed by set B (rows [0, nb)), float32 throughout.
//  - decode: one query over the prefill reference (A) and the generated ring/window (B), no mask;
//  - causal prefill: query row i sees A rows [0, causal_base + i] and B is empty.
// Keys go in chunks of 64 with an online (running max / running sum) softmax, so any number of
// keys fits in shared memory. Query head h reads KV head h / group (repeat_kv). Bidirectional
// attention over packed [q | k | v] rows (CLIP) is set A with k_base/v_base and no mask.
// SPANS (SR-SWA decode): set A is, per head, the reference rows that sparse_select.comp chose: key
// j of A is row j of the head's spans, in order (sel, at sel_base + head * sel_stride).
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Qb { float q[]; };
layout(std430, binding = 1) readonly buffer KAb { float ka[]; };
layout(std430, binding = 2) readonly buffer VAb { float va[]; };
layout(std430, binding = 3) readonly buffer KBb { float kb[]; };
layout(std430, binding = 4) readonly buffer VBb { float vb[]; };
layout(std430, binding = 5) writeonly buffer Ob { float o[]; };
#ifdef SPANS
layout(std430, binding = 6) readonly buffer Sb { uint sel[]; };
#endif
layout(push_constant) uniform P {
  uint rows, heads, group, head_dim, q_off, q_stride, kv_stride, na, nb, causal, causal_base, o_off, o_stride;
  float scale;
  uint k_base, v_base;  // offsets of the keys / values inside their rows (packed qkv rows)
  uint sel_base, sel_stride;  // SPANS
} p;
#include "common.glsl"

const uint CHUNK = 64u;
const uint MAX_DIM = 256u;
shared float qs[MAX_DIM];
shared float sc[CHUNK];
shared float red[CHUNK];
shared uint krow[CHUNK];  // the chunk's keys: their rows in A, or na_vis + their rows in B

// The row of set A that holds key j (j < na_vis).
uint a_row(uint j, uint h) {
#ifdef SPANS
  // Span i: sel[at + 3i] = first row, [+1] rows, [+2] index of its first key; binary search.
  const uint at = p.sel_base + h * p.sel_stride + 3u;
  uint lo = 0u, hi = sel[at - 3u];
  while (hi - lo > 1u) {
    const uint mid = (lo + hi) / 2u;
    if (sel[at + 3u * mid + 2u] <= j) lo = mid; else hi = mid;
  }
  return sel[at + 3u * lo] + (j - sel[at + 3u * lo + 2u]);
#else
  return j;
#endif
}

float key_dot(uint j, uint na_vis, uint koff, uint row) {
  float s = 0.0;
  if (j < na_vis) {
    const uint b = row * p.kv_stride + koff;
    for (uint d = 0u; d < p.head_dim; ++d) s = fma(qs[d], ka[b + d], s);
  } else {
    const uint b = (j - na_vis) * p.kv_stride + koff;
    for (uint d = 0u; d < p.head_dim; ++d) s = fma(qs[d], kb[b + d], s);
  }
  return s;
}

void main() {
  const uint g = group_index(), tid = gl_LocalInvocationID.x;
  if (g >= p.rows * p.heads) return;
  const uint row = g / p.heads, h = g % p.heads;
  const uint koff = (h / p.group) * p.head_dim + p.k_base, voff = (h / p.group) * p.head_dim + p.v_base;
  for (uint d = tid; d < p.head_dim; d += 64u) qs[d] = q[p.q_off + row * p.q_stride + h * p.head_dim + d];
#ifdef SPANS
  const uint na_vis = sel[p.sel_base + h * p.sel_stride + 1u];
#else
  const uint na_vis = p.causal != 0u ? min(p.na, p.causal_base + row + 1u) : p.na;
#endif
  const uint nb_vis = p.causal != 0u ? 0u : p.nb;
  const uint total = na_vis + nb_vis;
  barrier();

  float m = -1.0 / 0.0, l = 0.0;
  float acc[MAX_DIM / 64u];
  for (uint r = 0u; r < MAX_DIM / 64u; ++r) acc[r] = 0.0;
  for (uint c0 = 0u; c0 < total; c0 += CHUNK) {
    const uint j = c0 + tid;
    krow[tid] = j < na_vis ? a_row(j, h) : j;
    const float s = j < total ? key_dot(j, na_vis, koff, krow[tid]) * p.scale : -1.0 / 0.0;
    red[tid] = s;
    barrier();
    for (uint w = CHUNK / 2u; w > 0u; w >>= 1u) {
      if (tid < w) red[tid] = max(red[tid], red[tid + w]);
      barrier();
    }
    const float m_new = max(m, red[0]);  // finite: every chunk holds at least one key
    barrier();
    const float e = j < total ? exp(s - m_new) : 0.0;
    sc[tid] = e;
    red[tid] = e;
    barrier();
    for (uint w = CHUNK / 2u; w > 0u; w >>= 1u) {
      if (tid < w) red[tid] += red[tid + w];
      barrier();
    }
    const float alpha = exp(m - m_new);
    l = l * alpha + red[0];
    m = m_new;
    const uint cnt = min(CHUNK, total - c0);
    for (uint r = 0u; r < MAX_DIM / 64u; ++r) {
      const uint d = tid + 64u * r;
      if (d >= p.head_dim) break;
      float a = acc[r] * alpha;
      for (uint jj = 0u; jj < cnt; ++jj) {
        const uint key = c0 + jj;
        const uint kr = krow[jj];
        const float v = key < na_vis ? va[kr * p.kv_stride + voff + d] : vb[(kr - na_vis) * p.kv_stride + voff + d];
        a = fma(sc[jj], v, a);
      }
      acc[r] = a;
    }
    barrier();
  }
  for (uint r = 0u; r < MAX_DIM / 64u; ++r) {
    const uint d = tid + 64u * r;
    if (d < p.head_dim) o[p.o_off + row * p.o_stride + h * p.head_dim + d] = acc[r] / l;
  }
}
