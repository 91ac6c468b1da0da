// Document jobs on disk: everything a job needs to finish after the server is killed lives in
// its folder under the data directory, written before the job is acknowledged:
//   <data_dir>/jobs/<id>/job.json        what was asked (inputs, options) and how it stands
//   <data_dir>/jobs/<id>/input/0001.pdf  the uploads, in page order (NNNN.pdf or NNNN.image)
//   <data_dir>/jobs/<id>/checkpoint      the session's checkpoint (uocr/session/checkpoint.hpp)
//   <data_dir>/jobs/<id>/output.md       the Markdown written so far
// job.json is replaced atomically (write, fsync, rename). At start-up every job that had not
// ended is decoded again from its checkpoint, and the output file is cut back to what that
// checkpoint says was written, so the result is byte-identical to an uninterrupted run. Ended
// jobs are deleted `result_ttl_seconds` after they ended.
#pragma once
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../cli/output.hpp"
#include "api_error.hpp"
#include "durable_file.hpp"
#include "job_options.hpp"
#include "log.hpp"
#include "stored_json.hpp"
#include "uocr/io/read_file.hpp"

namespace uocr_serve {

enum class JobState { queued, running, succeeded, failed, cancelled, timed_out };

inline const char* job_state_name(JobState s) {
  switch (s) {
    case JobState::queued: return "queued";
    case JobState::running: return "running";
    case JobState::succeeded: return "succeeded";
    case JobState::failed: return "failed";
    case JobState::cancelled: return "cancelled";
    case JobState::timed_out: return "timed_out";
  }
  return "?";
}
inline bool job_ended(JobState s) { return s != JobState::queued && s != JobState::running; }

inline JobState parse_job_state(const std::string& name) {
  for (JobState s : {JobState::queued, JobState::running, JobState::succeeded, JobState::failed, JobState::cancelled, JobState::timed_out})
    if (name == job_state_name(s)) return s;
  throw uocr::Error(uocr::Status::invalid_argument, "'" + name + "' is not a job state");
}

class Job {
 public:
  Job(std::string id, std::filesystem::path dir) : id_(std::move(id)), dir_(std::move(dir)) {}

  const std::string& id() const { return id_; }
  const std::filesystem::path& dir() const { return dir_; }
  std::filesystem::path output_path() const { return dir_ / "output.md"; }
  std::filesystem::path checkpoint_path() const { return dir_ / "checkpoint"; }
  std::vector<std::string> input_paths() const {
    std::vector<std::string> paths;
    for (const std::string& name : inputs) paths.push_back((dir_ / "input" / name).string());
    return paths;
  }

  // Set once, before the job is shared.
  JobOptions options;
  std::vector<std::string> inputs;  // file names under input/, in page order
  int64_t pages_total = 0;
  int64_t created = 0;              // unix seconds

  struct Progress {
    JobState state = JobState::queued;
    int64_t pages_done = 0, tokens = 0;
    uint64_t output_bytes = 0;      // of output.md, flushed
    int64_t started = 0, ended = 0; // unix seconds; 0: not yet
    std::string finish_reason;      // stop | length (succeeded), else ""
    std::string stop;               // uocr's stop reason
    int error_status = 0;
    std::string error;
    std::vector<double> page_seconds;  // per page done: seconds from its start to the next page's
    int64_t prompt_tokens = 0;
  };
  Progress progress() const {
    std::lock_guard<std::mutex> lock(m_);
    return progress_;
  }
  // Changes the progress under the job's lock and wakes whoever waits for a change.
  template <class Fn>
  void update(Fn fn) {
    {
      std::lock_guard<std::mutex> lock(m_);
      fn(progress_);
      ++version_;
    }
    cv_.notify_all();
  }
  // Waits until the progress changes after `version` (or `wait` passes); returns the new version.
  uint64_t wait_change(uint64_t version, std::chrono::milliseconds wait) const {
    std::unique_lock<std::mutex> lock(m_);
    cv_.wait_for(lock, wait, [&] { return version_ != version; });
    return version_;
  }
  uint64_t version() const {
    std::lock_guard<std::mutex> lock(m_);
    return version_;
  }

  // The job as GET /v1/jobs/{id} shows it.
  nlohmann::json status_json() const {
    const Progress p = progress();
    nlohmann::json pages = nlohmann::json::array();
    for (int64_t i = 0; i < pages_total; ++i) {
      const char* state = i < p.pages_done ? "done" : i == p.pages_done && p.state == JobState::running ? "running" : "pending";
      nlohmann::json page = {{"index", i}, {"state", state}};
      if (size_t(i) < p.page_seconds.size()) page["seconds"] = p.page_seconds[size_t(i)];
      pages.push_back(page);
    }
    nlohmann::json j = {{"id", id_}, {"object", "job"}, {"state", job_state_name(p.state)}, {"created", created},
                        {"started", p.started ? nlohmann::json(p.started) : nlohmann::json(nullptr)},
                        {"ended", p.ended ? nlohmann::json(p.ended) : nlohmann::json(nullptr)}, {"pages_total", pages_total},
                        {"pages_done", p.pages_done}, {"tokens", p.tokens}, {"pages", pages}, {"options", options.to_json()}};
    if (!p.finish_reason.empty()) j["finish_reason"] = p.finish_reason;
    if (!p.stop.empty()) j["stop"] = p.stop;
    if (p.error_status) j["error"] = ApiError(p.error_status, p.error).body()["error"];
    return j;
  }

