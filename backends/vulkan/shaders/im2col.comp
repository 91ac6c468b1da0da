// Convolution lowered to a GEMM: cols[o, (ci*k + ky)*k + kx] = x[iy, ix, ci] of a channels-last
// map x [h, w, c] (0 outside it), for output pixel o = oy*wo + ox, iy = oy*stride - pad + ky.
// The column order is the weight's [out, in, kh, kw] order, so the weight is used as is.
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer Xb { float x[]; };
layout(std430, binding = 1) writeonly buffer Cb { float cols[]; };
layout(push_constant) uniform P { uint h, w, c, k, stride, pad, ho, wo, x_off; } p;
#include "common.glsl"

void main() {
  const uint e = group_index() * 256u + gl_LocalInvocationID.x;
  const uint kk = p.k * p.k, per_row = p.c * kk;
  if (e >= p.ho * p.wo * per_row) return;
  const uint o = e / per_row, r = e % per_row, ci = r / kk, ky = (r % kk) / p.k, kx = r % p.k;
  const int iy = int((o / p.wo) * p.stride + ky) - int(p.pad), ix = int((o % p.wo) * p.stride + kx) - int(p.pad);
  cols[e] = (iy < 0 || ix < 0 || iy >= int(p.h) || ix >= int(p.w)) ? 0.0 : x[p.x_off + (uint(iy) * p.w + uint(ix)) * p.c + ci];
}
