// Split-key attention ("flash decoding"): the attention of every query row and head of the
// decoder (prefill, the decode step, SR-SWA's selected keys), of CLIP and of SAM, in two kernels.
//
// Why split: a decode step has one query row per sequence, so one block per (row, head) gave 10
// blocks on a 132-SM GPU, each walking hundreds of keys one after another; latency, not
// bandwidth, set the step time. Splitting the keys into fixed chunks of kSplitKeys gives
// (heads × rows × chunks) short blocks that run side by side.
//
// Algorithm: the keys of a (row r, head h) are numbered j = 0..n−1; Keys says where key j's K and V
// rows are (dense: span a then span b; SR-SWA: the selected reference rows, then the ring).
//  1. partial (grid heads × rows × chunks): chunk c takes keys c·K .. c·K+K−1.
//     scores: kSplitThreads / K threads per key, each a float4-strided part of the head's dims,
//     then a xor butterfly among them; s_i = (q·k_i)·(1/sqrt(d)) (+ Keys' bias: SAM's relative
//     positions). Chunk max m_c, e_i = expf(s_i − m_c), l_c = Σ e_i (block_softmax_numerators'
//     order), o_c = Σ (e_i / l_c)·v_i: thread t owns columns 4·(t mod d/4) .. +3 of key part
//     t / (d/4), the parts added in order. Writes m_c, l_c, o_c.
//  2. combine (grid heads × rows): M = max m_c, w_c = l_c·expf(m_c − M), L = Σ w_c in chunk
//     order, out = Σ (w_c / L)·o_c in chunk order.
// The chunk size is a constant, never a function of the batch or of the key capacity, so a row's
// result depends on its own keys only: batched steps equal single steps, graph replays equal
// eager steps, and SR-SWA selecting every key equals dense R-SWA, bit for bit.
// Layout: q, out [heads·d] per row; K/V rows [kv_heads·d] float32 (head h reads KV head
// h / (heads / kv_heads)); partials [rows, heads, chunks, d + 2] in a scratch slot, rows in
// launches of at most 2^25 floats. d must be a multiple of 4, at most kMaxHeadDim.
// Numerics: float32, fixed reduction trees, accurate expf; no atomics.
#pragma once
#include "common.cuh"

