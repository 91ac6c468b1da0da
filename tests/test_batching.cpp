// Continuous batching (uocr/decoder/step_batcher.hpp): Decoder::decode_batch rows against
// decode_step (bit for bit), the batcher's scheduling and error paths with a scripted decoder,
// and sessions in several threads on one model with batching on against each run alone.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "support/demo_model.hpp"
#include "support/test_support.hpp"
#include "uocr/decoder/decoder.hpp"
#include "uocr/decoder/page_groups.hpp"
#include "uocr/decoder/step_batcher.hpp"
#include "uocr/engine/open.hpp"
#include "uocr/image/image.hpp"
#include "uocr/model/model.hpp"
#include "uocr/session/session.hpp"
#include "uocr/session/page_source.hpp"

using uocr::Status;
using uocr_test::demo_model;
using uocr_test::random_rows;
using uocr_test::status_of;


TEST_CASE("decode_batch: every row is decode_step's row, bit for bit, in rings and growing windows") {
  const auto model = demo_model();
  const uocr::DecoderConfig& c = model->config().decoder;
  uocr::Decoder alone(c, model->weights().decoder), batched(c, model->weights().decoder);
  CHECK(batched.batch_rows() > 4);  // bf16 weights on this build: rows go through the small-m kernel together

  // Six sequences (more than the mat-vec's 4 rows): different prompt lengths, R-SWA windows of
  // 4 and 8 (the rings wrap) and full attention.
  constexpr int kSeq = 6, kSteps = 12;
  const int windows[kSeq] = {4, 8, 0, 4, 8, 0};
  std::vector<uocr::KvCache> a, b;
  std::vector<int32_t> tokens(kSeq);
  std::vector<int64_t> positions(kSeq);
  for (int i = 0; i < kSeq; ++i) {
    a.emplace_back(c, windows[i]);
    b.emplace_back(c, windows[i]);
    const int64_t p = 5 + 3 * i;
    const std::vector<float> prompt = random_rows(p, c.hidden, unsigned(i + 1));
    const std::vector<float> la = alone.prefill(prompt, 0, a.back()), lb = alone.prefill(prompt, 0, b.back());
    REQUIRE(uocr_test::bit_identical(la, lb));
    tokens[size_t(i)] = int32_t(uocr_test::argmax(la));
    positions[size_t(i)] = p;
  }
  std::vector<uocr::KvCache*> caches;
  for (uocr::KvCache& k : b) caches.push_back(&k);
  int64_t mismatches = 0;
  for (int s = 0; s < kSteps; ++s) {
    // A different subset every step: sequences join and leave between steps.
    std::vector<int32_t> bt;
    std::vector<int64_t> bp;
    std::vector<uocr::KvCache*> bc;
    std::vector<int> who;
    for (int i = 0; i < kSeq; ++i)
      if (s < 2 || (s + i) % 4 != 0) {
        who.push_back(i);
        bt.push_back(tokens[size_t(i)]);
        bp.push_back(positions[size_t(i)]);
        bc.push_back(caches[size_t(i)]);
      }
    const std::vector<float> rows = batched.decode_batch(bt, bp, bc);
    REQUIRE(rows.size() == who.size() * size_t(c.vocab));
    for (size_t r = 0; r < who.size(); ++r) {
      const int i = who[r];
      const std::vector<float>& one = alone.decode_step(tokens[size_t(i)], positions[size_t(i)], a[size_t(i)]);
      mismatches += std::memcmp(one.data(), rows.data() + r * size_t(c.vocab), size_t(c.vocab) * sizeof(float)) != 0;
      tokens[size_t(i)] = int32_t(uocr_test::argmax(one));
      ++positions[size_t(i)];
    }
  }
  CHECK(mismatches == 0);
  for (int i = 0; i < kSeq; ++i) CHECK(a[size_t(i)].generated_rows() == b[size_t(i)].generated_rows());

  // A bad row refuses the whole call before any cache changes.
  const int64_t before = b[0].generated_rows();
  CHECK(status_of([&] { batched.decode_batch({tokens[0], int32_t(c.vocab)}, {positions[0], positions[1]}, {caches[0], caches[1]}); }) ==
        Status::invalid_argument);
  CHECK(status_of([&] { batched.decode_batch({tokens[0], tokens[0]}, {positions[0], positions[0]}, {caches[0], caches[0]}); }) ==
        Status::invalid_argument);
  CHECK(status_of([&] { batched.decode_batch({}, {}, {}); }) == Status::invalid_argument);
  CHECK(b[0].generated_rows() == before);
}