  // The worker's output file while the job runs (the worker's thread only).
  uocr_cli::Output output;

  // A fleet's snapshot only (fleet.hpp): the job hash's change counter and the result's storage key.
  uint64_t fleet_version = 0;
  std::string fleet_result;

  // How the job stands, as job.json and a fleet's job hash (fleet.hpp) keep it.
  friend nlohmann::json progress_json(const Progress& p) {
    return {{"state", job_state_name(p.state)}, {"started", p.started}, {"ended", p.ended}, {"pages_done", p.pages_done},
            {"tokens", p.tokens}, {"output_bytes", p.output_bytes}, {"prompt_tokens", p.prompt_tokens},
            {"finish_reason", p.finish_reason}, {"stop", p.stop}, {"error_status", p.error_status}, {"error", p.error},
            {"page_seconds", p.page_seconds}};
  }
  friend void read_progress(const nlohmann::json& j, Progress& p) {
    p.state = parse_job_state(j.at("state").get<std::string>());
    p.started = stored_integer<int64_t>(j, "started");
    p.ended = stored_integer<int64_t>(j, "ended");
    p.pages_done = stored_integer<int64_t>(j, "pages_done");
    p.tokens = stored_integer<int64_t>(j, "tokens");
    p.output_bytes = j.contains("output_bytes") ? stored_integer<uint64_t>(j, "output_bytes") : 0;
    p.prompt_tokens = stored_integer<int64_t>(j, "prompt_tokens");
    p.finish_reason = j.at("finish_reason").get<std::string>();
    p.stop = j.at("stop").get<std::string>();
    p.error_status = stored_integer<int>(j, "error_status");
    p.error = j.at("error").get<std::string>();
    // Redis's Lua (cjson) writes an empty list back as an empty object.
    const nlohmann::json& seconds = j.at("page_seconds");
    p.page_seconds = seconds.is_array() ? seconds.get<std::vector<double>>() : std::vector<double>{};
  }

 private:
  std::string id_;
  std::filesystem::path dir_;
  mutable std::mutex m_;
  mutable std::condition_variable cv_;
  Progress progress_;
  uint64_t version_ = 0;
};

class JobStore {
 public:
  JobStore(std::filesystem::path data_dir, double ttl_seconds, Log& log) : root_(std::move(data_dir) / "jobs"), ttl_(ttl_seconds), log_(log) {
    std::error_code ec;
    std::filesystem::create_directories(root_, ec);
    uocr::require(!ec, uocr::Status::io, [&] { return "cannot create the data directory " + root_.string() + ": " + ec.message(); });
  }

  // A new job's folder with its uploads; not a job yet (a crash now leaves a folder that
  // recover() removes) until commit().
  std::shared_ptr<Job> stage(JobOptions options, const std::vector<std::pair<std::string, std::string>>& uploads /* name, bytes */) {
    std::shared_ptr<Job> job;
    for (int attempt = 0; !job; ++attempt) {
      const std::string id = new_job_id();
      std::error_code ec;
      if (std::filesystem::create_directory(root_ / id, ec)) job = std::make_shared<Job>(id, root_ / id);
      uocr::require(!ec && attempt < 8, uocr::Status::io, [&] { return "cannot create a job folder in " + root_.string() + ": " + ec.message(); });
    }
    return fill(job, std::move(options), uploads);
  }
  // A fleet worker's copy of a job it took (worker.hpp): the same folder, under the job's own id.
  std::shared_ptr<Job> adopt(const Job& shared, const std::vector<std::pair<std::string, std::string>>& uploads) {
    std::error_code ec;
    std::filesystem::remove_all(root_ / shared.id(), ec);
    uocr::require(std::filesystem::create_directory(root_ / shared.id(), ec), uocr::Status::io,
                  [&] { return "cannot create a job folder in " + root_.string() + ": " + ec.message(); });
    std::shared_ptr<Job> job = fill(std::make_shared<Job>(shared.id(), root_ / shared.id()), shared.options, uploads);
    job->pages_total = shared.pages_total;
    job->created = shared.created;
    return job;
  }

 private:
  std::shared_ptr<Job> fill(std::shared_ptr<Job> job, JobOptions options, const std::vector<std::pair<std::string, std::string>>& uploads) {
    try {
      std::filesystem::create_directory(job->dir() / "input");
      for (const auto& [name, bytes] : uploads) {
        write_durably(job->dir() / "input" / name, bytes);
        job->inputs.push_back(name);
      }
    } catch (...) {
      discard(job);
      throw;
    }
    job->options = std::move(options);
    job->created = std::time(nullptr);
    return job;
  }