#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN
namespace cuda::detail {

inline constexpr int kSplitKeys = 64, kSplitThreads = 256;

// Keys: Row row(r, h) (q, out, n and what kv needs), const float* kv(row, j, value) (key j's K
// or V row), kBias and, when set, float bias(row, j) added to key j's scaled score.
// Dense rows: key j of a row is span a's row j, then span b's row j − a.rows.
struct RowKeys {
  static constexpr bool kBias = false;
  const ops::AttentionRow* rows;
  int64_t kv_row;  // floats per K/V row
  struct Row {
    const float* q;
    float* out;
    int64_t n;
    ops::AttentionRow spans;
  };
  __device__ Row row(int r, int) const {
    const ops::AttentionRow a = rows[r];
    return {a.q, a.out, a.a.rows + a.b.rows, a};
  }
  // Key j's K row (value: its V row).
  __device__ const float* kv(const Row& row, int64_t j, bool value) const {
    const bool in_a = j < row.spans.a.rows;
    const ops::KvSpan& s = in_a ? row.spans.a : row.spans.b;
    return (value ? s.v : s.k) + (in_a ? j : j - row.spans.a.rows) * kv_row;
  }
};

// q·k over d dims by the lanes_per_key threads of one key (each a float4-strided part), then a
// xor butterfly among them. Every lane of the warp calls it (the shuffles need the whole warp);
// k is null for a thread without a key.
__device__ __forceinline__ float chunk_dot(const float* qs, const float* k, int d, int lanes_per_key) {
  float acc = 0.f;
  if (k)
    for (int e = threadIdx.x % lanes_per_key * 4; e < d; e += lanes_per_key * 4) {
      const float4 kv = *reinterpret_cast<const float4*>(k + e);
      acc += qs[e] * kv.x + qs[e + 1] * kv.y + qs[e + 2] * kv.z + qs[e + 3] * kv.w;
    }
  for (int o = lanes_per_key / 2; o > 0; o /= 2) acc += __shfl_xor_sync(0xffffffffu, acc, o);
  return acc;
}

template <class Keys>
__global__ void __launch_bounds__(kSplitThreads)
    split_attention_partial(Keys keys, int heads, int kv_heads, int d, int64_t chunks, float* partial) {
  constexpr int K = kSplitKeys, lanes_per_key = kSplitThreads / K;
  __shared__ __align__(16) float qs[ops::kMaxHeadDim];
  __shared__ float s[K];
  __shared__ const float* vrow[K];
  __shared__ __align__(16) float parts[kSplitThreads * 4];
  __shared__ float red[kWarp];
  const int h = blockIdx.x, r = blockIdx.y;
  const int64_t c = blockIdx.z;
  const typename Keys::Row row = keys.row(r, h);
  const int64_t j0 = c * K;
  if (j0 >= row.n) return;  // the whole block: no barrier reached yet
  const int count = int(min(int64_t(K), row.n - j0));
  const int64_t head_off = int64_t(h / (heads / kv_heads)) * d;

  for (int e = threadIdx.x; e < d; e += kSplitThreads) qs[e] = row.q[int64_t(h) * d + e];
  __syncthreads();

  const int i = threadIdx.x / lanes_per_key;  // this thread's key in the chunk
  const float dot = chunk_dot(qs, i < count ? keys.kv(row, j0 + i, false) + head_off : nullptr, d, lanes_per_key);
  if (i < count && threadIdx.x % lanes_per_key == 0) {
    s[i] = dot * (1.0f / sqrtf(float(d)));
    if constexpr (Keys::kBias) s[i] += keys.bias(row, j0 + i);
    vrow[i] = keys.kv(row, j0 + i, true) + head_off;
  }
  __syncthreads();

  const SoftmaxStats st = block_softmax_numerators<kSplitThreads>(s, count, red);
  // Σ (e_i / l)·v_i: thread t owns 4 columns of key part t / (d/4).
  const int groups = d / 4, nparts = kSplitThreads / groups, g = threadIdx.x % groups, part = threadIdx.x / groups;
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  if (part < nparts)
    for (int k = part; k < count; k += nparts) {
      const float p = s[k] / st.sum;
      const float4 v = *reinterpret_cast<const float4*>(vrow[k] + 4 * g);
      acc.x += p * v.x, acc.y += p * v.y, acc.z += p * v.z, acc.w += p * v.w;
    }
  if (part < nparts) reinterpret_cast<float4*>(parts)[part * groups + g] = acc;
  __syncthreads();
  float* out = partial + ((int64_t(r) * heads + h) * chunks + c) * (d + 2);
  for (int e = threadIdx.x; e < d; e += kSplitThreads) {
    float o = 0.f;
    for (int p = 0; p < nparts; ++p) o += parts[p * d + e];
    out[2 + e] = o;
  }
  if (threadIdx.x == 0) out[0] = st.max, out[1] = st.sum;
}

template <class Keys>
__global__ void split_attention_combine(Keys keys, int heads, int d, int64_t chunks, const float* partial) {
  const int h = blockIdx.x, r = blockIdx.y;
  const typename Keys::Row row = keys.row(r, h);
  const int64_t used = (row.n + kSplitKeys - 1) / kSplitKeys, stride = d + 2;
  const float* p = partial + (int64_t(r) * heads + h) * chunks * stride;
  float mx = -INFINITY;
  for (int64_t c = 0; c < used; ++c) mx = fmaxf(mx, p[c * stride]);
  float total = 0.f;
  for (int64_t c = 0; c < used; ++c) total += p[c * stride + 1] * expf(p[c * stride] - mx);
  for (int e = threadIdx.x; e < d; e += blockDim.x) {
    float o = 0.f;
    for (int64_t c = 0; c < used; ++c) o += (p[c * stride + 1] * expf(p[c * stride] - mx) / total) * p[c * stride + 2 + e];
    row.out[int64_t(h) * d + e] = o;
  }
}

// Both kernels over rows [0, n) of `keys` (Keys::row takes a row index relative to `first`,
// which the caller bakes into Keys), max_keys ≥ every row's n.
template <class Keys, class KeysAt>
void split_attention(Context& c, KeysAt keys_at, int64_t n, const ops::AttentionDims& d, int64_t max_keys,
                     const char* what) {
  require(d.heads > 0 && d.kv_heads > 0 && d.heads % d.kv_heads == 0 && max_keys > 0 && n >= 0,
          Status::invalid_argument, [&] { return std::string("CUDA ") + what + ": bad shape"; });
  require(d.head_dim > 0 && d.head_dim % 4 == 0 && d.head_dim <= ops::kMaxHeadDim, Status::unsupported, [&] {
    return std::string("CUDA ") + what + ": head_dim " + std::to_string(d.head_dim) + " is not a multiple of 4 up to " +
           std::to_string(ops::kMaxHeadDim);
  });
  const int64_t chunks = (max_keys + kSplitKeys - 1) / kSplitKeys, per_row = int64_t(d.heads) * chunks * (d.head_dim + 2);
  require(chunks <= 65535, Status::unsupported, [&] {
    return std::string("CUDA ") + what + ": " + std::to_string(max_keys) + " keys exceed one launch";
  });
  const int64_t rows_per_launch = score_chunk_rows(per_row);
  float* partial = c.scratch(kScratchAttention, size_t(std::min(rows_per_launch, std::max<int64_t>(n, 1)) * per_row));
  const unsigned combine_threads = unsigned(std::min(128, (d.head_dim + kWarp - 1) / kWarp * kWarp));
  for (int64_t r0 = 0; r0 < n; r0 += rows_per_launch) {
    const int64_t rows = std::min(rows_per_launch, n - r0);
    const Keys keys = keys_at(r0);
    split_attention_partial<<<dim3(unsigned(d.heads), unsigned(rows), unsigned(chunks)), kSplitThreads, 0, stream(c)>>>(
        keys, d.heads, d.kv_heads, d.head_dim, chunks, partial);
    check_launch(what);
    split_attention_combine<<<dim3(unsigned(d.heads), unsigned(rows)), combine_threads, 0, stream(c)>>>(
        keys, d.heads, d.head_dim, chunks, partial);
    check_launch(what);
  }
}

}  // namespace cuda::detail
UOCR_NAMESPACE_END
