// Decomposed relative-position terms of SAM attention, for every real token and head:
//   rb[(token*heads + h)*2n + ky]     = q . Th[qy - ky + n - 1]   (ky < n)
//   rb[(token*heads + h)*2n + n + kx] = q . Tw[qx - kx + n - 1]   (kx < n)
// with (qy, qx) the token's position inside its n x n window (n = g for global blocks) and q the
// unscaled query of qkv [g*g, 3c].
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Qb { float qkv[]; };
layout(std430, binding = 1) readonly buffer Hb { float th[]; };
layout(std430, binding = 2) readonly buffer Wb { float tw[]; };
layout(std430, binding = 3) writeonly buffer Rb { float rb[]; };
layout(push_constant) uniform P { uint g, n, heads, hd, c; } p;
#include "common.glsl"

void main() {
  const uint e = group_index() * 64u + gl_LocalInvocationID.x;
  const uint per_head = 2u * p.n;
  if (e >= p.g * p.g * p.heads * per_head) return;
  const uint i = e % per_head, th_ = e / per_head, h = th_ % p.heads, token = th_ / p.heads;
  const uint y = token / p.g, x = token % p.g;
  const bool is_h = i < p.n;
  const uint kk = is_h ? i : i - p.n;
  const uint r = ((is_h ? y % p.n : x % p.n) + p.n - 1u - kk) * p.hd;
  const uint q = token * 3u * p.c + h * p.hd;
  float s = 0.0;
  for (uint d = 0u; d < p.hd; ++d) s = fma(qkv[q + d], is_h ? th[r + d] : tw[r + d], s);
  rb[e] = s;
}