TEST_CASE("decode_tokens: one sequence's tokens in one call are its decode_steps, bit for bit") {
  const auto model = demo_model();
  const uocr::DecoderConfig& c = model->config().decoder;
  uocr::Decoder alone(c, model->weights().decoder), batched(c, model->weights().decoder);
  // Rings of 4 and 8 that wrap inside the call (later rows' slots still hold older tokens when
  // an earlier row attends), full attention, and more tokens than one pass of batch_rows().
  for (const int window : {4, 8, 0}) {
    INFO("window " << window);
    uocr::KvCache a(c, window), b(c, window);
    const int64_t p = 7;
    const std::vector<float> prompt = random_rows(p, c.hidden, 11u);
    std::vector<float> logits = alone.prefill(prompt, 0, a);
    alone.prefill(prompt, 0, b);
    // Three steps first, so that the call starts on a partly filled window.
    int64_t position = p;
    for (int s = 0; s < 3; ++s, ++position) {
      const int32_t t = int32_t(uocr_test::argmax(logits));
      logits = alone.decode_step(t, position, a);
      alone.decode_step(t, position, b);
    }
    const int64_t n = window ? 2 * window + 3 : batched.batch_rows() + 5;
    std::vector<int32_t> tokens;
    for (int64_t i = 0; i < n; ++i) {
      tokens.push_back(int32_t(uocr_test::argmax(logits)));
      logits = alone.decode_step(tokens.back(), position + i, a);
    }
    batched.decode_tokens(tokens.data(), n, position, b);
    REQUIRE(a.generated_tokens() == b.generated_tokens());
    int64_t mismatches = 0;
    const size_t floats = size_t(a.generated_rows() * a.row_floats());
    for (int l = 0; l < a.layers(); ++l)
      mismatches += std::memcmp(a.generated_k(l), b.generated_k(l), floats * sizeof(float)) != 0 ||
                    std::memcmp(a.generated_v(l), b.generated_v(l), floats * sizeof(float)) != 0;
    CHECK(mismatches == 0);
    // The next step reads the same cache either way.
    const int32_t t = int32_t(uocr_test::argmax(logits));
    const std::vector<float> next_a = alone.decode_step(t, position + n, a);
    const std::vector<float>& next_b = alone.decode_step(t, position + n, b);
    CHECK(uocr_test::bit_identical(next_a, next_b));
  }
  // A bad token or a position past the limit refuses the call before the cache changes.
  uocr::KvCache k(c, 4);
  alone.prefill(random_rows(3, c.hidden, 5u), 0, k);
  const int32_t bad[2] = {0, int32_t(c.vocab)};
  CHECK(status_of([&] { batched.decode_tokens(bad, 2, 3, k); }) == Status::invalid_argument);
  CHECK(status_of([&] { batched.decode_tokens(bad, 1, c.max_positions, k); }) == Status::invalid_argument);
  CHECK(status_of([&] { batched.decode_tokens(bad, -1, 3, k); }) == Status::invalid_argument);
  CHECK(k.generated_tokens() == 0);
}

