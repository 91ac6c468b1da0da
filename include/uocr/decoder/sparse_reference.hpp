// SR-SWA: sparse reference attention for decode steps. R-SWA makes every generated token attend
// to the whole reference (BOS + every page's visual tokens + prompt text), so the step cost grows
// with the page count. SR-SWA narrows it, per layer and per query head, training-free:
//
//   1. page gate: each page of the reference has per-channel min/max key bounds (per KV head);
//      the upper bound of q·k over a page, sum_i max(q_i·min_i, q_i·max_i) (Quest, Tang et al.
//      2024), ranks the pages and the best `page_budget` pass. The pages are the leaves of a
//      tree: `gate_fan_out` pages per node, that many nodes per node above, up to a top level of
//      at most `gate_fan_out` nodes; a node's bounds are the elementwise min of its children's
//      mins and max of their maxes, so its Quest bound bounds every key under it. The gate scores
//      the top level, keeps the `gate_beam` best nodes, scores their children, and so on down to
//      the pages (a beam search: with a beam at least as wide as every level it scores every page
//      and passes exactly what scoring all pages would);
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
// after a prefill, update_page() after a page's rows are rewritten (page groups do both); a page's
// update recomputes its blocks, the page and its ancestors in the gate tree, nothing else.
//
// Cost per step, layer and head, in Quest bounds of 2d floats each: the gate's top level (at most
// F = gate_fan_out nodes) + at most beam·F per level below it (ceil(log_F(pages)) levels), then the
// gated pages' blocks; then the attention over the selected rows (always rows + block_budget ·
// block_tokens + window) instead of every reference row. With the defaults (F = 4, beam = 2 ·
// page_budget = 8): 13 gate bounds at 10 pages, 66 at 100, 116 at 1,000, 147 at 3,600 (+ 72
// blocks of the 4 gated pages), where dense reads the K+V of every row. The summaries a step
// reads are cold in a real step (the layer's weights pass through the caches in between), so they
// are prefetched together. The tree keeps the gate's work logarithmic in the page count; what
// still grows with it is memory traffic: from ~100 pages on, the heads' gated pages stop
// overlapping and every summary read is a cold miss. Timings against dense and across page
// counts: bench/unbounded.cpp, docs/PERFORMANCE.md "Unbounded documents".
// Not bounded: memory. The summaries take 2·d floats per block and per gate node (pages + ~1/3
// more), per KV head and layer (1/block_tokens of the keys' size, times 2); the keys and values
// stay in the KvCache: SR-SWA saves time, not memory (page groups bound memory). The per-head
// scratch is bounded by the beam and budgets, not the page count, unless page_budget = 0 (every
// page's blocks are then scored).
//
// Thread-safety: one SparseReference per Decoder/cache; attend() parallelises over heads inside.
#pragma once
#include <algorithm>
#include <atomic>
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
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

