// Document jobs (POST /v1/jobs and the calls on a job): a job is stored (job_store.hpp), then
// decoded by the Scheduler like any request, with a checkpoint at every page boundary and every
// `checkpoint_every_tokens` tokens, its Markdown written to its output file as it comes. At
// start-up, jobs that had not ended are queued again and resume from their checkpoints. A thread
// deletes ended jobs after their TTL; the Notifier calls callback URLs.
//
// In a fleet (docs/SCALING.md) the same class serves both sides: on an API node (`uocr serve
// --queue`) a job is checked and stored here, then queued on Redis for the workers, and every
// call on it is answered from Redis and storage (fleet.hpp); on a worker (worker.hpp) a job it
// took runs here like a local one while a JobMirror shares its progress with the fleet.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <ctime>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <stb/stb_image_write.h>

#include "../cli/inputs.hpp"
#include "api_error.hpp"
#include "callback.hpp"
#include "fleet.hpp"
#include "job_request.hpp"
#include "job_store.hpp"
#include "log.hpp"
#include "scheduler.hpp"
#include "serve_config.hpp"

namespace uocr_serve {

// What follows a job's run besides its folder: a fleet worker shares it with the fleet
// (worker.hpp). Called on the thread that decodes the job.
class JobMirror {
 public:
  virtual ~JobMirror() = default;
  virtual void wrote(Job& job, bool page_done) = 0;  // text or a page came
  virtual void checkpoint_saving(Job& job) = 0;       // what the checkpoint will record must be shared first
  virtual void checkpoint_saved(Job& job) = 0;
  // The run ended: true to end the job; false to leave it unended for another worker (the mirror
  // released it, or it is no longer this worker's).
  virtual bool keeps(Job& job) = 0;
  // The job ended here (state final, output.md complete): false when the fleet refused the end.
  virtual bool ended(Job& job) = 0;
};

class Jobs {
 public:
  // on_document_end: the server's metrics and request log for a job's document. fleet: an API
  // node's (jobs are queued there, not decoded here); mirror: a fleet worker's.
  Jobs(const ServeConfig& config, std::shared_ptr<const uocr::Model> model, Scheduler& scheduler, Log& log,
       std::function<void(const Document&, int status)> on_document_end, Fleet* fleet = nullptr, JobMirror* mirror = nullptr)
      : config_(config), model_(std::move(model)), scheduler_(scheduler), log_(log), store_(config.data_dir, config.result_ttl_seconds, log),
        notifier_(config.callback_secret, log), on_document_end_(std::move(on_document_end)), fleet_(fleet), mirror_(mirror) {}
  ~Jobs() { stop(); }

