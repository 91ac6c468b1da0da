// SR-SWA: sparse reference attention for decode steps. R-SWA makes every generated token attend
// to the whole reference (BOS + every page's visual tokens + prompt text), so the step cost grows
// with the page count. SR-SWA narrows it, per layer and per query head, training-free:
//
//   1. page gate: each page of the reference has per-channel min/max key bounds (per KV head);
//      the upper bound of q·k over a page, sum_i max(q_i·min_i, q_i·max_i) (Quest, Tang et al.
//      2024), ranks the pages and the best `page_budget` pass;
//   2. token selector: inside the pages that passed, blocks of `block_tokens` consecutive visual
//      tokens carry the same bounds; the best `block_budget` blocks are selected;
//   3. the step attends, exactly (softmax over the chosen keys only), to the always-visible rows
//      (BOS and prompt text) + the selected blocks + the generated-token window.
//
// Budgets covering everything (every page passes, every block is selected) over a layout that
// covers the whole reference: the dense kernel (decode_attention) runs, so the result is
// bit-identical to dense R-SWA (`dense_when_complete`); without that shortcut the gathered kernel
// gives the same bits too (one merged span; tests check both).
//
// Plugs into Decoder::set_decode_attention(). The key summaries must follow the cache: rebuild()
// after a prefill, update_page() after a page's rows are rewritten (page groups do both).
//
// Cost per step, layer and head: pages·2d (gate) + gated blocks·2d (selector) + selected rows·2d
// (attention) instead of reference rows·2d. Bounded: the selected rows (always rows + block_budget ·
// block_tokens + window). Not bounded: the gate is linear in the page count (2d floats per page
// and KV head: 1/T of the page's K+V, T = 273 tokens per page), and the summaries take 2·d floats
// per block, page and KV head per layer (1/block_tokens of the keys' size, times 2). Measured at
// the real width (bench/unbounded.cpp, docs/PERFORMANCE.md): 14-23x faster than dense at 100
// pages; from 100 to 1,000 pages the step grows 1.4-1.5x, the gate (a third of it at 1,000).
// The keys and values themselves stay in the KvCache: SR-SWA saves time, not memory (page
// groups bound memory).
//
// Thread-safety: one SparseReference per Decoder/cache; attend() parallelises over heads inside.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "uocr/core/error.hpp"
#include "uocr/decoder/attention.hpp"
#include "uocr/decoder/kv_cache.hpp"
#include "uocr/model/config.hpp"

