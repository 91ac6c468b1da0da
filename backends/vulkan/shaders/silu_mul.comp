// g[i] = silu(g[i]) * u[i] = g / (1 + exp(-g)) * u.
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 256) in;
layout(std430, binding = 0) buffer Gb { float g[]; };
layout(std430, binding = 1) readonly buffer Ub { float u[]; };
layout(push_constant) uniform P { uint n, g_off, u_off; } p;
#include "common.glsl"

void main() {
  const uint i = group_index() * 256u + gl_LocalInvocationID.x;
  if (i >= p.n) return;
  const float v = g[p.g_off + i];
  g[p.g_off + i] = v / (1.0 + exp(-v)) * u[p.u_off + i];
}