TEST_CASE("page groups: the CPU decoder's batched window recompute gives the stepped window's bits") {
  // uocr::Decoder re-feeds the window at a slide in one decode_tokens() call; a decoder type of
  // its own takes the generic path, one decode_step per token. Demo model (bf16: the rows really
  // go through the weights together), G = 2 over 3 random pages, dense and SR-SWA references,
  // both position schemes: every logit row must match to the bit.
  struct SteppedDecoder : uocr::Decoder {
    using uocr::Decoder::Decoder;
  };
  const auto model = demo_model();
  const uocr::DecoderConfig& c = model->config().decoder;
  const uocr_test::RandomDocument document(3, 20, c.hidden);
  const uocr::DocumentLayout& layout = document.layout;
  const int window = c.sliding_window;
  REQUIRE(window > 8);
  const int64_t steps = 3 * window + 10, slide_at[2] = {window + 5, 2 * window + 7};
  std::mt19937 rng(3);
  std::vector<int32_t> stream(static_cast<size_t>(steps));
  for (int32_t& t : stream) t = int32_t(rng() % uint32_t(c.vocab));
  for (const bool sparse : {false, true})
    for (const bool group_positions : {true, false}) {
      INFO("sparse " << sparse << ", group positions " << group_positions);
      uocr::PageGroupParams pp;
      pp.group_pages = 2;
      pp.overlap_pages = 1;
      pp.group_positions = group_positions;
      pp.recompute_on_slide = true;
      pp.sparse = sparse;
      pp.sparse_params.page_budget = 1;
      pp.sparse_params.block_budget = 2;
      pp.sparse_params.block_tokens = 4;
      uocr::PageGroupDecoder batched(c, model->weights().decoder, window, pp);
      uocr::BasicPageGroupDecoder<SteppedDecoder, uocr::KvCache> stepped(
          SteppedDecoder(c, model->weights().decoder), uocr::KvCache(c, window), pp);
      uocr::FunctionPageEmbeddings src_a = document.pages(), src_b = document.pages();
      batched.start(layout, src_a);
      stepped.start(layout, src_b);
      CHECK(batched.decoder().batch_rows() > 4);
      int64_t mismatches = 0, refed = 0;
      for (int64_t k = 0; k < steps; ++k) {
        if (k == slide_at[0] || k == slide_at[1]) {
          batched.next_page(2);  // group positions: the last 2 tokens begin the next page's text
          stepped.next_page(2);
          if (k == slide_at[0]) refed = batched.cache().generated_rows();  // G = 2: the one slide
        }
        const std::vector<float>& a = batched.step(stream[size_t(k)]);
        const std::vector<float>& b = stepped.step(stream[size_t(k)]);
        mismatches += a.size() != b.size() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) != 0;
      }
      CHECK(batched.slides() == 1);
      CHECK(refed == (group_positions ? 2 : window));  // the tokens the slide re-fed
      CHECK(mismatches == 0);
    }
}

namespace {

// A decoder that scripts decode_batch: the logits row of token t is {t, position}; token 13
// fails the whole batch.
struct ScriptedCache {};
struct ScriptedDecoder {
  std::vector<float> out;
  void set_position_limit(int64_t) {}
  const std::vector<float>& decode_batch(const std::vector<int32_t>& tokens, const std::vector<int64_t>& positions,
                                         const std::vector<ScriptedCache*>&, const std::vector<uocr::DecodeAttention*>&) {
    for (int32_t t : tokens) uocr::require(t != 13, Status::internal, "scripted failure");
    out.clear();
    for (size_t i = 0; i < tokens.size(); ++i) out.insert(out.end(), {float(tokens[i]), float(positions[i])});
    return out;
  }
};
using ScriptedBatcher = uocr::StepBatcher<ScriptedDecoder, ScriptedCache>;

// `threads` threads, each with its own cache and logits row, call step(t, s, cache, row) for
// s = 0, 1, ... up to `steps` times or until it returns false; returns when all have finished.
template <class Step>
void each_thread_steps(int threads, int steps, Step&& step) {
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      ScriptedCache cache;
      std::vector<float> row;
      for (int s = 0; s < steps; ++s)
        if (!step(t, s, cache, row)) break;
    });
  for (std::thread& th : pool) th.join();
}

}  // namespace

