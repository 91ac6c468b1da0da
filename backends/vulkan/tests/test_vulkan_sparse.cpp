// SR-SWA selection on the Vulkan device (backends/vulkan/shaders/sparse_select.comp through
// vulkan::VulkanSparseReference) against the CPU's rule (uocr::SparseReference::select_step): on
// random keys and queries, every layer's and head's spans must be the CPU's exactly, and the rows
// attended and bounds evaluated the same counts, over gate trees of every depth, budgets that pass
// everything or nothing of a level, head dims with and without a tail past the 8 summation lanes,
// GQA, crafted ties (identical pages: the lower page and block numbers win, as on the CPU); and the
// attention over the device's spans against the CPU's span attention. Needs a Vulkan device
// (lavapipe in CI; validation layers on where installed, zero errors asserted). The cases and the
// comparison are shared with the CUDA backend's test (sparse_select_cases.hpp).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "backends/vulkan/sparse.hpp"
#include "support/sparse_select_cases.hpp"
#include "support/vulkan_env.hpp"
#include "uocr/decoder/sparse_reference.hpp"

namespace vk = uocr::vulkan;

namespace {

vk::Context& context() {
  static vk::Context c;
  return c;
}

// check_device_selection's Device over vulkan::VulkanSparseReference: a step is one recording,
// submitted after each layer's select (the one q buffer is rewritten between layers).
struct VulkanSelection {
  vk::Context& ctx = context();
  vk::VulkanSparseReference dev{ctx};
  vk::Buffer q;

  void sync(const uocr::SparseReference& s, int heads) {
    dev.sync(s, heads);
    q = ctx.buffer(size_t(heads * s.head_dim()) * 4, vk::MemoryUse::activations, "q");
  }
  std::pair<int64_t, int64_t> step(const std::vector<std::vector<float>>& queries) {
    vk::Recorder rec(ctx);
    dev.begin_step(rec);
    for (size_t l = 0; l < queries.size(); ++l) {
      ctx.upload(q, queries[l].data(), queries[l].size() * 4);
      dev.select(rec, int(l), q);
      rec.submit();
    }
    const vk::VulkanSparseReference::StepCounts n = dev.step_counts();
    return {n.rows_attended, n.bounds_evaluated};
  }
  std::vector<uocr::RowSpan> spans(int layer, int h) const { return dev.selection(layer, h); }
};

}  // namespace

TEST_CASE("SR-SWA selection on Vulkan is the CPU's, span for span, over gate trees, budgets and ties") {
  for (const uocr_test::SparseCase& c : uocr_test::sparse_selection_cases()) {
    VulkanSelection dev;
    uocr_test::check_device_selection(c, dev);
    uocr_test::check_no_validation_errors(context(), c.name);
  }
}

TEST_CASE("SR-SWA attention over the device's spans and the window matches the CPU's span attention") {
  const uocr_test::SpanAttentionCase t;
  uocr::SparseReference cpu = t.f.sparse(t.c.params);
  vk::Context& ctx = context();
  vk::VulkanSparseReference dev(ctx);
  dev.sync(cpu, t.c.heads);
  auto upload = [&](const std::vector<float>& v) {
    vk::Buffer b = ctx.buffer(v.size() * 4, vk::MemoryUse::activations, "test input");
    ctx.upload(b, v.data(), v.size() * 4);
    return b;
  };
  const vk::Buffer rk = upload(t.keys()), rv = upload(t.values), wk = upload(t.win_k), wv = upload(t.win_v),
                   q = upload(t.query);
  const vk::Buffer out = ctx.buffer(size_t(t.shape.q_row()) * 4, vk::MemoryUse::activations, "out");
  {
    vk::Recorder rec(ctx);
    dev.begin_step(rec);
    dev.select(rec, t.layer, q);
    dev.attend(rec, t.layer, q, {&rk, &rv, t.f.rows}, {&wk, &wv, t.window}, out);
    rec.submit();
  }
  const std::vector<float> want = t.expected(cpu);
  const std::vector<float> got = ctx.download_vector<float>(out, want.size());
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, double(std::fabs(got[i] - want[i])));
  MESSAGE("span attention: worst absolute error " << worst);
  CHECK(worst < 1e-5);
  uocr_test::check_no_validation_errors(ctx, "span attention");
}
