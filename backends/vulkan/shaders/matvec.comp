// Decode path (m <= 4 input rows): y[y_off + i*ldy + j] = x_i . W[j, :] (+ bias[j]). A workgroup
// of 64 threads computes 4 output columns, 16 lanes per column striding over k, then a
// shared-memory tree reduction; each weight row is read once for all m inputs.
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Xb { float x[]; };
layout(std430, binding = 1) readonly buffer Wb { uint wdata[]; };
layout(std430, binding = 2) readonly buffer Bb { float bias[]; };
layout(std430, binding = 3) writeonly buffer Yb { float y[]; };
layout(push_constant) uniform P {
  uint m, n, k, x_off, ldx, y_off, ldy, has_bias, bias_off;
} p;
#include "weights.glsl"
#include "common.glsl"

const uint LANES = 16u;
shared float red[4][64];

void main() {
  const uint tid = gl_LocalInvocationID.x, lane = tid % LANES;
  const uint col = group_index() * 4u + tid / LANES;
  float acc[4] = float[4](0.0, 0.0, 0.0, 0.0);
  if (col < p.n) {
    const uint wrow = col * p.k;
    for (uint kk = lane; kk < p.k; kk += LANES) {
      const float wv = w_at(wrow + kk);
      for (uint i = 0u; i < 4u; ++i)
        if (i < p.m) acc[i] = fma(wv, x[p.x_off + i * p.ldx + kk], acc[i]);
    }
  }
  for (uint i = 0u; i < 4u; ++i) red[i][tid] = acc[i];
  barrier();
  for (uint s = LANES / 2u; s > 0u; s >>= 1u) {
    if (lane < s)
      for (uint i = 0u; i < 4u; ++i) red[i][tid] += red[i][tid + s];
    barrier();
  }
  if (lane == 0u && col < p.n) {
    const float b = p.has_bias != 0u ? bias[p.bias_off + col] : 0.0;
    for (uint i = 0u; i < p.m; ++i) y[p.y_off + i * p.ldy + col] = red[i][tid] + b;
  }
}