TEST_CASE("StepBatcher: batches when every sequence waits, bounded wait, errors reach the whole batch") {
  ScriptedBatcher batcher(ScriptedDecoder{}, {4, 5000000}, 1 << 24);  // 5 s: never reached while all four step
  constexpr int kThreads = 4, kSteps = 25;

  // All four registered before any steps: every batch then waits for all of them.
  std::vector<std::unique_ptr<ScriptedBatcher::Member>> members;
  for (int t = 0; t < kThreads; ++t) {
    members.push_back(std::make_unique<ScriptedBatcher::Member>(batcher));
    members.back()->active(true);
  }

  SUBCASE("four decoding sequences: every step is one batch of four, each thread gets its own row") {
    std::atomic<int> wrong{0};
    each_thread_steps(kThreads, kSteps, [&](int t, int s, ScriptedCache& cache, std::vector<float>& row) {
      batcher.step(100 + t, s, cache, nullptr, row);
      wrong += row != std::vector<float>{float(100 + t), float(s)};
      return true;
    });
    CHECK(wrong == 0);
    const uocr::BatchStats st = batcher.stats();
    CHECK(st.steps == kThreads * kSteps);
    CHECK(st.batches == kSteps);
    CHECK(st.largest == kThreads);
    CHECK(st.timeouts == 0);
  }

  SUBCASE("a registered sequence that stops stepping holds the others back by at most max_wait") {
    ScriptedBatcher quick(ScriptedDecoder{}, {4, 2000}, 1 << 24);
    ScriptedBatcher::Member me(quick), idle(quick);
    me.active(true);
    idle.active(true);  // never steps
    ScriptedCache cache;
    std::vector<float> row;
    const auto t0 = std::chrono::steady_clock::now();
    for (int s = 0; s < 10; ++s) quick.step(7, s, cache, nullptr, row);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHECK(quick.stats().timeouts == 10);
    CHECK(seconds < 5.0);  // 10 x 2 ms of waiting, with plenty of room for a loaded machine
    idle.active(false);    // now alone: no wait at all
    for (int s = 0; s < 10; ++s) quick.step(7, s, cache, nullptr, row);
    CHECK(quick.stats().timeouts == 10);
    CHECK(quick.stats().batches == 20);
  }

  SUBCASE("an error in a batch reaches every thread in it; the others carry on") {
    std::atomic<int> failed{0}, internal{0}, ok_after{0};
    each_thread_steps(kThreads, kSteps, [&](int t, int s, ScriptedCache& cache, std::vector<float>& row) {
      const Status st = status_of([&] { batcher.step(t == 0 && s == 10 ? 13 : 100 + t, s, cache, nullptr, row); });
      if (st != Status::ok) {
        ++failed;
        internal += st == Status::internal;
        if (t == 0) {  // the failing document ends (leaves the batcher); the others keep decoding
          members[0]->active(false);
          return false;
        }
      } else if (s > 10) {
        ++ok_after;
      }
      return true;
    });
    CHECK(failed == kThreads);  // step 10 was one batch of all four
    CHECK(internal == kThreads);
    CHECK(ok_after == (kThreads - 1) * (kSteps - 11));
  }
}

