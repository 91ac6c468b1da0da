// Mat-vec kernel: the linear layers of a decode step (a few rows) and the MoE experts of small
// batches, reading the weights in their stored type exactly once from memory.
//
// Algorithm: one warp per output row n of one group g (block = 8 warps = 8 output rows of one
// group; grid = (ceil(rows / 8), groups)). The warp walks the assignments of its group; for
// each it computes dot(w_g[n, :], x[row]) with lane l taking columns l, l+32, ... (or chunks of
// 8 columns, 16-byte loads, when cols % 8 == 0), then a xor-butterfly warp sum. The weight row
// is read from DRAM once and from L1/L2 for the further assignments.
// Layout: w [groups, rows, cols] row-major in bf16/f16/f32; x rows x_stride floats apart;
// y [assignments, rows] float32.
// Numerics: float32 products and sums; each output is a fixed-order sum (per-lane strided
// partial sums, then the butterfly), so results are deterministic run to run; they differ from
// the CPU's Eigen order only by float32 rounding (~1e-7 relative).
#include "common.cuh"

#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN
namespace cuda {
namespace {

using namespace detail;

constexpr int kRowsPerBlock = 8;

struct MatvecArgs {
  const void* w;
  int64_t rows, cols;
  const float* x;
  int64_t x_stride;
  const int32_t* x_rows;
  const int32_t* start;
  int64_t m;
  const float* bias;
  float* y;
};

template <class T, bool Vec8>
__global__ void __launch_bounds__(kRowsPerBlock * kWarp) matvec_kernel(MatvecArgs a) {
  const int lane = threadIdx.x % kWarp;
  const int64_t n = int64_t(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (n >= a.rows) return;
  const int64_t g = blockIdx.y;
  const int64_t a0 = a.start ? a.start[g] : 0, a1 = a.start ? a.start[g + 1] : a.m;
  const T* w = static_cast<const T*>(a.w) + (g * a.rows + n) * a.cols;
  for (int64_t i = a0; i < a1; ++i) {
    const float* x = a.x + int64_t(a.x_rows ? a.x_rows[i] : i) * a.x_stride;
    float acc = 0.f;
    if constexpr (Vec8) {
      for (int64_t c = int64_t(lane) * 8; c < a.cols; c += kWarp * 8) {
        float wv[8];
        load8(w, c, wv);
        const float4 x0 = *reinterpret_cast<const float4*>(x + c), x1 = *reinterpret_cast<const float4*>(x + c + 4);
        acc += wv[0] * x0.x + wv[1] * x0.y + wv[2] * x0.z + wv[3] * x0.w + wv[4] * x1.x + wv[5] * x1.y + wv[6] * x1.z +
               wv[7] * x1.w;
      }
    } else {
      for (int64_t c = lane; c < a.cols; c += kWarp) acc += Weight<T>::load(w, c) * x[c];
    }
    acc = warp_sum(acc);
    if (lane == 0) a.y[i * a.rows + n] = acc + (a.bias ? a.bias[n] : 0.f);
  }
}

template <class T>
void launch(const MatvecArgs& a, int64_t groups, bool vec8, cudaStream_t s) {
  const dim3 grid(blocks_for(a.rows, kRowsPerBlock), unsigned(groups));
  if (vec8)
    matvec_kernel<T, true><<<grid, kRowsPerBlock * kWarp, 0, s>>>(a);
  else
    matvec_kernel<T, false><<<grid, kRowsPerBlock * kWarp, 0, s>>>(a);
  check_launch("matvec");
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace

void ops::grouped_matvec(Context& c, const MatrixView& w, const float* x, int64_t x_stride, const int32_t* x_rows,
                         const int32_t* start, int64_t m, const float* bias, float* y) {
  require(w.rows > 0 && w.cols > 0 && w.groups > 0 && x_stride >= w.cols && m >= 0, Status::invalid_argument,
          "CUDA matvec: bad shape");
  require(start || w.groups == 1, Status::invalid_argument, "CUDA matvec: stacked matrices need group starts");
  require_grid_y(w.groups, "matvec");
  if (m == 0 && !start) return;
  const MatvecArgs a{w.data, w.rows, w.cols, x, x_stride, x_rows, start, m, bias, y};
  const bool vec8 = w.cols % 8 == 0 && x_stride % 4 == 0 && aligned16(w.data) && aligned16(x);
  const cudaStream_t s = stream(c);
  switch (w.dtype) {
    case DType::bf16: launch<__nv_bfloat16>(a, w.groups, vec8, s); break;
    case DType::f16: launch<__half>(a, w.groups, vec8, s); break;
    case DType::f32: launch<float>(a, w.groups, vec8, s); break;
    case DType::i8: throw Error(Status::internal, "CUDA: int8 weights have no kernel (refused before upload)");
  }
}

}  // namespace cuda
UOCR_NAMESPACE_END
