// Admission and decoding: documents wait in one bounded queue per pool (short documents apart
// from long ones, so that a 300-page document never holds up a one-page request) and are decoded
// by `max_concurrency` workers that share one loaded model and batch their decode steps
// (uocr::BatchParams). A document starts only when the KV it will hold fits, with that of the
// documents running, in `visual_cache_bytes`; at most `max_long_running` long documents run at
// once, so short ones always find a worker.
//
// A Document is shared by the HTTP thread that answers the request (it takes the text as it
// comes) and the worker that decodes it; cancel() stops the work at the next token, and a
// document that has waited past its deadline is ended without being decoded.
#pragma once
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "api_error.hpp"
#include "log.hpp"
#include "metrics.hpp"
#include "serve_config.hpp"
#include "uocr/image/image.hpp"
#include "uocr/image/preprocess.hpp"
#include "uocr/session/page_group_choice.hpp"
#include "uocr/session/session.hpp"
#include "uocr/vision/token_layout.hpp"

namespace uocr_serve {

using Clock = std::chrono::steady_clock;

enum class Pool { short_documents, long_documents };
inline const char* pool_name(Pool p) { return p == Pool::long_documents ? "long" : "short"; }

class Document;

// What a worker runs for a document besides its session: where the pages come from and, for
// jobs, the checkpoint and what else sees the run (an output file, progress, the job's state).
struct DocumentWork {
  std::function<std::unique_ptr<uocr::PageSource>()> open_pages;  // called by the worker, once
  uocr::CheckpointOptions checkpoint;                              // path empty: none
  bool collect_text = true;                                        // keep the text for take() (a chat reply)
  std::function<void()> on_start;                                  // the worker took the document
  std::function<void(const uocr::Event&)> on_event;
  std::function<void(const Document&)> on_end;                     // after the document ended
};

class Document {
 public:
  Document(std::string id, int64_t pages, uocr::SessionParams params, double timeout_seconds, DocumentWork work)
      : id_(std::move(id)), pages_(pages), params_(std::move(params)), arrived_(Clock::now()),
        deadline_(arrived_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_seconds))),
        work_(std::move(work)) {}

  const std::string& id() const { return id_; }
  int64_t pages() const { return pages_; }
  const uocr::SessionParams& params() const { return params_; }
  Clock::time_point arrived() const { return arrived_; }
  Clock::time_point deadline() const { return deadline_; }

  enum class Wait { text, finished, idle };
  // Moves the text generated since the last call into `out`; waits up to `wait` for some.
  Wait take(std::string& out, std::chrono::milliseconds wait) {
    std::unique_lock<std::mutex> lock(m_);
    cv_.wait_for(lock, wait, [&] { return !pending_.empty() || done_; });
    out.swap(pending_);
    pending_.clear();
    if (!out.empty()) return Wait::text;
    return done_ ? Wait::finished : Wait::idle;
  }
  // Stops the work at the next token (or before it starts).
  void cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }

  // After Wait::finished: the run's summary, or the error that ended it.
  const std::optional<ApiError>& error() const { return error_; }
  const uocr::RunSummary& summary() const { return summary_; }
  const uocr::DraftStats& draft() const { return draft_; }  // the passes that verified a page's text layer
  double seconds_to_first_token() const { return first_token_seconds_; }

 private:
  friend class Scheduler;
  void append(const std::string& text) {
    {
      std::lock_guard<std::mutex> lock(m_);
      pending_ += text;
    }
    cv_.notify_all();
  }
  void end(uocr::RunSummary summary, std::optional<ApiError> error, uocr::DraftStats draft = {}) {
    {
      std::lock_guard<std::mutex> lock(m_);
      summary_ = std::move(summary);
      error_ = std::move(error);
      draft_ = draft;
    }
    if (work_.on_end) work_.on_end(*this);
    work_ = {};  // what the work holds (a request's images) is freed now
    {
      std::lock_guard<std::mutex> lock(m_);
      done_ = true;
    }
    cv_.notify_all();
  }

  std::string id_;
  int64_t pages_;
  uocr::SessionParams params_;
  Clock::time_point arrived_, deadline_;
  DocumentWork work_;
  Pool pool_ = Pool::short_documents;
  uint64_t kv_bytes_ = 0;
  double first_token_seconds_ = -1;
  std::atomic<bool> cancelled_{false};

  std::mutex m_;
  std::condition_variable cv_;
  std::string pending_;
  bool done_ = false;
  uocr::RunSummary summary_;
  uocr::DraftStats draft_;
  std::optional<ApiError> error_;
};

