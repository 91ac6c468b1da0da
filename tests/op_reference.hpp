// Inputs and float64 references for the backend op conformance tests (tests/test_vulkan.cpp,
// backends/cuda/test_cuda.cpp): random activations, weight tensors in a checkpoint type, and the
// reference linear layer and attention every backend is measured against.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "uocr/core/dtype.hpp"
#include "uocr/decoder/attention.hpp"
#include "uocr/io/safetensors.hpp"

namespace uocr_test {

// n values drawn from N(0, scale²), the same for the same seed.
inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// A weight tensor held in memory in a checkpoint type, exposed as a TensorView like a checkpoint's.
struct HostTensor {
  std::vector<uint16_t> half;
  std::vector<float> full;
  uocr::TensorView view;
  HostTensor(uocr::DType t, std::vector<int64_t> shape, const std::vector<float>& values) {
    view.name = "test tensor";
    view.dtype = t;
    view.shape = std::move(shape);
    if (t == uocr::DType::f32) {
      full = values;
      view.data = reinterpret_cast<const uint8_t*>(full.data());
      return;
    }
    half.resize(values.size());
    for (size_t i = 0; i < values.size(); ++i) half[i] = t == uocr::DType::bf16 ? uocr::f32_to_bf16(values[i]) : to_f16(values[i]);
    view.data = reinterpret_cast<const uint8_t*>(half.data());
  }
  // The stored (rounded) values, widened.
  std::vector<double> values() const {
    std::vector<float> f(size_t(view.numel()));
    view.read_f32(0, view.numel(), f.data());
    return std::vector<double>(f.begin(), f.end());
  }
  static uint16_t to_f16(float f) {  // round to nearest even, normal range only (test data)
    uint32_t b;
    std::memcpy(&b, &f, 4);
    const uint32_t sign = (b >> 16) & 0x8000u, mant = b & 0x7fffffu, rest = mant & 0x1fffu;
    const int32_t exp = int32_t((b >> 23) & 0xff) - 127 + 15;
    if (exp <= 0) return uint16_t(sign);
    uint32_t h = sign | (uint32_t(exp) << 10) | (mant >> 13);
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
    return uint16_t(h);
  }
};

// y = x·wᵀ + b over m rows of x, in float64 from the stored weight values.
inline std::vector<double> ref_linear(const std::vector<float>& x, int64_t m, const HostTensor& w, const HostTensor* b) {
  const int64_t n = w.view.dim(0), k = w.view.dim(1);
  const std::vector<double> wv = w.values(), bv = b ? b->values() : std::vector<double>(size_t(n), 0.0);
  std::vector<double> y(size_t(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = bv[size_t(j)];
      for (int64_t c = 0; c < k; ++c) s += double(x[size_t(i * k + c)]) * wv[size_t(j * k + c)];
      y[size_t(i * n + j)] = s;
    }
  return y;
}

// One query row over keys [0, keys) of k/v (all visible), in float64.
inline std::vector<double> ref_attention_row(const float* q, const std::vector<float>& k, const std::vector<float>& v,
                                             int64_t keys, const uocr::AttentionShape& s) {
  const int64_t kr = s.kv_row(), d = s.head_dim;
  std::vector<double> out(size_t(s.q_row()));
  for (int h = 0; h < s.heads; ++h) {
    const int g = s.kv_head_of(h);
    std::vector<double> sc(static_cast<size_t>(keys));
    double mx = -1e300, sum = 0;
    for (int64_t j = 0; j < keys; ++j) {
      double dot = 0;
      for (int64_t e = 0; e < d; ++e) dot += double(q[h * d + e]) * k[size_t(j * kr + g * d + e)];
      mx = std::max(mx, sc[size_t(j)] = dot / std::sqrt(double(d)));
    }
    for (double& x : sc) sum += (x = std::exp(x - mx));
    for (int64_t e = 0; e < d; ++e) {
      double o = 0;
      for (int64_t j = 0; j < keys; ++j) o += sc[size_t(j)] / sum * v[size_t(j * kr + g * d + e)];
      out[size_t(h * d + e)] = o;
    }
  }
  return out;
}

}  // namespace uocr_test