  // Queues again every job that had not ended when the server last stopped; then starts the TTL thread.
  void recover() {
    for (const std::shared_ptr<Job>& job : store_.recover()) {
      const bool checkpoint = keep_resumable_checkpoint(*job);
      log_.info("job_resumed", {{"id", job->id()}, {"pages_done", job->progress().pages_done}, {"checkpoint", checkpoint}});
      start(job, true);
    }
    janitor_ = std::thread([this] { expire_until_stopped(); });
  }
  // Whether `job`'s checkpoint is one this process can resume: sound (its checksum) and written
  // for this model and these settings (a restart with another --precision or model, or a fleet
  // whose workers differ, is not). Another is removed, the reason logged, and the job decoded from
  // its start (its uploads are intact). False when there is none.
  bool keep_resumable_checkpoint(const Job& job) const {
    const std::filesystem::path path = job.checkpoint_path();
    if (!std::filesystem::exists(path)) return false;
    std::string why;
    try {
      const std::string what = uocr::Session(scheduler_.engine(), session_params(job.options), scheduler_.document_params()).resume_mismatch(path.string());
      if (!what.empty()) why = "checkpoint " + path.string() + " was written for " + what;
    } catch (const uocr::Error& e) {
      why = e.what();
    }
    if (why.empty()) return true;
    log_.write(LogLevel::warning, "checkpoint_unusable", {{"id", job.id()}, {"reason", why + "; the job starts over"}});
    std::filesystem::remove(path);
    return false;
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(m_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (janitor_.joinable()) janitor_.join();
  }

  JobStore& store() { return store_; }

  // The job with that id as it stands now: the live one, or in a fleet a snapshot of its hash;
  // nullptr when there is none.
  std::shared_ptr<Job> find(const std::string& id) {
    if (!fleet_) return store_.find(id);
    return fleet_call([&] { return fleet_->snapshot(id); });
  }
  // The job's change counter: take it before looking at the job, then await() from it.
  uint64_t version(const Job& job) const { return fleet_ ? job.fleet_version : job.version(); }
  // Waits up to `wait` for the job to change after version `seen` (a change since then returns
  // at once); returns the job as it stands then, `seen` moved to its version.
  std::shared_ptr<Job> await(const std::shared_ptr<Job>& job, uint64_t& seen, std::chrono::milliseconds wait) {
    if (!fleet_) {
      seen = job->wait_change(seen, wait);
      return job;
    }
    const auto until = std::chrono::steady_clock::now() + wait;
    for (;;) {
      std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(wait, kFleetPoll));
      std::shared_ptr<Job> now = find(job->id());
      if (!now) return job;
      if (now->fleet_version != seen || std::chrono::steady_clock::now() >= until) {
        seen = now->fleet_version;
        return now;
      }
    }
  }
  // The job's Markdown from byte `offset` as far as its progress says it was written.
  std::string text(const Job& job, uint64_t offset) {
    if (fleet_) return fleet_call([&] { return fleet_->text(job, offset); });
    const uint64_t end = job.progress().output_bytes;
    if (offset >= end) return "";
    std::ifstream in(job.output_path(), std::ios::binary);
    in.seekg(std::streamoff(offset));
    std::string t(size_t(end - offset), '\0');
    in.read(t.data(), std::streamsize(t.size()));
    t.resize(size_t(in.gcount()));
    return t;
  }
  // The ended job's Markdown.
  std::string result(const Job& job) {
    if (fleet_) return fleet_call([&] { return fleet_->result(job); });
    if (!std::filesystem::exists(job.output_path())) return "";
    const std::vector<uint8_t> bytes = uocr::read_file_capped(job.output_path().string(), uint64_t(1) << 34, "job output");
    return std::string(bytes.begin(), bytes.end());
  }

  // A fleet worker's job (worker.hpp), adopted into this folder: decoded from its checkpoint
  // when the folder has one.
  void run(const std::shared_ptr<Job>& job) {
    store_.commit(job);
    start(job, true);
  }

  // POST /v1/jobs: stores the uploads, counts the pages, queues the job. ApiError 400 (bad
  // input), 413 (too many pages), 503 (queue full: nothing is kept).
  std::shared_ptr<Job> submit(const JobRequest& request) {
    const JobOptions& o = request.options;
    if (!o.callback_url.empty() && !notifier_.has_secret())
      throw ApiError(400, "this server has no callback secret (callback_secret_file), so it cannot sign callbacks", "callback_url");
    // Every file holds a page at least, so more files than a job may read pages are refused before
    // they are stored and counted (a PDF's pages by running poppler).
    if (request.uploads.size() > size_t(config_.max_pages_per_request))
      throw ApiError(413, "the job has " + std::to_string(request.uploads.size()) + " files, more than max_pages_per_request (" +
                              std::to_string(config_.max_pages_per_request) + "); upload the files of the pages to read", "files");
    if (o.last_page > 0 && o.last_page - o.first_page + 1 > config_.max_pages_per_request) throw too_many_pages(o.last_page - o.first_page + 1);
    std::shared_ptr<Job> job = store_.stage(o, request.uploads);
    try {
      uint64_t kv = 0;
      job->pages_total = count_pages(*job, kv);
      if (fleet_) {
        scheduler_.check_fits(kv);
        fleet_call([&] { fleet_->enqueue(*job, scheduler_.pool_for(job->pages_total), config_.queue_max_size); });
        store_.discard(job);
        log_.info("job_queued", {{"id", job->id()}, {"pages", job->pages_total}, {"files", job->inputs.size()}});
        std::shared_ptr<Job> queued = find(job->id());
        if (!queued) throw ApiError(503, "job " + job->id() + " was queued, but Redis lost it at once; submit it again");
        return queued;
      }
      store_.commit(job);
      start(job, false, kv);
    } catch (const ApiError&) {
      store_.discard(job);
      throw;
    } catch (const uocr::Error& e) {
      store_.discard(job);
      throw api_error(e);
    }
    log_.info("job_submitted", {{"id", job->id()}, {"pages", job->pages_total}, {"files", job->inputs.size()}});
    return job;
  }