namespace uocr {

struct SparseParams {
  int block_tokens = 16;            // visual tokens per block (the last block of a page may be shorter)
  int page_budget = 4;              // pages the gate passes per layer and head; 0 = every page
  int block_budget = 64;            // blocks selected among the gated pages'; 0 = all of them
  bool dense_when_complete = true;  // budgets covering everything: run the dense kernel (bit-identical)
};

// What the reference rows are: rows every step sees, and pages (gated, split into blocks).
struct ReferenceLayout {
  std::vector<RowSpan> always;  // BOS, prompt text
  std::vector<RowSpan> pages;   // one span per page of visual tokens
  int64_t rows() const {
    int64_t n = 0;
    for (const RowSpan& s : always) n = std::max(n, s.end());
    for (const RowSpan& s : pages) n = std::max(n, s.end());
    return n;
  }
};

// The one-shot prompt: head (BOS + text before <image>), `pages` × `page_tokens`, tail text.
inline ReferenceLayout one_shot_layout(int64_t head_rows, int64_t pages, int64_t page_tokens, int64_t tail_rows) {
  ReferenceLayout l;
  if (head_rows > 0) l.always.push_back({0, head_rows});
  for (int64_t p = 0; p < pages; ++p) l.pages.push_back({head_rows + p * page_tokens, page_tokens});
  if (tail_rows > 0) l.always.push_back({head_rows + pages * page_tokens, tail_rows});
  return l;
}

namespace detail {

// One query head over chosen reference spans and the generated rows: exact softmax attention
// restricted to those keys. qh [d]; k/v rows have stride kr and the head's columns start at off.
inline void span_attention_head(const float* qh, const float* ref_k, const float* ref_v, const std::vector<RowSpan>& spans,
                                const KvRows& gen, int64_t kr, int64_t off, int d, std::vector<float>& scores, float* oh) {
  int64_t n = gen.rows;
  for (const RowSpan& s : spans) n += s.rows;
  if (int64_t(scores.size()) < n) scores.resize(size_t(n));
  Eigen::Map<const Eigen::VectorXf> q(qh, d);
  Eigen::Map<Eigen::VectorXf> sc(scores.data(), n);
  int64_t at = 0;
  for (const RowSpan& s : spans) {
    sc.segment(at, s.rows).noalias() = ConstHeadRows(ref_k + s.begin * kr + off, s.rows, d, Eigen::OuterStride<>(kr)) * q;
    at += s.rows;
  }
  if (gen.rows) sc.segment(at, gen.rows).noalias() = ConstHeadRows(gen.k + off, gen.rows, d, Eigen::OuterStride<>(kr)) * q;
  scaled_softmax_inplace(scores.data(), n, 1.0f / std::sqrt(float(d)));
  Eigen::Map<Eigen::VectorXf> o(oh, d);
  o.setZero();
  at = 0;
  for (const RowSpan& s : spans) {
    o.noalias() += ConstHeadRows(ref_v + s.begin * kr + off, s.rows, d, Eigen::OuterStride<>(kr)).transpose() *
                   sc.segment(at, s.rows);
    at += s.rows;
  }
  if (gen.rows)
    o.noalias() += ConstHeadRows(gen.v + off, gen.rows, d, Eigen::OuterStride<>(kr)).transpose() * sc.segment(at, gen.rows);
}

// Sorts spans by row and merges touching ones (fewer, longer GEMVs).
inline void merge_spans(std::vector<RowSpan>& spans) {
  std::sort(spans.begin(), spans.end(), [](const RowSpan& a, const RowSpan& b) { return a.begin < b.begin; });
  size_t w = 0;
  for (const RowSpan& s : spans) {
    if (s.rows == 0) continue;
    if (w > 0 && spans[w - 1].end() >= s.begin)
      spans[w - 1].rows = std::max(spans[w - 1].end(), s.end()) - spans[w - 1].begin;
    else
      spans[w++] = s;
  }
  spans.resize(w);
}

}  // namespace detail

// Decode attention of every query head over the same reference spans + the window (the spans a
// page group or a test oracle makes visible). out [heads·d].
inline void span_attention(const float* q, const KvRows& reference, const std::vector<RowSpan>& spans, const KvRows& generated,
                           const AttentionShape& s, float* out) {
  std::vector<float> scores;
  for (int h = 0; h < s.heads; ++h)
    detail::span_attention_head(q + int64_t(h) * s.head_dim, reference.k, reference.v, spans, generated, s.kv_row(),
                                int64_t(s.kv_head_of(h)) * s.head_dim, s.head_dim, scores, out + int64_t(h) * s.head_dim);
}

class SparseReference final : public DecodeAttention {
 public:
  SparseReference(const DecoderConfig& config, ReferenceLayout layout, SparseParams params)
      : layout_(std::move(layout)), p_(params), layers_(config.layers), kv_heads_(config.kv_heads), d_(config.head_dim) {
    require(p_.block_tokens > 0 && p_.page_budget >= 0 && p_.block_budget >= 0, Status::invalid_argument,
            "SR-SWA needs block_tokens > 0 and budgets >= 0 (0 = everything)");
    page_first_block_.push_back(0);
    for (const RowSpan& pg : layout_.pages) {
      require(pg.begin >= 0 && pg.rows > 0, Status::invalid_argument, "SR-SWA page spans must be non-empty");
      for (int64_t r = 0; r < pg.rows; r += p_.block_tokens)
        blocks_.push_back({pg.begin + r, std::min<int64_t>(p_.block_tokens, pg.rows - r)});
      page_first_block_.push_back(int64_t(blocks_.size()));
    }
    const size_t per_layer_blocks = blocks_.size() * size_t(kv_heads_ * d_);
    const size_t per_layer_pages = layout_.pages.size() * size_t(kv_heads_ * d_);
    blk_min_.assign(size_t(layers_), std::vector<float>(per_layer_blocks));
    blk_max_.assign(size_t(layers_), std::vector<float>(per_layer_blocks));
    page_min_.assign(size_t(layers_), std::vector<float>(per_layer_pages));
    page_max_.assign(size_t(layers_), std::vector<float>(per_layer_pages));
    summarized_.assign(layout_.pages.size(), false);
    missing_ = int64_t(layout_.pages.size());
    // Rows [0, coverage_) are exactly what the layout's spans cover together (-1: gaps or overlaps).
    std::vector<RowSpan> all(layout_.always);
    all.insert(all.end(), layout_.pages.begin(), layout_.pages.end());
    int64_t total = 0;
    for (const RowSpan& sp : all) total += sp.rows;
    detail::merge_spans(all);
    coverage_ = all.size() == 1 && all[0].begin == 0 && all[0].rows == total ? total : all.empty() ? 0 : -1;
  }

