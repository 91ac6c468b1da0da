// Generation rules: the upstream no-repeat n-gram processor (against a direct transcription of
// the Python, on randomized streams), greedy/top-p sampling, and the loop guard.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>

#include "support/test_support.hpp"
#include "uocr/session/logit_chain.hpp"
#include "uocr/session/loop_guard.hpp"
#include "uocr/session/ngram.hpp"
#include "uocr/session/sampler.hpp"

namespace {

// modeling_unlimitedocr.py SlidingWindowNoRepeatNgramProcessor, over the whole sequence.
std::set<int32_t> reference_banned(const std::vector<int32_t>& s, int n, int window) {
  std::set<int32_t> banned;
  const int64_t L = int64_t(s.size());
  if (L < n) return banned;
  const int64_t start = std::max<int64_t>(0, L - window), end = L - n + 1;
  if (end <= start) return banned;
  const std::vector<int32_t> prefix(s.begin() + (L - n + 1), s.end());
  for (int64_t idx = start; idx < end; ++idx)
    if (std::equal(prefix.begin(), prefix.end(), s.begin() + idx)) banned.insert(s[size_t(idx + n - 1)]);
  return banned;
}

}  // namespace

TEST_CASE("no-repeat n-gram matches the upstream rule on randomized token streams") {
  std::mt19937 rng(42);
  int checked_with_bans = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const int n = 1 + int(rng() % 6) + (trial % 3 == 0 ? 30 : 0);  // includes upstream's 35
    const int window = n + int(rng() % 200);
    const int alphabet = 2 + int(rng() % 5);
    uocr::NoRepeatNgram rule(n, window);
    std::vector<int32_t> seq;
    const int prompt = int(rng() % 50);
    for (int i = 0; i < prompt; ++i) seq.push_back(int32_t(rng() % alphabet));
    rule.push(seq.begin(), seq.end());
    for (int step = 0; step < 400; ++step) {
      const std::set<int32_t> ref = reference_banned(seq, n, window);
      const std::vector<int32_t> got = rule.banned();
      REQUIRE(std::vector<int32_t>(ref.begin(), ref.end()) == got);
      checked_with_bans += !ref.empty();
      // Periodic streams make repeats (and bans) frequent.
      const int32_t t = (rng() % 4 == 0) ? int32_t(rng() % alphabet) : seq.empty() ? 0 : seq[seq.size() / 2 % seq.size()];
      seq.push_back(t);
      rule.push(t);
    }
  }
  CHECK(checked_with_bans > 1000);
}

TEST_CASE("no-repeat n-gram: off, short sequences, and bad parameters") {
  uocr::NoRepeatNgram off(0, 0);
  off.push(1);
  off.push(1);
  CHECK(off.banned().empty());
  uocr::NoRepeatNgram three(3, 128);
  for (int32_t t : {5, 6, 7, 5, 6}) three.push(t);
  CHECK(three.banned() == std::vector<int32_t>{7});
  CHECK_THROWS_AS(uocr::NoRepeatNgram(-1, 10), uocr::Error);
  CHECK_THROWS_AS(uocr::NoRepeatNgram(35, 0), uocr::Error);
}

TEST_CASE("greedy picks the lowest index among ties and skips banned tokens") {
  uocr::Sampler greedy({});
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> l = {0.5f, 2.f, 2.f, -inf};
  CHECK(greedy.pick(l.data(), 4, 1) == 1);
  l[1] = -inf;
  CHECK(greedy.pick(l.data(), 4, 1) == 2);
  std::vector<float> all_banned(3, -inf);
  CHECK(greedy.pick(all_banned.data(), 3, 1) == -1);
}

namespace {

// The plain definition of greedy's choice: strictly larger wins, so ties keep the lowest index,
// NaN never wins and an array of -inf / NaN gives -1.
int32_t reference_argmax(const float* x, int64_t n) {
  int32_t best = -1;
  float best_v = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i)
    if (x[i] > best_v) {
      best_v = x[i];
      best = int32_t(i);
    }
  return best;
}

}  // namespace

