// RMSNorm (DeepseekV2RMSNorm): y[r] = w ⊙ x[r] · rsqrt(mean(x[r]²) + eps).
// Algorithm: one block of 256 threads per row; each thread sums the squares of columns
// tid, tid+256, ... then a fixed-order block sum (common.cuh); the scale is one float32
// 1/sqrt (not the approximate rsqrtf), as the CPU's 1.0f / std::sqrt.
// Layout: x, y [rows, n] float32 row-major; w [n] float32 (widened from the checkpoint once).
// Numerics: float32 throughout; y = w · (x · inv) in the CPU's multiplication order.
#include "common.cuh"

namespace uocr::cuda {
namespace {

using namespace detail;

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) rms_norm_kernel(const float* x, int64_t n, const float* w, float eps, float* y) {
  __shared__ float partial[kWarp];
  const float* xr = x + int64_t(blockIdx.x) * n;
  float* yr = y + int64_t(blockIdx.x) * n;
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) ss += xr[i] * xr[i];
  ss = block_sum(ss, partial);
  const float inv = 1.0f / sqrtf(ss / float(n) + eps);
  for (int64_t i = threadIdx.x; i < n; i += kThreads) yr[i] = w[i] * (xr[i] * inv);
}

}  // namespace

void ops::rms_norm(Context& c, const float* x, int64_t rows, int64_t n, const float* w, float eps, float* y) {
  require(rows >= 0 && rows < (int64_t(1) << 31) && n > 0, Status::invalid_argument, "CUDA rms_norm: bad shape");
  if (rows == 0) return;
  rms_norm_kernel<<<unsigned(rows), kThreads, 0, stream(c)>>>(x, n, w, eps, y);
  check_launch("rms_norm");
}

}  // namespace uocr::cuda