 public:
  // job.json written: the job survives a crash from here on.
  void commit(const std::shared_ptr<Job>& job) {
    save(*job);
    std::lock_guard<std::mutex> lock(m_);
    jobs_[job->id()] = job;
  }
  void discard(const std::shared_ptr<Job>& job) {
    {
      std::lock_guard<std::mutex> lock(m_);
      jobs_.erase(job->id());
    }
    std::error_code ec;
    std::filesystem::remove_all(job->dir(), ec);
  }

  // The job with that id; nullptr for an unknown id or one that is not an id at all.
  std::shared_ptr<Job> find(const std::string& id) const {
    if (!is_job_id(id)) return nullptr;
    std::lock_guard<std::mutex> lock(m_);
    auto it = jobs_.find(id);
    return it == jobs_.end() ? nullptr : it->second;
  }

  // job.json as the job stands now (atomically replaced).
  void save(const Job& job) const {
    nlohmann::json j = progress_json(job.progress());
    j.update({{"id", job.id()}, {"created", job.created}, {"inputs", job.inputs}, {"pages_total", job.pages_total}, {"options", job.options.to_json()}});
    replace_durably(job.dir() / "job.json", j.dump(1));
  }

  // Reads every job folder (at start-up): the jobs that had not ended, oldest first, to decode
  // again. A folder that is not a complete job (a crash while it was created) is removed.
  std::vector<std::shared_ptr<Job>> recover() {
    std::vector<std::shared_ptr<Job>> unfinished;
    for (const auto& entry : std::filesystem::directory_iterator(root_)) {
      const std::string id = entry.path().filename().string();
      if (!is_job_id(id)) continue;
      std::shared_ptr<Job> job = std::make_shared<Job>(id, entry.path());
      try {
        const std::vector<uint8_t> bytes = uocr::read_file_capped((entry.path() / "job.json").string(), uint64_t(64) << 20, "job file");
        const nlohmann::json j = nlohmann::json::parse(bytes.begin(), bytes.end());
        job->inputs = j.at("inputs").get<std::vector<std::string>>();
        job->pages_total = stored_integer<int64_t>(j, "pages_total");
        job->created = stored_integer<int64_t>(j, "created");
        job->options = JobOptions::from_json(j.at("options"));
        job->update([&](Job::Progress& p) {
          read_progress(j, p);
          std::error_code ec;
          p.output_bytes = std::filesystem::exists(job->output_path()) ? uint64_t(std::filesystem::file_size(job->output_path(), ec)) : 0;
        });
      } catch (const std::exception& e) {
        log_.write(LogLevel::warning, "job_dropped", {{"id", id}, {"reason", e.what()}});
        std::error_code ec;
        std::filesystem::remove_all(entry.path(), ec);
        continue;
      }
      {
        std::lock_guard<std::mutex> lock(m_);
        jobs_[id] = job;
      }
      if (!job_ended(job->progress().state)) unfinished.push_back(job);
    }
    std::sort(unfinished.begin(), unfinished.end(), [](const auto& a, const auto& b) { return a->created < b->created; });
    return unfinished;
  }

  // Deletes the jobs that ended more than the TTL ago.
  void expire() {
    const int64_t now = std::time(nullptr);
    std::vector<std::shared_ptr<Job>> old;
    {
      std::lock_guard<std::mutex> lock(m_);
      for (auto it = jobs_.begin(); it != jobs_.end();) {
        const Job::Progress p = it->second->progress();
        if (job_ended(p.state) && double(now - p.ended) >= ttl_) {
          old.push_back(it->second);
          it = jobs_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (const auto& job : old) {
      std::error_code ec;
      std::filesystem::remove_all(job->dir(), ec);
      log_.info("job_expired", {{"id", job->id()}});
    }
  }

  const std::filesystem::path& root() const { return root_; }

  static bool is_job_id(const std::string& id) {
    if (id.size() != 28 || id.rfind("job-", 0) != 0) return false;
    return std::all_of(id.begin() + 4, id.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
  }

 private:
  static std::string new_job_id() {
    static std::mutex m;
    static std::mt19937_64 rng{std::random_device{}() ^ uint64_t(std::chrono::steady_clock::now().time_since_epoch().count())};
    std::lock_guard<std::mutex> lock(m);
    char b[32];
    std::snprintf(b, sizeof b, "job-%016llx%08llx", (unsigned long long)rng(), (unsigned long long)(rng() & 0xffffffffu));
    return b;
  }

  std::filesystem::path root_;
  double ttl_;
  Log& log_;
  mutable std::mutex m_;
  std::map<std::string, std::shared_ptr<Job>> jobs_;
};

}  // namespace uocr_serve
