// In place: mode 0 exact GELU 0.5*x*(1 + erf(x/sqrt(2))) (SAM), mode 1 quick_gelu
// x*sigmoid(1.702*x) (CLIP). GLSL has no erf: erfc from Numerical Recipes' Chebyshev fit
// (fractional error < 1.2e-7), evaluated in float32.
#version 450
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 256) in;
layout(std430, binding = 0) buffer Xb { float x[]; };
layout(push_constant) uniform P { uint n, x_off, mode; } p;
#include "common.glsl"

float erfc_pos(float z) {  // z >= 0
  const float t = 1.0 / (1.0 + 0.5 * z);
  return t * exp(-z * z - 1.26551223 +
                 t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806 + t * (0.27886807 +
                 t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))));
}

void main() {
  const uint i = group_index() * 256u + gl_LocalInvocationID.x;
  if (i >= p.n) return;
  const float v = x[p.x_off + i];
  if (p.mode == 0u) {
    // 1 + erf(u) = erfc(-u): 2 - erfc(|u|) for u >= 0, erfc(|u|) for u < 0 (no cancellation).
    const float u = v * 0.70710678118654752;
    const float c = erfc_pos(abs(u));
    x[p.x_off + i] = 0.5 * v * (u >= 0.0 ? 2.0 - c : c);
  } else {
    x[p.x_off + i] = v / (1.0 + exp(-1.702 * v));
  }
}
