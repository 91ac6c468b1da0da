// y[r] = (x[r] - mean) / sqrt(var + eps) * w + b over rows of n (nn.LayerNorm; biased variance,
// two-pass statistics in float32). LayerNorm2d over NCHW channels is the same op after the host
// lays the channels out as rows' last dimension.
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Xb { float x[]; };
layout(std430, binding = 1) readonly buffer Wb { float w[]; };
layout(std430, binding = 2) readonly buffer Bb { float b[]; };
layout(std430, binding = 3) writeonly buffer Yb { float y[]; };
layout(push_constant) uniform P { uint rows, n, x_off, y_off; float eps; } p;
#include "common.glsl"

shared float red[64];

float block_sum(float v, uint tid) {
  red[tid] = v;
  barrier();
  for (uint s = 32u; s > 0u; s >>= 1u) {
    if (tid < s) red[tid] += red[tid + s];
    barrier();
  }
  const float total = red[0];
  barrier();
  return total;
}

void main() {
  const uint row = group_index(), tid = gl_LocalInvocationID.x;
  if (row >= p.rows) return;
  const uint xb = p.x_off + row * p.n, yb = p.y_off + row * p.n;
  float s = 0.0;
  for (uint i = tid; i < p.n; i += 64u) s += x[xb + i];
  const float mean = block_sum(s, tid) / float(p.n);
  float v = 0.0;
  for (uint i = tid; i < p.n; i += 64u) {
    const float d = x[xb + i] - mean;
    v = fma(d, d, v);
  }
  const float inv = 1.0 / sqrt(block_sum(v, tid) / float(p.n) + p.eps);
  for (uint i = tid; i < p.n; i += 64u) y[yb + i] = (x[xb + i] - mean) * inv * w[i] + b[i];
}