  const ReferenceLayout& layout() const { return layout_; }
  const SparseParams& params() const { return p_; }
  size_t page_count() const { return layout_.pages.size(); }
  size_t block_count() const { return blocks_.size(); }

  // Summaries of every page from the cache's reference keys (after a prefill).
  void rebuild(const KvCache& cache) {
    for (size_t pg = 0; pg < layout_.pages.size(); ++pg) update_page(cache, pg);
  }
  // Summaries of one page, in every layer (after its rows were rewritten).
  void update_page(const KvCache& cache, size_t page) {
    require(cache.layers() == layers_ && cache.row_floats() == int64_t(kv_heads_) * d_, Status::invalid_argument,
            "SR-SWA summaries were built for a different decoder configuration");
    require(page < layout_.pages.size() && layout_.pages[page].end() <= cache.reference_rows(), Status::invalid_argument,
            "SR-SWA page is outside the cache's reference");
    for (int l = 0; l < layers_; ++l) summarize(l, page, cache.reference_k(l));
  }
  // One layer's summaries of one page from that layer's reference keys [rows, kv_heads·d].
  void summarize(int layer, size_t page, const float* ref_k) {
    const int64_t kr = int64_t(kv_heads_) * d_;
    for (int g = 0; g < kv_heads_; ++g) {
      std::fill_n(page_min(layer, g, page), d_, std::numeric_limits<float>::infinity());
      std::fill_n(page_max(layer, g, page), d_, -std::numeric_limits<float>::infinity());
    }
    for (int64_t b = page_first_block_[page]; b < page_first_block_[page + 1]; ++b) {
      const RowSpan& blk = blocks_[size_t(b)];
      for (int g = 0; g < kv_heads_; ++g) {
        float* mn = block_min(layer, g, b);
        float* mx = block_max(layer, g, b);
        std::fill(mn, mn + d_, std::numeric_limits<float>::infinity());
        std::fill(mx, mx + d_, -std::numeric_limits<float>::infinity());
        for (int64_t r = blk.begin; r < blk.end(); ++r) {
          const float* k = ref_k + r * kr + int64_t(g) * d_;
          for (int i = 0; i < d_; ++i) {
            mn[i] = std::min(mn[i], k[i]);
            mx[i] = std::max(mx[i], k[i]);
          }
        }
        float* pmn = page_min(layer, g, page);
        float* pmx = page_max(layer, g, page);
        for (int i = 0; i < d_; ++i) {
          pmn[i] = std::min(pmn[i], mn[i]);
          pmx[i] = std::max(pmx[i], mx[i]);
        }
      }
    }
    if (!summarized_[page]) --missing_;
    summarized_[page] = true;
  }

  // Bytes of key summaries held (block and page min/max, all layers).
  size_t summary_bytes() const {
    return size_t(layers_) * 2 * (blk_min_.empty() ? 0 : blk_min_[0].size() + page_min_[0].size()) * sizeof(float);
  }

  // Upper bound of q·k over block `b` for KV head `g` (tests check it bounds every key).
  float block_bound(int layer, int g, int64_t b, const float* qh) const {
    const float* mn = block_min(layer, g, b);
    const float* mx = block_max(layer, g, b);
    float s = 0;
    for (int i = 0; i < d_; ++i) s += std::max(qh[i] * mn[i], qh[i] * mx[i]);
    return s;
  }

