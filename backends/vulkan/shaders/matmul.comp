// y[y_off + i*ldy + j] = sum_k x[x_off + i*ldx + k] * W[j, k] (+ bias[j]) for i < m, j < n:
// 64x64 output tiles, 16x16 threads with 4x4 outputs each, K in steps of 16 through shared
// memory; float32 accumulation (fma) whatever the weight type.
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 16, local_size_y = 16) in;
layout(std430, binding = 0) readonly buffer Xb { float x[]; };
layout(std430, binding = 1) readonly buffer Wb { uint wdata[]; };
layout(std430, binding = 2) readonly buffer Bb { float bias[]; };
layout(std430, binding = 3) writeonly buffer Yb { float y[]; };
#ifdef ROUTED  // MoE expert GEMM: its rows of the grouped buffers, (first, count) at route[route_at];
               // its weights from element w_off of a stack of experts
layout(std430, binding = 4) readonly buffer Rb { uint route[]; };
#endif
layout(push_constant) uniform P {
  uint m, n, k, x_off, ldx, y_off, ldy, has_bias, bias_off, tiles_n;
#ifdef ROUTED
  uint route_at, w_off;
#endif
} p;
#include "weights.glsl"
#include "common.glsl"

shared float xs[16][65];
shared float ws[16][65];

void main() {
#ifdef ROUTED
  const uint first = route[p.route_at], m = route[p.route_at + 1u], wbase = p.w_off;
#else
  const uint first = 0u, m = p.m, wbase = 0u;
#endif
  const uint x_off = p.x_off + first * p.ldx, y_off = p.y_off + first * p.ldy;
  const uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y, tid = ty * 16u + tx;
  const uint g = group_index();
  const uint col0 = (g % p.tiles_n) * 64u, row0 = (g / p.tiles_n) * 64u;
  const bool live = row0 < m;  // uniform over the workgroup
  float acc[4][4];
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) acc[i][j] = 0.0;
  for (uint k0 = 0u; k0 < p.k && live; k0 += 16u) {
    for (uint t = 0u; t < 4u; ++t) {
      const uint idx = tid + t * 256u, r = idx / 16u, kk = idx % 16u, gk = k0 + kk;
      const uint gr = row0 + r, gc = col0 + r;
      xs[kk][r] = (gr < m && gk < p.k) ? x[x_off + gr * p.ldx + gk] : 0.0;
      ws[kk][r] = (gc < p.n && gk < p.k) ? w_at(wbase + gc * p.k + gk) : 0.0;
    }
    barrier();
    for (uint kk = 0u; kk < 16u; ++kk) {
      float a[4], b[4];
      for (uint i = 0u; i < 4u; ++i) a[i] = xs[kk][ty + 16u * i];
      for (uint j = 0u; j < 4u; ++j) b[j] = ws[kk][tx + 16u * j];
      for (uint i = 0u; i < 4u; ++i)
        for (uint j = 0u; j < 4u; ++j) acc[i][j] = fma(a[i], b[j], acc[i][j]);
    }
    barrier();
  }
  if (!live) return;
  for (uint i = 0u; i < 4u; ++i) {
    const uint r = row0 + ty + 16u * i;
    if (r >= m) continue;
    for (uint j = 0u; j < 4u; ++j) {
      const uint c = col0 + tx + 16u * j;
      if (c >= p.n) continue;
      y[y_off + r * p.ldy + c] = acc[i][j] + (p.has_bias != 0u ? bias[p.bias_off + c] : 0.0);
    }
  }
}
