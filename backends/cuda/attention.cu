// Attention of query rows over two spans of cached keys/values: the R-SWA decode step (span a =
// the never-evicted reference, span b = the ring of generated rows, all visible, no mask: slot
// order inside the ring is irrelevant) and causal prefill (a empty, b = prompt rows 0..i for
// query i). One kernel serves both, and batched decode passes one row per sequence.
//
// Algorithm (two exact passes, like the CPU's decode_attention; no online rescaling): one block
// of 256 threads per (head h, query row r), GQA head g = h / (heads / kv_heads).
//  1. scores: warp w takes keys w, w+8, ...; lanes split head_dim, then a butterfly sum;
//     s[j] = (q·k_j) · scale with scale = 1/sqrt(head_dim) (float32, the CPU's order:
//     products first, scaled after).
//  2. softmax: max over j (block_max), e_j = expf(s_j − max), sum (fixed-order block_sum),
//     p_j = e_j / sum.
//  3. output: thread t owns column e = t % d of part t / d (256 / d parts); part p sums
//     p_j · v_j[e] over j ≡ p mod parts in ascending j, then the parts are added in order.
// Layout: q, out rows [heads·d]; k, v rows [kv_heads·d] float32; scores live in a global scratch
// [rows, heads, max_keys] (a prompt's rows go in chunks so it stays bounded).
// Numerics: float32, deterministic (no atomics, fixed reduction trees); the exp is the accurate
// expf. Sums run in a different order than the CPU's SIMD loop: agreement ~1e-7 relative.
#include "common.cuh"

namespace uocr::cuda {
namespace {

using namespace detail;

constexpr int kThreads = 256, kWarps = kThreads / kWarp;

__global__ void __launch_bounds__(kThreads)
    attention_kernel(const ops::AttentionRow* rows, int heads, int kv_heads, int d, int64_t max_keys, float* scores) {
  __shared__ float qs[ops::kMaxHeadDim];
  __shared__ float parts_out[kThreads];
  __shared__ float red[kWarp];
  const int h = blockIdx.x, lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const ops::AttentionRow row = rows[blockIdx.y];
  const int g = h / (heads / kv_heads);
  const int64_t kr = int64_t(kv_heads) * d, na = row.a.rows, n = na + row.b.rows;
  float* s = scores + (int64_t(blockIdx.y) * heads + h) * max_keys;
  const float scale = 1.0f / sqrtf(float(d));

  for (int e = threadIdx.x; e < d; e += kThreads) qs[e] = row.q[int64_t(h) * d + e];
  __syncthreads();

  for (int64_t j = warp; j < n; j += kWarps) {
    const float* k = (j < na ? row.a.k + j * kr : row.b.k + (j - na) * kr) + int64_t(g) * d;
    const float dot = warp_dot(qs, k, d);
    if (lane == 0) s[j] = dot * scale;
  }
  __syncthreads();

  const float sum = block_softmax_numerators<kThreads>(s, n, red);
  const float o = block_weighted_values<kThreads>(
      s, sum, n, d, [&](int64_t j) { return (j < na ? row.a.v + j * kr : row.b.v + (j - na) * kr) + int64_t(g) * d; },
      parts_out);
  if (threadIdx.x < d) row.out[int64_t(h) * d + threadIdx.x] = o;
}

}  // namespace

void ops::attention(Context& c, const AttentionRow* rows, int64_t n, const AttentionDims& d, int64_t max_keys) {
  require(d.heads > 0 && d.kv_heads > 0 && d.heads % d.kv_heads == 0 && d.head_dim > 0 && max_keys > 0 && n >= 0,
          Status::invalid_argument, "CUDA attention: bad shape");
  require(d.head_dim <= kMaxHeadDim, Status::unsupported, [&] {
    return "CUDA attention: head_dim " + std::to_string(d.head_dim) + " exceeds " + std::to_string(kMaxHeadDim);
  });
  // Long prompts go in chunks of query rows (score_chunk_rows).
  const int64_t per_row = int64_t(d.heads) * max_keys;
  const int64_t chunk = score_chunk_rows(per_row);
  float* scores = c.scratch(kScratchAttention, size_t(std::min(chunk, std::max<int64_t>(n, 1)) * per_row));
  for (int64_t r0 = 0; r0 < n; r0 += chunk) {
    const int64_t rows_now = std::min(chunk, n - r0);
    attention_kernel<<<dim3(unsigned(d.heads), unsigned(rows_now)), kThreads, 0, stream(c)>>>(
        rows + r0, d.heads, d.kv_heads, d.head_dim, max_keys, scores);
    check_launch("attention");
  }
}

}  // namespace uocr::cuda
