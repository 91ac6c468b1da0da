// out[o_off + r*ldo + c] = x[x_off + r*ldx + c] for r < rows, c < cols (concatenations, CLS row).
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer Xb { float x[]; };
layout(std430, binding = 1) writeonly buffer Ob { float o[]; };
layout(push_constant) uniform P { uint rows, cols, x_off, ldx, o_off, ldo; } p;
#include "common.glsl"

void main() {
  const uint e = group_index() * 256u + gl_LocalInvocationID.x;
  if (e >= p.rows * p.cols) return;
  const uint r = e / p.cols, c = e % p.cols;
  o[p.o_off + r * p.ldo + c] = x[p.x_off + r * p.ldx + c];
}