  // GET /v1/jobs/{id}/pages/{n}/image: page n (0-based, of the job's range) as PNG, for a page
  // preview: PDF pages rendered at `preview_dpi`, images as uploaded.
  std::string page_png(const Job& job, int64_t n) {
    if (n < 0 || n >= job.pages_total) throw ApiError(404, "job " + job.id() + " has no page " + std::to_string(n), "page");
    constexpr int preview_dpi = 96;
    std::vector<std::string> inputs = job.input_paths();
    struct Folder {  // a fleet job's uploads, fetched for the preview
      std::filesystem::path path;
      ~Folder() {
        std::error_code ec;
        if (!path.empty()) std::filesystem::remove_all(path, ec);
      }
    } fetched;
    if (fleet_) {
      fetched.path = store_.root() / ("preview-" + job.id() + "-" + std::to_string(++previews_));
      fleet_call([&] { fleet_->fetch_inputs(job, fetched.path); });
      inputs.clear();
      for (const std::string& name : job.inputs) inputs.push_back((fetched.path / name).string());
    }
    uocr::PageRange page_only(uocr_cli::open_inputs(inputs, preview_dpi, config_.decode_limits, config_.page_render_timeout_seconds),
                              job.options.first_page - 1 + n, 1);
    uocr::ImageU8 page;
    if (!page_only.next(page)) throw ApiError(500, "page " + std::to_string(n) + " could not be read");
    std::string png;
    auto append = [](void* out, void* data, int size) { static_cast<std::string*>(out)->append(static_cast<const char*>(data), size_t(size)); };
    if (stbi_write_png_to_func(append, &png, page.width, page.height, 3, page.rgb.data(), page.width * 3) == 0)
      throw ApiError(500, "page " + std::to_string(n) + " could not be encoded as PNG");
    return png;
  }

  // DELETE /v1/jobs/{id}: the work stops at the next token (in a fleet: at the worker's next
  // lease renewal, then its next token).
  void cancel(const std::shared_ptr<Job>& job) {
    if (fleet_) return fleet_call([&] { fleet_->cancel(job->id()); });
    std::shared_ptr<Document> doc;
    {
      std::lock_guard<std::mutex> lock(m_);
      auto it = running_.find(job->id());
      if (it != running_.end()) doc = it->second;
    }
    if (doc) scheduler_.cancel(doc);
  }

 private:
  std::unique_ptr<uocr::PageSource> open_pages(const Job& job) const {
    std::unique_ptr<uocr::PageSource> all =
        uocr_cli::open_inputs(job.input_paths(), job.options.dpi, config_.decode_limits, config_.page_render_timeout_seconds);
    const int64_t first = job.options.first_page - 1;
    const int64_t last = job.options.last_page > 0 ? job.options.last_page : all->count();
    if (first == 0 && last == all->count()) return all;
    return std::make_unique<uocr::PageRange>(std::move(all), first, last - first);
  }

