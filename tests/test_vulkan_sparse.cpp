// SR-SWA selection on the Vulkan device (backends/vulkan/shaders/sparse_select.comp through
// vulkan::DeviceSparseReference) against the CPU's rule (uocr::SparseReference::select_step): on
// random keys and queries, every layer's and head's spans must be the CPU's exactly, and the rows
// attended and bounds evaluated the same counts, over gate trees of every depth, budgets that pass
// everything or nothing of a level, head dims with and without a tail past the 8 summation lanes,
// GQA, crafted ties (identical pages: the lower page and block numbers win, as on the CPU); and the
// attention over the device's spans against the CPU's span attention. Needs a Vulkan device
// (lavapipe in CI; validation layers on where installed, zero errors asserted).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "op_reference.hpp"
#include "vulkan_env.hpp"
#include "uocr/backends/vulkan/sparse.hpp"
#include "uocr/decoder/sparse_reference.hpp"

namespace vk = uocr::vulkan;
using uocr_test::randn;

namespace {

vk::Context& context() {
  static vk::Context c;
  return c;
}

struct Case {
  std::string name;
  int layers = 2, heads = 4, kv_heads = 2, head_dim = 32;
  int64_t head_rows = 3, pages = 10, page_tokens = 40, tail_rows = 5;
  uocr::SparseParams params;
  bool identical_pages = false;  // every page's keys equal page 0's: all bounds tie
};

// Reference keys [rows, kv_heads*d] per layer, the SparseReference summarized from them.
struct Fixture {
  uocr::DecoderConfig config;
  uocr::ReferenceLayout layout;
  std::vector<std::vector<float>> keys;
  int64_t rows = 0;

