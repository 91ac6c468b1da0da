// CPU matrix kernels over checkpoint weights stored as bf16/f16/f32. Weights stay in their
// mapped form; they are widened to float32 on the fly, one panel at a time for GEMMs (the
// conversion is O(N·K) against O(M·N·K) multiply-adds) and inline for the decode matvec.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include <Eigen/Core>

#include "uocr/core/dtype.hpp"
#include "uocr/io/safetensors.hpp"
#include "uocr/model/weights.hpp"

namespace uocr::cpu {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixMap = Eigen::Map<RowMatrix>;
using ConstMatrixMap = Eigen::Map<const RowMatrix>;

namespace detail {

// dot products of rows x[0..m) with weight row j, written to y[i*n + j].
template <class T, class Widen>
inline void rows_dot(const T* wrow, const float* x, int64_t m, int64_t k, float* y, int64_t n, int64_t j,
                     Widen widen) {
  float acc[4] = {0, 0, 0, 0};
  for (int64_t i = 0; i < m; ++i) {
    const float* xi = x + i * k;
    float s = 0.f;
#pragma omp simd reduction(+ : s)
    for (int64_t c = 0; c < k; ++c) s += widen(wrow[c]) * xi[c];
    acc[i] = s;
  }
  for (int64_t i = 0; i < m; ++i) y[i * n + j] = acc[i];
}

inline float widen_bf16(uint16_t h) {
  uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

}  // namespace detail

// y[M, N] = x[M, K] · W[N, K]ᵀ (+ bias[N]).
inline void linear(const float* x, int64_t m, const TensorView& w, const TensorView* bias, float* y) {
  const int64_t n = w.dim(0), k = w.dim(1);
  if (m <= 4 && w.dtype != DType::f16) {
    // Decode path: memory-bound, stream each weight row once for all m inputs.
#pragma omp parallel for schedule(static) if (n * k > (1 << 16))
    for (int64_t j = 0; j < n; ++j) {
      if (w.dtype == DType::bf16)
        detail::rows_dot(reinterpret_cast<const uint16_t*>(w.data) + j * k, x, m, k, y, n, j, detail::widen_bf16);
      else
        detail::rows_dot(reinterpret_cast<const float*>(w.data) + j * k, x, m, k, y, n, j, [](float v) { return v; });
    }
  } else if (w.dtype == DType::f32) {
    MatrixMap(y, m, n).noalias() = ConstMatrixMap(x, m, k) * ConstMatrixMap(reinterpret_cast<const float*>(w.data), n, k).transpose();
  } else {
    // Panels of weight rows widened to float32, multiplied by Eigen's blocked GEMM.
    const int64_t panel = std::max<int64_t>(16, std::min<int64_t>(n, (int64_t(1) << 20) / std::max<int64_t>(k, 1)));
    thread_local std::vector<float> buf;
    buf.resize(size_t(panel * k));
    ConstMatrixMap xm(x, m, k);
    MatrixMap ym(y, m, n);
    for (int64_t j0 = 0; j0 < n; j0 += panel) {
      const int64_t nb = std::min(panel, n - j0);
      w.read_f32(j0 * k, nb * k, buf.data());
      ym.middleCols(j0, nb).noalias() = xm * ConstMatrixMap(buf.data(), nb, k).transpose();
    }
  }
  if (bias) {
    std::vector<float> b = bias->to_vector();
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) y[i * n + j] += b[size_t(j)];
  }
}

inline void linear(const float* x, int64_t m, const LinearWeights& l, float* y) {
  linear(x, m, *l.weight, l.bias, y);
}

inline std::vector<float> linear(const std::vector<float>& x, int64_t m, const LinearWeights& l) {
  std::vector<float> y(size_t(m * l.out()));
  linear(x.data(), m, l, y.data());
  return y;
}

}  // namespace uocr::cpu
