// A fleet worker (`uocr worker`, docs/SCALING.md): takes jobs from the pools' streams, decodes
// them with one loaded model like `uocr serve` does (Scheduler, Jobs), and shares what a job does
// with the fleet as it goes (the JobMirror side):
//   - text and progress to Redis every kFlushEvery and at every page;
//   - each checkpoint to storage, and the job's pointer to it, after the text it records;
//   - the result to storage at the end, then the job ended and its stream entry acknowledged.
// A lease thread renews each job's lease every lease_seconds / 3 and cancels the job when the
// lease was lost (another worker has it now) or a client cancelled it. The taking thread also
// reclaims jobs whose lease expired (their worker died) and resumes them from their checkpoint;
// a job taken more than max_deliveries times goes to the dead-letter stream instead.
// Draining (SIGTERM): no new job is taken; each running job is released right after its next
// checkpoint (or after one lease at most), so another worker resumes it at once.
#pragma once
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "fleet.hpp"
#include "jobs.hpp"
#include "log.hpp"
#include "metrics.hpp"
#include "scheduler.hpp"
#include "serve_config.hpp"

namespace uocr_serve {

// The consumer name a worker uses when none is configured: HOST-PID.
inline std::string default_worker_name() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0 || host[0] == '\0') std::snprintf(host, sizeof host, "worker");
  return std::string(host) + "-" + std::to_string(::getpid());
}

class Worker final : public JobMirror {
 public:
  Worker(const ServeConfig& config, std::shared_ptr<const uocr::Model> model, Metrics& metrics, Log& log)
      : config_(config), consumer_(config.worker_name.empty() ? default_worker_name() : config.worker_name), metrics_(metrics), log_(log),
        fleet_(config.queue, config.storage, config.result_ttl_seconds), scheduler_(model, config_, metrics_, log_),
        jobs_(config_, model, scheduler_, log_, [this](const Document& d, int status) {
          count_document(metrics_, d, status);
          if (status != 200) metrics_.add("uocr:errors_total", 1, "code=\"" + std::to_string(status) + "\"");
        }, nullptr, this) {
    for (const auto& [name, help] : std::vector<std::pair<const char*, const char*>>{
             {"uocr:fleet_jobs_taken_total", "Jobs this worker took from a pool's stream, reclaimed ones included."},
             {"uocr:fleet_jobs_resumed_total", "Jobs this worker resumed from another worker's checkpoint."},
             {"uocr:fleet_jobs_reclaimed_total", "Jobs this worker took over after their lease expired."},
             {"uocr:fleet_jobs_released_total", "Jobs this worker gave back while draining."},
             {"uocr:fleet_jobs_dead_lettered_total", "Jobs this worker sent to the dead-letter stream."},
             {"uocr:fleet_jobs_finished_total", "Jobs this worker ended, by state."},
             {"uocr:fleet_lease_renew_failures_total", "Lease renewals that failed (Redis unreachable) or found the lease lost."},
             {"uocr:fleet_fenced_writes_total", "Writes the fleet refused because this worker had lost the job's lease."},
             {"uocr:fleet_recomputed_tokens_total", "Tokens decoded again after a resume (past the checkpoint resumed from)."}})
      metrics_.declare_counter(name, help);
    fleet_.create_streams();
    for (const std::string& p : config_.pools) pools_.push_back(p == "long" ? Pool::long_documents : Pool::short_documents);
  }
  ~Worker() override { stop(); }

  const std::string& name() const { return consumer_; }
  Scheduler& scheduler() { return scheduler_; }
  int running() const {
    std::lock_guard<std::mutex> lock(m_);
    return int(running_.size());
  }

  void start() {
    taker_ = std::thread([this] { take_until_draining(); });
    leases_ = std::thread([this] { renew_until_stopped(); });
  }

