// f[f_off + r*h + c] = sum over row r's experts in ascending index of w * o[slot*h + c] (MoE: the
// expert outputs mixed into their tokens' rows in the CPU's order, starting from zero; slots and
// weights from moe_route.comp).
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer Rb { uint route[]; };
layout(std430, binding = 1) readonly buffer Ob { float o[]; };
layout(std430, binding = 2) writeonly buffer Fb { float f[]; };
layout(push_constant) uniform P { uint rows, k, h, mix_pos, mix_weight, f_off; } p;
#include "common.glsl"

void main() {
  const uint i = group_index() * 256u + gl_LocalInvocationID.x;
  if (i >= p.rows * p.h) return;
  const uint r = i / p.h, c = i % p.h;
  float acc = 0.0;
  for (uint j = 0u; j < p.k; ++j) {
    const uint a = r * p.k + j;
    acc = acc + uintBitsToFloat(route[p.mix_weight + a]) * o[route[p.mix_pos + a] * p.h + c];
  }
  f[p.f_off + i] = acc;
}
