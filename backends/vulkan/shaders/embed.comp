// Token embedding rows: out[out_off + i*h + c] = E[ids[i] - row0, c] for the ids that fall in
// this chunk of the table [row0, row0 + rows) (large tables are split into chunks that each fit
// one storage-buffer binding).
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer Ib { uint ids[]; };
layout(std430, binding = 1) readonly buffer Wb { uint wdata[]; };
layout(std430, binding = 2) writeonly buffer Ob { float o[]; };
layout(push_constant) uniform P { uint count, h, row0, rows, out_off; } p;
#include "weights.glsl"
#include "common.glsl"

void main() {
  const uint e = group_index() * 256u + gl_LocalInvocationID.x;
  if (e >= p.count * p.h) return;
  const uint i = e / p.h, c = e % p.h, id = ids[i];
  if (id < p.row0 || id - p.row0 >= p.rows) return;
  o[p.out_off + e] = w_at((id - p.row0) * p.h + c);
}
