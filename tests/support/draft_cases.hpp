// Draft verification's exactness cases, run on every backend that verifies (tests/test_draft.cpp
// on the CPU, backends/vulkan/tests/test_vulkan_session.cpp on Vulkan):
//  - page groups: verify() + settle(kept) leave the decoder exactly as `kept` steps would
//    (logit rows, KV rows, state), whatever is kept, with ring wraps, slides, SR-SWA, both
//    position schemes, full attention;
//  - sessions on the demo model: drafts right everywhere, wrong everywhere and empty give the
//    tokens of plain decoding.
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "support/demo_model.hpp"
#include "support/page_texts.hpp"
#include "uocr/decoder/page_groups.hpp"
#include "uocr/engine/engine.hpp"
#include "uocr/session/draft.hpp"
#include "uocr/session/page_source.hpp"
#include "uocr/session/session.hpp"

namespace uocr_test {

template <class PageGroups>
std::vector<float> kv_of(PageGroups& d) {
  std::vector<float> all;
  d.visit_kv([&](float* data, size_t floats) { all.insert(all.end(), data, data + floats); });
  return all;
}

// open(window, params) -> a page-group decoder of the demo model (two are opened per case: one
// verifies, its twin steps).
template <class Open>
void check_verify_matches_steps(Open&& open) {
  const uocr::DecoderConfig& c = demo_model()->config().decoder;
  const RandomDocument document(4, 12, c.hidden);
  const uocr::DocumentLayout& layout = document.layout;
  struct Case {
    int window;
    bool sparse, group_positions, recompute;
  };
  for (const Case k : {Case{8, false, false, false}, Case{8, true, true, true}, Case{8, false, true, true},
                       Case{0, false, false, false}, Case{0, true, true, false}}) {
    INFO("window " << k.window << ", sparse " << k.sparse << ", group positions " << k.group_positions << ", recompute "
                   << k.recompute);
    uocr::PageGroupParams pp;
    pp.group_pages = 2;
    pp.overlap_pages = 1;
    pp.group_positions = k.group_positions;
    pp.recompute_on_slide = k.recompute;
    pp.sparse = k.sparse;
    pp.sparse_params.page_budget = 1;
    pp.sparse_params.block_budget = 2;
    pp.sparse_params.block_tokens = 4;
    auto verified = open(k.window, pp);
    auto stepped = open(k.window, pp);
    uocr::FunctionPageEmbeddings src_a = document.pages(), src_b = document.pages();
    verified.start(layout, src_a);
    stepped.start(layout, src_b);
    REQUIRE(verified.verify_limit() > 0);
    std::mt19937 rng(11);
    auto token = [&] { return int32_t(rng() % uint32_t(c.vocab)); };
    int64_t rows_checked = 0, mismatches = 0, passes = 0;
    for (int64_t generated = 0; generated < 90;) {
      if (generated > 0 && generated % 25 < 3 && verified.current_page() + 1 < layout.pages) {
        verified.next_page(1);
        stepped.next_page(1);
      }
      const int64_t limit = verified.verify_limit();
      const int64_t n = 1 + int64_t(rng() % uint32_t(std::min<int64_t>(limit, 12)));
      std::vector<int32_t> tokens(static_cast<size_t>(n));
      for (int32_t& t : tokens) t = token();
      const int64_t kept = int64_t(rng() % uint32_t(n + 1));  // 0 .. n
      const std::vector<float> rows = verified.verify(tokens.data(), n);
      CHECK_THROWS_AS(verified.step(tokens[0]), uocr::Error);  // nothing else before settle()
      verified.settle(kept);
      ++passes;
      for (int64_t i = 0; i < kept; ++i) {
        const std::vector<float>& b = stepped.step(tokens[size_t(i)]);
        mismatches += !std::equal(b.begin(), b.end(), rows.begin() + i * c.vocab);
        ++rows_checked;
      }
      generated += kept;
      CHECK(verified.next_position() == stepped.next_position());
      // The next step sees the same cache: a forgotten token's slot holds its old row again.
      const int32_t t = token();
      const std::vector<float> a = verified.step(t);
      const std::vector<float>& b = stepped.step(t);
      mismatches += a != b;
      ++generated;
    }
    CHECK(passes > 10);
    CHECK(rows_checked > 20);
    CHECK(mismatches == 0);
    CHECK(kv_of(verified) == kv_of(stepped));
    const uocr::PageGroupState sa = verified.state(), sb = stepped.state();
    CHECK(sa.generated == sb.generated);
    CHECK(sa.ring_tokens == sb.ring_tokens);
    CHECK(sa.window_ids == sb.window_ids);
    CHECK(sa.slides == sb.slides);
    CHECK(verified.slides() > 0);
    CHECK(verified.memory().window_kv_bytes == stepped.memory().window_kv_bytes);
    CHECK(verified.memory().peak_kv_bytes == stepped.memory().peak_kv_bytes);
  }
}

struct Transcript {
  std::vector<int32_t> tokens;
  std::string text;
  uocr::SessionStats stats;
  int64_t generated = 0;
};

// How a session holds the demo document.
struct DraftSetup {
  const char* name;
  int window;  // -1: the model's
  uocr::DocumentParams document;
};

inline std::vector<DraftSetup> draft_setups() {
  std::vector<DraftSetup> s;
  uocr::DocumentParams one_group;
  one_group.groups.group_pages = 4;
  one_group.groups.overlap_pages = 3;
  s.push_back({"one group, R-SWA", -1, one_group});
  s.push_back({"one group, full attention", 0, one_group});
  uocr::DocumentParams sliding;
  sliding.groups.group_pages = 2;
  sliding.groups.overlap_pages = 1;
  s.push_back({"sliding groups", -1, sliding});
  uocr::DocumentParams recompute = sliding;
  recompute.groups.group_positions = true;
  recompute.groups.recompute_on_slide = true;
  s.push_back({"sliding groups, group positions, recomputed window", -1, recompute});
  uocr::DocumentParams sparse = sliding;
  sparse.groups.sparse = true;
  sparse.groups.sparse_params.page_budget = 1;
  sparse.groups.sparse_params.block_budget = 4;
  sparse.groups.sparse_params.block_tokens = 8;
  s.push_back({"sliding groups, SR-SWA", -1, sparse});
  return s;
}

// The three demo pages as one document on `engine`, with `drafts` (none: no draft texts).
inline Transcript transcribe(const std::shared_ptr<uocr::Engine>& engine, const DraftSetup& setup,
                             const std::vector<std::string>* drafts, bool drafting = true,
                             const uocr::CheckpointOptions& ck = {}, int64_t stop_after = 0, float temperature = 0.f) {
  uocr::SessionParams sp;
  sp.max_new_tokens = 400;
  sp.sampling.temperature = temperature;
  sp.sampling.seed = 5;
  sp.window = setup.window;
  uocr::DocumentParams dp = setup.document;
  dp.draft.enabled = drafting;
  dp.draft.measure_cost = false;  // the passes drafted depend on the drafts only
  uocr::Session s(engine, sp, dp);
  uocr::FilePages files({demo_sample(1), demo_sample(2), demo_sample(3)});
  uocr::DraftedPages with_drafts(files, drafts ? *drafts : std::vector<std::string>{});
  Transcript out;
  const uocr::RunSummary sum = s.run(with_drafts, [&](const uocr::Event& e) {
    if (e.type == uocr::Event::Type::token && e.token >= 0) out.tokens.push_back(e.token);
    return stop_after == 0 || int64_t(out.tokens.size()) < stop_after;
  }, ck);
  out.text = sum.text;
  out.stats = s.stats();
  out.generated = sum.generated_tokens;
  return out;
}

// Every word of `text` reversed: a draft wrong everywhere.
inline std::string reversed_words(std::string text) {
  for (size_t i = 0; i < text.size();) {
    const size_t end = std::min(text.find_first_of(" \n", i), text.size());
    std::reverse(text.begin() + std::ptrdiff_t(i), text.begin() + std::ptrdiff_t(end));
    i = end + 1;
  }
  return text;
}

// Drafts right, wrong and empty on `engine` give exactly the tokens of plain decoding there.
inline void check_drafts_keep_the_tokens(const std::shared_ptr<uocr::Engine>& engine, const DraftSetup& setup) {
  INFO(std::string(setup.name));
  const Transcript plain = transcribe(engine, setup, nullptr, false);
  REQUIRE(plain.tokens.size() > 60);
  CHECK_FALSE(plain.stats.drafting);
  CHECK(plain.stats.draft.passes == plain.generated);
  const std::vector<std::string> right = page_texts(plain.text);
  REQUIRE(right.size() >= 2);  // a page whose marker the model left out drafts nothing

  const Transcript drafted = transcribe(engine, setup, &right);
  CHECK(drafted.stats.drafting);
  CHECK(drafted.tokens == plain.tokens);
  CHECK(drafted.text == plain.text);
  // Right drafts: most tokens come from verified rows.
  CHECK(drafted.stats.draft.accepted * 2 > drafted.generated);
  CHECK(drafted.stats.draft.passes * 2 < drafted.generated);
  CHECK(drafted.stats.slides == plain.stats.slides);
  MESSAGE(std::string(setup.name) << ": " << drafted.generated << " tokens in " << drafted.stats.draft.passes << " passes ("
                     << drafted.stats.draft.accepted << " of " << drafted.stats.draft.drafted << " drafted accepted)");

  std::vector<std::string> wrong;
  for (const std::string& t : right) wrong.push_back(reversed_words(t));
  const Transcript misled = transcribe(engine, setup, &wrong);
  CHECK(misled.tokens == plain.tokens);
  CHECK(misled.text == plain.text);

  const std::vector<std::string> none;
  const Transcript empty = transcribe(engine, setup, &none);
  CHECK(empty.tokens == plain.tokens);
  CHECK(empty.stats.draft.verify_passes == 0);
  CHECK(empty.stats.draft.passes == empty.generated);
}

}  // namespace uocr_test
