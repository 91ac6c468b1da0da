// Draft decoding (uocr/session/draft.hpp): verifying drafts never changes what is decoded.
//  - page groups: verify() + settle(kept) leave the decoder exactly as `kept` steps would (logit
//    rows, KV rows, state), whatever is kept, with ring wraps, slides, SR-SWA, both position schemes;
//  - sessions on the demo model: drafts right everywhere, wrong everywhere, empty; one group,
//    sliding groups, full attention, SR-SWA; a run resumed from a checkpoint taken inside an
//    accepted draft; sampling turns it off;
//  - the lookup that proposes tokens.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "support/demo_model.hpp"
#include "support/page_texts.hpp"
#include "uocr/decoder/page_groups.hpp"
#include "uocr/engine/open.hpp"
#include "uocr/model/model.hpp"
#include "uocr/session/draft.hpp"
#include "uocr/session/page_source.hpp"
#include "uocr/session/session.hpp"

namespace {

using uocr_test::demo_model;
using uocr_test::page_texts;
using uocr_test::random_rows;

std::string sample(int page) { return uocr_test::demo_sample(page); }

std::vector<float> kv_of(uocr::PageGroupDecoder& d) {
  std::vector<float> all;
  d.visit_kv([&](float* data, size_t floats) { all.insert(all.end(), data, data + floats); });
  return all;
}

}  // namespace

