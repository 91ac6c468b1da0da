// The SR-SWA device-selection cases shared by the Vulkan and CUDA tests (test_vulkan_sparse.cpp,
// backends/cuda/tests/test_cuda_sparse.cpp): random reference keys summarized into a
// SparseReference, settings covering gate trees of every depth, budgets that pass everything or
// nothing of a level, head dims with and without a tail past the 8 summation lanes, GQA and crafted
// ties; and the check that a device's selection is the CPU's (uocr::SparseReference::select_step)
// span for span, with the same rows-attended and bounds-evaluated counts.
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "op_reference.hpp"
#include "uocr/decoder/sparse_reference.hpp"

namespace uocr_test {

struct SparseCase {
  std::string name;
  int layers = 2, heads = 4, kv_heads = 2, head_dim = 32;
  int64_t head_rows = 3, pages = 10, page_tokens = 40, tail_rows = 5;
  uocr::SparseParams params;
  bool identical_pages = false;  // every page's keys equal page 0's: all bounds tie
};

// Reference keys [rows, kv_heads*d] per layer, and SparseReferences summarized from them.
struct SparseFixture {
  uocr::DecoderConfig config;
  uocr::ReferenceLayout layout;
  std::vector<std::vector<float>> keys;
  int64_t rows = 0;

  explicit SparseFixture(const SparseCase& c) {
    config.layers = c.layers;
    config.heads = c.heads;
    config.kv_heads = c.kv_heads;
    config.head_dim = c.head_dim;
    layout = uocr::one_shot_layout(c.head_rows, c.pages, c.page_tokens, c.tail_rows);
    rows = layout.rows();
    const int64_t row = int64_t(c.kv_heads) * c.head_dim;
    for (int l = 0; l < c.layers; ++l) {
      keys.push_back(randn(size_t(rows * row), 100u + uint32_t(l)));
      if (c.identical_pages)
        for (int64_t p = 1; p < c.pages; ++p)
          std::copy_n(keys.back().begin() + c.head_rows * row, c.page_tokens * row,
                      keys.back().begin() + (c.head_rows + p * c.page_tokens) * row);
    }
  }
  uocr::SparseReference sparse(const uocr::SparseParams& p) const {
    uocr::SparseReference s(config, layout, p);
    for (int l = 0; l < config.layers; ++l)
      for (size_t pg = 0; pg < s.page_count(); ++pg) s.summarize(l, pg, keys[size_t(l)].data());
    return s;
  }
};

inline std::vector<SparseCase> sparse_selection_cases() {
  std::vector<SparseCase> cases;
  auto add = [&](std::string name, auto&& edit) {
    SparseCase c;
    c.name = std::move(name);
    edit(c);
    cases.push_back(c);
  };
  add("defaults: 10 pages, tree of 3 levels", [](SparseCase& c) { c.params = {16, 4, 64, true, 4, 0}; });
  add("page budget 1, block budget 3", [](SparseCase& c) { c.params = {16, 1, 3, true, 4, 0}; });
  add("300 pages, fan-out 3, beam 2", [](SparseCase& c) {
    c.pages = 300;
    c.page_tokens = 17;
    c.params = {8, 2, 5, true, 3, 2};
  });
  add("no gate (page budget 0): blocks of every page", [](SparseCase& c) { c.params = {16, 0, 7, true, 4, 0}; });
  add("pages <= fan-out: one gate level", [](SparseCase& c) {
    c.pages = 4;
    c.params = {16, 2, 6, true, 4, 0};
  });
  add("block budget 0: every gated block", [](SparseCase& c) { c.params = {16, 3, 0, true, 2, 0}; });
  add("head_dim 40 (a tail past the 8 lanes), no GQA", [](SparseCase& c) {
    c.head_dim = 40;
    c.kv_heads = 4;
    c.params = {10, 3, 9, true, 4, 5};
  });
  add("full budgets without the dense shortcut: one merged span", [](SparseCase& c) { c.params = {16, 0, 0, false, 4, 0}; });
  add("identical pages: every bound ties, lower numbers win", [](SparseCase& c) {
    c.identical_pages = true;
    c.params = {16, 3, 4, true, 2, 3};
  });
  add("single-row blocks, wide beam", [](SparseCase& c) {
    c.pages = 20;
    c.page_tokens = 9;
    c.params = {1, 5, 23, true, 5, 12};
  });
  return cases;
}

// Runs `steps` steps of random queries through a device's selection and the CPU's and compares
// every layer's and head's spans and the step's counts. Device: sync(const SparseReference&,
// heads); step(queries [layer][heads*d]) -> {rows attended, bounds evaluated} of the step, every
// layer selected; spans(layer, h) -> the last step's spans.
template <class Device>
void check_device_selection(const SparseCase& c, Device& device, int steps = 3) {
  INFO(c.name);
  const SparseFixture f(c);
  uocr::SparseReference cpu = f.sparse(c.params);
  const uocr::SparseReference mirrored = f.sparse(c.params);
  device.sync(mirrored, c.heads);
  const uocr::AttentionShape shape{c.heads, c.kv_heads, c.head_dim};
  for (int step = 0; step < steps; ++step) {
    CAPTURE(step);
    std::vector<std::vector<float>> queries;
    for (int l = 0; l < c.layers; ++l) queries.push_back(randn(size_t(c.heads * c.head_dim), uint32_t(7 + 31 * step + l), 2.0f));
    const std::pair<int64_t, int64_t> counts = device.step(queries);
    int64_t cpu_rows = 0, cpu_bounds = 0;
    for (int l = 0; l < c.layers; ++l) {
      CAPTURE(l);
      const int64_t r0 = cpu.rows_attended(), b0 = cpu.bounds_evaluated();
      REQUIRE_FALSE(cpu.select_step(l, queries[size_t(l)].data(), f.rows, shape));
      cpu_rows += cpu.rows_attended() - r0;
      cpu_bounds += cpu.bounds_evaluated() - b0;
      for (int h = 0; h < c.heads; ++h) {
        CAPTURE(h);
        const std::vector<uocr::RowSpan> got = device.spans(l, h);
        const std::vector<uocr::RowSpan>& want = cpu.last_selection(h);
        REQUIRE(got.size() == want.size());
        for (size_t i = 0; i < got.size(); ++i) CHECK((got[i].begin == want[i].begin && got[i].rows == want[i].rows));
      }
    }
    CHECK(counts.first == cpu_rows);
    CHECK(counts.second == cpu_bounds);
  }
}

// The span-attention case: reference values and a window of random rows, one query, and the
// CPU's attention of each head over its selected spans (the last select_step of `cpu`) + window.
struct SpanAttentionCase {
  SparseCase c;
  SparseFixture f;
  uocr::AttentionShape shape;
  int layer = 1;
  int64_t window = 11;
  std::vector<float> values, win_k, win_v, query;