// A document's pages, pulled only while it may go on: a cancel or a timeout then also stops the
// encoding of the pages a page group needs before its next token (Error(cancelled) from next()).
class StoppablePages final : public uocr::ForwardedPages {
 public:
  StoppablePages(std::unique_ptr<uocr::PageSource> pages, std::function<void()> check) : ForwardedPages(std::move(pages)), check_(std::move(check)) {}
  bool next(uocr::ImageU8& page) override {
    check_();
    return pages_.next(page);
  }

 private:
  std::function<void()> check_;
};

// OpenAI's finish_reason for how a run stopped.
inline const char* finish_reason(uocr::StopReason s) {
  return s == uocr::StopReason::max_tokens || s == uocr::StopReason::context_limit ? "length" : "stop";
}

// A document's end in the metrics (latency, tokens, pages; errors are counted by whoever answers
// them); returns its seconds from arrival to end.
inline double count_document(Metrics& metrics, const Document& d, int status) {
  const double seconds = std::chrono::duration<double>(Clock::now() - d.arrived()).count();
  const uocr::RunSummary& s = d.summary();
  metrics.observe("uocr:e2e_request_latency_seconds", seconds);
  if (d.seconds_to_first_token() >= 0) metrics.observe("uocr:time_to_first_token_seconds", d.seconds_to_first_token());
  metrics.add("uocr:generation_tokens_total", double(s.generated_tokens));
  metrics.add("uocr:prompt_tokens_total", double(s.prompt_tokens));
  metrics.add("uocr:spec_decode_num_drafts_total", double(d.draft().verify_passes));
  metrics.add("uocr:spec_decode_num_draft_tokens_total", double(d.draft().drafted));
  metrics.add("uocr:spec_decode_num_accepted_tokens_total", double(d.draft().accepted));
  if (status == 200) {
    metrics.add("uocr:pages_total", double(d.pages()));
    metrics.observe("uocr:page_latency_seconds", seconds / double(d.pages()));
    metrics.add("uocr:request_success_total", 1, std::string("finished_reason=\"") + finish_reason(s.stop) + "\"");
  }
  return seconds;
}

class Scheduler {
 public:
  // Opens the engine every document runs on (a backend that is not built in or a missing device
  // fails here) before any worker starts.
  Scheduler(std::shared_ptr<const uocr::Model> model, const ServeConfig& config, Metrics& metrics, Log& log)
      : model_(std::move(model)), config_(config), metrics_(metrics), log_(log), engine_(open_serving_engine()) {
    uocr::PageGroupChoice{}.apply(model_->decode_defaults(), document_.groups);  // as uocr run does
    document_.keep_text = false;  // the text goes to the client as it comes
    for (int i = 0; i < config_.max_concurrency; ++i) workers_.emplace_back([this] { work(); });
  }
  ~Scheduler() { shutdown(); }

  // The session settings the server adds to a request's.
  void add_server_settings(uocr::SessionParams& p) const {
    p.backend = uocr::parse_backend(config_.backend);
    p.device_index = config_.device;
    p.precision = config_.precision;
    p.batching.max_batch = config_.max_concurrency;
  }
  const uocr::DocumentParams& document_params() const { return document_; }
  // The engine the documents run on: the device, its copy of the weights, the step batcher.
  const std::shared_ptr<uocr::Engine>& engine() const { return engine_; }

