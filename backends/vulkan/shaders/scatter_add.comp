// y[y_off + idx[idx_off + i]*h + c] += wt[idx_off + i] * o[o_off + i*h + c] for i < count (MoE:
// one expert's outputs mixed into their tokens' rows; indices within one call are distinct).
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer Ib { uint idx[]; };
layout(std430, binding = 1) readonly buffer Wb { float wt[]; };
layout(std430, binding = 2) readonly buffer Ob { float o[]; };
layout(std430, binding = 3) buffer Yb { float y[]; };
layout(push_constant) uniform P { uint count, h, idx_off, o_off, y_off; } p;
#include "common.glsl"

void main() {
  const uint e = group_index() * 256u + gl_LocalInvocationID.x;
  if (e >= p.count * p.h) return;
  const uint i = e / p.h, c = e % p.h;
  const uint at = p.y_off + idx[p.idx_off + i] * p.h + c;
  y[at] = y[at] + wt[p.idx_off + i] * o[p.o_off + e];
}
