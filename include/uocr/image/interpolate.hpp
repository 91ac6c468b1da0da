// float32 resampling of position tables, matching PyTorch's CPU kernels
// (aten/src/ATen/native/cpu/UpSampleKernel.cpp, UpSample.h):
//   interpolate_bicubic_aa = F.interpolate(x[None], size=(h, w), mode="bicubic", antialias=True,
//                            align_corners=False)[0] for x [C, H, W]
//                            (SAM pos_embed 64 -> 40 and CLIP position table 16 -> 10 on tiles)
//   interpolate_linear     = F.interpolate(x[None], size=l, mode="linear", align_corners=False)[0]
//                            for x [C, L] (SAM rel-pos tables 127 -> 79 on tiles)
// Index ranges, weights and sums follow the kernels' float/double promotions step by step, and
// the multiply-adds that GCC contracts into FMAs in PyTorch's AVX2/AVX-512 kernel builds are
// std::fma here, so results are bit-identical to torch on x86-64 CPUs (checked against torch
// 2.5.1). PyTorch builds without FMA, and its CUDA kernels, differ by about 1 ulp.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "uocr/core/error.hpp"
#include "uocr/image/fp_exact.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

namespace detail {

// Keys' cubic with a = -0.5 (the antialias variant, PIL-compatible), in float like aa_filter<float>:
// ((a+2)x - (a+3))x^2 + 1 and ((ax - 5a)x + 8a)x - 4a, contracted as in torch's binary.
inline float torch_aa_cubic(float x) {
  constexpr float a = -0.5f;
  x = std::fabs(x);
  if (x < 1.0f) return std::fma(std::fma(a + 2, x, -(a + 3)) * x, x, 1.0f);
  if (x < 2.0f) return std::fma(std::fma(std::fma(a, x, -5 * a), x, 8 * a), x, -4 * a);
  return 0.0f;
}

// Per output index the first input index, the tap count and `ksize` normalised weights, as
// HelperInterpBase::_compute_indices_min_size_weights_aa<float>.
struct AaTaps {
  int64_t ksize = 0;
  std::vector<int64_t> first;
  std::vector<int64_t> count;
  std::vector<float> weights;
};

inline AaTaps aa_bicubic_taps(int64_t in_size, int64_t out_size) {
  const float scale = float(in_size) / float(out_size);
  const float support = scale >= 1.0f ? float(4 * 0.5 * double(scale)) : 2.0f;
  const float invscale = scale >= 1.0f ? float(1.0 / double(scale)) : 1.0f;
  AaTaps t;
  t.ksize = int64_t(std::ceil(support)) * 2 + 1;
  t.first.resize(size_t(out_size));
  t.count.resize(size_t(out_size));
  t.weights.assign(size_t(out_size * t.ksize), 0.0f);
  for (int64_t i = 0; i < out_size; ++i) {
    const float center = float(double(scale) * (double(i) + 0.5));
    const int64_t xmin = std::max(int64_t(double(center - support) + 0.5), int64_t(0));
    const int64_t xsize =
        std::clamp(std::min(int64_t(double(center + support) + 0.5), in_size) - xmin, int64_t(0), t.ksize);
    float* w = &t.weights[size_t(i * t.ksize)];
    float total = 0.0f;
    for (int64_t j = 0; j < xsize; ++j) {
      w[j] = torch_aa_cubic(float((double(float(j + xmin) - center) + 0.5) * double(invscale)));
      total += w[j];
    }
    if (total != 0.0f) {
      for (int64_t j = 0; j < xsize; ++j) w[j] /= total;
    }
    t.first[size_t(i)] = xmin;
    t.count[size_t(i)] = xsize;
  }
  return t;
}

// One separable pass over `outer` blocks of `in_size` rows of `inner` interleaved samples:
// dst[o][x][k] = sum_j w[x][j] * src[o][first + j][k], accumulated from j = 0 with FMAs.
inline void aa_pass(const float* src, float* dst, int64_t outer, int64_t in_size, int64_t out_size, int64_t inner) {
  const AaTaps t = aa_bicubic_taps(in_size, out_size);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t x = 0; x < out_size; ++x) {
      const float* w = &t.weights[size_t(x * t.ksize)];
      const float* s = src + (o * in_size + t.first[size_t(x)]) * inner;
      float* d = dst + (o * out_size + x) * inner;
      for (int64_t k = 0; k < inner; ++k) {
        float acc = s[k] * w[0];
        for (int64_t j = 1; j < t.count[size_t(x)]; ++j) acc = std::fma(s[j * inner + k], w[j], acc);
        d[k] = acc;
      }
    }
  }
}