  Pool pool_for(int64_t pages) const { return pages > config_.long_document_pages ? Pool::long_documents : Pool::short_documents; }
  // Whether a document for pool p would be refused now: its queue holds queue_max_size beyond
  // what idle workers are about to take.
  bool full(Pool p) const {
    std::lock_guard<std::mutex> lock(m_);
    return full_locked(p);
  }

  // KV bytes the document's session holds at most: the reference (prompt text and the visual
  // tokens of the pages held at once) and the R-SWA window, at the decoder's bytes per token.
  uint64_t kv_bytes(const std::vector<uocr::ImageU8>& headers, const uocr::SessionParams& p) const {
    const uocr::ModelConfig& cfg = model_->config();
    const uint64_t per_token = 2ull * uint64_t(cfg.decoder.kv_heads) * uint64_t(cfg.decoder.head_dim) * sizeof(float) * uint64_t(cfg.decoder.layers);
    const size_t held = headers.size() > 1 ? std::min<size_t>(headers.size(), size_t(std::max(document_.groups.group_pages, 1))) : 1;
    const int s = cfg.sam.image_size;
    uint64_t page_tokens = uocr::visual_token_count(s, 0, 0, 0, cfg.sam.patch);
    if (headers.size() == 1 && p.mode == uocr::ImageMode::gundam && (headers[0].width > uocr::kGundamTileSize || headers[0].height > uocr::kGundamTileSize)) {
      const uocr::TileGrid g = uocr::choose_tile_grid(headers[0].width, headers[0].height);
      page_tokens = uocr::visual_token_count(s, uocr::kGundamTileSize, g.x, g.y, cfg.sam.patch);
    }
    const uint64_t prompt_text = 64 + p.prompt.size();  // tokens around the pages: at most one per byte
    return per_token * (prompt_text + held * page_tokens + uint64_t(uocr::effective_window(*model_, p)));
  }

  // ApiError 413 when a document needs more KV than the whole cache may hold.
  void check_fits(uint64_t kv_bytes) const {
    if (kv_bytes > config_.visual_cache_bytes)
      throw ApiError(413, "the document needs " + std::to_string(kv_bytes) + " bytes of KV cache, more than the server's visual_cache_bytes (" +
                              std::to_string(config_.visual_cache_bytes) + ")");
  }

  // Queues the document. ApiError 503 when its pool's queue is full (unless `admitted`: a job
  // taken before a restart) or the server is stopping, 413 when it needs more KV than the whole
  // cache may hold.
  void submit(const std::shared_ptr<Document>& d, uint64_t kv_bytes, bool admitted = false) {
    d->pool_ = pool_for(d->pages());
    d->kv_bytes_ = kv_bytes;
    check_fits(kv_bytes);
    {
      std::lock_guard<std::mutex> lock(m_);
      if (stopping_) throw ApiError(503, "the server is shutting down");
      std::deque<std::shared_ptr<Document>>& q = queue(d->pool_);
      if (!admitted && full_locked(d->pool_))
        throw ApiError(503, std::string("the ") + pool_name(d->pool_) + " document queue is full (queue_max_size " +
                                std::to_string(config_.queue_max_size) + "); retry later");
      q.push_back(d);
    }
    cv_.notify_all();
  }

  // Cancels a document: out of its queue at once if it has not started, else at its next token.
  void cancel(const std::shared_ptr<Document>& d) {
    d->cancel();
    {
      std::lock_guard<std::mutex> lock(m_);
      std::deque<std::shared_ptr<Document>>& q = queue(d->pool_);
      const auto it = std::find(q.begin(), q.end(), d);
      if (it == q.end()) return;
      q.erase(it);
    }
    d->end({}, cancelled_error());
    cv_.notify_all();
  }

