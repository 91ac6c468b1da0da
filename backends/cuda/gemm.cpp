// ops::linear: y[m, n] = x[m, k] · wᵀ (+ bias). A few rows (decode, small batches) take the
// mat-vec kernel (matvec.cu), which reads bf16/f16 weights directly. More rows go to cuBLAS in
// column-major terms: yᵀ[n, m] = op_T(W as k×n) · xᵀ (k×m), ldc = n.
//  - Precision::f32: f32 weights go straight to cublasSgemm; bf16/f16 weights are widened
//    to float32 in chunks of rows (at most 2^24 elements, 64 MiB of scratch) and each chunk is an
//    SGEMM into its columns of y. CUBLAS_PEDANTIC_MATH keeps cuBLAS from using TF32: float32
//    products and accumulation, the CPU's numerics.
//  - Precision::bf16 with bf16 weights: x is rounded to bf16 once and cublasGemmEx
//    multiplies bf16 × bf16 on tensor cores, accumulating and writing float32.
#include <algorithm>
#include <climits>

#include "backends/cuda/ops.hpp"
#include "check.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN
namespace cuda {

using detail::check;

void ops::linear(Context& c, const float* x, int64_t m, const MatrixView& w, const float* bias, float* y) {
  require(w.groups == 1 && w.rows > 0 && w.cols > 0 && m >= 0, Status::invalid_argument, "CUDA linear: bad shape");
  if (m <= kMatvecMaxRows) {
    grouped_matvec(c, w, x, w.cols, nullptr, nullptr, m, bias, y);
    return;
  }
  const int64_t n = w.rows, k = w.cols;
  require(n < INT_MAX && m < INT_MAX && k < INT_MAX, Status::unsupported, "CUDA linear: dimension beyond cuBLAS's int range");
  const auto h = static_cast<cublasHandle_t>(c.blas());
  const float one = 1.0f, zero = 0.0f;
  if (c.gemm_precision() == Precision::bf16 && w.dtype == DType::bf16) {
    auto* xb = reinterpret_cast<uint16_t*>(c.scratch(detail::kScratchGemmActivations, size_t(m * k + 1) / 2));
    round_to_bf16(c, x, m * k, xb);
    check(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    check(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, int(n), int(m), int(k), &one, w.data, CUDA_R_16BF, int(k), xb,
                       CUDA_R_16BF, int(k), &zero, y, CUDA_R_32F, int(n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "cublasGemmEx (bf16)");
  } else {
    check(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode");
    if (w.dtype == DType::f32) {
      check(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, int(n), int(m), int(k), &one, static_cast<const float*>(w.data),
                        int(k), x, int(k), &zero, y, int(n)),
            "cublasSgemm");
    } else {
      const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(n, (int64_t(1) << 24) / k));
      float* wf = c.scratch(detail::kScratchGemmWeights, size_t(chunk * k));
      const auto* base = static_cast<const uint8_t*>(w.data);
      for (int64_t n0 = 0; n0 < n; n0 += chunk) {
        const int64_t rows = std::min(chunk, n - n0);
        widen(c, w.dtype, base + size_t(n0 * k) * dtype_size(w.dtype), rows * k, wf);
        check(cublasSgemm(h, CUBLAS_OP_T, CUBLAS_OP_N, int(rows), int(m), int(k), &one, wf, int(k), x, int(k), &zero,
                          y + n0, int(n)),
              "cublasSgemm (widened weights)");
      }
    }
  }
  if (bias) add_bias(c, y, m, n, bias);
}

}  // namespace cuda
UOCR_NAMESPACE_END
