// Decode path (m <= 4 input rows): y[y_off + i*ldy + j] = x_i . W[j, :] (+ bias[j]). A workgroup
// of 64 threads computes 4 output columns, 16 lanes per column striding over k, then a
// shared-memory tree reduction; each weight row is read once for all m inputs.
// STACKED (MoE decode): one input row per grouped routing slot, its expert's weights taken from a
// stack of experts (see work.glsl).
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Xb { float x[]; };
layout(std430, binding = 1) readonly buffer Wb { uint wdata[]; };
layout(std430, binding = 2) readonly buffer Bb { float bias[]; };
layout(std430, binding = 3) writeonly buffer Yb { float y[]; };
#ifdef STACKED
layout(std430, binding = 4) readonly buffer Rb { uint route[]; };
#endif
layout(push_constant) uniform P {
  uint m, n, k, x_off, ldx, y_off, ldy, has_bias, bias_off;
#ifdef STACKED
  uint tiles, slots, slot_expert, expert0, stack_experts;
#endif
} p;
#include "weights.glsl"
#include "common.glsl"
#include "work.glsl"

const uint LANES = 16u;
shared float red[4][64];

void main() {
  uint first, m, wbase, g;
  if (!work(first, m, wbase, g)) return;
  const uint x_off = p.x_off + first * p.ldx, y_off = p.y_off + first * p.ldy;
  const uint tid = gl_LocalInvocationID.x, lane = tid % LANES;
  const uint col = g * 4u + tid / LANES;
  float acc[4] = float[4](0.0, 0.0, 0.0, 0.0);
  if (col < p.n) {
    const uint wrow = wbase + col * p.k;
    for (uint kk = lane; kk < p.k; kk += LANES) {
      const float wv = w_at(wrow + kk);
      for (uint i = 0u; i < 4u; ++i)
        if (i < m) acc[i] = fma(wv, x[x_off + i * p.ldx + kk], acc[i]);
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
    for (uint i = 0u; i < m; ++i) y[y_off + i * p.ldy + col] = red[i][tid] + b;
  }
}