  // Reference rows attended, summed over heads and layers, since the last reset_counters().
  int64_t rows_attended() const { return rows_attended_; }
  int64_t rows_dense() const { return rows_dense_; }
  void reset_counters() { rows_attended_ = rows_dense_ = 0; }

  // The reference spans head `h` selected in the last attend() call (merged, by row).
  const std::vector<RowSpan>& last_selection(int h) const { return heads_[size_t(h)].spans; }

  void attend(int layer, const float* q, const KvRows& reference, const KvRows& generated, const AttentionShape& s,
              float* out) override {
    require(layer >= 0 && layer < layers_ && s.kv_heads == kv_heads_ && s.head_dim == d_, Status::invalid_argument,
            "SR-SWA was built for a different decoder configuration");
    require(layout_.rows() <= reference.rows, Status::invalid_argument, "SR-SWA layout is larger than the reference");
    require(missing_ == 0, Status::invalid_argument, "SR-SWA summaries are missing: call rebuild() after prefill");
    if (int(heads_.size()) < s.heads) heads_.resize(size_t(s.heads));
    rows_dense_ += int64_t(s.heads) * reference.rows;
    // Budgets that pass every page and every block select the whole layout, whatever the query:
    // when that is the whole reference, this is dense R-SWA, so run its kernel.
    if (p_.dense_when_complete && selects_all() && coverage_ == reference.rows) {
      for (int h = 0; h < s.heads; ++h) heads_[size_t(h)].spans.assign(1, RowSpan{0, reference.rows});
      rows_attended_ += int64_t(s.heads) * reference.rows;
      dense_scores_.resize(size_t(s.heads * (reference.rows + generated.rows)));
      decode_attention(q, reference, generated, s, dense_scores_.data(), out);
      return;
    }
    const int64_t kr = s.kv_row();
    int64_t work = generated.rows + int64_t(layout_.pages.size());  // rows streamed, roughly, per head
    for (const RowSpan& a : layout_.always) work += a.rows;
    const int64_t budget_blocks = p_.block_budget ? std::min<int64_t>(p_.block_budget, int64_t(blocks_.size())) : int64_t(blocks_.size());
    work += budget_blocks * (p_.block_tokens + 1);
    // Split heads across threads only when that is sizeable (as decode_attention does).
#pragma omp parallel for schedule(static) if (work * kr > (int64_t(1) << 18))
    for (int h = 0; h < s.heads; ++h) {
      Head& hs = heads_[size_t(h)];
      select(layer, s.kv_head_of(h), q + int64_t(h) * d_, hs);
      detail::span_attention_head(q + int64_t(h) * d_, reference.k, reference.v, hs.spans, generated, kr,
                                  int64_t(s.kv_head_of(h)) * d_, d_, hs.scores, out + int64_t(h) * d_);
    }
    for (int h = 0; h < s.heads; ++h)
      for (const RowSpan& sp : heads_[size_t(h)].spans) rows_attended_ += sp.rows;
  }

 private:
  struct Head {
    std::vector<float> page_score, block_score;
    std::vector<int64_t> order, gated;
    std::vector<RowSpan> spans;
    std::vector<float> scores;
  };

  float* block_min(int l, int g, int64_t b) { return &blk_min_[size_t(l)][(size_t(g) * blocks_.size() + size_t(b)) * size_t(d_)]; }
  float* block_max(int l, int g, int64_t b) { return &blk_max_[size_t(l)][(size_t(g) * blocks_.size() + size_t(b)) * size_t(d_)]; }
  float* page_min(int l, int g, size_t p) { return &page_min_[size_t(l)][(size_t(g) * layout_.pages.size() + p) * size_t(d_)]; }
  float* page_max(int l, int g, size_t p) { return &page_max_[size_t(l)][(size_t(g) * layout_.pages.size() + p) * size_t(d_)]; }
  const float* page_min(int l, int g, size_t p) const {
    return &page_min_[size_t(l)][(size_t(g) * layout_.pages.size() + p) * size_t(d_)];
  }
  const float* page_max(int l, int g, size_t p) const {
    return &page_max_[size_t(l)][(size_t(g) * layout_.pages.size() + p) * size_t(d_)];
  }
  const float* block_min(int l, int g, int64_t b) const {
    return &blk_min_[size_t(l)][(size_t(g) * blocks_.size() + size_t(b)) * size_t(d_)];
  }
  const float* block_max(int l, int g, int64_t b) const {
    return &blk_max_[size_t(l)][(size_t(g) * blocks_.size() + size_t(b)) * size_t(d_)];
  }