  // Stops taking jobs, releases the running ones at their next checkpoint (or after one lease),
  // then stops.
  void drain() {
    draining_ = true;
    wake_.notify_all();
    if (taker_.joinable()) taker_.join();
    const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(config_.lease_seconds));
    std::unique_lock<std::mutex> lock(m_);
    wake_.wait_until(lock, until, [&] { return running_.empty(); });
    lock.unlock();
    stop();
  }

 private:
  struct Running {
    Lease lease;
    std::shared_ptr<Job> job;
    uint64_t shared_bytes = 0;       // of output.md, in Redis
    uint64_t checkpoint_bytes = 0;   // of output.md, recorded by the checkpoint being written
    int64_t tokens_before = 0;       // what the job's previous worker had shared when this one took it
    bool first_write = true;
    Clock::time_point flushed;
    std::atomic<bool> lost{false}, release{false};
  };

  void stop() {
    draining_ = true;
    {
      std::lock_guard<std::mutex> lock(m_);
      stopping_ = true;
    }
    wake_.notify_all();
    if (taker_.joinable()) taker_.join();
    scheduler_.shutdown();  // what still runs is released by keeps()
    if (leases_.joinable()) leases_.join();
  }

  // ---- taking ----

  void take_until_draining() {
    auto last_reclaim = Clock::now() - std::chrono::hours(1);
    const auto reclaim_every = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(std::max(0.2, config_.lease_seconds / 3)));
    int failures = 0;
    while (!draining_) {
      try {
        if (running() >= config_.max_concurrency) {
          std::unique_lock<std::mutex> lock(m_);
          wake_.wait_for(lock, std::chrono::milliseconds(200), [&] { return draining_.load() || int(running_.size()) < config_.max_concurrency; });
          continue;
        }
        bool took = false;
        if (Clock::now() - last_reclaim >= reclaim_every) {
          last_reclaim = Clock::now();
          for (size_t i = 0; i < pools_.size() && !took; ++i)
            if (has_room(pools_[i])) took = reclaim(pools_[i]);
        }
        for (size_t i = 0; i < pools_.size() && !took && !draining_; ++i) {
          if (!has_room(pools_[i])) continue;
          std::optional<Lease> lease = fleet_.take(pools_[i], consumer_, kTakeBlockMs);
          if (lease) took = start_job(*lease, false);
        }
        failures = 0;
      } catch (const std::exception& e) {
        // Redis or storage away (a restart): wait and try again; the leases tell the rest.
        if (failures++ % 10 == 0) log_.write(LogLevel::warning, "fleet_unreachable", {{"worker", consumer_}, {"reason", e.what()}});
        std::unique_lock<std::mutex> lock(m_);
        wake_.wait_for(lock, std::chrono::seconds(1), [&] { return draining_.load(); });
      }
    }
  }

  // Whether a job of pool p would start at once: a long one only while fewer than
  // max_long_running long ones run here (a taken job that waits holds its lease for nothing).
  bool has_room(Pool p) const {
    if (p == Pool::short_documents) return true;
    std::lock_guard<std::mutex> lock(m_);
    const int long_running = int(std::count_if(running_.begin(), running_.end(),
                                               [](const auto& r) { return r.second->lease.stream == Fleet::stream(Pool::long_documents); }));
    return long_running < config_.long_running_limit();
  }

  bool reclaim(Pool p) {
    const Fleet::Reclaimed r = fleet_.reclaim(p, consumer_, config_.lease_seconds, config_.max_deliveries);
    if (!r.dead_job.empty()) {
      metrics_.add("uocr:fleet_jobs_dead_lettered_total", 1);
      log_.write(LogLevel::error, "job_dead_lettered", {{"id", r.dead_job}, {"error", r.dead_error}});
      return false;
    }
    if (!r.lease) return false;
    metrics_.add("uocr:fleet_jobs_reclaimed_total", 1);
    return start_job(*r.lease, true);
  }

  // Copies the job into this worker's folder (uploads; checkpoint and text to resume from) and
  // queues it on the scheduler. A job that cannot even be set up fails now, with the reason.
  bool start_job(const Lease& lease, bool reclaimed) {
    auto run = std::make_shared<Running>();
    run->lease = lease;
    run->flushed = Clock::now();
    try {
      const std::shared_ptr<Job> shared = fleet_.snapshot(lease.id);
      uocr::require(shared != nullptr, uocr::Status::io, [&] { return "job " + lease.id + " has no hash"; });
      std::vector<std::pair<std::string, std::string>> uploads;
      for (const std::string& name : shared->inputs) {
        std::optional<std::string> bytes = fleet_.storage().get(lease.storage_prefix() + "input/" + name);
        uocr::require(bytes.has_value(), uocr::Status::io, [&] { return "upload " + name + " of job " + lease.id + " is missing from storage"; });
        uploads.emplace_back(name, std::move(*bytes));
      }
      run->job = jobs_.store().adopt(*shared, uploads);
      run->tokens_before = shared->progress().tokens;
      const Fleet::Resume from = fleet_.resume_point(lease.id);
      if (!from.checkpoint.empty()) {
        write_file(run->job->checkpoint_path(), from.checkpoint);
        if (jobs_.keep_resumable_checkpoint(*run->job)) {
          write_file(run->job->output_path(), from.text);
          metrics_.add("uocr:fleet_jobs_resumed_total", 1);
        }
      }
    } catch (const uocr::Error& e) {
      log_.write(LogLevel::error, "job_setup_failed", {{"id", lease.id}, {"reason", e.what()}});
      if (run->job) jobs_.store().discard(run->job);
      try {  // the lease runs out and a reaper retries the job, or dead-letters it with this reason
        fleet_.note_failure(lease, std::string("worker ") + consumer_ + " could not set the job up: " + e.what());
      } catch (const uocr::Error&) {
      }
      return false;
    }
    {
      std::lock_guard<std::mutex> lock(m_);
      running_[lease.id] = run;
    }
    metrics_.add("uocr:fleet_jobs_taken_total", 1);
    log_.info("job_taken", {{"id", lease.id}, {"worker", consumer_}, {"generation", lease.generation}, {"reclaimed", reclaimed},
                            {"resume", std::filesystem::exists(run->job->checkpoint_path())}});
    try {
      jobs_.run(run->job);
    } catch (const std::exception& e) {
      log_.write(LogLevel::error, "job_not_started", {{"id", lease.id}, {"reason", e.what()}});
      forget(lease.id);
      try {
        fleet_.note_failure(lease, std::string("worker ") + consumer_ + " could not start the job: " + e.what());
      } catch (const uocr::Error&) {
      }
      return false;
    }
    return true;
  }

  static void write_file(const std::filesystem::path& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), std::streamsize(bytes.size()));
    out.close();
    uocr::require(bool(out), uocr::Status::io, [&] { return "cannot write " + path.string(); });
  }

  // ---- leases ----

  void renew_until_stopped() {
    const auto every = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(std::max(0.2, config_.lease_seconds / 3)));
    std::unique_lock<std::mutex> lock(m_);
    while (!stopping_) {
      wake_.wait_for(lock, every, [&] { return stopping_; });
      if (stopping_) break;
      std::vector<std::shared_ptr<Running>> runs;
      for (const auto& [id, r] : running_) runs.push_back(r);
      lock.unlock();
      for (const auto& r : runs) renew(*r);
      lock.lock();
    }
  }

  void renew(Running& r) {
    if (r.lost) return;
    int answer = 0;
    try {
      answer = fleet_.renew(r.lease, consumer_);
    } catch (const uocr::Error& e) {
      metrics_.add("uocr:fleet_lease_renew_failures_total", 1);
      log_.write(LogLevel::warning, "lease_renew_failed", {{"id", r.lease.id}, {"reason", e.what()}});
      return;
    }
    if (answer < 0) {
      metrics_.add("uocr:fleet_lease_renew_failures_total", 1);
      lose(r, "renew");
    } else if (answer == 1) {
      log_.info("job_cancel_seen", {{"id", r.lease.id}});
      jobs_.cancel(r.job);
    }
  }

  // The job is another worker's now: stop it, write nothing more.
  void lose(Running& r, const char* where) {
    if (r.lost.exchange(true)) return;
    log_.write(LogLevel::warning, "lease_lost", {{"id", r.lease.id}, {"worker", consumer_}, {"generation", r.lease.generation}, {"at", where}});
    jobs_.cancel(r.job);
  }

  // ---- the JobMirror side ----

  std::shared_ptr<Running> running_job(const Job& job) {
    std::lock_guard<std::mutex> lock(m_);
    auto it = running_.find(job.id());
    return it == running_.end() ? nullptr : it->second;
  }

  // Sends output.md past what Redis has, and the progress. False when not all of it went.
  bool share(Running& r) {
    if (r.lost) return false;
    const Job::Progress p = r.job->progress();
    std::string text;
    if (p.output_bytes > r.shared_bytes) {
      std::ifstream in(r.job->output_path(), std::ios::binary);
      in.seekg(std::streamoff(r.shared_bytes));
      text.resize(size_t(p.output_bytes - r.shared_bytes));
      in.read(text.data(), std::streamsize(text.size()));
      text.resize(size_t(in.gcount()));
    }
    r.flushed = Clock::now();
    try {
      if (!fleet_.progress(r.lease, r.shared_bytes, text, p)) {
        metrics_.add("uocr:fleet_fenced_writes_total", 1);
        lose(r, "progress");
        return false;
      }
    } catch (const uocr::Error& e) {
      log_.write(LogLevel::warning, "progress_not_shared", {{"id", r.lease.id}, {"reason", e.what()}});
      return false;
    }
    r.shared_bytes += text.size();
    return r.shared_bytes >= p.output_bytes;
  }

  void wrote(Job& job, bool page_done) override {
    const std::shared_ptr<Running> r = running_job(job);
    if (!r) return;
    if (r->first_write) {  // the first token after the checkpoint resumed from (or after none)
      r->first_write = false;
      const int64_t recomputed = std::max<int64_t>(0, r->tokens_before - (job.progress().tokens - 1));
      if (r->tokens_before > 0) {
        metrics_.add("uocr:fleet_recomputed_tokens_total", double(recomputed));
        log_.info("job_resumed", {{"id", job.id()}, {"worker", consumer_}, {"checkpoint_tokens", job.progress().tokens - 1},
                                  {"tokens_before", r->tokens_before}, {"recomputed_tokens", recomputed}});
      }
    }
    if (page_done || Clock::now() - r->flushed >= kFlushEvery) share(*r);
  }

  void checkpoint_saving(Job& job) override {
    const std::shared_ptr<Running> r = running_job(job);
    if (!r) return;
    r->checkpoint_bytes = job.progress().output_bytes;
    share(*r);
  }

  void checkpoint_saved(Job& job) override {
    const std::shared_ptr<Running> r = running_job(job);
    if (!r || r->lost) return;
    // A checkpoint counts only once Redis holds the text it records.
    if (r->shared_bytes < r->checkpoint_bytes && !share(*r)) return;
    try {
      const std::vector<uint8_t> bytes = uocr::read_file_capped(job.checkpoint_path().string(), UINT64_MAX, "checkpoint");
      if (!fleet_.checkpoint(r->lease, std::string(bytes.begin(), bytes.end()))) {
        metrics_.add("uocr:fleet_fenced_writes_total", 1);
        lose(*r, "checkpoint");
        return;
      }
    } catch (const uocr::Error& e) {
      log_.write(LogLevel::warning, "checkpoint_not_stored", {{"id", r->lease.id}, {"reason", e.what()}});
      return;
    }
    if (draining_) {  // stored: the job can move now
      r->release = true;
      jobs_.cancel(r->job);
    }
  }

  bool keeps(Job& job) override {
    const std::shared_ptr<Running> r = running_job(job);
    if (!r) return false;
    if (r->lost) {
      forget(job.id());
      return false;
    }
    if (!r->release && !draining_) return true;
    share(*r);
    try {
      if (fleet_.release(r->lease, "worker " + consumer_ + " drained")) {
        metrics_.add("uocr:fleet_jobs_released_total", 1);
        log_.info("job_released", {{"id", job.id()}, {"worker", consumer_}, {"pages_done", job.progress().pages_done}});
      }
    } catch (const uocr::Error& e) {  // the lease runs out instead
      log_.write(LogLevel::warning, "job_not_released", {{"id", job.id()}, {"reason", e.what()}});
    }
    forget(job.id());
    return false;
  }

  bool ended(Job& job) override {
    const std::shared_ptr<Running> r = running_job(job);
    if (!r) return false;
    bool done = false;
    if (!r->lost) {
      const std::vector<uint8_t> bytes = uocr::read_file_capped(job.output_path().string(), uint64_t(1) << 34, "job output");
      const std::string output(bytes.begin(), bytes.end());
      // Redis or storage may be away for a moment (a restart): the end is retried, for one lease
      // at most; after that the lease has run out and another worker ends the job.
      const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(config_.lease_seconds));
      for (int attempt = 0;; ++attempt) {
        try {
          done = fleet_.finish(r->lease, job.progress(), output);
          if (!done) metrics_.add("uocr:fleet_fenced_writes_total", 1);
          break;
        } catch (const uocr::Error& e) {
          if (Clock::now() >= until) {
            log_.write(LogLevel::error, "job_end_not_stored", {{"id", job.id()}, {"reason", e.what()}});
            break;
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(std::min(2000, 100 << std::min(attempt, 5))));
        }
      }
    }
    if (done) {
      metrics_.add("uocr:fleet_jobs_finished_total", 1, std::string("state=\"") + job_state_name(job.progress().state) + "\"");
    } else {
      log_.write(LogLevel::warning, "job_end_refused", {{"id", job.id()}, {"worker", consumer_}, {"generation", r->lease.generation}});
    }
    forget(job.id());
    return done;
  }

  // The job is done with here: its folder goes, a slot frees.
  void forget(const std::string& id) {
    std::shared_ptr<Running> r;
    {
      std::lock_guard<std::mutex> lock(m_);
      auto it = running_.find(id);
      if (it == running_.end()) return;
      r = it->second;
      running_.erase(it);
    }
    if (r->job) {
      r->job->output.close_unfinished();
      jobs_.store().discard(r->job);
    }
    wake_.notify_all();
  }

  static constexpr int kTakeBlockMs = 250;
  static constexpr std::chrono::milliseconds kFlushEvery{250};

  const ServeConfig& config_;
  std::string consumer_;
  Metrics& metrics_;
  Log& log_;
  Fleet fleet_;
  Scheduler scheduler_;
  Jobs jobs_;
  std::vector<Pool> pools_;

  mutable std::mutex m_;
  std::condition_variable wake_;
  std::map<std::string, std::shared_ptr<Running>> running_;
  std::atomic<bool> draining_{false};
  bool stopping_ = false;
  std::thread taker_, leases_;
};

}  // namespace uocr_serve
