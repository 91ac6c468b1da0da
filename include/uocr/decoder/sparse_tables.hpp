// What a device backend uploads to run SR-SWA's selection on its own (Vulkan's sparse_select.comp,
// CUDA's sparse_select.cu): the tables of a uocr::SparseReference flattened to 32-bit words, the
// kernel's parameters, and the sizes of the per-head scratch and of the selection output. Both
// backends build them here, so their kernels read one layout:
//
//   tables (uint32 words): blocks [2B] (first row, rows), page_first_block [P + 1],
//     level_first [L + 1], always-visible spans [2A] (first row, rows);
//   bounds (float, one array per layer, SparseReference::block_bounds / node_bounds as they are):
//     [kv_head][block][min d, max d] and [kv_head][gate node][min d, max d];
//   scratch per head (uint32): cand [2C] (score key, id) pairs, spans [2S] (row, rows) pairs,
//     kept [K] (C and S powers of two: the bitonic sorts' sizes);
//   selection per (layer, head), sel_stride words: span count, total rows, bounds evaluated, then
//     per span (first row, rows, index of its first key among the head's selected keys).
//
// Without Eigen or the decoder's headers (the CUDA kernels include it through nvcc): the builder
// is a template over the SparseReference type.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "uocr/core/error.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

// The selection kernels' parameters (Vulkan: the push constants, in this order). `layer` is set
// per launch.
struct SparseSelectParams {
  uint32_t heads, group, head_dim, layer;
  uint32_t blocks, pages, levels, nodes;  // B, P, gate levels L, gate nodes (all levels)
  uint32_t fan, beam, page_budget, block_budget;
  uint32_t gates, always;                 // gate on (0/1), A
  uint32_t cand_cap, span_cap, kept_cap;  // C, S, K
  uint32_t sel_stride;
};

struct SparseTables {
  SparseSelectParams params{};
  std::vector<uint32_t> words;  // the tables above

  // Scratch of all heads, and the selection of every layer's heads, in 32-bit words.
  size_t scratch_words() const {
    return size_t(params.heads) * (2 * size_t(params.cand_cap) + 2 * size_t(params.span_cap) + params.kept_cap);
  }
  size_t selection_words(int layers) const { return size_t(layers) * params.heads * params.sel_stride; }
};

namespace detail {
inline uint32_t table_word(int64_t v, const char* backend) {
  require(v >= 0 && v <= int64_t(UINT32_MAX), Status::unsupported,
          [&] { return std::string("SR-SWA on ") + backend + ": a table entry exceeds 32 bits"; });
  return uint32_t(v);
}
inline int64_t pow2_at_least(int64_t n) {
  int64_t m = 1;
  while (m < n) m <<= 1;
  return m;
}
}  // namespace detail

// The tables and parameters of SparseReference `s` for a decoder of `heads` query heads.
// `backend` names the backend in errors.
template <class Reference>
SparseTables sparse_tables(const Reference& s, int heads, const char* backend) {
  const auto& sp = s.params();
  const int64_t blocks = int64_t(s.blocks().size()), pages = int64_t(s.page_count());
  const int levels = s.gate_levels();
  const int64_t nodes = s.level_first().back(), always = int64_t(s.layout().always.size());
  int64_t widest_page = 0;
  for (int64_t p = 0; p < pages; ++p)
    widest_page = std::max(widest_page, s.page_first_block()[size_t(p) + 1] - s.page_first_block()[size_t(p)]);
  const bool gates = s.gates();
  // Candidates at once: a gate level (the top one, or the kept nodes' children) or the gated blocks.
  const int64_t gated = gates ? std::min(blocks, int64_t(sp.page_budget) * widest_page) : blocks;
  const int64_t kept_blocks = sp.block_budget ? std::min<int64_t>(sp.block_budget, gated) : gated;
  const int64_t gate_slots = gates ? std::max<int64_t>(s.level_first()[size_t(levels)] - s.level_first()[size_t(levels) - 1],
                                                       int64_t(s.gate_beam()) * sp.gate_fan_out)
                                   : 0;
  auto w = [&](int64_t v) { return detail::table_word(v, backend); };
  SparseTables t;
  t.params = SparseSelectParams{w(heads), w(heads / s.kv_heads()), w(s.head_dim()), 0, w(blocks), w(pages), w(levels),
                                w(nodes), w(sp.gate_fan_out), w(s.gate_beam()), w(sp.page_budget), w(sp.block_budget),
                                gates ? 1u : 0u, w(always), w(detail::pow2_at_least(std::max<int64_t>({gate_slots, gated, 1}))),
                                w(detail::pow2_at_least(always + kept_blocks)), w(std::max(s.gate_beam(), 1)),
                                w(3 + 3 * (always + kept_blocks))};
  for (const auto& b : s.blocks()) t.words.insert(t.words.end(), {w(b.begin), w(b.rows)});
  for (int64_t v : s.page_first_block()) t.words.push_back(w(v));
  for (int64_t v : s.level_first()) t.words.push_back(w(v));
  for (const auto& a : s.layout().always) t.words.insert(t.words.end(), {w(a.begin), w(a.rows)});
  return t;
}

// The spans of one head's selection words (`sel`: its sel_stride words), as Span{first row, rows}
// (uocr::RowSpan).
template <class Span>
std::vector<Span> selection_spans(const std::vector<uint32_t>& sel) {
  std::vector<Span> spans;
  for (uint32_t i = 0; i < sel[0]; ++i) spans.push_back(Span{int64_t(sel[3 + 3 * i]), int64_t(sel[4 + 3 * i])});
  return spans;
}

UOCR_NAMESPACE_END
