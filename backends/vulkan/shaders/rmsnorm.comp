// y[r] = w * (x[r] * 1/sqrt(mean(x[r]^2) + eps)), one workgroup per row (DeepseekV2RMSNorm).
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Xb { float x[]; };
layout(std430, binding = 1) readonly buffer Wb { float w[]; };
layout(std430, binding = 2) writeonly buffer Yb { float y[]; };
layout(push_constant) uniform P { uint rows, n, x_off, y_off; float eps; } p;
#include "common.glsl"

shared float red[64];

void main() {
  const uint row = group_index(), tid = gl_LocalInvocationID.x;
  if (row >= p.rows) return;
  const uint xb = p.x_off + row * p.n, yb = p.y_off + row * p.n;
  float ss = 0.0;
  for (uint i = tid; i < p.n; i += 64u) ss = fma(x[xb + i], x[xb + i], ss);
  red[tid] = ss;
  barrier();
  for (uint s = 32u; s > 0u; s >>= 1u) {
    if (tid < s) red[tid] += red[tid + s];
    barrier();
  }
  const float inv = 1.0 / sqrt(red[0] / float(p.n) + p.eps);
  for (uint i = tid; i < p.n; i += 64u) y[yb + i] = w[i] * (x[xb + i] * inv);
}