  // Quest bounds of `count` consecutive summaries [count, d] (min and max) for q: q⁺·max + q⁻·min.
  void bounds(const float* mn, const float* mx, int64_t count, const Eigen::VectorXf& qpos, const Eigen::VectorXf& qneg,
              float* out) const {
    using Rows = Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;
    Eigen::Map<Eigen::VectorXf> o(out, count);
    o.noalias() = Rows(mx, count, d_) * qpos;
    o.noalias() += Rows(mn, count, d_) * qneg;
  }

  // Keeps the `budget` best of `idx` by `score` (all when budget is 0 or covers them); lower index wins ties.
  static void keep_best(std::vector<int64_t>& idx, const std::vector<float>& score, int budget) {
    if (budget == 0 || int64_t(idx.size()) <= budget) return;
    auto better = [&](int64_t a, int64_t b) { return score[size_t(a)] > score[size_t(b)] || (score[size_t(a)] == score[size_t(b)] && a < b); };
    std::nth_element(idx.begin(), idx.begin() + budget, idx.end(), better);
    idx.resize(size_t(budget));
  }

  bool selects_all() const {
    return (p_.page_budget == 0 || p_.page_budget >= int64_t(layout_.pages.size())) &&
           (p_.block_budget == 0 || p_.block_budget >= int64_t(blocks_.size()));
  }

  void select(int layer, int g, const float* qh, Head& hs) const {
    Eigen::Map<const Eigen::VectorXf> q(qh, d_);
    const Eigen::VectorXf qpos = q.cwiseMax(0.0f), qneg = q.cwiseMin(0.0f);
    const int64_t n_pages = int64_t(layout_.pages.size());
    // 1. Page gate.
    hs.gated.resize(size_t(n_pages));
    std::iota(hs.gated.begin(), hs.gated.end(), int64_t(0));
    if (p_.page_budget && n_pages > p_.page_budget) {
      hs.page_score.resize(size_t(n_pages));
      bounds(page_min(layer, g, 0), page_max(layer, g, 0), n_pages, qpos, qneg, hs.page_score.data());
      keep_best(hs.gated, hs.page_score, p_.page_budget);
    }
    // 2. Token selector over the gated pages' blocks (indexed by global block number).
    hs.order.clear();
    for (int64_t pg : hs.gated)
      for (int64_t b = page_first_block_[size_t(pg)]; b < page_first_block_[size_t(pg) + 1]; ++b) hs.order.push_back(b);
    if (p_.block_budget && int64_t(hs.order.size()) > p_.block_budget) {
      hs.block_score.resize(blocks_.size());
      for (int64_t pg : hs.gated) {
        const int64_t b0 = page_first_block_[size_t(pg)], nb = page_first_block_[size_t(pg) + 1] - b0;
        bounds(block_min(layer, g, b0), block_max(layer, g, b0), nb, qpos, qneg, hs.block_score.data() + b0);
      }
      keep_best(hs.order, hs.block_score, p_.block_budget);
    }
    // 3. Rows attended: always-visible rows + the selected blocks, merged by row.
    hs.spans.assign(layout_.always.begin(), layout_.always.end());
    for (int64_t b : hs.order) hs.spans.push_back(blocks_[size_t(b)]);
    detail::merge_spans(hs.spans);
  }

  ReferenceLayout layout_;
  SparseParams p_;
  int layers_, kv_heads_, d_;
  std::vector<RowSpan> blocks_;
  std::vector<int64_t> page_first_block_;
  // Per layer: [kv_head][block][d] and [kv_head][page][d] (contiguous per head for the bound GEMVs).
  std::vector<std::vector<float>> blk_min_, blk_max_, page_min_, page_max_;
  std::vector<bool> summarized_;
  int64_t missing_ = 0;
  int64_t coverage_ = -1;
  std::vector<Head> heads_;
  std::vector<float> dense_scores_;
  int64_t rows_attended_ = 0, rows_dense_ = 0;
};

}  // namespace uocr