  // The job's page count (its range of the document), every image decoded once to refuse a bad
  // one now, and the KV the session will hold.
  int64_t count_pages(const Job& job, uint64_t& kv) const {
    const JobOptions& o = job.options;
    std::vector<uocr::ImageU8> sizes;
    int64_t total = 0;
    const std::vector<std::string> paths = job.input_paths();
    for (size_t i = 0; i < paths.size(); ++i) {
      const std::string& path = paths[i];
      if (uocr_cli::is_pdf(path)) {
        total += uocr_cli::PdfPages(path, o.dpi, config_.decode_limits, config_.page_render_timeout_seconds).count();
      } else {
        try {
          const uocr::ImageU8 page = uocr::load_image(path, config_.decode_limits);
          sizes.push_back({page.width, page.height, {}});
          ++total;
        } catch (const uocr::Error& e) {
          throw ApiError(400, "file " + std::to_string(i + 1) + " is neither a PDF nor a usable image: " + e.what(), "files");
        }
      }
      // A job to the document's end is too long as soon as its pages so far are (the rest are not counted).
      if (o.last_page == 0 && total - o.first_page + 1 > config_.max_pages_per_request) throw too_many_pages(total - o.first_page + 1, i + 1 < paths.size());
    }
    if (o.first_page > total || (o.last_page > 0 && o.last_page > total))
      throw ApiError(400, "option 'pages' asks for pages beyond the document's " + std::to_string(total), "pages");
    const int64_t pages = (o.last_page > 0 ? o.last_page : total) - o.first_page + 1;
    if (o.mode == "gundam" && !(pages == 1 && job.inputs.size() == 1 && sizes.size() == 1))
      throw ApiError(400, "mode gundam reads a single image; documents of several pages and PDFs use base", "mode");
    const uocr::SessionParams p = session_params(o);
    try {
      uocr::validate(*model_, p);
    } catch (const uocr::Error& e) {
      throw ApiError(400, e.what());
    }
    if (sizes.size() != size_t(pages)) sizes.assign(size_t(std::min<int64_t>(pages, 64)), uocr::ImageU8{});  // base views: sizes do not matter
    kv = scheduler_.kv_bytes(sizes, p);
    return pages;
  }

  // 413 for a job of `pages` pages (`at_least`: and those of files not counted).
  ApiError too_many_pages(int64_t pages, bool at_least = false) const {
    return ApiError(413, "the job has " + std::string(at_least ? "at least " : "") + std::to_string(pages) + " pages, more than max_pages_per_request (" +
                             std::to_string(config_.max_pages_per_request) + ")", "pages");
  }

  uocr::SessionParams session_params(const JobOptions& o) const {
    uocr::SessionParams p;
    p.mode = o.mode == "gundam" ? uocr::ImageMode::gundam : uocr::ImageMode::base;
    p.prompt = o.prompt;
    p.max_new_tokens = o.max_tokens;
    p.ngram_size = o.ngram_size;
    p.ngram_window = o.ngram_window;
    p.sampling.temperature = float(o.temperature);
    p.sampling.top_p = float(o.top_p);
    p.sampling.seed = o.seed;
    scheduler_.add_server_settings(p);
    return p;
  }