  explicit Fixture(const Case& c) {
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

// Runs the device selection of every layer for `steps` random queries and compares it with the CPU's.
void check_case(const Case& c, int steps = 3) {
  INFO(c.name);
  Fixture f(c);
  uocr::SparseReference cpu = f.sparse(c.params);
  uocr::SparseReference mirrored = f.sparse(c.params);
  vk::Context& ctx = context();
  vk::DeviceSparseReference dev(ctx);
  dev.sync(mirrored, c.heads);
  const uocr::AttentionShape shape{c.heads, c.kv_heads, c.head_dim};
  vk::Buffer q = ctx.buffer(size_t(c.heads * c.head_dim) * 4, vk::MemoryUse::activations, "q");
  for (int step = 0; step < steps; ++step) {
    CAPTURE(step);
    std::vector<std::vector<float>> queries;
    vk::Recorder rec(ctx);
    dev.begin_step(rec);
    int64_t cpu_rows = 0, cpu_bounds = 0;
    for (int l = 0; l < c.layers; ++l) {
      queries.push_back(randn(size_t(c.heads * c.head_dim), uint32_t(7 + 31 * step + l), 2.0f));
      // The layer's q replaces the previous one after that one's submission finished.
      ctx.upload(q, queries.back().data(), queries.back().size() * 4);
      dev.select(rec, l, q);
      rec.submit();
      const int64_t r0 = cpu.rows_attended(), b0 = cpu.bounds_evaluated();
      REQUIRE_FALSE(cpu.select_step(l, queries.back().data(), f.rows, shape));
      cpu_rows += cpu.rows_attended() - r0;
      cpu_bounds += cpu.bounds_evaluated() - b0;
      for (int h = 0; h < c.heads; ++h) {
        CAPTURE(l);
        CAPTURE(h);
        const std::vector<uocr::RowSpan> got = dev.selection(l, h);
        const std::vector<uocr::RowSpan>& want = cpu.last_selection(h);
        REQUIRE(got.size() == want.size());
        for (size_t i = 0; i < got.size(); ++i) CHECK((got[i].begin == want[i].begin && got[i].rows == want[i].rows));
      }
    }
    const vk::DeviceSparseReference::StepCounts n = dev.step_counts();
    CHECK(n.rows_attended == cpu_rows);
    CHECK(n.bounds_evaluated == cpu_bounds);
  }
  uocr_test::check_no_validation_errors(ctx, c.name);
}

}  // namespace

TEST_CASE("SR-SWA selection on Vulkan is the CPU's, span for span, over gate trees, budgets and ties") {
  std::vector<Case> cases;
  auto add = [&](std::string name, auto&& edit) {
    Case c;
    c.name = std::move(name);
    edit(c);
    cases.push_back(c);
  };
  add("defaults: 10 pages, tree of 3 levels", [](Case& c) { c.params = {16, 4, 64, true, 4, 0}; });
  add("page budget 1, block budget 3", [](Case& c) { c.params = {16, 1, 3, true, 4, 0}; });
  add("300 pages, fan-out 3, beam 2", [](Case& c) {
    c.pages = 300;
    c.page_tokens = 17;
    c.params = {8, 2, 5, true, 3, 2};
  });
  add("no gate (page budget 0): blocks of every page", [](Case& c) { c.params = {16, 0, 7, true, 4, 0}; });
  add("pages <= fan-out: one gate level", [](Case& c) {
    c.pages = 4;
    c.params = {16, 2, 6, true, 4, 0};
  });
  add("block budget 0: every gated block", [](Case& c) { c.params = {16, 3, 0, true, 2, 0}; });
  add("head_dim 40 (a tail past the 8 lanes), no GQA", [](Case& c) {
    c.head_dim = 40;
    c.kv_heads = 4;
    c.params = {10, 3, 9, true, 4, 5};
  });
  add("full budgets without the dense shortcut: one merged span", [](Case& c) { c.params = {16, 0, 0, false, 4, 0}; });
  add("identical pages: every bound ties, lower numbers win", [](Case& c) {
    c.identical_pages = true;
    c.params = {16, 3, 4, true, 2, 3};
  });
  add("single-row blocks, wide beam", [](Case& c) {
    c.pages = 20;
    c.page_tokens = 9;
    c.params = {1, 5, 23, true, 5, 12};
  });
  for (const Case& c : cases) check_case(c);
}

TEST_CASE("SR-SWA attention over the device's spans and the window matches the CPU's span attention") {
  Case c;
  c.params = {16, 2, 5, true, 4, 0};
  Fixture f(c);
  uocr::SparseReference cpu = f.sparse(c.params);
  vk::Context& ctx = context();
  vk::DeviceSparseReference dev(ctx);
  dev.sync(cpu, c.heads);
  const uocr::AttentionShape shape{c.heads, c.kv_heads, c.head_dim};
  const int64_t row = shape.kv_row(), window = 11;
  const std::vector<float> values = randn(size_t(f.rows * row), 5u), win_k = randn(size_t(window * row), 6u),
                           win_v = randn(size_t(window * row), 8u), query = randn(size_t(shape.q_row()), 9u, 2.0f);
  auto upload = [&](const std::vector<float>& v) {
    vk::Buffer b = ctx.buffer(v.size() * 4, vk::MemoryUse::activations, "test input");
    ctx.upload(b, v.data(), v.size() * 4);
    return b;
  };
  const vk::Buffer rk = upload(f.keys[1]), rv = upload(values), wk = upload(win_k), wv = upload(win_v), q = upload(query);
  const vk::Buffer out = ctx.buffer(size_t(shape.q_row()) * 4, vk::MemoryUse::activations, "out");
  {
    vk::Recorder rec(ctx);
    dev.begin_step(rec);
    dev.select(rec, 1, q);
    dev.attend(rec, 1, q, {&rk, &rv, f.rows}, {&wk, &wv, window}, out);
    rec.submit();
  }
  REQUIRE_FALSE(cpu.select_step(1, query.data(), f.rows, shape));
  std::vector<float> want(size_t(shape.q_row())), scores;
  for (int h = 0; h < c.heads; ++h)
    uocr::detail::span_attention_head(query.data() + h * c.head_dim, f.keys[1].data(), values.data(), cpu.last_selection(h),
                                      uocr::KvRows{win_k.data(), win_v.data(), window}, row,
                                      int64_t(shape.kv_head_of(h)) * c.head_dim, c.head_dim, scores,
                                      want.data() + h * c.head_dim);
  const std::vector<float> got = ctx.download_vector<float>(out, want.size());
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, double(std::fabs(got[i] - want[i])));
  MESSAGE("span attention: worst absolute error " << worst);
  CHECK(worst < 1e-5);
  uocr_test::check_no_validation_errors(ctx, "span attention");
}