TEST_CASE("page groups: verify() and settle(kept) leave the decoder as `kept` steps would") {
  const auto model = demo_model();
  const uocr::DecoderConfig& c = model->config().decoder;
  const uocr_test::RandomDocument document(4, 12, c.hidden);
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
    uocr::PageGroupDecoder verified(c, model->weights().decoder, k.window, pp);
    uocr::PageGroupDecoder stepped(c, model->weights().decoder, k.window, pp);
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

TEST_CASE("page groups: verify() and settle() refuse misuse with a clear error") {
  const auto model = demo_model();
  const uocr::DecoderConfig& c = model->config().decoder;
  uocr::PageGroupDecoder d(c, model->weights().decoder, 8, {});
  const int32_t t[2] = {1, 2};
  CHECK(d.verify_limit() == 0);  // before start()
  CHECK_THROWS_AS(d.verify(t, 1), uocr::Error);
  CHECK_THROWS_AS(d.settle(0), uocr::Error);
  uocr::DocumentLayout layout;
  layout.head = {0};
  layout.pages = 1;
  layout.page_tokens = 4;
  uocr::FunctionPageEmbeddings src(1, [&](int64_t, std::vector<float>& out) { out = random_rows(4, c.hidden, 1); });
  d.start(layout, src);
  CHECK(d.verify_limit() == 8);  // the ring's size
  CHECK_THROWS_AS(d.verify(t, 9), uocr::Error);
  CHECK_THROWS_AS(d.verify(t, 0), uocr::Error);
  d.verify(t, 2);
  CHECK_THROWS_AS(d.state(), uocr::Error);
  CHECK_THROWS_AS(d.next_page(), uocr::Error);
  CHECK_THROWS_AS(d.settle(3), uocr::Error);
  d.settle(1);
  CHECK(d.generated() == 1);
}

TEST_CASE("draft lookup: continues in order, prefers the longest suffix, re-synchronises") {
  uocr::DraftLookup l;
  l.set({10, 11, 12, 13, 14, 10, 11, 20, 21});
  std::vector<int32_t> out;
  const int32_t a[] = {10, 11};
  l.propose(a, 2, 3, out);
  CHECK(out == std::vector<int32_t>{12, 13, 14});
  const int32_t b[] = {14, 10, 11};  // the longer suffix picks the second "10 11"
  l.propose(b, 3, 2, out);
  CHECK(out == std::vector<int32_t>{20, 21});
  const int32_t c[] = {99, 12};  // a mismatch, then a token of the draft: found again
  l.propose(c, 2, 2, out);
  CHECK(out == std::vector<int32_t>{13, 14});
  const int32_t d[] = {98, 99};
  l.propose(d, 2, 4, out);
  CHECK(out.empty());
  const int32_t e[] = {21};  // the draft's end: nothing follows
  l.propose(e, 1, 4, out);
  CHECK(out.empty());
}

namespace {

struct Transcript {
  std::vector<int32_t> tokens;
  std::string text;
  uocr::SessionStats stats;
  int64_t generated = 0;
};

struct Setup {
  const char* name;
  int window;  // -1: the model's
  uocr::DocumentParams document;
};

std::vector<Setup> setups() {
  std::vector<Setup> s;
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

// The three demo pages as one document, with `drafts` (none: no draft texts).
Transcript transcribe(const Setup& setup, const std::vector<std::string>* drafts, bool drafting = true,
                      const uocr::CheckpointOptions& ck = {}, int64_t stop_after = 0, float temperature = 0.f) {
  uocr::SessionParams sp;
  sp.max_new_tokens = 400;
  sp.sampling.temperature = temperature;
  sp.sampling.seed = 5;
  sp.window = setup.window;
  uocr::DocumentParams dp = setup.document;
  dp.draft.enabled = drafting;
  dp.draft.measure_cost = false;  // the passes drafted depend on the drafts only
  uocr::Session s(demo_model(), sp, dp);
  uocr::FilePages files({sample(1), sample(2), sample(3)});
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
std::string reversed_words(std::string text) {
  for (size_t i = 0; i < text.size();) {
    const size_t end = std::min(text.find_first_of(" \n", i), text.size());
    std::reverse(text.begin() + i, text.begin() + end);
    i = end + 1;
  }
  return text;
}

}  // namespace

TEST_CASE("sessions: drafts right, wrong or empty give exactly the tokens of plain decoding") {
  for (const Setup& setup : setups()) {
    INFO(std::string(setup.name));
    const Transcript plain = transcribe(setup, nullptr, false);
    REQUIRE(plain.tokens.size() > 60);
    CHECK_FALSE(plain.stats.drafting);
    CHECK(plain.stats.draft.passes == plain.generated);
    const std::vector<std::string> right = page_texts(plain.text);
    REQUIRE(right.size() >= 2);  // a page whose marker the model left out drafts nothing

    const Transcript drafted = transcribe(setup, &right);
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
    const Transcript misled = transcribe(setup, &wrong);
    CHECK(misled.tokens == plain.tokens);
    CHECK(misled.text == plain.text);

    const std::vector<std::string> none;
    const Transcript empty = transcribe(setup, &none);
    CHECK(empty.tokens == plain.tokens);
    CHECK(empty.stats.draft.verify_passes == 0);
    CHECK(empty.stats.draft.passes == empty.generated);
  }
}

TEST_CASE("sessions: a run resumed from a checkpoint taken inside an accepted draft goes on exactly") {
  const Setup setup = setups()[3];  // sliding groups with a recomputed window
  const Transcript plain = transcribe(setup, nullptr, false);
  const std::vector<std::string> right = page_texts(plain.text);
  const std::string path = (std::filesystem::temp_directory_path() / "uocr_test_draft_resume.ckpt").string();
  uocr::CheckpointOptions ck;
  ck.path = path;
  ck.every_tokens = 7;  // inside verified runs of up to 16 tokens
  const Transcript first = transcribe(setup, &right, true, ck, 45);
  REQUIRE(first.tokens.size() == 45);
  CHECK(first.stats.draft.accepted > 10);
  const std::string copy = path + ".copy";
  std::filesystem::copy_file(path, copy, std::filesystem::copy_options::overwrite_existing);
  ck.resume = true;
  const Transcript rest = transcribe(setup, &right, true, ck);
  const int64_t at = rest.stats.resumed_at_token;
  CHECK(at == 42);
  std::vector<int32_t> joined(first.tokens.begin(), first.tokens.begin() + at);
  joined.insert(joined.end(), rest.tokens.begin(), rest.tokens.end());
  CHECK(joined == plain.tokens);
  // Checkpoints hold no trace of drafting: one written with drafts resumes without them.
  ck.path = copy;
  const Transcript undrafted = transcribe(setup, nullptr, false, ck);
  CHECK(undrafted.tokens == rest.tokens);
  std::filesystem::remove(path);
  std::filesystem::remove(copy);
}

TEST_CASE("sessions: sampling does not draft; bad draft parameters are refused") {
  const Setup setup = setups()[0];
  const Transcript plain = transcribe(setup, nullptr, false, {}, 0, 0.9f);
  const std::vector<std::string> right = page_texts(plain.text);
  const Transcript sampled = transcribe(setup, &right, true, {}, 0, 0.9f);
  CHECK_FALSE(sampled.stats.drafting);
  CHECK(sampled.tokens == plain.tokens);
  CHECK(sampled.stats.draft.verify_passes == 0);
  uocr::DocumentParams dp;
  dp.draft.max_tokens = 0;
  CHECK_THROWS_AS(uocr::Session(demo_model(), {}, dp), uocr::Error);
}

TEST_CASE("sessions: drafting that costs more time than steps rests; the text stays the same") {
  // The demo model is small enough that a pass over k tokens costs about k steps: with the cost
  // measured, drafting mostly rests there, and the tokens are those of plain decoding either way.
  const Setup setup = setups()[0];
  const Transcript plain = transcribe(setup, nullptr, false);
  const std::vector<std::string> right = page_texts(plain.text);
  uocr::SessionParams sp;
  sp.max_new_tokens = 400;
  uocr::DocumentParams dp = setup.document;
  uocr::Session s(demo_model(), sp, dp);
  uocr::FilePages files({sample(1), sample(2), sample(3)});
  uocr::DraftedPages pages(files, right);
  const uocr::RunSummary sum = s.run(pages);
  CHECK(sum.text == plain.text);
  CHECK(s.stats().draft.verify_passes >= 2);  // measured before it can rest
  CHECK(s.stats().draft.passes <= sum.generated_tokens);
}
