// out[out_off + i*h + c] = x[x_off + idx[idx_off + i]*h + c] for i < count (MoE: the rows
// routed to one expert).
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer Ib { uint idx[]; };
layout(std430, binding = 1) readonly buffer Xb { float x[]; };
layout(std430, binding = 2) writeonly buffer Ob { float o[]; };
layout(push_constant) uniform P { uint count, h, idx_off, x_off, out_off; } p;
#include "common.glsl"

void main() {
  const uint e = group_index() * 256u + gl_LocalInvocationID.x;
  if (e >= p.count * p.h) return;
  const uint i = e / p.h, c = e % p.h;
  o[p.out_off + e] = x[p.x_off + idx[p.idx_off + i] * p.h + c];
}
