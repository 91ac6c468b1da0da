// Row norms. RMSNorm (DeepseekV2RMSNorm, the decoder): y[r] = w ⊙ x[r] · rsqrt(mean(x[r]²) + eps).
// LayerNorm (the vision encoder; LayerNorm2d on a channels-last map is the same per-token norm):
// y[r] = (x[r] − mean) / sqrt(var + eps) · w + b, biased variance.
// Algorithm: one block of 256 threads per row; each thread sums columns tid, tid+256, ... then a
// fixed-order block sum (common.cuh). LayerNorm takes two passes as the CPU does (the mean, then
// the sum of squared deviations), then writes; each thread writes only the columns it read, so
// y may alias x. The scale is one float32 1/sqrt (not the approximate rsqrtf), as the CPU's
// 1.0f / std::sqrt.
// Layout: x, y [rows, n] float32 row-major; w, b [n] float32 (widened from the checkpoint once).
// Numerics: float32 throughout, the CPU's operation order (sums in a different order: ~1e-7).
#include "common.cuh"

#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN
namespace cuda {
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

__global__ void __launch_bounds__(kThreads)
    layer_norm_kernel(const float* x, int64_t n, const float* w, const float* b, float eps, float* y) {
  __shared__ float partial[kWarp];
  const float* xr = x + int64_t(blockIdx.x) * n;
  float* yr = y + int64_t(blockIdx.x) * n;
  float s = 0.f;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) s += xr[i];
  const float mean = block_sum(s, partial) / float(n);
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) ss += (xr[i] - mean) * (xr[i] - mean);
  const float inv = 1.0f / sqrtf(block_sum(ss, partial) / float(n) + eps);
  for (int64_t i = threadIdx.x; i < n; i += kThreads) yr[i] = (xr[i] - mean) * inv * w[i] + b[i];
}

}  // namespace

void ops::layer_norm(Context& c, const float* x, int64_t rows, int64_t n, const float* w, const float* b, float eps,
                     float* y) {
  require(rows >= 0 && rows < (int64_t(1) << 31) && n > 0, Status::invalid_argument, "CUDA layer_norm: bad shape");
  if (rows == 0) return;
  layer_norm_kernel<<<unsigned(rows), kThreads, 0, stream(c)>>>(x, n, w, b, eps, y);
  check_launch("layer_norm");
}

void ops::rms_norm(Context& c, const float* x, int64_t rows, int64_t n, const float* w, float eps, float* y) {
  require(rows >= 0 && rows < (int64_t(1) << 31) && n > 0, Status::invalid_argument, "CUDA rms_norm: bad shape");
  if (rows == 0) return;
  rms_norm_kernel<<<unsigned(rows), kThreads, 0, stream(c)>>>(x, n, w, eps, y);
  check_launch("rms_norm");
}

}  // namespace cuda
UOCR_NAMESPACE_END