  struct Load {
    int running = 0, running_long = 0, waiting_short = 0, waiting_long = 0;
    uint64_t kv_bytes = 0;
  };
  Load load() const {
    std::lock_guard<std::mutex> lock(m_);
    return {running_, running_long_, int(short_.size()), int(long_.size()), kv_in_use_};
  }
  bool workers_alive() const { return !stopping_; }

  // Stops taking documents, ends the waiting ones with 503, cancels the running ones and joins
  // the workers.
  void shutdown() {
    std::deque<std::shared_ptr<Document>> dropped;
    {
      std::lock_guard<std::mutex> lock(m_);
      if (stopping_ && workers_.empty()) return;
      stopping_ = true;
      for (auto* q : {&short_, &long_}) {
        dropped.insert(dropped.end(), q->begin(), q->end());
        q->clear();
      }
      for (const auto& d : running_docs_) d->cancel();
    }
    cv_.notify_all();
    for (const auto& d : dropped) d->end({}, ApiError(503, "the server is shutting down"));
    for (std::thread& t : workers_) t.join();
    workers_.clear();
  }

 private:
  std::deque<std::shared_ptr<Document>>& queue(Pool p) { return p == Pool::long_documents ? long_ : short_; }
  bool full_locked(Pool p) const {
    const int idle_workers = std::max(0, config_.max_concurrency - running_);  // about to take waiting documents
    return int(queue(p).size()) >= config_.queue_max_size + idle_workers;
  }
  const std::deque<std::shared_ptr<Document>>& queue(Pool p) const { return p == Pool::long_documents ? long_ : short_; }

  // The next document that may start: the head of the short queue, else of the long queue, if
  // its KV fits (a document alone always fits: submit() refused larger ones).
  std::shared_ptr<Document> next_locked() {
    for (Pool p : {Pool::short_documents, Pool::long_documents}) {
      std::deque<std::shared_ptr<Document>>& q = queue(p);
      if (q.empty()) continue;
      const std::shared_ptr<Document>& d = q.front();
      if (p == Pool::long_documents && running_long_ >= config_.long_running_limit()) continue;
      if (running_ > 0 && kv_in_use_ + d->kv_bytes_ > config_.visual_cache_bytes) continue;
      std::shared_ptr<Document> out = d;
      q.pop_front();
      return out;
    }
    return nullptr;
  }

  void work() {
    // Decoding runs at a lower priority than the HTTP threads (and the OpenMP threads a worker
    // starts inherit it): under full load, health checks and refusals still answer at once.
    ::setpriority(PRIO_PROCESS, pid_t(::syscall(SYS_gettid)), kWorkerNice);
    for (;;) {
      std::shared_ptr<Document> d;
      {
        std::unique_lock<std::mutex> lock(m_);
        cv_.wait(lock, [&] { return stopping_ || (d = next_locked()) != nullptr; });
        if (!d) return;
        ++running_;
        running_long_ += d->pool_ == Pool::long_documents;
        kv_in_use_ += d->kv_bytes_;
        running_docs_.push_back(d);
      }
      run(*d);
      {
        std::lock_guard<std::mutex> lock(m_);
        --running_;
        running_long_ -= d->pool_ == Pool::long_documents;
        kv_in_use_ -= d->kv_bytes_;
        running_docs_.erase(std::find(running_docs_.begin(), running_docs_.end(), d));
      }
      cv_.notify_all();
    }
  }

