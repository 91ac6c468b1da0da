// The upstream multi_3 reference case on tiny-b (GQA 4/2 heads, 3 layers, R-SWA n = 8): 3 pages of
// 273 visual tokens, "<image>Multi page parsing.", 40 reference generated tokens. Shared by the
// page-group tests on the CPU (test_infinite.cpp) and on Vulkan (test_vulkan_session.cpp).
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "test_support.hpp"
#include "uocr/decoder/decoder.hpp"
#include "uocr/decoder/page_groups.hpp"
#include "uocr/decoder/sparse_reference.hpp"
#include "uocr/model/checkpoint.hpp"
#include "uocr/model/config.hpp"
#include "uocr/model/weights.hpp"

namespace uocr_test {

struct Multi3 {
  uocr::ModelConfig cfg = uocr::ModelConfig::load(reference_dir() + "/tiny-b/config.json");
  uocr::Checkpoint ck = uocr::Checkpoint::open(reference_dir() + "/tiny-b");
  uocr::ModelWeights w = uocr::ModelWeights::bind(ck, cfg);
  std::vector<int32_t> ids = npy_ids(reference_dir() + "/cases/multi_3/input_ids.npy");
  std::vector<int32_t> gen = npy_ids(reference_dir() + "/cases/multi_3/gen_ids.npy");
  std::vector<float> vision = uocr::read_npy(reference_dir() + "/cases/multi_3/vision_tokens.npy").to_f32();
  uocr::DocumentLayout layout;  // head, 3 pages of visual tokens, tail, as in `ids`

  Multi3() {
    const auto first = std::find(ids.begin(), ids.end(), uocr::kImageTokenId);
    const auto last = std::find_if(first, ids.end(), [](int32_t t) { return t != uocr::kImageTokenId; });
    layout.head.assign(ids.begin(), first);
    layout.tail.assign(last, ids.end());
    layout.pages = 3;
    layout.page_tokens = int64_t(last - first) / 3;
  }
  const uocr::DecoderConfig& dc() const { return cfg.decoder; }
  int window() const { return cfg.decoder.sliding_window; }
  int64_t hidden() const { return cfg.decoder.hidden; }
  // Page p's reference visual tokens.
  void page(int64_t p, std::vector<float>& out) const {
    const size_t n = size_t(layout.page_tokens * hidden());
    out.assign(vision.begin() + std::ptrdiff_t(size_t(p) * n), vision.begin() + std::ptrdiff_t(size_t(p + 1) * n));
  }
  uocr::FunctionPageEmbeddings source() const {
    return uocr::FunctionPageEmbeddings(layout.pages, [this](int64_t p, std::vector<float>& out) { page(p, out); });
  }
  static Multi3& get() {
    static Multi3 f;
    return f;
  }
};

// The partial SR-SWA budgets of the device tests: one page of the group and 4 blocks of 16 tokens
// per layer and head, at G = 3 and G = 2 (G = 2 slides twice, so the summaries of a rewritten slot
// are read back too). `check(pp)` runs one setting.
template <class Check>
void for_partial_budgets(Check&& check) {
  uocr::PageGroupParams pp;
  pp.overlap_pages = 1;
  pp.sparse = true;
  pp.sparse_params = {16, 1, 4, true};
  for (int g : {3, 2}) {
    CAPTURE(g);
    pp.group_pages = g;
    check(pp);
  }
}

// A device backend's SR-SWA made the CPU's selections: partial budgets attended fewer rows than
// dense, every step, layer and head attended as many rows and scored as many bounds, and the last
// step's spans in the last layer are the same rows (`device_spans(h)`: the device's, head h).
template <class DeviceSpans>
void check_same_selections(const uocr::SparseReference& device, DeviceSpans&& device_spans, const uocr::SparseReference& cpu,
                           int heads, double worst) {
  MESSAGE("worst relative error " << worst << ", reference rows attended "
                 << device.rows_attended() << " of " << device.rows_dense());
  CHECK(device.rows_attended() < device.rows_dense());
  CHECK(device.rows_attended() == cpu.rows_attended());
  CHECK(device.bounds_evaluated() == cpu.bounds_evaluated());
  for (int h = 0; h < heads; ++h) {
    const std::vector<uocr::RowSpan> a = device_spans(h);
    const std::vector<uocr::RowSpan>& b = cpu.last_selection(h);
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) CHECK((a[i].begin == b[i].begin && a[i].rows == b[i].rows));
  }
}

}  // namespace uocr_test
