// ViT patch embedding lowered to a GEMM: cols[gy*g + gx, (ci*p + py)*p + px] =
// img[ci, gy*p + py, gx*p + px] of a CHW image of side `size` (kernel = stride = p).
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer Xb { float img[]; };
layout(std430, binding = 1) writeonly buffer Cb { float cols[]; };
layout(push_constant) uniform P { uint channels, size, patch_size, grid; } p;
#include "common.glsl"

void main() {
  const uint e = group_index() * 256u + gl_LocalInvocationID.x;
  const uint pp = p.patch_size * p.patch_size, per_row = p.channels * pp;
  if (e >= p.grid * p.grid * per_row) return;
  const uint t = e / per_row, r = e % per_row, ci = r / pp, py = (r % pp) / p.patch_size, px = r % p.patch_size;
  const uint y = (t / p.grid) * p.patch_size + py, x = (t % p.grid) * p.patch_size + px;
  cols[e] = img[(ci * p.size + y) * p.size + x];
}