struct SparseParams {
  int block_tokens = 16;            // visual tokens per block (the last block of a page may be shorter)
  int page_budget = 4;              // pages the gate passes per layer and head; 0 = every page
  int block_budget = 64;            // blocks selected among the gated pages'; 0 = all of them
  bool dense_when_complete = true;  // budgets covering everything: run the dense kernel (bit-identical)
  int gate_fan_out = 4;             // gate tree: pages per node, nodes per node above (>= 2)
  int gate_beam = 0;                // gate nodes kept per tree level; 0 = 2 · page_budget; never below page_budget
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

// Quest's upper bound of q·k over keys within [mn, mx] per channel: sum_i max(q_i·mn_i, q_i·mx_i).
// Eight fixed lanes summed in a fixed order: the same bits for a node whatever the set it is
// scored with or the address of its summaries (the gate tree and a flat gate must agree).
inline float quest_bound(const float* q, const float* mn, const float* mx, int d) {
  constexpr int kLanes = 8;
  float acc[kLanes] = {};
  int i = 0;
  for (; i + kLanes <= d; i += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += std::max(q[i + l] * mn[i + l], q[i + l] * mx[i + l]);
  float s = 0;
  for (int l = 0; l < kLanes; ++l) s += acc[l];
  for (; i < d; ++i) s += std::max(q[i] * mn[i], q[i] * mx[i]);
  return s;
}

// Asks for [p, p + floats) ahead of use. The gate, the selector and the attention read scattered
// summaries and rows that a real step finds cold (the layer's weights went through the caches in
// between): issued together, their memory latencies overlap instead of adding up.
inline void prefetch(const float* p, int64_t floats) {
  for (int64_t i = 0; i < floats; i += 64 / int64_t(sizeof(float))) __builtin_prefetch(p + i);
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
    require(p_.gate_fan_out >= 2 && p_.gate_beam >= 0, Status::invalid_argument,
            "SR-SWA needs a gate fan-out >= 2 and a gate beam >= 0 (0 = twice the page budget)");
    page_first_block_.push_back(0);
    for (const RowSpan& pg : layout_.pages) {
      require(pg.begin >= 0 && pg.rows > 0, Status::invalid_argument, "SR-SWA page spans must be non-empty");
      for (int64_t r = 0; r < pg.rows; r += p_.block_tokens)
        blocks_.push_back({pg.begin + r, std::min<int64_t>(p_.block_tokens, pg.rows - r)});
      page_first_block_.push_back(int64_t(blocks_.size()));
    }
    // Gate tree levels: level 0 = the pages, each next level groups F nodes, up to <= F nodes.
    const int64_t fan = p_.gate_fan_out;
    level_first_ = {0, int64_t(layout_.pages.size())};
    for (int64_t n = gate_nodes(0); n > fan; n = gate_nodes(gate_levels() - 1)) level_first_.push_back(level_first_.back() + (n + fan - 1) / fan);
    beam_ = p_.gate_beam ? std::max(p_.gate_beam, p_.page_budget) : 2 * p_.page_budget;
    if (gates()) {
      gate_work_ = gate_nodes(gate_levels() - 1);
      for (int lv = gate_levels() - 1; lv > 0; --lv) gate_work_ += std::min<int64_t>(int64_t(beam_) * fan, gate_nodes(lv - 1));
    }
    // Unsummarized entries are the identities of min/max: a node over pages not yet summarized
    // bounds those it has (rebuild() fills every page before attend() may run).
    auto empty_bounds = [&](int64_t count) {
      std::vector<float> v(size_t(count) * size_t(kv_heads_) * 2 * size_t(d_), -std::numeric_limits<float>::infinity());
      for (size_t i = 0; i < v.size(); i += 2 * size_t(d_)) std::fill_n(v.begin() + std::ptrdiff_t(i), d_, std::numeric_limits<float>::infinity());
      return v;
    };
    blk_.assign(size_t(layers_), empty_bounds(int64_t(blocks_.size())));
    node_.assign(size_t(layers_), empty_bounds(level_first_.back()));
    summarized_.assign(layout_.pages.size(), 0);
    missing_ = int64_t(layout_.pages.size());
    // Rows [0, coverage_) are exactly what the layout's spans cover together (-1: gaps or overlaps).
    std::vector<RowSpan> all(layout_.always);
    all.insert(all.end(), layout_.pages.begin(), layout_.pages.end());
    int64_t total = 0;
    for (const RowSpan& sp : all) total += sp.rows;
    detail::merge_spans(all);
    coverage_ = all.size() == 1 && all[0].begin == 0 && all[0].rows == total ? total : all.empty() ? 0 : -1;
    rows_ = layout_.rows();
    for (const RowSpan& a : layout_.always) always_rows_ += a.rows;
  }

  const ReferenceLayout& layout() const { return layout_; }
  const SparseParams& params() const { return p_; }
  int layers() const { return layers_; }
  int kv_heads() const { return kv_heads_; }
  int head_dim() const { return d_; }
  size_t page_count() const { return layout_.pages.size(); }
  size_t block_count() const { return blocks_.size(); }
  // Gate tree: levels (1 = the pages only, no tree) and nodes per level (level 0: pages). Node j of
  // level l covers pages [j·F^l, (j+1)·F^l) (the last node of a level: fewer).
  int gate_levels() const { return int(level_first_.size()) - 1; }
  int64_t gate_nodes(int level) const { return level_first_[size_t(level) + 1] - level_first_[size_t(level)]; }
  int gate_beam() const { return beam_; }

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
  // One layer's summaries of one page from that layer's reference keys [rows, kv_heads·d]: its
  // blocks, the page, then the page's ancestors in the gate tree (each from its children).
  void summarize(int layer, size_t page, const float* ref_k) {
    summarize_rows(layer, page, ref_k + layout_.pages[page].begin * int64_t(kv_heads_) * d_);
  }
  // The same from the page's own key rows only (page_k: its first row; a device backend reads
  // back one page at a time).
  void summarize_rows(int layer, size_t page, const float* page_k) {
    const int64_t kr = int64_t(kv_heads_) * d_;
    const int64_t first_row = layout_.pages[page].begin;
    for (int g = 0; g < kv_heads_; ++g) {
      std::fill_n(node_min(layer, g, page), d_, std::numeric_limits<float>::infinity());
      std::fill_n(node_max(layer, g, page), d_, -std::numeric_limits<float>::infinity());
    }
    for (int64_t b = page_first_block_[page]; b < page_first_block_[page + 1]; ++b) {
      const RowSpan& blk = blocks_[size_t(b)];
      for (int g = 0; g < kv_heads_; ++g) {
        float* mn = block_min(layer, g, b);
        float* mx = block_max(layer, g, b);
        std::fill(mn, mn + d_, std::numeric_limits<float>::infinity());
        std::fill(mx, mx + d_, -std::numeric_limits<float>::infinity());
        for (int64_t r = blk.begin; r < blk.end(); ++r) {
          const float* k = page_k + (r - first_row) * kr + int64_t(g) * d_;
          for (int i = 0; i < d_; ++i) {
            mn[i] = std::min(mn[i], k[i]);
            mx[i] = std::max(mx[i], k[i]);
          }
        }
        widen(node_min(layer, g, page), node_max(layer, g, page), mn, mx);
      }
    }
    int64_t j = int64_t(page);
    for (int lv = 1; lv < gate_levels(); ++lv) {
      j /= p_.gate_fan_out;
      const int64_t node = level_first_[size_t(lv)] + j, c0 = level_first_[size_t(lv) - 1] + j * p_.gate_fan_out,
                    c1 = std::min(c0 + p_.gate_fan_out, level_first_[size_t(lv)]);
      for (int g = 0; g < kv_heads_; ++g) {
        float* mn = node_min(layer, g, node);
        float* mx = node_max(layer, g, node);
        std::fill_n(mn, d_, std::numeric_limits<float>::infinity());
        std::fill_n(mx, d_, -std::numeric_limits<float>::infinity());
        for (int64_t c = c0; c < c1; ++c) widen(mn, mx, node_min(layer, g, c), node_max(layer, g, c));
      }
    }
    if (!summarized_[page]) --missing_;
    summarized_[page] = 1;
    revision_ = next_revision();
  }

  // Bytes of key summaries held (block and gate-node min/max, all layers).
  size_t summary_bytes() const {
    return size_t(layers_) * (blk_.empty() ? 0 : blk_[0].size() + node_[0].size()) * sizeof(float);
  }
  // Bytes of every buffer this object holds (allocated capacity): the summaries, the block and
  // tree indices, the layout, and each head's scores and selections (those reach their working
  // size during the first attend(); the dense shortcut's scores grow with the reference).
  size_t scratch_bytes() const {
    size_t n = bytes(blk_) + bytes(node_);
    for (const auto* per_layer : {&blk_, &node_})
      for (const std::vector<float>& v : *per_layer) n += bytes(v);
    n += bytes(layout_.always) + bytes(layout_.pages) + bytes(blocks_) + bytes(page_first_block_) + bytes(level_first_) +
         bytes(summarized_) + bytes(dense_scores_) + bytes(heads_);
    for (const Head& h : heads_) n += bytes(h.cand) + bytes(h.kept) + bytes(h.pages) + bytes(h.spans) + bytes(h.scores);
    return n;
  }

  // Upper bound of q·k over block `b` for KV head `g` (tests check it bounds every key).
  float block_bound(int layer, int g, int64_t b, const float* qh) const {
    return detail::quest_bound(qh, block_min(layer, g, b), block_max(layer, g, b), d_);
  }
  // Upper bound of q·k over node `j` of gate level `level` (level 0: page j) for KV head `g`.
  float node_bound(int layer, int g, int level, int64_t j, const float* qh) const {
    const int64_t node = level_first_[size_t(level)] + j;
    return detail::quest_bound(qh, node_min(layer, g, node), node_max(layer, g, node), d_);
  }

  // Reference rows attended, summed over heads and layers, since the last reset_counters(); and
  // the Quest bounds evaluated (gate nodes + blocks), likewise.
  int64_t rows_attended() const { return rows_attended_; }
  int64_t rows_dense() const { return rows_dense_; }
  int64_t bounds_evaluated() const { return bounds_evaluated_; }
  void reset_counters() { rows_attended_ = rows_dense_ = bounds_evaluated_ = 0; }

  // The reference spans head `h` selected in the last attend() or select_step() call (merged, by row).
  const std::vector<RowSpan>& last_selection(int h) const {
    require(h >= 0 && size_t(h) < heads_.size(), Status::invalid_argument,
            "SR-SWA: no selection of that head here (none made yet, or a device backend selected)");
    return heads_[size_t(h)].spans;
  }

  // One step's selection in `layer` without the attention, for a caller that attends on its own
  // (the device backends' selection kernels are tested against it). True: the dense kernel serves
  // this step (budgets covering a layout that is the whole reference); else head h's reference
  // spans are in last_selection(h). q [heads·d] after RoPE; counted as attend() counts.
  bool select_step(int layer, const float* q, int64_t reference_rows, const AttentionShape& s) {
    check_step(layer, reference_rows, s);
    if (int(heads_.size()) < s.heads) heads_.resize(size_t(s.heads));
    if (dense_step(reference_rows)) {
      for (int h = 0; h < s.heads; ++h) heads_[size_t(h)].spans.assign(1, RowSpan{0, reference_rows});
      count_selection(s.heads, reference_rows, int64_t(s.heads) * reference_rows, 0);
      return true;
    }
    // Split heads across threads only when that is sizeable (as decode_attention does).
#pragma omp parallel for schedule(static) if (select_work() * s.kv_row() > (int64_t(1) << 18))
    for (int h = 0; h < s.heads; ++h) select(layer, s.kv_head_of(h), q + int64_t(h) * d_, heads_[size_t(h)]);
    int64_t rows = 0, bounds = 0;
    for (int h = 0; h < s.heads; ++h) {
      for (const RowSpan& sp : heads_[size_t(h)].spans) rows += sp.rows;
      bounds += heads_[size_t(h)].bounds;
    }
    count_selection(s.heads, reference_rows, rows, bounds);
    return false;
  }

  // The checks of select_step (a device backend that selects on its own runs them too).
  void check_step(int layer, int64_t reference_rows, const AttentionShape& s) const {
    require(layer >= 0 && layer < layers_ && s.kv_heads == kv_heads_ && s.head_dim == d_, Status::invalid_argument,
            "SR-SWA was built for a different decoder configuration");
    require(rows_ <= reference_rows, Status::invalid_argument, "SR-SWA layout is larger than the reference");
    require(missing_ == 0, Status::invalid_argument, "SR-SWA summaries are missing: call rebuild() after prefill");
  }
  // Budgets that pass every page and every block select the whole layout, whatever the query:
  // when that is the whole reference, a step is dense R-SWA, and its kernel serves it.
  bool dense_step(int64_t reference_rows) const { return p_.dense_when_complete && selects_all() && coverage_ == reference_rows; }
  // A device backend's decode step, which selects on the device (Vulkan, CUDA): before it, the
  // checks of each of its `layers` layers; true when the device selects, false when the budgets
  // cover the whole reference and the dense kernel serves (dense R-SWA's bits).
  bool begin_device_step(int layers, int64_t reference_rows, const AttentionShape& s) const {
    for (int l = 0; l < layers; ++l) check_step(l, reference_rows, s);
    return !dense_step(reference_rows);
  }
  // After it: its `head_layers` heads' selections counted, the device's two counters when it
  // `selected`, else every reference row.
  void end_device_step(int64_t head_layers, int64_t reference_rows, bool selected, int64_t rows_attended, int64_t bounds) {
    if (!selected) {
      rows_attended = head_layers * reference_rows;
      bounds = 0;
    }
    count_selection(head_layers, reference_rows, rows_attended, bounds);
  }
  // Adds selections to the counters: `head_layers` heads' (one layer's heads, or a step's heads
  // times layers) reference rows attended and Quest bounds evaluated, over a reference of
  // `reference_rows` rows (select_step's, or a device backend's own selection).
  void count_selection(int64_t head_layers, int64_t reference_rows, int64_t rows_attended, int64_t bounds) {
    rows_dense_ += head_layers * reference_rows;
    rows_attended_ += rows_attended;
    bounds_evaluated_ += bounds;
  }

  // What a device backend mirrors to select on its own (decoder/sparse_tables.hpp): the blocks
  // (rows), each page's first block (page p: [page_first_block()[p], page_first_block()[p + 1])),
  // the gate levels' first nodes (level l: [level_first()[l], level_first()[l + 1])), whether the
  // gate runs, and per layer the bounds: [kv_head][block][min d, max d] and [kv_head][node][min d,
  // max d]. revision() changes whenever a summary does, and differs between instances (a mirror
  // compares it to know whether to upload again).
  const std::vector<RowSpan>& blocks() const { return blocks_; }
  const std::vector<int64_t>& page_first_block() const { return page_first_block_; }
  const std::vector<int64_t>& level_first() const { return level_first_; }
  bool gates() const { return p_.page_budget > 0 && int64_t(layout_.pages.size()) > p_.page_budget; }
  const std::vector<float>& block_bounds(int layer) const { return blk_[size_t(layer)]; }
  const std::vector<float>& node_bounds(int layer) const { return node_[size_t(layer)]; }
  uint64_t revision() const { return revision_; }

  void attend(int layer, const float* q, const KvRows& reference, const KvRows& generated, const AttentionShape& s,
              float* out) override {
    if (select_step(layer, q, reference.rows, s)) {
      dense_scores_.resize(size_t(s.heads * (reference.rows + generated.rows)));
      decode_attention(q, reference, generated, s, dense_scores_.data(), out);
      return;
    }
    const int64_t kr = s.kv_row();
#pragma omp parallel for schedule(static) if ((select_work() + generated.rows) * kr > (int64_t(1) << 18))
    for (int h = 0; h < s.heads; ++h)
      detail::span_attention_head(q + int64_t(h) * d_, reference.k, reference.v, heads_[size_t(h)].spans, generated, kr,
                                  int64_t(s.kv_head_of(h)) * d_, d_, heads_[size_t(h)].scores, out + int64_t(h) * d_);
  }

 private:
  struct Scored {
    float score;
    int64_t id;
  };
  struct Head {
    std::vector<Scored> cand;      // gate nodes, then blocks, with their bounds
    std::vector<int64_t> kept;     // gate nodes kept at the level above
    std::vector<int64_t> pages;    // pages that passed the gate
    std::vector<RowSpan> spans;
    std::vector<float> scores;
    int64_t bounds = 0;            // Quest bounds evaluated in the last select()
  };

  // Revisions from one counter: no two summary states of any two instances share one.
  static uint64_t next_revision() {
    static std::atomic<uint64_t> counter{0};
    return ++counter;
  }

  template <class T>
  static size_t bytes(const std::vector<T>& v) {
    return v.capacity() * sizeof(T);
  }

  // Offsets in a layer's [kv_head][block][min d, max d] and [kv_head][node][min d, max d]: one
  // contiguous run per bound, a node's children side by side.
  size_t block_at(int g, int64_t b) const { return (size_t(g) * blocks_.size() + size_t(b)) * 2 * size_t(d_); }
  size_t node_at(int g, int64_t n) const { return (size_t(g) * size_t(level_first_.back()) + size_t(n)) * 2 * size_t(d_); }
  float* block_min(int l, int g, int64_t b) { return blk_[size_t(l)].data() + block_at(g, b); }
  float* block_max(int l, int g, int64_t b) { return block_min(l, g, b) + d_; }
  float* node_min(int l, int g, int64_t n) { return node_[size_t(l)].data() + node_at(g, n); }
  float* node_max(int l, int g, int64_t n) { return node_min(l, g, n) + d_; }
  const float* block_min(int l, int g, int64_t b) const { return blk_[size_t(l)].data() + block_at(g, b); }
  const float* block_max(int l, int g, int64_t b) const { return block_min(l, g, b) + d_; }
  const float* node_min(int l, int g, int64_t n) const { return node_[size_t(l)].data() + node_at(g, n); }
  const float* node_max(int l, int g, int64_t n) const { return node_min(l, g, n) + d_; }

  // [mn, mx] <- the elementwise hull of [mn, mx] and [cmn, cmx].
  void widen(float* mn, float* mx, const float* cmn, const float* cmx) const {
    for (int i = 0; i < d_; ++i) {
      mn[i] = std::min(mn[i], cmn[i]);
      mx[i] = std::max(mx[i], cmx[i]);
    }
  }

  // Keeps the `budget` best of `c` by score (all when it covers them); lower id wins ties.
  static void keep_best(std::vector<Scored>& c, int64_t budget) {
    if (int64_t(c.size()) <= budget) return;
    std::nth_element(c.begin(), c.begin() + budget, c.end(),
                     [](const Scored& a, const Scored& b) { return a.score > b.score || (a.score == b.score && a.id < b.id); });
    c.resize(size_t(budget));
  }

  // Rows streamed, roughly, per head and step besides the window: always rows + gate nodes +
  // gated blocks + selected rows.
  int64_t select_work() const {
    const int64_t budget_blocks = p_.block_budget ? std::min<int64_t>(p_.block_budget, int64_t(blocks_.size())) : int64_t(blocks_.size());
    return always_rows_ + gate_work_ + budget_blocks * (p_.block_tokens + 1);
  }

  bool selects_all() const {
    return !gates() && (p_.block_budget == 0 || p_.block_budget >= int64_t(blocks_.size()));
  }

  // Appends nodes [first, last) of gate level `level`, scored, to hs.cand.
  void score_nodes(int layer, int g, int level, int64_t first, int64_t last, const float* qh, Head& hs) const {
    const int64_t base = level_first_[size_t(level)];
    for (int64_t j = first; j < last; ++j)
      hs.cand.push_back({detail::quest_bound(qh, node_min(layer, g, base + j), node_max(layer, g, base + j), d_), j});
    hs.bounds += last - first;
  }

  void select(int layer, int g, const float* qh, Head& hs) const {
    const int64_t fan = p_.gate_fan_out;
    hs.bounds = 0;
    hs.cand.clear();
    hs.pages.clear();
    // 1. Page gate: beam search down the tree, from its top level to the pages.
    if (gates()) {
      const int top = gate_levels() - 1;
      score_nodes(layer, g, top, 0, gate_nodes(top), qh, hs);
      for (int lv = top; lv > 0; --lv) {
        keep_best(hs.cand, beam_);
        hs.kept.clear();
        for (const Scored& c : hs.cand) hs.kept.push_back(c.id);
        hs.cand.clear();
        const int64_t nodes = gate_nodes(lv - 1);
        for (int64_t j : hs.kept)
          detail::prefetch(node_min(layer, g, level_first_[size_t(lv) - 1] + j * fan), (std::min((j + 1) * fan, nodes) - j * fan) * 2 * d_);
        for (int64_t j : hs.kept) score_nodes(layer, g, lv - 1, j * fan, std::min((j + 1) * fan, gate_nodes(lv - 1)), qh, hs);
      }
      keep_best(hs.cand, p_.page_budget);
      for (const Scored& c : hs.cand) hs.pages.push_back(c.id);
    } else {
      hs.pages.resize(layout_.pages.size());
      std::iota(hs.pages.begin(), hs.pages.end(), int64_t(0));
    }
    // 2. Token selector over the gated pages' blocks (by global block number).
    int64_t gated_blocks = 0;
    for (int64_t pg : hs.pages) gated_blocks += page_first_block_[size_t(pg) + 1] - page_first_block_[size_t(pg)];
    const bool choose = p_.block_budget && gated_blocks > p_.block_budget;
    if (choose)
      for (int64_t pg : hs.pages)
        detail::prefetch(block_min(layer, g, page_first_block_[size_t(pg)]),
                         (page_first_block_[size_t(pg) + 1] - page_first_block_[size_t(pg)]) * 2 * d_);
    hs.cand.clear();
    for (int64_t pg : hs.pages)
      for (int64_t b = page_first_block_[size_t(pg)]; b < page_first_block_[size_t(pg) + 1]; ++b)
        hs.cand.push_back({choose ? block_bound(layer, g, b, qh) : 0.0f, b});
    if (choose) {
      hs.bounds += gated_blocks;
      keep_best(hs.cand, p_.block_budget);
    }
    // 3. Rows attended: always-visible rows + the selected blocks, merged by row.
    hs.spans.assign(layout_.always.begin(), layout_.always.end());
    for (const Scored& c : hs.cand) hs.spans.push_back(blocks_[size_t(c.id)]);
    detail::merge_spans(hs.spans);
  }

  ReferenceLayout layout_;
  SparseParams p_;
  int layers_, kv_heads_, d_;
  int beam_ = 0;
  std::vector<RowSpan> blocks_;
  std::vector<int64_t> page_first_block_;
  std::vector<int64_t> level_first_;  // gate level l's nodes: [level_first_[l], level_first_[l + 1]); level 0 = pages
  // Per layer: [kv_head][block][min d, max d] and [kv_head][gate node][min d, max d].
  std::vector<std::vector<float>> blk_, node_;
  std::vector<uint8_t> summarized_;
  int64_t missing_ = 0;
  int64_t coverage_ = -1;
  int64_t rows_ = 0, always_rows_ = 0, gate_work_ = 0;
  std::vector<Head> heads_;
  std::vector<float> dense_scores_;
  int64_t rows_attended_ = 0, rows_dense_ = 0, bounds_evaluated_ = 0;
  uint64_t revision_ = 0;
};

UOCR_NAMESPACE_END
