// SAM-ViT attention with decomposed relative positions (upstream Attention with use_rel_pos),
// windowed blocks and global blocks in one kernel: a real token of the g x g grid attends to
// the n·n keys of its n x n window (n = g for global blocks, one window), the grid zero-padded
// to whole windows; a padded key's k/v is the qkv bias (a zero row through the Linear), taking
// part without a mask, as upstream. For query q at (qy, qx) inside its window, key j at (ky, kx):
//   s_j = (q·k_j) · scale + (q·Th[qy − ky + n − 1] + q·Tw[qx − kx + n − 1]),  scale = 1/sqrt(hd)
// (the bias uses the unscaled q), then softmax and the weighted sum of v.
// Algorithm (as attention.cu, two exact passes, no online rescaling): one block of 256 threads
// per (head, query token). The 2n bias terms go to shared memory first (a warp per term, lanes
// split hd, butterfly sum); scores: warp w takes keys w, w+8, ...; softmax: block max, expf,
// fixed-order block sum, p_j = e_j / sum; output: thread t owns column t % hd of part t / hd and
// sums p_j · v_j over j ≡ part (mod parts) ascending, the parts then added in order.
// Layout: qkv [g·g, 3C] rows [q heads | k | v] float32, bias [3C], Th/Tw [2n − 1, hd] (resampled
// on the host as the CPU does), out [g·g, C]; scores in a global scratch [rows, heads, n·n]
// (query tokens go in chunks so it stays at most 2^25 floats).
// Numerics: float32, deterministic (fixed reduction trees, no atomics); the CPU multiplies by
// 1/sum after the weighted sum and uses Eigen's exp: agreement ~1e-7 relative.
#include "common.cuh"

namespace uocr::cuda {
namespace {

using namespace detail;

constexpr int kThreads = 256, kWarps = kThreads / kWarp;

__global__ void __launch_bounds__(kThreads)
    sam_attention_kernel(const float* qkv, const float* bias, const float* th, const float* tw, int g, int n, int heads,
                         int64_t c, int64_t row0, float* scores, float* out) {
  __shared__ float qs[ops::kMaxHeadDim];
  __shared__ float rel[2 * ops::kMaxSamSpan];  // [0, n): per key row ky; [n, 2n): per key column kx
  __shared__ float parts_out[kThreads];
  __shared__ float red[kWarp];
  const int h = blockIdx.x, lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int64_t token = row0 + blockIdx.y, hoff = int64_t(h) * (c / heads);
  const int hd = int(c / heads), y = int(token / g), x = int(token % g);
  const int wy = y / n, wx = x / n, qy = y % n, qx = x % n;
  const int64_t keys = int64_t(n) * n;
  float* s = scores + (int64_t(blockIdx.y) * heads + h) * keys;
  const float scale = 1.0f / sqrtf(float(hd));
  // Key j's qkv row: a real token of the window, or the bias for padding.
  auto key_row = [&](int64_t j) {
    const int ky = wy * n + int(j / n), kx = wx * n + int(j % n);
    return ky < g && kx < g ? qkv + (int64_t(ky) * g + kx) * 3 * c : bias;
  };

  for (int e = threadIdx.x; e < hd; e += kThreads) qs[e] = qkv[token * 3 * c + hoff + e];
  __syncthreads();

  for (int i = warp; i < 2 * n; i += kWarps) {
    const float* t = i < n ? th + int64_t(qy - i + n - 1) * hd : tw + int64_t(qx - (i - n) + n - 1) * hd;
    const float dot = warp_dot(qs, t, hd);
    if (lane == 0) rel[i] = dot;
  }
  __syncthreads();

  for (int64_t j = warp; j < keys; j += kWarps) {
    const float* k = key_row(j) + c + hoff;
    const float dot = warp_dot(qs, k, hd);
    if (lane == 0) s[j] = dot * scale + (rel[j / n] + rel[n + j % n]);
  }
  __syncthreads();

  const float sum = block_softmax_numerators<kThreads>(s, keys, red);
  const float o = block_weighted_values<kThreads>(
      s, sum, keys, hd, [&](int64_t j) { return key_row(j) + 2 * c + hoff; }, parts_out);
  if (threadIdx.x < hd) out[token * c + hoff + threadIdx.x] = o;
}

}  // namespace

void ops::sam_attention(Context& c, const float* qkv, const float* qkv_bias, const float* th, const float* tw, int g,
                        int n, int heads, int64_t channels, float* out) {
  require(g > 0 && n > 0 && heads > 0 && channels % heads == 0, Status::invalid_argument, "CUDA sam_attention: bad shape");
  require(n <= kMaxSamSpan && channels / heads <= kMaxHeadDim, Status::unsupported, [&] {
    return "CUDA sam_attention: window " + std::to_string(n) + " or head_dim " + std::to_string(channels / heads) +
           " exceeds " + std::to_string(kMaxSamSpan) + " / " + std::to_string(kMaxHeadDim);
  });
  const int64_t tokens = int64_t(g) * g, per_row = int64_t(heads) * n * n;
  const int64_t chunk = score_chunk_rows(per_row);
  float* scores = c.scratch(kScratchAttention, size_t(std::min(chunk, tokens) * per_row));
  for (int64_t r0 = 0; r0 < tokens; r0 += chunk) {
    const int64_t rows = std::min(chunk, tokens - r0);
    sam_attention_kernel<<<dim3(unsigned(heads), unsigned(rows)), kThreads, 0, stream(c)>>>(
        qkv, qkv_bias, th, tw, g, n, heads, channels, r0, scores, out);
    check_launch("sam_attention");
  }
}

}  // namespace uocr::cuda
