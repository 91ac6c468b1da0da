// Greedy sampling on the device: out[r] = argmax of x[r, 0..n), the first index on ties (as
// std::max_element), so a batch of sessions reads back one int32 per row instead of its logits.
// Algorithm: one block of 256 threads per row; each thread keeps its best (value, index) over
// columns tid, tid+256, ... (ascending, strict '>'), then a shared-memory tree keeps the larger
// value and, on equal values, the smaller index (logits are finite; NaN handling is unspecified).
#include "common.cuh"

#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN
namespace cuda {
namespace {

using namespace detail;

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) argmax_kernel(const float* x, int64_t n, int32_t* out) {
  __shared__ float best_v[kThreads];
  __shared__ int64_t best_i[kThreads];
  const float* row = x + int64_t(blockIdx.x) * n;
  float v = -INFINITY;
  int64_t idx = -1;
  for (int64_t i = threadIdx.x; i < n; i += kThreads)
    if (idx < 0 || row[i] > v) v = row[i], idx = i;
  best_v[threadIdx.x] = v;
  best_i[threadIdx.x] = idx;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      const int o = threadIdx.x + half;
      const bool other_better = best_i[o] >= 0 && (best_i[threadIdx.x] < 0 || best_v[o] > best_v[threadIdx.x] ||
                                                   (best_v[o] == best_v[threadIdx.x] && best_i[o] < best_i[threadIdx.x]));
      if (other_better) best_v[threadIdx.x] = best_v[o], best_i[threadIdx.x] = best_i[o];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = int32_t(best_i[0]);
}

}  // namespace

void ops::argmax(Context& c, const float* x, int64_t rows, int64_t n, int32_t* out) {
  require(rows >= 0 && rows < (int64_t(1) << 31) && n > 0 && n < (int64_t(1) << 31), Status::invalid_argument,
          "CUDA argmax: bad shape");
  if (rows == 0) return;
  argmax_kernel<<<unsigned(rows), kThreads, 0, stream(c)>>>(x, n, out);
  check_launch("argmax");
}

}  // namespace cuda
UOCR_NAMESPACE_END
