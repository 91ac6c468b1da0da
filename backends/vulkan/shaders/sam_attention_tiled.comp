// SAM attention (windowed or global, decomposed rel-pos) with one query per thread: a workgroup
// takes 64 query tokens of one window and head, streams the window's keys and values through
// shared memory in tiles, and keeps an online softmax and the HD-float output in registers
// (HD is a compile-time head dim: variants for 32 / 64 / 128). The rel-pos terms come
// precomputed from sam_relpos. Padded window tokens (outside the g x g map) are keys/values equal
// to the qkv bias, as upstream; their queries are not computed (upstream drops them).
#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Qb { float qkv[]; };
layout(std430, binding = 1) readonly buffer Bb { float qkv_bias[]; };
layout(std430, binding = 2) readonly buffer Rb { float rb[]; };
layout(std430, binding = 3) writeonly buffer Ob { float o[]; };
layout(push_constant) uniform P { uint g, n, heads, c, nw, qblocks; float scale; } p;
#include "common.glsl"

const uint TK = 2048u / HD;  // keys per tile: K and V tiles take 16 KiB of shared memory
shared float ks[TK * HD];
shared float vs[TK * HD];

void main() {
  const uint gi = group_index(), tid = gl_LocalInvocationID.x;
  if (gi >= p.nw * p.nw * p.heads * p.qblocks) return;  // uniform per workgroup
  const uint qb = gi % p.qblocks, rest = gi / p.qblocks, h = rest % p.heads, win = rest / p.heads;
  const uint wy = win / p.nw, wx = win % p.nw, hoff = h * HD, total = p.n * p.n;
  const uint t = qb * 64u + tid;
  const uint y = wy * p.n + t / p.n, x = wx * p.n + t % p.n;
  const bool valid = t < total && y < p.g && x < p.g;
  const uint token = valid ? y * p.g + x : 0u;
  const uint relbase = (token * p.heads + h) * 2u * p.n;

  float q[HD], acc[HD];
  [[unroll]] for (uint d = 0u; d < HD; ++d) {
    q[d] = valid ? qkv[token * 3u * p.c + hoff + d] : 0.0;
    acc[d] = 0.0;
  }
  float m = -1.0 / 0.0, l = 0.0;
  for (uint k0 = 0u; k0 < total; k0 += TK) {
    for (uint e = tid; e < TK * HD; e += 64u) {
      const uint j = k0 + e / HD, d = e % HD;
      const uint ky = wy * p.n + j / p.n, kx = wx * p.n + j % p.n;
      float kv = 0.0, vv = 0.0;
      if (j < total) {
        if (ky < p.g && kx < p.g) {
          const uint row = (ky * p.g + kx) * 3u * p.c + hoff + d;
          kv = qkv[row + p.c];
          vv = qkv[row + 2u * p.c];
        } else {
          kv = qkv_bias[p.c + hoff + d];
          vv = qkv_bias[2u * p.c + hoff + d];
        }
      }
      ks[e] = kv;
      vs[e] = vv;
    }
    barrier();
    if (valid) {
      const uint cnt = min(TK, total - k0);
      for (uint jj = 0u; jj < cnt; ++jj) {
        const uint j = k0 + jj;
        float s = 0.0;
        [[unroll]] for (uint d = 0u; d < HD; ++d) s = fma(q[d], ks[jj * HD + d], s);
        s = s * p.scale + rb[relbase + j / p.n] + rb[relbase + p.n + j % p.n];
        const float m_new = max(m, s);
        const float corr = exp(m - m_new), e = exp(s - m_new);
        l = l * corr + e;
        [[unroll]] for (uint d = 0u; d < HD; ++d) acc[d] = fma(e, vs[jj * HD + d], acc[d] * corr);
        m = m_new;
      }
    }
    barrier();
  }
  if (valid) {
    const float inv = 1.0 / l;
    [[unroll]] for (uint d = 0u; d < HD; ++d) o[token * p.c + hoff + d] = acc[d] * inv;
  }
}
