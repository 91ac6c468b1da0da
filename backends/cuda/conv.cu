// Convolutions of the vision encoder lowered to one GEMM each: these kernels build the im2col
// columns, ops::linear (cuBLAS) multiplies them by the weight as stored, [out, in·k·k].
//  - patch_im2col: the ViT patch embedding (kernel = stride = p, no padding) of a CHW image;
//    row gy·(size/p) + gx = the patch's pixels in (channel, py, px) order.
//  - im2col: a k x k convolution (stride, zero padding) over a channels-last map [h, w, c]
//    (the layout of every vision activation); row oy·wo + ox = (channel, ky, kx), zero where the
//    window leaves the map.
// Both orders are the checkpoint weight's [out, in, kh, kw] flattened, as the CPU's conv.hpp.
// Algorithm: one thread per column element (grid-stride), decoding (row, channel, ky, kx) from
// the flat index. Numerics: exact copies.
#include "common.cuh"

#include "uocr/version.hpp"
#include "uocr/vision/token_layout.hpp"

UOCR_NAMESPACE_BEGIN
namespace cuda {
namespace {

using namespace detail;

constexpr int kThreads = 256;

__global__ void patch_im2col_kernel(const float* chw, int channels, int size, int p, float* cols) {
  const int g = size / p;
  const int64_t len = int64_t(channels) * p * p, n = int64_t(g) * g * len;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / len, in = i % len;
    const int ch = int(in / (p * p)), py = int(in / p % p), px = int(in % p);
    const int gy = int(row / g), gx = int(row % g);
    cols[i] = chw[(int64_t(ch) * size + int64_t(gy) * p + py) * size + int64_t(gx) * p + px];
  }
}

__global__ void im2col_kernel(const float* x, int h, int w, int channels, int k, int stride, int pad, int wo,
                              int64_t n, float* cols) {
  const int64_t len = int64_t(channels) * k * k;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / len, in = i % len;
    const int ch = int(in / (k * k)), ky = int(in / k % k), kx = int(in % k);
    const int iy = int(row / wo) * stride - pad + ky, ix = int(row % wo) * stride - pad + kx;
    cols[i] = (iy >= 0 && iy < h && ix >= 0 && ix < w) ? x[(int64_t(iy) * w + ix) * channels + ch] : 0.f;
  }
}

}  // namespace

void ops::patch_im2col(Context& c, const float* chw, int channels, int size, int p, float* cols) {
  require(channels > 0 && p > 0 && size > 0 && size % p == 0, Status::invalid_argument, "CUDA patch_im2col: bad shape");
  const int64_t n = int64_t(size / p) * (size / p) * channels * p * p;
  patch_im2col_kernel<<<grid_stride_blocks(n, kThreads), kThreads, 0, stream(c)>>>(chw, channels, size, p, cols);
  check_launch("patch_im2col");
}

void ops::im2col(Context& c, const float* x, int h, int w, int channels, int k, int stride, int pad, float* cols) {
  require(h > 0 && w > 0 && channels > 0 && k > 0 && stride > 0 && pad >= 0 && h + 2 * pad >= k && w + 2 * pad >= k,
          Status::invalid_argument, "CUDA im2col: bad shape");
  const int ho = conv_output_size(h, k, stride, pad), wo = conv_output_size(w, k, stride, pad);
  const int64_t n = int64_t(ho) * wo * channels * k * k;
  im2col_kernel<<<grid_stride_blocks(n, kThreads), kThreads, 0, stream(c)>>>(x, h, w, channels, k, stride, pad, wo, n,
                                                                             cols);
  check_launch("im2col");
}

}  // namespace cuda
UOCR_NAMESPACE_END
