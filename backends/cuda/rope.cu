// Rotary position embedding, half rotation (transformers' rotate_half over the whole head, as
// uocr/decoder/rope.hpp): for i < d/2, x1 = v[i], x2 = v[i + d/2]:
//   v[i] = x1·cos − x2·sin,  v[i + d/2] = x2·cos + x1·sin,  angle = float(pos) · inv_freq[i].
// Algorithm: one thread per (row, head, i); the angle is the same single float32 product as the
// CPU, then sincosf (the accurate, range-reduced one; no fast-math), so results match the CPU's
// std::cos/std::sin to about one ulp even at positions in the tens of thousands.
// Layout: row r starts at x + r·row_stride and holds `heads` vectors of head_dim floats;
// inv_freq [d/2] float32 from the host (the CPU's exact values); positions [rows] int64 or null
// (then first + r).
#include "common.cuh"

#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN
namespace cuda {
namespace {

using namespace detail;

constexpr int kThreads = 256;

__global__ void rope_kernel(float* x, int64_t rows, int heads, int half, int64_t row_stride, const float* inv_freq,
                            int64_t first, const int64_t* positions) {
  const int64_t total = rows * heads * half;
  for (int64_t t = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; t < total; t += int64_t(gridDim.x) * blockDim.x) {
    const int i = int(t % half);
    const int64_t h = (t / half) % heads, r = t / (int64_t(half) * heads);
    const int64_t pos = positions ? positions[r] : first + r;
    const float angle = float(pos) * inv_freq[i];
    float s, c;
    sincosf(angle, &s, &c);
    float* v = x + r * row_stride + h * 2 * half;
    const float x1 = v[i], x2 = v[i + half];
    v[i] = x1 * c - x2 * s;
    v[i + half] = x2 * c + x1 * s;
  }
}

}  // namespace

void ops::rope(Context& c, float* x, int64_t rows, int heads, int head_dim, int64_t row_stride, const float* inv_freq,
               int64_t first_position, const int64_t* positions) {
  require(rows >= 0 && heads > 0 && head_dim > 0 && head_dim % 2 == 0 && row_stride >= int64_t(heads) * head_dim,
          Status::invalid_argument, "CUDA rope: bad shape");
  const int64_t total = rows * heads * (head_dim / 2);
  if (total == 0) return;
  rope_kernel<<<grid_stride_blocks(total, kThreads), kThreads, 0, stream(c)>>>(x, rows, heads, head_dim / 2, row_stride,
                                                                               inv_freq, first_position, positions);
  check_launch("rope");
}

}  // namespace cuda
UOCR_NAMESPACE_END