TEST_CASE("vectorised argmax equals the scalar definition on ties, NaN, infinities and signed zeros") {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> specials = {-inf, inf, nan, -0.f, 0.f, 1.f, 2.f, -1.f};
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.f, 4.f);
  std::vector<int64_t> sizes;
  for (int64_t n = 0; n <= 1000; ++n) sizes.push_back(n);
  for (int64_t n : {1023, 1024, 1025, 2047, 2049, 3001, 5000, 129280}) sizes.push_back(n);  // several blocks
  std::vector<float> x;
  size_t found = 0;
  uocr::Sampler greedy({});
  for (const int64_t n : sizes) {
    for (int kind = 0; kind < 4; ++kind) {
      x.assign(size_t(n) + 3, 0.f);
      for (float& v : x) {
        switch (kind) {
          case 0: v = specials[rng() % specials.size()]; break;  // ties everywhere
          case 1: v = rng() % 64 == 0 ? specials[rng() % specials.size()] : (rng() % 2 ? -inf : nan); break;
          case 2: v = rng() % 2 ? -inf : nan; break;  // nothing to choose
          default: v = std::round(normal(rng)); break;  // integers: ties of the maximum
        }
      }
      const size_t offset = size_t(n) % 4;  // unaligned starts too
      const int32_t want = reference_argmax(x.data() + offset, n);
      CAPTURE(n);
      CAPTURE(kind);
      CHECK(uocr::Sampler::argmax(x.data() + offset, n) == want);
      found += want >= 0;
      // pick's NaN / +inf check shares this pass.
      const bool non_finite = std::any_of(x.begin() + long(offset), x.begin() + long(offset) + n,
                                          [](float v) { return std::isnan(v) || v == std::numeric_limits<float>::infinity(); });
      CHECK((uocr_test::status_of([&] { greedy.pick(x.data() + offset, n, 1); }) == uocr::Status::invalid_model) == non_finite);
    }
  }
  CHECK(found > sizes.size() * 2);  // the cases with an answer are not all -1
  // Signed zeros in different blocks are equal maxima: the first one wins, whatever its sign.
  for (const float first : {-0.f, 0.f}) {
    x.assign(3000, -1.f);
    x[700] = first;
    x[2500] = -first;
    CHECK(uocr::Sampler::argmax(x.data(), 3000) == 700);
  }
}

TEST_CASE("top-p sampling is reproducible from the seed and respects the nucleus") {
  std::vector<float> l = {3.f, 2.f, 1.f, 0.f, -1.f, -5.f};
  uocr::Sampler a({1.f, 0.8f, 7}), b({1.f, 0.8f, 7});
  std::vector<int> counts(6, 0);
  for (int i = 0; i < 4000; ++i) {
    const int32_t x = a.pick(l.data(), 6, i + 1);
    CHECK(x == b.pick(l.data(), 6, i + 1));
    counts[size_t(x)]++;
  }
  // softmax mass: 0.63, 0.23, 0.086, ...: top_p 0.8 keeps exactly the first two tokens.
  CHECK(counts[0] > 0);
  CHECK(counts[1] > 0);
  CHECK(counts[2] + counts[3] + counts[4] + counts[5] == 0);
  const double share = counts[0] / 4000.0;
  CHECK(share == doctest::Approx(0.6652 / (0.6652 + 0.2447)).epsilon(0.05));
  CHECK_THROWS_AS(uocr::Sampler({-1.f, 1.f, 0}), uocr::Error);
  CHECK_THROWS_AS(uocr::Sampler({1.f, 0.f, 0}), uocr::Error);
}

