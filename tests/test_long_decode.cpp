// Long decoding through the public Session API on a tiny model, with the KV bytes read after every
// token. R-SWA must hold exactly P + n rows from the moment its ring is full, over 20,000 generated
// tokens (constant memory however long the output); full attention exactly P + generated rows
// (bytes_per_token more per token), over 4,000 tokens: its attention cost grows with every token
// and 20,000 of them would triple the test's time without checking anything more. Both are
// counted by the session's own accounting.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "support/test_support.hpp"
#include "uocr/session/one_shot.hpp"

namespace {


constexpr int64_t kTokens = 20000;      // R-SWA
constexpr int64_t kFullTokens = 4000;   // full attention
constexpr int kWindow = 128;  // upstream's n

// tiny-b (3 layers, GQA 4/2 heads of 4) because its max_position_embeddings is 32768: the demo
// model stops at 8192 positions.
std::shared_ptr<const uocr::Model> tiny_b() {
  static const std::shared_ptr<const uocr::Model> m = uocr::Model::load(uocr_test::golden_model_dir());
  return m;
}

// K and V, float32, every layer: what one token costs in the cache, from the config alone.
size_t bytes_per_token(const uocr::DecoderConfig& c) {
  return size_t(2) * size_t(c.kv_heads) * size_t(c.head_dim) * sizeof(float) * size_t(c.layers);
}

struct LongRun {
  uocr::RunSummary sum;
  std::vector<int32_t> ids;                // one per token event with an id
  std::vector<uocr::MemoryStats> memory;   // OneShotSession::memory() at each of those events
  int window = -1;
};

// Exactly `tokens` tokens, whatever the random weights pick: EOS is suppressed until then
// (min_new_tokens) and the loop guard is off (random weights repeat themselves, which is what it
// would stop). The n-gram rule stays on, as upstream.
LongRun decode_long(int window, int64_t tokens) {
#ifdef _OPENMP
  // A step of this model is ~20 parallel regions of microseconds each: on a shared machine their
  // fork/joins cost more than the work (minutes instead of seconds with libgomp's spinning waits).
  omp_set_num_threads(1);
#endif
  uocr::SessionParams p;
  p.window = window;
  p.max_new_tokens = tokens;
  p.min_new_tokens = tokens;
  p.loop_guard = false;
  uocr::OneShotSession s(tiny_b(), p);
  s.add_page(uocr::load_image(uocr_test::golden("page.png")));
  LongRun r;
  r.window = s.effective_window();
  r.ids.reserve(size_t(tokens));
  r.memory.reserve(size_t(tokens));
  r.sum = s.run([&](const uocr::Event& e) {
    if (e.type == uocr::Event::Type::token && e.token >= 0) {
      r.ids.push_back(e.token);
      r.memory.push_back(s.memory());
    }
    return true;
  });
  return r;
}

const LongRun& rswa_run() {
  static const LongRun r = decode_long(kWindow, kTokens);
  return r;
}
const LongRun& full_run() {
  static const LongRun r = decode_long(0, kFullTokens);
  return r;
}

// The run really generated `tokens` tokens, one event each, on the prompt of one page.
void check_length(const LongRun& r, int64_t tokens) {
  REQUIRE(r.sum.stop == uocr::StopReason::max_tokens);
  REQUIRE(r.sum.generated_tokens == tokens);
  REQUIRE(int64_t(r.ids.size()) == tokens);
  REQUIRE(r.sum.prompt_tokens > r.sum.visual_tokens);
  REQUIRE(r.sum.visual_tokens > 0);
}

// First event k (0-based) whose window bytes differ from expected(k), or -1.
template <class Expected>
int64_t first_window_mismatch(const LongRun& r, Expected expected) {
  for (size_t k = 0; k < r.memory.size(); ++k)
    if (r.memory[k].window_kv_bytes != expected(int64_t(k))) return int64_t(k);
  return -1;
}

}  // namespace

TEST_CASE("R-SWA decodes 20,000 tokens with KV bytes exactly constant from P + n on") {
  const LongRun& r = rswa_run();
  check_length(r, kTokens);
  REQUIRE(r.window == kWindow);
  const size_t bpt = bytes_per_token(tiny_b()->config().decoder);
  const size_t prompt = size_t(r.sum.prompt_tokens);

  // At the k-th token event (0-based) k tokens have been fed back: the window holds min(k, n) rows.
  CHECK(first_window_mismatch(r, [&](int64_t k) { return size_t(std::min<int64_t>(k, kWindow)) * bpt; }) == -1);
  const uocr::MemoryStats& full_ring = r.memory[size_t(kWindow)];
  CHECK(full_ring.reference_kv_bytes == prompt * bpt);
  CHECK(full_ring.window_kv_bytes == size_t(kWindow) * bpt);
  int64_t changed = 0;
  for (size_t k = size_t(kWindow); k < r.memory.size(); ++k) {
    const uocr::MemoryStats& m = r.memory[k];
    changed += m.reference_kv_bytes != full_ring.reference_kv_bytes || m.window_kv_bytes != full_ring.window_kv_bytes ||
               m.kv_allocated_bytes != full_ring.kv_allocated_bytes || m.peak_kv_bytes != full_ring.peak_kv_bytes;
  }
  CHECK(changed == 0);
  // The ring was reserved up front: not one byte more was allocated during the whole run.
  CHECK(r.memory.front().kv_allocated_bytes == full_ring.kv_allocated_bytes);
  CHECK(r.sum.memory.window_kv_bytes == size_t(kWindow) * bpt);
  CHECK(r.sum.memory.peak_kv_bytes == (prompt + kWindow) * bpt);
}

