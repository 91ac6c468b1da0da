// Continuous batching of decode steps: documents decoded by different threads on one model (one
// session per thread, the usual server setup) have their decode steps merged into one batched
// decoder call, so a step reads the weights once for all of them instead of once per document.
//
//   StepBatcher<Decoder, KvCache> batcher(Decoder(cfg, weights), {/*max_batch*/ 16, /*max_wait_us*/ 500});
//   // in each document's thread, after its prefill:
//   StepBatcher<Decoder, KvCache>::Member member(batcher);
//   member.active(true);                                                // counted as decoding
//   batcher.step(token, position, cache, attention, logits);           // waits for its batch
//
// A thread's step() queues (token, position, its KV cache, its decode attention) and waits. A
// batch runs as soon as every registered (decoding) sequence has a step queued, or max_batch
// steps are queued, or the oldest queued step has waited max_wait_us: a document that is busy
// elsewhere (sampling, a callback, a page being encoded) holds the others back by at most that
// much. The waiting thread that finds a batch ready runs it (no extra thread): one
// Dec::decode_batch call, then each thread copies out its own logits row. One batch runs at a
// time (the batch decoder's scratch is shared). An exception in a batch reaches every thread in
// it (rethrown from step()); the others go on.
//
// Sequences register (Member) only while they decode: the engines leave during prefill and page
// slides (uocr/engine/engine.hpp), so those never count as "not yet waiting".
//
// The batch decoder's own position limit is the largest (kMaxExtrapolatedPosition): each caller
// checks its step against its own decoder first (BasicPageGroupDecoder::step with a batcher).
//
// Dec: uocr::Decoder (rows bit-identical to decode_step) or cuda::CudaDecoder, anything with
// decode_batch(tokens, positions, caches, attentions) -> logits [n, vocab].
//
// Thread-safety: every member function may be called from any thread.
#pragma once
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <string>
#include <vector>

#include "uocr/core/error.hpp"
#include "uocr/decoder/attention.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

struct BatchParams {
  int max_batch = 1;       // sequences per batched step; 1 = off (each document steps alone)
  int max_wait_us = 1000;  // longest a queued step waits for others before its batch runs anyway
};

inline void validate(const BatchParams& p) {
  require(p.max_batch >= 1 && p.max_wait_us >= 0, Status::invalid_argument, [&] {
    return "batching needs max_batch >= 1 and max_wait_us >= 0, got " + std::to_string(p.max_batch) + " and " +
           std::to_string(p.max_wait_us);
  });
}

// What a batcher did so far.
struct BatchStats {
  int64_t batches = 0;   // batched decoder calls
  int64_t steps = 0;     // sequence steps in them (rows)
  int64_t largest = 0;   // most rows in one call
  int64_t timeouts = 0;  // batches started by max_wait_us rather than by every sequence waiting
};

template <class Dec, class Cache>
class StepBatcher {
 public:
  StepBatcher(Dec decoder, BatchParams params, int64_t position_limit) : dec_(std::move(decoder)), p_(params) {
    validate(p_);
    dec_.set_position_limit(position_limit);
  }

  // Registration of one sequence (RAII): counted while active(true), i.e. decoding.
  class Member {
   public:
    explicit Member(StepBatcher& b) : b_(&b) {}
    ~Member() { active(false); }
    Member(const Member&) = delete;
    Member& operator=(const Member&) = delete;
    void active(bool on) {
      if (on == on_) return;
      on_ = on;
      std::lock_guard<std::mutex> lock(b_->m_);
      b_->active_ += on ? 1 : -1;
      b_->cv_.notify_all();  // fewer sequences to wait for: a batch may be ready now
    }

   private:
    StepBatcher* b_;
    bool on_ = false;
  };

  // Runs one step of `cache`'s sequence in the next batch and puts its logits [vocab] in `out`.
  // `attention`: the sequence's decode attention (nullptr: dense). Rethrows the batch's error.
  void step(int32_t token, int64_t position, Cache& cache, DecodeAttention* attention, std::vector<float>& out) {
    Request r{token, position, &cache, attention, &out, Clock::now(), false, nullptr};
    std::unique_lock<std::mutex> lock(m_);
    pending_.push_back(&r);
    cv_.notify_all();  // the batch another thread waits for may be complete now
    while (!r.done) {
      const bool full = int64_t(pending_.size()) >= std::min<int64_t>(p_.max_batch, std::max<int64_t>(active_, 1));
      if (!running_ && !pending_.empty() && (full || Clock::now() >= deadline())) {
        run(lock, !full);
      } else if (running_ || pending_.empty()) {
        cv_.wait(lock);
      } else {
        cv_.wait_until(lock, deadline());
      }
    }
    if (r.error) std::rethrow_exception(r.error);
  }

  BatchStats stats() const {
    std::lock_guard<std::mutex> lock(m_);
    return stats_;
  }
  const BatchParams& params() const { return p_; }

 private:
  using Clock = std::chrono::steady_clock;
  struct Request {
    int32_t token;
    int64_t position;
    Cache* cache;
    DecodeAttention* attention;
    std::vector<float>* out;
    Clock::time_point queued;
    bool done = false;
    std::exception_ptr error;
  };

  Clock::time_point deadline() const { return pending_.front()->queued + std::chrono::microseconds(p_.max_wait_us); }

  // Takes the oldest max_batch queued steps and runs them with the lock released.
  void run(std::unique_lock<std::mutex>& lock, bool timed_out) {
    const size_t n = std::min(pending_.size(), size_t(p_.max_batch));
    std::vector<Request*> batch(pending_.begin(), pending_.begin() + std::ptrdiff_t(n));
    pending_.erase(pending_.begin(), pending_.begin() + std::ptrdiff_t(n));
    running_ = true;
    lock.unlock();
    std::exception_ptr error;
    try {
      tokens_.clear();
      positions_.clear();
      caches_.clear();
      attentions_.clear();
      for (const Request* r : batch) {
        tokens_.push_back(r->token);
        positions_.push_back(r->position);
        caches_.push_back(r->cache);
        attentions_.push_back(r->attention);
      }
      const std::vector<float>& logits = dec_.decode_batch(tokens_, positions_, caches_, attentions_);
      const size_t vocab = logits.size() / n;
      for (size_t i = 0; i < n; ++i) batch[i]->out->assign(logits.begin() + std::ptrdiff_t(i * vocab),
                                                           logits.begin() + std::ptrdiff_t((i + 1) * vocab));
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    for (Request* r : batch) {
      r->error = error;
      r->done = true;
    }
    running_ = false;
    ++stats_.batches;
    stats_.steps += int64_t(n);
    stats_.largest = std::max(stats_.largest, int64_t(n));
    stats_.timeouts += timed_out;
    cv_.notify_all();
  }

  Dec dec_;
  BatchParams p_;
  mutable std::mutex m_;
  std::condition_variable cv_;
  std::deque<Request*> pending_;  // queued steps, oldest first (each lives in its caller's step())
  int64_t active_ = 0;            // registered sequences that are decoding
  bool running_ = false;
  BatchStats stats_;
  // The batch's arguments, reused (only the running thread touches them).
  std::vector<int32_t> tokens_;
  std::vector<int64_t> positions_;
  std::vector<Cache*> caches_;
  std::vector<DecodeAttention*> attentions_;
};

UOCR_NAMESPACE_END
