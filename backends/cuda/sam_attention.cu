// SAM-ViT attention with decomposed relative positions (upstream Attention with use_rel_pos),
// windowed blocks and global blocks alike: a real token of the g x g grid attends to the n·n
// keys of its n x n window (n = g for global blocks, one window), the grid zero-padded to whole
// windows; a padded key's k/v is the qkv bias (a zero row through the Linear), taking part
// without a mask, as upstream. For query q at (qy, qx) inside its window, key j at (ky, kx):
//   s_j = (q·k_j) · scale + (q·Th[qy − ky + n − 1] + q·Tw[qx − kx + n − 1]),  scale = 1/sqrt(hd)
// (the bias uses the unscaled q), then softmax and the weighted sum of v.
// Algorithm: (1) rel: the 2n bias terms of every (token, head), a warp per term (lanes split
// hd, butterfly sum), into the scratch [tokens, heads, 2n]; (2) the split-key attention of
// split_attention.cuh with those terms as the keys' bias.
// Layout: qkv [g·g, 3C] rows [q heads | k | v] float32, bias [3C], Th/Tw [2n − 1, hd] (resampled
// on the host as the CPU does), out [g·g, C].
// Numerics: float32, deterministic (fixed reduction trees, no atomics); the CPU multiplies by
// 1/sum after the weighted sum and uses Eigen's exp: agreement ~1e-7 relative.
#include "split_attention.cuh"

#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN
namespace cuda {
namespace {

using namespace detail;

constexpr int kRelThreads = 256, kRelWarps = kRelThreads / kWarp;

// rel[(token·heads + h)·2n + i] = q·Th[qy − i + n − 1] for i < n (key row i), q·Tw[qx − (i−n) + n − 1] after.
__global__ void __launch_bounds__(kRelThreads)
    sam_rel_kernel(const float* qkv, const float* th, const float* tw, int g, int n, int heads, int64_t c, float* rel) {
  const int h = blockIdx.x, lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int64_t token = blockIdx.y;
  const int hd = int(c / heads), qy = int(token / g) % n, qx = int(token % g) % n;
  const float* q = qkv + token * 3 * c + int64_t(h) * hd;
  float* out = rel + (token * heads + h) * 2 * n;
  for (int i = warp; i < 2 * n; i += kRelWarps) {
    const float* t = i < n ? th + int64_t(qy - i + n - 1) * hd : tw + int64_t(qx - (i - n) + n - 1) * hd;
    const float dot = warp_dot(q, t, hd);
    if (lane == 0) out[i] = dot;
  }
}

struct SamKeys {
  static constexpr bool kBias = true;
  const float *qkv, *qkv_bias, *rel;
  float* out;
  int g, n, heads;
  int64_t c, first;  // channels; the first query token of this launch
  struct Row {
    const float* q;
    float* out;
    int64_t n;
    int wy, wx;
    const float* rel;
  };
  __device__ Row row(int r, int h) const {
    const int64_t token = first + r;
    const int y = int(token / g), x = int(token % g);
    return {qkv + token * 3 * c, out + token * c, int64_t(n) * n, y / n, x / n, rel + (token * heads + h) * 2 * n};
  }
  // Key j's row of the window: a real token, or the bias for padding; +c: K, +2c: V.
  __device__ const float* kv(const Row& row, int64_t j, bool value) const {
    const int ky = row.wy * n + int(j / n), kx = row.wx * n + int(j % n);
    return (ky < g && kx < g ? qkv + (int64_t(ky) * g + kx) * 3 * c : qkv_bias) + (value ? 2 * c : c);
  }
  __device__ float bias(const Row& row, int64_t j) const { return row.rel[j / n] + row.rel[n + j % n]; }
};

}  // namespace

void ops::sam_attention(Context& c, const float* qkv, const float* qkv_bias, const float* th, const float* tw, int g,
                        int n, int heads, int64_t channels, float* out) {
  require(g > 0 && n > 0 && heads > 0 && channels % heads == 0, Status::invalid_argument, "CUDA sam_attention: bad shape");
  require(n <= kMaxSamSpan, Status::unsupported, [&] {
    return "CUDA sam_attention: window " + std::to_string(n) + " exceeds " + std::to_string(kMaxSamSpan);
  });
  const int64_t tokens = int64_t(g) * g;
  require_grid_y(tokens, "sam_attention");
  float* rel = c.scratch(kScratchSamRel, size_t(tokens * heads * 2 * n));
  sam_rel_kernel<<<dim3(unsigned(heads), unsigned(tokens)), kRelThreads, 0, stream(c)>>>(qkv, th, tw, g, n, heads, channels,
                                                                                         rel);
  check_launch("sam_attention relative positions");
  const SamKeys keys{qkv, qkv_bias, rel, out, g, n, heads, channels, 0};
  split_attention<SamKeys>(
      c,
      [&](int64_t first) {
        SamKeys k = keys;
        k.first = first;
        return k;
      },
      tokens, ops::AttentionDims{heads, heads, int(channels / heads)}, int64_t(n) * n, "sam_attention");
}

}  // namespace cuda
UOCR_NAMESPACE_END