TEST_CASE("R-SWA's scratch is constant from the first step on and peak_bytes is the largest KV + scratch held") {
  const LongRun& r = rswa_run();
  check_length(r, kTokens);
  // The engines' workspaces are sized by the prefill and the first step, then reused: not one
  // byte more over 20,000 tokens.
  const uocr::MemoryStats& first = r.memory[1];
  CHECK(first.scratch_bytes > 0);
  int64_t changed = 0;
  size_t largest = 0;
  for (size_t k = 1; k < r.memory.size(); ++k) {
    changed += r.memory[k].scratch_bytes != first.scratch_bytes;
    largest = std::max(largest, r.memory[k].kv_allocated_bytes + r.memory[k].scratch_bytes);
  }
  CHECK(changed == 0);
  const uocr::MemoryStats& m = r.sum.memory;
  CHECK(m.scratch_bytes == first.scratch_bytes);
  CHECK(m.peak_scratch_bytes == m.scratch_bytes);
  // peak_bytes is the largest sample of KV held + scratch, the final state included.
  CHECK(m.peak_bytes == std::max(largest, m.kv_allocated_bytes + m.scratch_bytes));
  CHECK(m.peak_bytes >= m.peak_kv_bytes + m.peak_scratch_bytes);
  CHECK(m.peak_bytes > m.peak_kv_bytes);
}

TEST_CASE("full attention over 4,000 tokens grows by exactly bytes_per_token per token") {
  const LongRun& r = full_run();
  check_length(r, kFullTokens);
  REQUIRE(r.window == 0);
  const size_t bpt = bytes_per_token(tiny_b()->config().decoder);
  const size_t prompt = size_t(r.sum.prompt_tokens);

  CHECK(first_window_mismatch(r, [&](int64_t k) { return size_t(k) * bpt; }) == -1);
  int64_t wrong = 0;
  for (const uocr::MemoryStats& m : r.memory)
    wrong += m.reference_kv_bytes != prompt * bpt || m.kv_allocated_bytes < m.reference_kv_bytes + m.window_kv_bytes;
  CHECK(wrong == 0);
  CHECK(r.sum.memory.window_kv_bytes == size_t(kFullTokens - 1) * bpt);  // the last token is not fed back
  CHECK(r.sum.memory.peak_kv_bytes == (prompt + kFullTokens - 1) * bpt);
  // Against R-SWA: the same bytes at the moment the ring fills, then bytes_per_token more per token
  // while R-SWA stays at P + n.
  const LongRun& ring = rswa_run();
  CHECK(r.memory[size_t(kWindow)].window_kv_bytes == ring.memory[size_t(kWindow)].window_kv_bytes);
  const size_t last = size_t(kFullTokens - 1);
  CHECK(r.memory[last].window_kv_bytes - ring.memory[last].window_kv_bytes == (last - kWindow) * bpt);
}

TEST_CASE("R-SWA and full attention pick the same tokens until the ring first overwrites a slot") {
  // Up to n generated rows both attend to exactly the same rows, so the first n + 1 picks agree;
  // afterwards R-SWA drops the oldest row and the random-weight streams may part.
  const LongRun& ring = rswa_run();
  const LongRun& full = full_run();
  REQUIRE(ring.ids.size() > size_t(kWindow));
  CHECK(std::equal(ring.ids.begin(), ring.ids.begin() + kWindow + 1, full.ids.begin()));
}

TEST_CASE("min_new_tokens is validated against max_new_tokens") {
  uocr::SessionParams p;
  p.min_new_tokens = -1;
  CHECK_THROWS_AS(uocr::OneShotSession(tiny_b(), p), uocr::Error);
  p.min_new_tokens = 10;
  p.max_new_tokens = 9;
  CHECK_THROWS_AS(uocr::OneShotSession(tiny_b(), p), uocr::Error);
  p.max_new_tokens = 0;  // no cap: any minimum is fine
  CHECK_NOTHROW(uocr::OneShotSession(tiny_b(), p));
  p.max_new_tokens = 10;
  CHECK_NOTHROW(uocr::OneShotSession(tiny_b(), p));
}

TEST_CASE("an id the model can emit but the tokenizer lacks streams as nothing, as HF's decode drops it") {
  // The published vocab_size (129280) exceeds the tokenizer's ids (up to 128826); random weights
  // pick such ids within a few thousand tokens, which must not end a long run. Ids a caller passes
  // to decode() stay an error.
  const uocr::Tokenizer& tok = tiny_b()->tokenizer();
  const int32_t missing = int32_t(tok.id_limit());
  REQUIRE(missing < tiny_b()->config().decoder.vocab);
  CHECK(tok.generated_bytes(missing).empty());
  const int32_t known = tok.encode("long").front();
  CHECK(tok.generated_bytes(known) == tok.token_bytes(known));
  CHECK_THROWS_AS(tok.generated_bytes(-1), uocr::Error);
  CHECK_THROWS_AS(tok.decode({missing}), uocr::Error);
}