namespace {

struct DocumentRun {
  std::vector<int32_t> tokens;
  std::string text;
  Status status = Status::ok;
  uocr::StopReason stop = uocr::StopReason::eos;
  bool drafting = false;
  uocr::DraftStats draft;
  // Decode steps it ran: every token is fed back but the last one unless the run ended at EOS
  // (the first token comes from the prefill).
  int64_t steps() const { return int64_t(tokens.size()) - (stop == uocr::StopReason::eos ? 0 : 1); }
};

// Holds every thread at its first token until `count` threads got there: all documents have
// prefilled and are registered as decoding before any of them steps, so batches form whatever
// the scheduler does (a loaded machine could otherwise run the documents one after another).
class StartGate {
 public:
  explicit StartGate(int count) : left_(count) {}
  void arrive_and_wait() {
    std::unique_lock<std::mutex> lock(m_);
    if (--left_ == 0) cv_.notify_all();
    // Bounded: a thread that failed before its first token must not hang the others.
    cv_.wait_for(lock, std::chrono::seconds(60), [&] { return left_ <= 0; });
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  int left_;
};

// Document d of the threaded test: one sample page each (the fourth sampled with a seed), and a
// three-page document in groups of two (a slide: the document leaves the batch while its next
// page is encoded and prefilled), on `engine` (null: an engine of its own, without batching).
// `stop_after` > 0 cancels after that many tokens; `gate`, when given, is passed at the first token;
// `drafts`: the pages' draft texts, verified whatever they cost (no resting on measured cost).
DocumentRun run_document(int d, const std::shared_ptr<uocr::Engine>& engine, int64_t stop_after = 0, StartGate* gate = nullptr,
                      std::vector<std::string> drafts = {}) {
  uocr::SessionParams sp;
  sp.max_new_tokens = 120;
  uocr::DocumentParams ip;
  ip.draft.measure_cost = false;
  std::vector<std::string> files{uocr_test::demo_sample(1 + d % 3)};
  if (d == 3) sp.sampling = {1.5f, 1.0f, 42};  // hot enough to leave the greedy path of a confident model
  if (d == 4) {
    files = {uocr_test::demo_sample(1), uocr_test::demo_sample(2), uocr_test::demo_sample(3)};
    ip.groups.group_pages = 2;
    ip.groups.overlap_pages = 1;
    ip.page_fallback_tokens = 40;
  }
  DocumentRun out;
  out.status = status_of([&] {
    uocr::Session s = engine ? uocr::Session(engine, sp, ip) : uocr::Session(demo_model(), sp, ip);
    uocr::FilePages files_pages(files);
    uocr::DraftedPages pages(files_pages, std::move(drafts));
    const uocr::RunSummary sum = s.run(pages, [&](const uocr::Event& e) {
      if (e.type == uocr::Event::Type::token && e.token >= 0) out.tokens.push_back(e.token);
      if (gate && out.tokens.size() == 1) gate->arrive_and_wait();
      return stop_after == 0 || int64_t(out.tokens.size()) < stop_after;
    });
    out.text = sum.text;
    out.stop = sum.stop;
    out.drafting = s.stats().drafting;
    out.draft = s.stats().draft;
  });
  return out;
}

}  // namespace

TEST_CASE("sessions in five threads with batching on give each document's tokens alone; batches formed") {
  constexpr int kDocs = 5;
  std::vector<DocumentRun> alone;
  for (int d = 0; d < kDocs; ++d) alone.push_back(run_document(d, nullptr));
  for (const DocumentRun& t : alone) {
    REQUIRE(t.status == Status::ok);
    REQUIRE(t.tokens.size() > 10);
  }
  CHECK(alone[0].tokens != alone[1].tokens);
  CHECK(alone[0].tokens != alone[3].tokens);  // document 3 samples

  // A batch runs when every decoding document has queued its step: the wait only bounds a
  // document busy between steps (sampling, its callback), which never takes seconds.
  const std::shared_ptr<uocr::Engine> engine = uocr::open_engine(demo_model(), uocr::Backend::cpu, {0, {8, 5000000}});
  const uocr::BatchStats before = engine->batch_stats();
  std::vector<DocumentRun> together(kDocs);
  std::vector<std::thread> threads;
  StartGate gate(kDocs);
  for (int d = 0; d < kDocs; ++d)
    threads.emplace_back([&, d] { together[size_t(d)] = run_document(d, engine, 0, &gate); });
  for (std::thread& th : threads) th.join();
  const uocr::BatchStats after = engine->batch_stats();
  for (int d = 0; d < kDocs; ++d) {
    CAPTURE(d);
    CHECK(together[size_t(d)].status == Status::ok);
    CHECK(together[size_t(d)].tokens == alone[size_t(d)].tokens);
    CHECK(together[size_t(d)].text == alone[size_t(d)].text);
  }
  int64_t steps = 0;
  for (const DocumentRun& t : alone) steps += t.steps();
  CHECK(after.steps - before.steps == steps);
  CHECK(after.largest >= 2);
  CHECK(after.batches - before.batches < steps);  // steps shared batches
  for (const DocumentRun& t : alone) MESSAGE("document: ", t.tokens.size(), " tokens");
  MESSAGE("batches ", after.batches - before.batches, " for ", steps, " steps, largest ", after.largest, ", timeouts ",
          after.timeouts - before.timeouts);

  // Batching off is the engine without a batcher (today's path).
  CHECK(uocr::open_engine(demo_model(), uocr::Backend::cpu, {})->batch_stats().batches == 0);
}

TEST_CASE("batched sessions verify their drafts outside the batch: each document's tokens alone, drafts accepted") {
  // Documents 0 and 1 (one page each) and 4 (three pages in sliding groups of two), greedy.
  const std::vector<int> docs = {0, 1, 4};
  std::vector<DocumentRun> alone;
  for (const int d : docs) alone.push_back(run_document(d, nullptr));
  // Document 0's draft is its own text, document 1's every word of its text reversed (wrong
  // everywhere), document 4's its whole text for each page (found by lookup page after page).
  std::string reversed;
  for (size_t i = 0; i < alone[1].text.size();) {
    size_t j = alone[1].text.find_first_of(" \n", i);
    if (j == std::string::npos) j = alone[1].text.size();
    reversed.append(alone[1].text.rbegin() + std::ptrdiff_t(alone[1].text.size() - j), alone[1].text.rbegin() + std::ptrdiff_t(alone[1].text.size() - i));
    if (j < alone[1].text.size()) reversed += alone[1].text[j];
    i = j + 1;
  }
  const std::vector<std::vector<std::string>> drafts = {{alone[0].text}, {reversed}, {alone[2].text, alone[2].text, alone[2].text}};

  const std::shared_ptr<uocr::Engine> engine = uocr::open_engine(demo_model(), uocr::Backend::cpu, {0, {8, 5000000}});
  const uocr::BatchStats before = engine->batch_stats();
  std::vector<DocumentRun> together(docs.size());
  std::vector<std::thread> threads;
  StartGate gate(int(docs.size()));
  for (size_t i = 0; i < docs.size(); ++i)
    threads.emplace_back([&, i] { together[i] = run_document(docs[i], engine, 0, &gate, drafts[i]); });
  for (std::thread& th : threads) th.join();
  const uocr::BatchStats after = engine->batch_stats();
  for (size_t i = 0; i < docs.size(); ++i) {
    CAPTURE(docs[i]);
    CHECK(together[i].status == Status::ok);
    CHECK(together[i].tokens == alone[i].tokens);
    CHECK(together[i].text == alone[i].text);
    CHECK(together[i].drafting);
    MESSAGE("document ", docs[i], ": ", together[i].tokens.size(), " tokens, ", together[i].draft.passes, " passes, ",
            together[i].draft.accepted, " of ", together[i].draft.drafted, " drafted tokens accepted");
  }
  for (const size_t right : {size_t(0), size_t(2)}) {  // right drafts: most tokens accepted, few passes
    CHECK(together[right].draft.accepted > int64_t(together[right].tokens.size()) / 2);
    CHECK(together[right].draft.passes < int64_t(together[right].tokens.size()) / 2);
  }
  // Every pass that verified nothing was a step of the batcher.
  int64_t steps = 0;
  for (const DocumentRun& t : together) steps += t.draft.passes - t.draft.verify_passes;
  CHECK(steps > 0);
  CHECK(after.steps - before.steps == steps);
}

TEST_CASE("batched sessions: one that is cancelled or fails early does not hold up the others") {
  // 1 s per step: a document left registered would show.
  const std::shared_ptr<uocr::Engine> engine = uocr::open_engine(demo_model(), uocr::Backend::cpu, {0, {4, 1000000}});
  const DocumentRun reference = run_document(0, nullptr);
  std::vector<DocumentRun> got(4);
  std::vector<std::thread> threads;
  const auto t0 = std::chrono::steady_clock::now();
  threads.emplace_back([&] { got[0] = run_document(0, engine); });
  threads.emplace_back([&] { got[1] = run_document(0, engine, 5); });  // cancelled after 5 tokens
  threads.emplace_back([&] {
    // Four pages in groups of two: the fourth is read at the second slide (10 tokens after the
    // first at the latest), while the document decodes in the batch, and fails.
    uocr::DocumentParams ip;
    ip.groups.group_pages = 2;
    ip.groups.overlap_pages = 1;
    ip.page_fallback_tokens = 10;
    got[2].status = status_of([&] {
      uocr::Session s(engine, {}, ip);
      uocr::CallbackPages pages(4, [](int64_t i, uocr::ImageU8& page) {
        uocr::require(i < 3, Status::io, "page 4 is unreadable");
        page = uocr::load_image(uocr_test::demo_sample(int(i) + 1));
        return true;
      });
      s.run(pages, [&](const uocr::Event& e) {
        if (e.type == uocr::Event::Type::token && e.token >= 0) got[2].tokens.push_back(e.token);
        return true;
      });
    });
  });
  threads.emplace_back([&] { got[3] = run_document(1, engine); });
  for (std::thread& th : threads) th.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(got[0].status == Status::ok);
  CHECK(got[0].tokens == reference.tokens);
  CHECK(got[1].tokens.size() == 5);
  CHECK(got[2].status == Status::io);
  CHECK(got[2].tokens.size() >= 2);  // it had been decoding in the batch
  CHECK(got[3].status == Status::ok);
  // Document 0 alone has ~30 steps: each waiting out 1 s for a vanished document, 30 s.
  CHECK(seconds < 10.0);
  MESSAGE("four batched sessions, two ending early: ", seconds, " s");
}

TEST_CASE("batching parameters are validated; Vulkan refuses batching") {
  CHECK(status_of([&] { uocr::open_engine(demo_model(), uocr::Backend::cpu, {0, {0, 10}}); }) == Status::invalid_argument);
  CHECK(status_of([&] { uocr::open_engine(demo_model(), uocr::Backend::cpu, {0, {4, -1}}); }) == Status::invalid_argument);
  uocr::SessionParams sp;
  sp.batching.max_batch = -3;
  CHECK(status_of([&] { uocr::Session s(demo_model(), sp); }) == Status::invalid_argument);
  const Status vk = status_of([&] { uocr::open_engine(demo_model(), uocr::Backend::vulkan, {0, {4, 10}}); });
  CHECK(vk == Status::unsupported);
}
