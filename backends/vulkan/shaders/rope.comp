// In place: rotary embedding with the half-split pairing (i, i + half) on `rows` rows of
// `heads` vectors of 2*half floats. Row r's cos/sin come from a host table [row][half][2]
// computed exactly as the CPU does (float32 angle, then cos/sin) for that row's position, so no
// large-argument sin/cos runs on the device.
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer Xb { float x[]; };
layout(std430, binding = 1) readonly buffer Tb { float table[]; };
layout(push_constant) uniform P { uint rows, heads, half_dim, x_off, row_stride; } p;
#include "common.glsl"

void main() {
  const uint idx = group_index() * 64u + gl_LocalInvocationID.x;
  const uint per_row = p.heads * p.half_dim;
  if (idx >= p.rows * per_row) return;
  const uint r = idx / per_row, rem = idx % per_row, h = rem / p.half_dim, i = rem % p.half_dim;
  const uint base = p.x_off + r * p.row_stride + h * 2u * p.half_dim;
  const uint t = (r * p.half_dim + i) * 2u;
  const float c = table[t], s = table[t + 1u];
  const float x1 = x[base + i], x2 = x[base + i + p.half_dim];
  x[base + i] = x1 * c - x2 * s;
  x[base + i + p.half_dim] = x2 * c + x1 * s;
}