  // The job's Document, queued. `recovered`: taken before a restart (queued even when the queue is full).
  void start(const std::shared_ptr<Job>& job, bool recovered, uint64_t kv = 0) {
    const uocr::SessionParams params = session_params(job->options);
    if (recovered) {
      std::vector<uocr::ImageU8> base(size_t(std::min<int64_t>(job->pages_total, 64)));
      kv = std::min<uint64_t>(scheduler_.kv_bytes(base, params), config_.visual_cache_bytes);
    }
    DocumentWork w;
    w.collect_text = false;
    w.open_pages = [this, job] { return open_pages(*job); };
    w.checkpoint.path = job->checkpoint_path().string();
    w.checkpoint.every_tokens = config_.checkpoint_every_tokens;
    w.checkpoint.resume = std::filesystem::exists(job->checkpoint_path());
    w.checkpoint.save_caller_state = [this, job] {
      const Job::Progress p = job->progress();
      uocr::StateWriter s;
      s.put(job->output.state());
      s.put(p.pages_done);
      s.put(p.tokens);
      s.put(p.page_seconds);
      if (mirror_) mirror_->checkpoint_saving(*job);
      return s.bytes();
    };
    if (mirror_) w.checkpoint.on_saved = [this, job] { mirror_->checkpoint_saved(*job); };
    w.checkpoint.restore_caller_state = [job](const std::string& bytes) {
      uocr::StateReader r(bytes, job->checkpoint_path().string());
      std::string output;
      r.get(output);
      job->output.path = job->output_path().string();
      job->output.restore(output, job->checkpoint_path().string());
      job->update([&](Job::Progress& p) {
        r.get(p.pages_done);
        r.get(p.tokens);
        r.get(p.page_seconds);
        p.output_bytes = job->output.written;
      });
    };
    const bool fresh = !w.checkpoint.resume;
    w.on_start = [this, job, fresh] {
      {
        std::lock_guard<std::mutex> lock(m_);
        page_started_[job->id()] = std::chrono::steady_clock::now();
      }
      job->update([&](Job::Progress& p) {
        if (fresh) p = Job::Progress{};
        p.state = JobState::running;
        if (!p.started) p.started = std::time(nullptr);
      });
      if (fresh) {
        job->output.path = job->output_path().string();
        job->output.open();
      }
      store_.save(*job);
    };
    w.on_event = [this, job](const uocr::Event& e) { on_event(*job, e); };
    w.on_end = [this, job](const Document& d) { on_end(job, d); };
    auto doc = std::make_shared<Document>(job->id(), job->pages_total, params, config_.request_timeout_seconds * double(job->pages_total), std::move(w));
    {
      std::lock_guard<std::mutex> lock(m_);
      running_[job->id()] = doc;
    }
    try {
      scheduler_.submit(doc, kv, recovered);
    } catch (...) {
      std::lock_guard<std::mutex> lock(m_);
      running_.erase(job->id());
      throw;
    }
  }

  void on_event(Job& job, const uocr::Event& e) {
    if (e.type == uocr::Event::Type::token) {
      job.output.write(e.text);
      job.update([&](Job::Progress& p) {
        ++p.tokens;
        p.output_bytes = job.output.written;
      });
    } else if (e.type == uocr::Event::Type::page && e.page > 0) {
      const auto now = std::chrono::steady_clock::now();
      double seconds = 0;
      {
        std::lock_guard<std::mutex> lock(m_);
        seconds = std::chrono::duration<double>(now - page_started_[job.id()]).count();
        page_started_[job.id()] = now;
      }
      job.update([&](Job::Progress& p) {
        if (e.page <= p.pages_done) return;
        p.pages_done = std::min<int64_t>(e.page, job.pages_total);
        while (int64_t(p.page_seconds.size()) < p.pages_done) p.page_seconds.push_back(seconds);
      });
    }
    if (mirror_ && (e.type == uocr::Event::Type::token || e.type == uocr::Event::Type::page))
      mirror_->wrote(job, e.type == uocr::Event::Type::page);
  }

