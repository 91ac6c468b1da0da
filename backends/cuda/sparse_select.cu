// SR-SWA on the device for one decode step and layer: the selection (the CPU's rule,
// uocr::SparseReference::select_step, bit for bit) and the attention over what it selected. The
// same algorithm as Vulkan's sparse_select.comp and attention.comp (SPANS), so the host never
// reads q back.
//
// Selection: one block of 256 threads per query head (GQA: KV head g = h / (heads / kv_heads)).
//  1. page gate (when it runs): Quest bounds of the gate tree's top level, then per level below
//     keep the `beam` best and score their children (slot k·F + c = child c of kept node k,
//     padding past the level's end), down to the pages; the `page_budget` best pages pass;
//  2. token selector: the gated pages' blocks (page by page), scored only when there are more
//     than `block_budget`, the best `block_budget` kept;
//  3. spans: the always-visible spans + the kept blocks, sorted by (row, rows) and merged as the
//     CPU's merge_spans; thread 0 writes them and adds the head's rows and bounds to the step's
//     counters (two 64-bit integer atomics: order-free, exact).
// "Keep the best n" sorts (key, id) pairs ascending with a bitonic sort over the head's global
// scratch (padded to a power of two with (~0, ~0)) and takes the first n, where key is the score
// mapped to an order-preserving integer, inverted (ascending key = descending score) with -0 as
// +0: the set the CPU's nth_element keeps, the lower id winning ties. The threads of a block
// meet at __syncthreads() between passes, which also makes their global-memory writes visible to
// each other; every loop bound is block-uniform, so every thread reaches every barrier.
// Numerics: a Quest bound sum_i max(q_i·min_i, q_i·max_i) is summed as the CPU's quest_bound:
// 8 lanes (lane l takes i ≡ l mod 8 ascending over the whole groups of 8), then the lanes in
// order, then the tail, each product and sum rounded on its own (__fmul_rn / __fadd_rn: no FMA
// contraction) and max(a, b) = a < b ? b : a (std::max, -0 vs +0 included).
// Layout: tables, bounds, scratch and selection as uocr/decoder/sparse_tables.hpp describes.
//
// Attention: each head's selected reference rows in span order, then the window's rows in slot
// order, through the dense kernels (split_attention.cuh), so a selection of the whole reference
// gives dense R-SWA's bits. A key's row is found by binary search over the span list (first key
// index per span).
#include "split_attention.cuh"