  void run(Document& d) {
    const auto started = Clock::now();
    metrics_.observe("uocr:request_queue_time_seconds", std::chrono::duration<double>(started - d.arrived_).count());
    const double left = std::chrono::duration<double>(d.deadline_ - started).count();
    if (d.cancelled_ || left <= 0) {
      d.end({}, d.cancelled_ ? cancelled_error() : ApiError(504, "the request timed out while it waited (request_timeout_seconds per page)"));
      return;
    }
    uocr::SessionParams p = d.params_;
    p.page_time_budget_seconds = left / double(d.pages_);  // what is left of the request's time, spread over its pages
    try {
      if (d.work_.on_start) d.work_.on_start();
      uocr::Session session(engine_, p, document_);
      StoppablePages pages(d.work_.open_pages(), [&d] {
        if (d.cancelled_ || Clock::now() >= d.deadline_) throw uocr::Error(uocr::Status::cancelled, "stopped between two pages");
      });
      int64_t tokens = 0;
      auto on_event = [&](const uocr::Event& e) {
        if (e.type == uocr::Event::Type::token) {
          if (tokens++ == 0) d.first_token_seconds_ = std::chrono::duration<double>(Clock::now() - d.arrived_).count();
          if (d.work_.collect_text && !e.text.empty()) d.append(e.text);
        } else if (e.type == uocr::Event::Type::page) {
          log_.info("page", {{"id", d.id_}, {"page", e.page}, {"tokens", tokens},
                             {"seconds", std::chrono::duration<double>(Clock::now() - started).count()}});
        }
        if (d.work_.on_event) d.work_.on_event(e);
        return !d.cancelled_;
      };
      uocr::RunSummary sum = session.run(pages, on_event, d.work_.checkpoint);
      std::optional<ApiError> error;
      if (sum.stop == uocr::StopReason::time_budget)
        error = ApiError(504, "the request timed out after " + std::to_string(tokens) + " tokens (request_timeout_seconds per page)");
      else if (sum.stop == uocr::StopReason::cancelled)
        error = cancelled_error();
      d.end(std::move(sum), std::move(error), session.stats().draft);
    } catch (const uocr::Error& e) {
      if (e.status() == uocr::Status::cancelled)  // from StoppablePages
        d.end({}, d.cancelled_ ? cancelled_error() : ApiError(504, "the request timed out while its pages were encoded (request_timeout_seconds per page)"));
      else
        d.end({}, api_error(e));
    } catch (const std::bad_alloc&) {
      d.end({}, ApiError(503, "out of memory while decoding the document"));
    } catch (const std::exception& e) {
      d.end({}, ApiError(500, std::string("internal error: ") + e.what()));
    }
  }

  // Why a cancelled document stopped: its client (499, nginx's "client closed request"), or the
  // server stopping (503: a job's checkpoint is kept and it resumes at the next start).
  ApiError cancelled_error() const {
    return stopping_ ? ApiError(503, "the server is shutting down") : ApiError(499, "cancelled by the client");
  }

  static constexpr int kWorkerNice = 10;

  std::shared_ptr<uocr::Engine> open_serving_engine() const {
    uocr::SessionParams p;
    add_server_settings(p);
    return uocr::open_engine(model_, p.backend, uocr::engine_options(p));
  }

  std::shared_ptr<const uocr::Model> model_;
  const ServeConfig& config_;
  Metrics& metrics_;
  Log& log_;
  std::shared_ptr<uocr::Engine> engine_;
  uocr::DocumentParams document_;

  mutable std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Document>> short_, long_;
  std::vector<std::shared_ptr<Document>> running_docs_;
  int running_ = 0, running_long_ = 0;
  uint64_t kv_in_use_ = 0;
  std::atomic<bool> stopping_{false};
  std::vector<std::thread> workers_;
};

// The scheduler's load as /metrics shows it.
inline std::vector<Metrics::Gauge> scheduler_gauges(const Scheduler& scheduler, const ServeConfig& config) {
  const Scheduler::Load l = scheduler.load();
  return {{"uocr:num_requests_running", "Documents being decoded.", "", double(l.running)},
          {"uocr:num_requests_waiting", "Documents waiting in a pool's queue.", "pool=\"short\"", double(l.waiting_short)},
          {"uocr:num_requests_waiting", "", "pool=\"long\"", double(l.waiting_long)},
          {"uocr:visual_cache_bytes", "KV cache bytes the running documents may hold (admission's count).", "", double(l.kv_bytes)},
          {"uocr:visual_cache_limit_bytes", "visual_cache_bytes: the admission limit.", "", double(config.visual_cache_bytes)}};
}

}  // namespace uocr_serve