TEST_CASE("a NaN or +inf logit is an invalid-model error naming the generated token, greedy or sampled") {
  // Damaged weights: a row of NaN must fail by name, not end the run as "no token".
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (const uocr::SamplingParams& p : {uocr::SamplingParams{}, uocr::SamplingParams{1.f, 0.9f, 5}}) {
    uocr::Sampler s(p);
    std::string message;
    const std::vector<float> all_nan(5, nan);
    CHECK(uocr_test::status_of([&] { s.pick(all_nan.data(), 5, 1); }, &message) == uocr::Status::invalid_model);
    CHECK(message == "the model produced non-finite logits (NaN) at generated token 1: its weights may be damaged");
    const std::vector<float> one_nan = {1.f, -inf, 3.f, nan, 2.f};
    CHECK(uocr_test::status_of([&] { s.pick(one_nan.data(), 5, 17); }, &message) == uocr::Status::invalid_model);
    CHECK(message == "the model produced non-finite logits (NaN) at generated token 17: its weights may be damaged");
    const std::vector<float> overflow = {1.f, -inf, inf, 3.f};
    CHECK(uocr_test::status_of([&] { s.pick(overflow.data(), 4, 2); }, &message) == uocr::Status::invalid_model);
    CHECK(message == "the model produced non-finite logits (+inf) at generated token 2: its weights may be damaged");
  }
  // One NaN among finite logits is seen wherever it is: any lane of the vector loop, the scalar tail, any block.
  uocr::Sampler greedy({});
  for (const int64_t n : {1, 15, 16, 17, 33, 2100})
    for (int64_t at = 0; at < n; at += n > 100 ? 7 : 1) {
      std::vector<float> x(size_t(n), 1.f);
      x[size_t(at)] = nan;
      CAPTURE(n);
      CAPTURE(at);
      CHECK(uocr_test::status_of([&] { greedy.pick(x.data(), n, 1); }) == uocr::Status::invalid_model);
    }
}

TEST_CASE("logit chain: EOS waits for min_new_tokens, the n-gram rule bans, and a fully banned step picks nothing") {
  const int32_t eos = 1;
  const uocr::LogitChain chain(4, /*min_new_tokens*/ 2, eos, nullptr);
  uocr::Sampler greedy(uocr::SamplingParams{});
  uocr::LogitChain::Step step;
  std::vector<float> logits = {0.f, 9.f, 5.f, 7.f};  // EOS is the most likely
  step.generated = 1;
  CHECK(chain.next(logits, step, greedy).token == 3);  // before min_new_tokens: EOS banned
  CHECK(std::isinf(logits[size_t(eos)]));
  logits = {0.f, 9.f, 5.f, 7.f};
  step.generated = 2;
  CHECK(chain.next(logits, step, greedy).token == eos);
  logits = {0.f, 9.f, 5.f, 7.f};
  step.banned = {1, 3};
  CHECK(chain.next(logits, step, greedy).token == 2);  // the n-gram rule's tokens are out
  logits = {0.f, 9.f, 5.f, 7.f};
  step.banned = {0, 1, 2, 3};
  const uocr::LogitChain::Pick none = chain.next(logits, step, greedy);
  CHECK(none.token == -1);
  CHECK_FALSE(none.completed_marker);
  // An id outside the logits (a corrupt state that slipped past the checks) is an error, never a write.
  logits = {0.f, 9.f, 5.f, 7.f};
  step.banned = {4};
  CHECK(uocr_test::status_of([&] { chain.next(logits, step, greedy); }) == uocr::Status::internal);
}

TEST_CASE("loop guard: varying box coordinates still count as a loop, real text does not") {
  uocr::LoopGuard guard;
  bool stopped = false;
  for (int i = 0; i < 400 && !stopped; ++i)
    stopped = guard.push("<|det|>table [" + std::to_string(i) + ", " + std::to_string(2 * i) + ", 999, 999]<|/det|>cell\n");
  CHECK(stopped);
  CHECK(guard.block().find("<|det|>table [") != std::string::npos);

  uocr::LoopGuard prose;
  std::mt19937 rng(1);
  const char* words[] = {"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"};
  bool false_alarm = false;
  for (int i = 0; i < 5000; ++i) false_alarm |= prose.push(std::string(words[rng() % 8]) + " ");
  CHECK_FALSE(false_alarm);

  // A long table with numbers that change is content, not a loop.
  uocr::LoopGuard table;
  bool table_alarm = false;
  for (int i = 0; i < 300; ++i)
    table_alarm |= table.push("<tr><td>" + std::to_string(1000 + i * 7) + "</td><td>" + std::to_string(i * i) + "</td></tr>");
  CHECK_FALSE(table_alarm);
}
