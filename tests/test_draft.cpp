// Draft decoding (uocr/session/draft.hpp) on the CPU: verifying drafts never changes what is decoded.
//  - page groups: verify() + settle(kept) leave the decoder exactly as `kept` steps would, and
//    sessions on the demo model with drafts right, wrong or empty give plain decoding's tokens
//    (the cases of tests/support/draft_cases.hpp, which backends/vulkan/tests/test_vulkan_session.cpp runs on Vulkan);
//  - a run resumed from a checkpoint taken inside an accepted draft; sampling turns it off;
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
#include "support/draft_cases.hpp"
#include "support/page_texts.hpp"
#include "uocr/decoder/page_groups.hpp"
#include "uocr/engine/open.hpp"
#include "uocr/model/model.hpp"
#include "uocr/session/draft.hpp"
#include "uocr/session/page_source.hpp"
#include "uocr/session/session.hpp"

namespace {

using uocr_test::demo_model;
using uocr_test::DraftSetup;
using uocr_test::draft_setups;
using uocr_test::page_texts;
using uocr_test::random_rows;
using uocr_test::Transcript;

std::string sample(int page) { return uocr_test::demo_sample(page); }

// The CPU engine the sessions share.
std::shared_ptr<uocr::Engine> cpu() {
  static const std::shared_ptr<uocr::Engine> e = uocr::open_engine(demo_model(), uocr::Backend::cpu);
  return e;
}

// The three demo pages as one document on the CPU (uocr_test::transcribe).
Transcript transcribe(const DraftSetup& setup, const std::vector<std::string>* drafts, bool drafting = true,
                      const uocr::CheckpointOptions& ck = {}, int64_t stop_after = 0, float temperature = 0.f) {
  return uocr_test::transcribe(cpu(), setup, drafts, drafting, ck, stop_after, temperature);
}

}  // namespace

TEST_CASE("page groups: verify() and settle(kept) leave the decoder as `kept` steps would") {
  const auto model = demo_model();
  uocr_test::check_verify_matches_steps([&](int window, const uocr::PageGroupParams& pp) {
    return uocr::PageGroupDecoder(model->config().decoder, model->weights().decoder, window, pp);
  });
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

TEST_CASE("sessions: drafts right, wrong or empty give exactly the tokens of plain decoding") {
  for (const DraftSetup& setup : draft_setups()) uocr_test::check_drafts_keep_the_tokens(cpu(), setup);
}

TEST_CASE("sessions: a run resumed from a checkpoint taken inside an accepted draft goes on exactly") {
  const DraftSetup setup = draft_setups()[3];  // sliding groups with a recomputed window
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
  const DraftSetup setup = draft_setups()[0];
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
  const DraftSetup setup = draft_setups()[0];
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
