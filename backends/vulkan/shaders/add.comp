// x[x_off + i] += y[y_off + i] (residual connections, MoE shared expert).
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 256) in;
layout(std430, binding = 0) buffer Xb { float x[]; };
layout(std430, binding = 1) readonly buffer Yb { float y[]; };
layout(push_constant) uniform P { uint n, x_off, y_off; } p;
#include "common.glsl"

void main() {
  const uint i = group_index() * 256u + gl_LocalInvocationID.x;
  if (i >= p.n) return;
  x[p.x_off + i] += y[p.y_off + i];
}
