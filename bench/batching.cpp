// Continuous batching on the CPU: decode tokens/s of 1, 4 and 16 documents decoding at once in
// their own threads on one model, each stepping alone (batching off) or through the shared
// StepBatcher (uocr/decoder/step_batcher.hpp). Every document is prefilled first (a synthetic
// one-page prompt: random visual embeddings), then all decode `steps` greedy tokens together;
// the time is from the common start to the last document's last step. docs/PERFORMANCE.md.
//
//   OMP_WAIT_POLICY=passive ./build/bench/batching [--model DIR] [--steps N] [--threads 1,4,16] [--wait-us US]
//
// --wait-us is the batcher's max_wait_us (default 20000): on this loaded 2-core machine, 16
// threads woken together need milliseconds to all be scheduled again, and a shorter wait starts
// batches before they are back.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "uocr/engine/open.hpp"
#include "uocr/model/model.hpp"

namespace {

using Clock = std::chrono::steady_clock;

// Releases the waiting threads together once `count` have arrived.
class Gate {
 public:
  explicit Gate(int count) : left_(count) {}
  void arrive_and_wait() {
    std::unique_lock<std::mutex> lock(m_);
    if (--left_ == 0) {
      start_ = Clock::now();
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return left_ == 0; });
    }
  }
  Clock::time_point start() const { return start_; }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  int left_;
  Clock::time_point start_;
};

struct Result {
  double seconds = 0;
  uocr::BatchStats stats;
};

Result run(const std::shared_ptr<const uocr::Model>& model, int threads, int steps, const uocr::BatchParams& batching) {
  const auto engine = uocr::open_engine(model, uocr::Backend::cpu, {0, batching});
  const uocr::BatchStats before = engine->batch_stats();
  const uocr::DecoderConfig& c = model->config().decoder;
  constexpr int64_t kPageTokens = 100;
  Gate gate(threads);
  std::vector<Clock::time_point> done(static_cast<size_t>(threads));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      uocr::DocumentLayout layout;
      layout.head = {int32_t(c.bos_id)};
      layout.tail = {10, 11, 12};
      layout.pages = 1;
      layout.page_tokens = kPageTokens;
      uocr::FunctionPageEmbeddings pages(1, [&](int64_t, std::vector<float>& out) {
        std::mt19937 rng(unsigned(t + 1));
        std::normal_distribution<float> nd(0.f, 1.f);
        out.resize(size_t(kPageTokens * c.hidden));
        for (float& x : out) x = nd(rng);
      });
      const auto dec = engine->decoder(128, uocr::PageGroupParams{});
      std::vector<float> logits = dec->start(layout, pages);
      gate.arrive_and_wait();
      for (int s = 0; s < steps; ++s)
        logits = dec->step(int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin()));
      done[size_t(t)] = Clock::now();
    });
  for (std::thread& th : pool) th.join();
  Result r;
  r.seconds = std::chrono::duration<double>(*std::max_element(done.begin(), done.end()) - gate.start()).count();
  r.stats = engine->batch_stats();
  r.stats.batches -= before.batches;
  r.stats.steps -= before.steps;
  r.stats.timeouts -= before.timeouts;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_dir = "models/uocr-demo";
  int steps = 200, wait_us = 20000;
  std::vector<int> counts{1, 4, 16};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--model") {
      model_dir = v;
    } else if (a == "--steps") {
      steps = std::atoi(v.c_str());
    } else if (a == "--wait-us") {
      wait_us = std::atoi(v.c_str());
    } else if (a == "--threads") {
      counts.clear();
      std::stringstream ss(v);
      for (std::string n; std::getline(ss, n, ',');) counts.push_back(std::atoi(n.c_str()));
    } else {
      std::fprintf(stderr, "usage: batching [--model DIR] [--steps N] [--threads 1,4,16] [--wait-us US]\n");
      return 2;
    }
  }
  try {
    const auto model = uocr::Model::load(model_dir);
    run(model, 1, 8, {});  // warm-up: the mapped weights paged in, so neither column pays for it
    std::printf("%-9s %12s %12s %8s %12s %9s\n", "documents", "off tok/s", "on tok/s", "on/off", "rows/batch", "timeouts");
    for (int n : counts) {
      const Result off = run(model, n, steps, {});
      // One document: the batcher's own cost (every batch one row).
      const Result on = run(model, n, steps, {std::max(n, 2), wait_us});
      const double total = double(n) * steps;
      std::printf("%-9d %12.1f %12.1f %8.2f %12.2f %9lld\n", n, total / off.seconds, total / on.seconds,
                  off.seconds / on.seconds, on.stats.batches ? double(on.stats.steps) / double(on.stats.batches) : 0.0,
                  static_cast<long long>(on.stats.timeouts));
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "batching: %s\n", e.what());
    return 1;
  }
  return 0;
}
