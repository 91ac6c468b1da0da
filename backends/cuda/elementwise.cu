// Elementwise and row-movement kernels: SiLU·mul, GELU (erf, quick), residual add, bias add,
// embedding rows, weight widening (bf16/f16 → f32 for the float32 GEMM path), rounding to bf16
// (the bf16 GEMM path), row gather (MoE grouping, SR-SWA), row scatter (new K/V rows into each
// sequence's cache) and strided row copies (the vision encoder's concatenations).
// Layout: flat float32 arrays or row-major [rows, width]; one thread per element, grid-stride
// loops so any size fits one launch.
// Numerics: silu(g)·u = g / (1 + exp(-g)) · u and quick GELU x / (1 + exp(-1.702·x)) in float32
// with the accurate expf (no fast-math), as the CPU's exp; erf GELU 0.5·x·(1 + erff(x·(1/√2)))
// with the accurate erff (the CPU's Eigen erf differs by a few ulp); everything else moves or
// widens values exactly.
#include "common.cuh"

#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN
namespace cuda {
namespace {

using namespace detail;

constexpr int kThreads = 256;

#define UOCR_GRID_STRIDE(i, n) for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

__global__ void silu_mul_kernel(float* g, const float* u, int64_t n) {
  UOCR_GRID_STRIDE(i, n) {
    const float v = g[i];
    g[i] = v / (1.0f + expf(-v)) * u[i];
  }
}

__global__ void gelu_kernel(float* x, int64_t n, bool quick) {
  UOCR_GRID_STRIDE(i, n) {
    const float v = x[i];
    x[i] = quick ? v / (1.0f + expf(-1.702f * v)) : 0.5f * v * (1.0f + erff(v * 0.70710678118654752f));
  }
}

__global__ void copy_rows_kernel(const float* src, int64_t src_stride, int64_t rows, int64_t width, float* dst,
                                 int64_t dst_stride) {
  UOCR_GRID_STRIDE(i, rows * width) dst[(i / width) * dst_stride + i % width] = src[(i / width) * src_stride + i % width];
}

__global__ void add_kernel(float* x, const float* y, int64_t n) {
  UOCR_GRID_STRIDE(i, n) x[i] += y[i];
}

__global__ void add_bias_kernel(float* y, int64_t rows, int64_t n, const float* bias) {
  UOCR_GRID_STRIDE(i, rows * n) y[i] += bias[i % n];
}

template <class T>
__global__ void embed_kernel(const int32_t* ids, int64_t count, const T* table, int64_t width, float* out) {
  UOCR_GRID_STRIDE(i, count * width) out[i] = Weight<T>::load(table, int64_t(ids[i / width]) * width + i % width);
}

template <class T>
__global__ void widen_kernel(const T* src, int64_t n, float* dst) {
  UOCR_GRID_STRIDE(i, n) dst[i] = Weight<T>::load(src, i);
}

__global__ void round_bf16_kernel(const float* src, int64_t n, __nv_bfloat16* dst) {
  UOCR_GRID_STRIDE(i, n) dst[i] = __float2bfloat16_rn(src[i]);
}

__global__ void scatter_rows_kernel(const float* src, int64_t rows, int64_t width, float* const* dst) {
  UOCR_GRID_STRIDE(i, rows * width) dst[i / width][i % width] = src[i];
}

__global__ void gather_rows_kernel(const float* src, const int32_t* rows, int64_t count, int64_t width, float* dst) {
  UOCR_GRID_STRIDE(i, count * width) dst[i] = src[int64_t(rows[i / width]) * width + i % width];
}

template <class Launch>
void by_dtype(DType t, Launch&& launch) {
  switch (t) {
    case DType::bf16: launch(static_cast<const __nv_bfloat16*>(nullptr)); break;
    case DType::f16: launch(static_cast<const __half*>(nullptr)); break;
    case DType::f32: launch(static_cast<const float*>(nullptr)); break;
    case DType::i8: throw Error(Status::internal, "CUDA: int8 weights have no kernel (refused before upload)");
  }
}

}  // namespace

void ops::silu_mul(Context& c, float* g, const float* u, int64_t n) {
  if (n <= 0) return;
  silu_mul_kernel<<<grid_stride_blocks(n, kThreads), kThreads, 0, stream(c)>>>(g, u, n);
  check_launch("silu_mul");
}

void ops::gelu(Context& c, float* x, int64_t n, Gelu kind) {
  if (n <= 0) return;
  gelu_kernel<<<grid_stride_blocks(n, kThreads), kThreads, 0, stream(c)>>>(x, n, kind == Gelu::quick);
  check_launch("gelu");
}

void ops::copy_rows(Context& c, const float* src, int64_t src_stride, int64_t rows, int64_t width, float* dst,
                    int64_t dst_stride) {
  if (rows * width <= 0) return;
  copy_rows_kernel<<<grid_stride_blocks(rows * width, kThreads), kThreads, 0, stream(c)>>>(src, src_stride, rows, width,
                                                                                           dst, dst_stride);
  check_launch("copy_rows");
}

void ops::add(Context& c, float* x, const float* y, int64_t n) {
  if (n <= 0) return;
  add_kernel<<<grid_stride_blocks(n, kThreads), kThreads, 0, stream(c)>>>(x, y, n);
  check_launch("add");
}

void ops::add_bias(Context& c, float* y, int64_t rows, int64_t n, const float* bias) {
  if (rows * n <= 0) return;
  add_bias_kernel<<<grid_stride_blocks(rows * n, kThreads), kThreads, 0, stream(c)>>>(y, rows, n, bias);
  check_launch("add_bias");
}

void ops::embed(Context& c, const int32_t* ids, int64_t n, const MatrixView& table, float* out) {
  if (n <= 0) return;
  by_dtype(table.dtype, [&](auto tag) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(tag)>>;
    embed_kernel<T><<<grid_stride_blocks(n * table.cols, kThreads), kThreads, 0, stream(c)>>>(
        ids, n, static_cast<const T*>(table.data), table.cols, out);
  });
  check_launch("embed");
}

void ops::widen(Context& c, DType t, const void* src, int64_t count, float* dst) {
  if (count <= 0) return;
  by_dtype(t, [&](auto tag) {
    using T = std::remove_cv_t<std::remove_pointer_t<decltype(tag)>>;
    widen_kernel<T>
        <<<grid_stride_blocks(count, kThreads), kThreads, 0, stream(c)>>>(static_cast<const T*>(src), count, dst);
  });
  check_launch("widen");
}

void ops::round_to_bf16(Context& c, const float* src, int64_t count, uint16_t* dst) {
  if (count <= 0) return;
  round_bf16_kernel<<<grid_stride_blocks(count, kThreads), kThreads, 0, stream(c)>>>(
      src, count, reinterpret_cast<__nv_bfloat16*>(dst));
  check_launch("round_to_bf16");
}

void ops::scatter_rows(Context& c, const float* src, int64_t rows, int64_t width, float* const* dst) {
  if (rows * width <= 0) return;
  scatter_rows_kernel<<<grid_stride_blocks(rows * width, kThreads), kThreads, 0, stream(c)>>>(src, rows, width, dst);
  check_launch("scatter_rows");
}

void ops::gather_rows(Context& c, const float* src, const int32_t* rows, int64_t count, int64_t width, float* dst) {
  if (count * width <= 0) return;
  gather_rows_kernel<<<grid_stride_blocks(count * width, kThreads), kThreads, 0, stream(c)>>>(src, rows, count, width,
                                                                                              dst);
  check_launch("gather_rows");
}

}  // namespace cuda
UOCR_NAMESPACE_END