inline void require_sizes(bool ok, const char* what) {
  require(ok, Status::invalid_argument, [&] { return std::string(what) + ": sizes must be positive"; });
}

}  // namespace detail

// [channels, in_h, in_w] -> [channels, out_h, out_w], channel-major. Width is resampled first,
// then height; an unchanged axis is skipped, as in PyTorch.
inline std::vector<float> interpolate_bicubic_aa(const float* src, int channels, int in_h, int in_w, int out_h,
                                                 int out_w) {
  detail::require_sizes(src && channels > 0 && in_h > 0 && in_w > 0 && out_h > 0 && out_w > 0,
                        "interpolate_bicubic_aa");
  std::vector<float> cur(src, src + size_t(channels) * size_t(in_h) * size_t(in_w));
  if (out_w != in_w) {
    std::vector<float> next(size_t(channels) * size_t(in_h) * size_t(out_w));
    detail::aa_pass(cur.data(), next.data(), int64_t(channels) * in_h, in_w, out_w, 1);
    cur.swap(next);
  }
  if (out_h != in_h) {
    std::vector<float> next(size_t(channels) * size_t(out_h) * size_t(out_w));
    detail::aa_pass(cur.data(), next.data(), channels, in_h, out_h, out_w);
    cur.swap(next);
  }
  return cur;
}

// [channels, in_len] -> [channels, out_len]: linear, align_corners=False, no antialias
// (upsample_linear1d: source index clamped at 0, upper neighbour clamped to the last sample;
// t0 * w0 + t1 * w1 evaluated as fma(t0, w0, t1 * w1)).
inline std::vector<float> interpolate_linear(const float* src, int channels, int in_len, int out_len) {
  detail::require_sizes(src && channels > 0 && in_len > 0 && out_len > 0, "interpolate_linear");
  if (in_len == out_len) return std::vector<float>(src, src + size_t(channels) * size_t(in_len));
  const float scale = float(in_len) / float(out_len);
  const size_t n = static_cast<size_t>(out_len);
  std::vector<int64_t> i0(n), i1(n);
  std::vector<float> w0(n), w1(n);
  for (int64_t i = 0; i < out_len; ++i) {
    float real = detail::rounded(scale * (float(i) + 0.5f)) - 0.5f;
    if (real < 0.0f) real = 0.0f;
    const int64_t idx = std::min(int64_t(std::floor(real)), int64_t(in_len) - 1);
    const float lambda = std::min(std::max(real - float(idx), 0.0f), 1.0f);
    i0[size_t(i)] = idx;
    i1[size_t(i)] = idx + (idx < in_len - 1 ? 1 : 0);
    w0[size_t(i)] = 1.0f - lambda;
    w1[size_t(i)] = lambda;
  }
  std::vector<float> out(size_t(channels) * size_t(out_len));
  for (int64_t c = 0; c < channels; ++c) {
    const float* s = src + c * in_len;
    float* d = out.data() + c * out_len;
    for (size_t i = 0; i < n; ++i) d[i] = std::fma(s[i0[i]], w0[i], s[i1[i]] * w1[i]);
  }
  return out;
}

UOCR_NAMESPACE_END
