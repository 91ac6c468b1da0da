// Decode path for short rows (k <= 512; m <= 4 input rows): one thread per output column, each
// reading its weight row once for all m inputs. No shared memory and no barriers, which keeps
// huge-n/small-k products (tiny models' lm_head: 129280 x 32) cheap on every device.
// STACKED (MoE decode): as in matvec.comp.
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

void main() {
  uint first, m, wbase, g;
  if (!work(first, m, wbase, g)) return;
  const uint x_off = p.x_off + first * p.ldx, y_off = p.y_off + first * p.ldy;
  const uint col = g * 64u + gl_LocalInvocationID.x;
  if (col >= p.n) return;
  float acc[4] = float[4](0.0, 0.0, 0.0, 0.0);
  const uint wrow = wbase + col * p.k;
  if ((p.k & 1u) == 0u) {  // even rows start on a word: two elements per load
    for (uint kk = 0u; kk < p.k; kk += 2u) {
      const vec2 wv = w_pair(wrow + kk);
      for (uint i = 0u; i < 4u; ++i) {
        if (i >= m) break;
        const uint xb = x_off + i * p.ldx + kk;
        acc[i] = fma(wv.y, x[xb + 1u], fma(wv.x, x[xb], acc[i]));
      }
    }
  } else {
    for (uint kk = 0u; kk < p.k; ++kk) {
      const float wv = w_at(wrow + kk);
      for (uint i = 0u; i < 4u; ++i)
        if (i < m) acc[i] = fma(wv, x[x_off + i * p.ldx + kk], acc[i]);
    }
  }
  const float b = p.has_bias != 0u ? bias[p.bias_off + col] : 0.0;
  for (uint i = 0u; i < m; ++i) y[y_off + i * p.ldy + col] = acc[i] + b;
}
