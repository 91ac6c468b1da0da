// SAM-ViT attention with decomposed relative positions over an n x n token grid (a window, or
// the whole g x g map for global blocks), one workgroup per (real token, head):
//   s_j = q.k_j * scale + q.Th[qy - ky + n - 1] + q.Tw[qx - kx + n - 1]   (unscaled q in the bias)
//   out = softmax(s) . v
// qkv holds the g*g real tokens as [q | k | v] rows of 3C; windowed blocks see the map zero-padded
// to whole n x n windows, and a padded token's q/k/v is the qkv bias (a zero row through the
// Linear), which takes part as key/value with no mask, as upstream. Online softmax over chunks of
// 64 keys, float32.
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Qb { float qkv[]; };
layout(std430, binding = 1) readonly buffer Bb { float qkv_bias[]; };
layout(std430, binding = 2) readonly buffer Hb { float th[]; };  // [2n-1, hd]
layout(std430, binding = 3) readonly buffer Wb { float tw[]; };  // [2n-1, hd]
layout(std430, binding = 4) writeonly buffer Ob { float o[]; };
layout(push_constant) uniform P { uint g, n, heads, hd, c; float scale; } p;
#include "common.glsl"

const uint CHUNK = 64u;
const uint MAX_DIM = 256u;
const uint MAX_N = 128u;
shared float qs[MAX_DIM];
shared float relh[MAX_N];
shared float relw[MAX_N];
shared float sc[CHUNK];
shared float red[CHUNK];

// Row offset of window token t (0 <= t < n*n) of window (wy, wx), or -1 for a padded token.
int token_row(uint wy, uint wx, uint t) {
  const uint y = wy * p.n + t / p.n, x = wx * p.n + t % p.n;
  return (y < p.g && x < p.g) ? int((y * p.g + x) * 3u * p.c) : -1;
}

float kv_at(int row, uint part, uint d) {  // part 1 = k, 2 = v
  return row >= 0 ? qkv[uint(row) + part * p.c + d] : qkv_bias[part * p.c + d];
}

void main() {
  const uint gi = group_index(), tid = gl_LocalInvocationID.x;
  if (gi >= p.g * p.g * p.heads) return;
  const uint token = gi / p.heads, h = gi % p.heads;
  const uint y = token / p.g, x = token % p.g;
  const uint wy = y / p.n, wx = x / p.n, qy = y % p.n, qx = x % p.n;
  const uint hoff = h * p.hd;
  for (uint d = tid; d < p.hd; d += 64u) qs[d] = qkv[token * 3u * p.c + hoff + d];
  barrier();
  // Decomposed rel-pos terms of this query for every key row ky and column kx.
  for (uint i = tid; i < 2u * p.n; i += 64u) {
    const bool is_h = i < p.n;
    const uint kk = is_h ? i : i - p.n;
    const uint r = ((is_h ? qy : qx) + p.n - 1u - kk) * p.hd;
    float s = 0.0;
    for (uint d = 0u; d < p.hd; ++d) s = fma(qs[d], is_h ? th[r + d] : tw[r + d], s);
    if (is_h) relh[kk] = s; else relw[kk] = s;
  }
  barrier();

  const uint total = p.n * p.n;
  float m = -1.0 / 0.0, l = 0.0;
  float acc[MAX_DIM / 64u];
  for (uint r = 0u; r < MAX_DIM / 64u; ++r) acc[r] = 0.0;
  for (uint c0 = 0u; c0 < total; c0 += CHUNK) {
    const uint j = c0 + tid;
    float s = -1.0 / 0.0;
    if (j < total) {
      const int row = token_row(wy, wx, j);
      float dot = 0.0;
      for (uint d = 0u; d < p.hd; ++d) dot = fma(qs[d], kv_at(row, 1u, hoff + d), dot);
      s = dot * p.scale + relh[j / p.n] + relw[j % p.n];
    }
    red[tid] = s;
    barrier();
    for (uint w = CHUNK / 2u; w > 0u; w >>= 1u) {
      if (tid < w) red[tid] = max(red[tid], red[tid + w]);
      barrier();
    }
    const float m_new = max(m, red[0]);
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
      if (d >= p.hd) break;
      float a = acc[r] * alpha;
      for (uint jj = 0u; jj < cnt; ++jj) a = fma(sc[jj], kv_at(token_row(wy, wx, c0 + jj), 2u, hoff + d), a);
      acc[r] = a;
    }
    barrier();
  }
  for (uint r = 0u; r < MAX_DIM / 64u; ++r) {
    const uint d = tid + 64u * r;
    if (d < p.hd) o[token * p.c + hoff + d] = acc[r] / l;
  }
}