  // The job's end: its state and output file, the checkpoint removed, job.json, the callback.
  // A document ended by the server stopping stays as it is on disk, to resume at the next start;
  // a fleet worker's mirror decides whether the job ends here at all.
  void on_end(const std::shared_ptr<Job>& job, const Document& d) noexcept {
    double last_page_seconds = 0;
    {
      std::lock_guard<std::mutex> lock(m_);
      running_.erase(job->id());
      auto it = page_started_.find(job->id());
      if (it != page_started_.end()) last_page_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - it->second).count();
      page_started_.erase(job->id());
    }
    const std::optional<ApiError>& error = d.error();
    const int status = error ? error->status() : 200;
    if (mirror_ ? !mirror_->keeps(*job) : status == 503 && stopping_documents()) {
      job->output.close_unfinished();
      return;
    }
    try {
      const uocr::RunSummary& s = d.summary();
      std::string output_error;
      if (job->output.file != nullptr) {
        try {
          job->output.finish();
        } catch (const uocr::Error& e) {
          output_error = e.what();
        }
      }
      job->update([&](Job::Progress& p) {
        p.ended = std::time(nullptr);
        p.stop = error && status != 504 && status != 499 ? "" : uocr::stop_reason_name(s.stop);
        p.prompt_tokens = s.prompt_tokens;
        p.output_bytes = job->output.written;
        if (!output_error.empty()) {
          p.state = JobState::failed;
          p.error_status = 500;
          p.error = output_error;
        } else if (!error) {
          p.state = JobState::succeeded;
          p.finish_reason = uocr_serve::finish_reason(s.stop);
          if (s.stop == uocr::StopReason::eos) p.pages_done = job->pages_total;
          while (int64_t(p.page_seconds.size()) < p.pages_done) p.page_seconds.push_back(last_page_seconds);
        } else {
          p.state = status == 504 ? JobState::timed_out : status == 499 ? JobState::cancelled : JobState::failed;
          p.error_status = status;
          p.error = error->what();
        }
      });
      std::error_code ec;
      std::filesystem::remove(job->checkpoint_path(), ec);
      store_.save(*job);
      on_document_end_(d, status);
      if (mirror_ && !mirror_->ended(*job)) return;
      if (!job->options.callback_url.empty()) {
        if (notifier_.has_secret())
          notifier_.post(job->options.callback_url, job->id(), job->status_json().dump());
        else  // a fleet worker configured without the API nodes' callback_secret_file
          log_.write(LogLevel::error, "callback_not_sent", {{"id", job->id()}, {"reason", "no callback_secret_file on this worker"}});
      }
      log_.info("job_ended", {{"id", job->id()}, {"state", job_state_name(job->progress().state)}, {"pages", job->pages_total},
                              {"tokens", job->progress().tokens}});
    } catch (const std::exception& e) {
      log_.write(LogLevel::error, "job_end_failed", {{"id", job->id()}, {"reason", e.what()}});
    }
  }

  bool stopping_documents() const { return !scheduler_.workers_alive(); }

  // Runs a call on the fleet: Redis or storage out of reach is a 503 the client may retry.
  template <class Fn>
  auto fleet_call(Fn fn) -> decltype(fn()) {
    try {
      return fn();
    } catch (const uocr::Error& e) {
      if (e.status() != uocr::Status::io) throw;
      log_.write(LogLevel::warning, "fleet_unreachable", {{"reason", e.what()}});
      throw ApiError(503, std::string("the job queue or storage is unreachable: ") + e.what());
    }
  }

  void expire_until_stopped() {
    const auto period = std::chrono::duration<double>(std::clamp(config_.result_ttl_seconds / 4, 1.0, 60.0));
    std::unique_lock<std::mutex> lock(m_);
    while (!stopping_) {
      lock.unlock();
      store_.expire();
      if (fleet_) {
        try {
          fleet_->expire();
        } catch (const uocr::Error& e) {
          log_.write(LogLevel::warning, "fleet_expiry_failed", {{"reason", e.what()}});
        }
      }
      lock.lock();
      cv_.wait_for(lock, period, [&] { return stopping_; });
    }
  }

  const ServeConfig& config_;
  std::shared_ptr<const uocr::Model> model_;
  Scheduler& scheduler_;
  Log& log_;
  JobStore store_;
  Notifier notifier_;
  std::function<void(const Document&, int)> on_document_end_;
  Fleet* fleet_;
  JobMirror* mirror_;
  std::atomic<uint64_t> previews_{0};
  static constexpr std::chrono::milliseconds kFleetPoll{250};
  std::mutex m_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::map<std::string, std::shared_ptr<Document>> running_;  // queued or decoding
  std::map<std::string, std::chrono::steady_clock::time_point> page_started_;
  std::thread janitor_;
};

}  // namespace uocr_serve