#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN
namespace cuda {
namespace {

using namespace detail;

constexpr int kThreads = 256;
constexpr uint32_t kPad = 0xffffffffu;

// The CPU's detail::quest_bound of q (d floats) over [mn, mn + d) and [mn + d, mn + 2d).
__device__ float quest_bound(const float* q, const float* mn, int d) {
  constexpr int kLanes = 8;
  const float* mx = mn + d;
  float acc[kLanes];
#pragma unroll
  for (int l = 0; l < kLanes; ++l) acc[l] = 0.f;
  int i = 0;
  for (; i + kLanes <= d; i += kLanes)
#pragma unroll
    for (int l = 0; l < kLanes; ++l) {
      const float a = __fmul_rn(q[i + l], mn[i + l]), b = __fmul_rn(q[i + l], mx[i + l]);
      acc[l] = __fadd_rn(acc[l], a < b ? b : a);
    }
  float s = 0.f;
#pragma unroll
  for (int l = 0; l < kLanes; ++l) s = __fadd_rn(s, acc[l]);
  for (; i < d; ++i) {
    const float a = __fmul_rn(q[i], mn[i]), b = __fmul_rn(q[i], mx[i]);
    s = __fadd_rn(s, a < b ? b : a);
  }
  return s;
}

// Ascending key = descending score; -0 counts as +0 (the CPU compares them equal).
__device__ uint32_t score_key(float s) {
  const uint32_t u = __float_as_uint(s == 0.f ? 0.f : s);
  const uint32_t ordered = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return ~ordered;
}

__device__ void store_pair(uint32_t* base, uint32_t i, uint32_t key, uint32_t id) {
  base[2 * i] = key;
  base[2 * i + 1] = id;
}

__device__ uint32_t pow2_at_least(uint32_t n) {
  uint32_t m = 1;
  while (m < n) m <<= 1;
  return m;
}

// Ascending bitonic sort of the (key, id) pairs [0, n) at base (n a power of two), by the whole
// block; ends synchronised.
__device__ void sort_pairs(uint32_t* base, uint32_t n) {
  for (uint32_t k = 2; k <= n; k <<= 1)
    for (uint32_t j = k >> 1; j > 0; j >>= 1) {
      for (uint32_t i = threadIdx.x; i < n; i += kThreads) {
        const uint32_t o = i ^ j;
        if (o > i) {
          const uint32_t ak = base[2 * i], ai = base[2 * i + 1], bk = base[2 * o], bi = base[2 * o + 1];
          const bool b_first = bk < ak || (bk == ak && bi < ai);
          if (b_first == ((i & k) == 0)) {
            store_pair(base, i, bk, bi);
            store_pair(base, o, ak, ai);
          }
        }
      }
      __syncthreads();
    }
}

// Pads the pairs past `slots` up to a power of two and sorts them (the block, synchronised).
__device__ void sort_candidates(uint32_t* cand, uint32_t slots) {
  const uint32_t n = pow2_at_least(max(slots, 1u));
  for (uint32_t i = slots + threadIdx.x; i < n; i += kThreads) store_pair(cand, i, kPad, kPad);
  __syncthreads();
  sort_pairs(cand, n);
}

__global__ void __launch_bounds__(kThreads)
    sparse_select_kernel(SparseSelectParams p, const float* __restrict__ q, const float* __restrict__ block_bounds,
                         const float* __restrict__ node_bounds, const uint32_t* __restrict__ tab, uint32_t* scratch,
                         uint32_t* selection, unsigned long long* counts) {
  __shared__ float qs[ops::kMaxHeadDim];
  __shared__ uint32_t n_real;  // real candidates of a gate level (the slots may hold padding)
  const uint32_t tid = threadIdx.x, head = blockIdx.x, kvh = head / p.group;
  const int d = int(p.head_dim);
  uint32_t* cand = scratch + size_t(head) * (2 * size_t(p.cand_cap) + 2 * size_t(p.span_cap) + p.kept_cap);
  uint32_t* span = cand + 2 * size_t(p.cand_cap);
  uint32_t* kept = span + 2 * size_t(p.span_cap);
  const uint32_t* page_first_block = tab + 2 * size_t(p.blocks);
  const uint32_t* level_first = page_first_block + p.pages + 1;
  const uint32_t* always = level_first + p.levels + 1;
  auto node = [&](uint32_t n) { return node_bounds + (size_t(kvh) * p.nodes + n) * 2 * size_t(d); };
  auto block = [&](uint32_t b) { return block_bounds + (size_t(kvh) * p.blocks + b) * 2 * size_t(d); };

  for (int e = int(tid); e < d; e += kThreads) qs[e] = q[size_t(head) * d + e];
  __syncthreads();
  uint32_t bounds = 0;

  // 1. Page gate: the pages that pass go to kept[0, n_pages).
  uint32_t n_pages = p.pages;
  if (p.gates) {
    const uint32_t top = p.levels - 1, top_first = level_first[top], top_nodes = level_first[top + 1] - top_first;
    for (uint32_t i = tid; i < top_nodes; i += kThreads)
      store_pair(cand, i, score_key(quest_bound(qs, node(top_first + i), d)), i);
    uint32_t slots = top_nodes, real = top_nodes;
    bounds += top_nodes;
    for (uint32_t lv = top; lv > 0; --lv) {
      sort_candidates(cand, slots);  // every thread has read n_real (below) before this returns
      const uint32_t keep = min(p.beam, real);
      for (uint32_t i = tid; i < keep; i += kThreads) kept[i] = cand[2 * i + 1];
      if (tid == 0) n_real = 0;
      __syncthreads();
      const uint32_t first = level_first[lv - 1], nodes = level_first[lv] - first;
      slots = keep * p.fan;
      for (uint32_t s = tid; s < slots; s += kThreads) {
        const uint32_t child = kept[s / p.fan] * p.fan + s % p.fan;
        if (child < nodes) {
          store_pair(cand, s, score_key(quest_bound(qs, node(first + child), d)), child);
          atomicAdd(&n_real, 1u);
        } else {
          store_pair(cand, s, kPad, kPad);
        }
      }
      __syncthreads();
      real = n_real;
      bounds += real;
    }
    sort_candidates(cand, slots);
    n_pages = min(p.page_budget, real);
    for (uint32_t i = tid; i < n_pages; i += kThreads) kept[i] = cand[2 * i + 1];
    __syncthreads();
  }

  // 2. Token selector: the gated pages' blocks as candidates (slot order: page by page).
  uint32_t gated = 0;
  if (p.gates) {
    for (uint32_t i = 0; i < n_pages; ++i) {
      const uint32_t b0 = page_first_block[kept[i]], b1 = page_first_block[kept[i] + 1];
      for (uint32_t t = tid; t < b1 - b0; t += kThreads) store_pair(cand, gated + t, 0, b0 + t);
      gated += b1 - b0;
    }
  } else {
    for (uint32_t b = tid; b < p.blocks; b += kThreads) store_pair(cand, b, 0, b);
    gated = p.blocks;
  }
  __syncthreads();
  uint32_t n_blocks = gated;
  if (p.block_budget != 0 && gated > p.block_budget) {
    for (uint32_t s = tid; s < gated; s += kThreads) cand[2 * s] = score_key(quest_bound(qs, block(cand[2 * s + 1]), d));
    __syncthreads();
    bounds += gated;
    sort_candidates(cand, gated);
    n_blocks = p.block_budget;
  }

  // 3. Spans: the always-visible rows + the kept blocks, sorted by row and merged.
  const uint32_t n_spans = p.always + n_blocks, n_sorted = pow2_at_least(max(n_spans, 1u));
  for (uint32_t i = tid; i < p.always; i += kThreads) store_pair(span, i, always[2 * i], always[2 * i + 1]);
  for (uint32_t i = tid; i < n_blocks; i += kThreads) {
    const uint32_t b = cand[2 * i + 1];
    store_pair(span, p.always + i, tab[2 * b], tab[2 * b + 1]);
  }
  for (uint32_t i = n_spans + tid; i < n_sorted; i += kThreads) store_pair(span, i, kPad, kPad);
  __syncthreads();
  sort_pairs(span, n_sorted);
  if (tid != 0) return;
  uint32_t* sel = selection + (size_t(p.layer) * p.heads + head) * p.sel_stride;
  uint32_t count = 0, total = 0, row = 0, rows = 0;
  auto close = [&] {  // writes the open span
    sel[3 * count] = row;
    sel[3 * count + 1] = rows;
    sel[3 * count + 2] = total;
    total += rows;
  };
  for (uint32_t i = 0; i < n_spans; ++i) {
    const uint32_t s_row = span[2 * i], s_rows = span[2 * i + 1];
    if (s_rows == 0) continue;
    if (count > 0 && row + rows >= s_row) {
      rows = max(row + rows, s_row + s_rows) - row;
      continue;
    }
    if (count > 0) close();
    ++count;
    row = s_row;
    rows = s_rows;
  }
  if (count > 0) close();
  sel[0] = count;
  sel[1] = total;
  sel[2] = bounds;
  atomicAdd(&counts[0], (unsigned long long)total);
  atomicAdd(&counts[1], (unsigned long long)bounds);
}

// A head's SR-SWA keys: its selected reference rows in span order, then every row of the window
// (the dense kernel's order, so a selection of the whole reference gives the dense bits).
struct SpanKeys {
  static constexpr bool kBias = false;
  const float* q;
  float* out;
  const uint32_t* selection;
  uint32_t sel_stride;
  ops::KvSpan reference, window;
  int64_t kv_row;
  struct Row {
    const float* q;
    float* out;
    int64_t n;
    const uint32_t* sel;
  };
  __device__ Row row(int, int h) const {
    const uint32_t* sel = selection + size_t(h) * sel_stride;
    return {q, out, int64_t(sel[1]) + window.rows, sel};
  }
  // Key j's K row (value: its V row). Span i: sel[3 + 3i] first row, [4 + 3i] rows, [5 + 3i]
  // index of its first key.
  __device__ const float* kv(const Row& row, int64_t j, bool value) const {
    const int64_t na = row.sel[1];
    if (j >= na) return (value ? window.v : window.k) + (j - na) * kv_row;
    uint32_t lo = 0, hi = row.sel[0];
    while (hi - lo > 1) {
      const uint32_t mid = (lo + hi) / 2;
      if (row.sel[5 + 3 * mid] <= uint32_t(j)) lo = mid; else hi = mid;
    }
    return (value ? reference.v : reference.k) + int64_t(row.sel[3 + 3 * lo] + (uint32_t(j) - row.sel[5 + 3 * lo])) * kv_row;
  }
};

}  // namespace

void ops::sparse_select(Context& c, const SparseSelectParams& p, const float* q, const float* block_bounds,
                        const float* node_bounds, const uint32_t* tables, uint32_t* scratch, uint32_t* selection,
                        uint64_t* counts) {
  require(p.heads > 0 && p.group > 0 && p.heads % p.group == 0 && p.head_dim > 0 && p.head_dim <= uint32_t(kMaxHeadDim) &&
              (!p.gates || (p.levels > 0 && p.fan > 0)),
          Status::invalid_argument, "CUDA SR-SWA selection: bad parameters");
  sparse_select_kernel<<<p.heads, kThreads, 0, stream(c)>>>(p, q, block_bounds, node_bounds, tables, scratch, selection,
                                                            reinterpret_cast<unsigned long long*>(counts));
  check_launch("sparse_select");
}

void ops::span_attention(Context& c, const float* q, const AttentionDims& d, const KvSpan& reference, const KvSpan& window,
                         const uint32_t* selection, int64_t sel_stride, float* out) {
  require(sel_stride >= 3 && sel_stride <= int64_t(UINT32_MAX) && reference.rows >= 0 && window.rows >= 0,
          Status::invalid_argument, "CUDA span attention: bad shape");
  // A head's selected rows are disjoint rows of the reference: at most reference.rows keys.
  const SpanKeys keys{q, out, selection, uint32_t(sel_stride), reference, window, int64_t(d.kv_heads) * d.head_dim};
  split_attention<SpanKeys>(c, [&](int64_t) { return keys; }, 1, d, std::max<int64_t>(reference.rows + window.rows, 1),
                            "span attention");
}

}  // namespace cuda
UOCR_NAMESPACE_END