  SpanAttentionCase() : c(make_case()), f(c), shape{c.heads, c.kv_heads, c.head_dim} {
    const int64_t row = shape.kv_row();
    values = randn(size_t(f.rows * row), 5u);
    win_k = randn(size_t(window * row), 6u);
    win_v = randn(size_t(window * row), 8u);
    query = randn(size_t(shape.q_row()), 9u, 2.0f);
  }
  const std::vector<float>& keys() const { return f.keys[size_t(layer)]; }

  // The CPU's selection for `query` in `layer`, then its span attention [heads*d].
  std::vector<float> expected(uocr::SparseReference& cpu) const {
    REQUIRE_FALSE(cpu.select_step(layer, query.data(), f.rows, shape));
    std::vector<float> want(size_t(shape.q_row())), scores;
    for (int h = 0; h < c.heads; ++h)
      uocr::detail::span_attention_head(query.data() + h * c.head_dim, keys().data(), values.data(), cpu.last_selection(h),
                                        uocr::KvRows{win_k.data(), win_v.data(), window}, shape.kv_row(),
                                        int64_t(shape.kv_head_of(h)) * c.head_dim, c.head_dim, scores,
                                        want.data() + h * c.head_dim);
    return want;
  }

 private:
  static SparseCase make_case() {
    SparseCase c;
    c.params = {16, 2, 5, true, 4, 0};
    return c;
  }
};

}  // namespace uocr_test
