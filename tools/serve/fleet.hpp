// A fleet's shared state (docs/SCALING.md): jobs queued on Redis Streams and described by Redis
// hashes, their files in a Storage (storage.hpp). API nodes (`uocr serve --queue`) enqueue jobs and
// answer every call on them from here; workers (`uocr worker`, worker.hpp) take, renew, checkpoint
// and finish them through here.
//
//   uocr:jobs:short, uocr:jobs:long   one stream per pool, entries {job: ID}; consumer group "workers"
//   uocr:jobs:dead                    the dead-letter stream: {job, deliveries, error}
//   uocr:job:ID                       hash: created, pages_total, inputs, options, pool, state, progress
//                                     (Job::Progress as JSON), generation, owner, msg, checkpoint, result,
//                                     cancel, deliveries, last_error, version
//   uocr:text:ID                      the Markdown written so far, while the job runs
//   uocr:expiry                       sorted set: ended jobs by when they are deleted
//   storage jobs/ID/input/NNNN.*      the uploads; jobs/ID/checkpoint-gG-N and jobs/ID/result-gG.md
//
// Fencing: a worker that takes a job gets its new `generation`; every write it makes to the job
// (text, progress, the checkpoint and result pointers, the end) is a Lua script that first checks
// that generation, so a worker that lost its lease (paused, cut off) and comes back changes
// nothing. Its storage objects carry its generation in their keys, so they never replace the
// objects the job's hash points to.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "api_error.hpp"
#include "job_store.hpp"
#include "redis.hpp"
#include "scheduler.hpp"
#include "storage.hpp"

namespace uocr_serve {

namespace fleet_lua {

// KEYS: hash, stream. ARGV: max_waiting, id, then the hash's field/value pairs. 0: the pool's queue is full.
inline const char* const kEnqueue = R"(
redis.pcall('XGROUP', 'CREATE', KEYS[2], 'workers', '0', 'MKSTREAM')
local pending = redis.call('XPENDING', KEYS[2], 'workers')[1]
if redis.call('XLEN', KEYS[2]) - pending >= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], unpack(ARGV, 3))
redis.call('XADD', KEYS[2], '*', 'job', ARGV[2])
return 1
)";

// After XREADGROUP gave this consumer entry `msg`. KEYS: hash. ARGV: consumer, msg.
// The new generation; -1: no such job any more, -2: it ended (cancelled while it waited).
inline const char* const kTake = R"(
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local state = redis.call('HGET', KEYS[1], 'state')
if state ~= 'queued' and state ~= 'running' then return -2 end
local g = redis.call('HINCRBY', KEYS[1], 'generation', 1)
redis.call('HINCRBY', KEYS[1], 'deliveries', 1)
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'msg', ARGV[2], 'state', 'running')
redis.call('HINCRBY', KEYS[1], 'version', 1)
return g
)";

// Takes over one entry whose lease expired (XAUTOCLAIM) and the job with it, or sends the job to
// the dead-letter stream when max_deliveries workers took it and none ended or released it.
// KEYS: stream, dead stream, expiry. ARGV: group, consumer, lease_ms, max_deliveries, now, expire_at.
// nil: nothing expired; {'taken', id, msg, generation}; {'dead', id, error}; {'gone', id}.
inline const char* const kReclaim = R"(
local r = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[3], '0-0', 'COUNT', 1)
local entries = r[2]
if #entries == 0 then return false end
local msg = entries[1][1]
local fields = entries[1][2]
local id = ''
for i = 1, #fields, 2 do if fields[i] == 'job' then id = fields[i + 1] end end
local hash = 'uocr:job:' .. id
local state = redis.call('HGET', hash, 'state')
if not state or (state ~= 'queued' and state ~= 'running') then
  redis.call('XACK', KEYS[1], ARGV[1], msg)
  redis.call('XDEL', KEYS[1], msg)
  return {'gone', id}
end
local tries = tonumber(redis.call('HGET', hash, 'deliveries') or '0')
local owner = redis.call('HGET', hash, 'owner') or ''
local last = redis.call('HGET', hash, 'last_error') or ''
if owner ~= '' then
  last = 'worker ' .. owner .. ' stopped renewing its lease'
  redis.call('HSET', hash, 'last_error', last)
end
if tries >= tonumber(ARGV[4]) then
  local err = 'the job was taken ' .. tries .. ' times and no worker finished it (last: ' .. last .. ')'
  redis.call('XADD', KEYS[2], '*', 'job', id, 'deliveries', tostring(tries), 'error', err)
  redis.call('XACK', KEYS[1], ARGV[1], msg)
  redis.call('XDEL', KEYS[1], msg)
  local p = cjson.decode(redis.call('HGET', hash, 'progress'))
  p.state = 'failed'
  p.error_status = 500
  p.error = err
  p.ended = tonumber(ARGV[5])
  redis.call('HSET', hash, 'state', 'failed', 'progress', cjson.encode(p), 'owner', '')
  redis.call('HINCRBY', hash, 'generation', 1)
  redis.call('HINCRBY', hash, 'version', 1)
  redis.call('DEL', 'uocr:text:' .. id)
  redis.call('ZADD', KEYS[3], ARGV[6], id)
  return {'dead', id, err}
end
local g = redis.call('HINCRBY', hash, 'generation', 1)
redis.call('HINCRBY', hash, 'deliveries', 1)
redis.call('HSET', hash, 'owner', ARGV[2], 'msg', msg, 'state', 'running')
redis.call('HINCRBY', hash, 'version', 1)
return {'taken', id, msg, tostring(g)}
)";

// The lease: resets the entry's idle time. KEYS: hash, stream. ARGV: generation, group, consumer, msg.
// -1: the lease is lost; else 1 when the job was cancelled, 0 when not.
inline const char* const kRenew = R"(
if redis.call('HGET', KEYS[1], 'generation') ~= ARGV[1] then return -1 end
redis.call('XCLAIM', KEYS[2], ARGV[2], ARGV[3], 0, ARGV[4], 'JUSTID')
return tonumber(redis.call('HGET', KEYS[1], 'cancel') or '0')
)";

// Text and progress. KEYS: hash, text. ARGV: generation, offset, text, progress, state. 0: fenced off.
inline const char* const kProgress = R"(
if redis.call('HGET', KEYS[1], 'generation') ~= ARGV[1] then return 0 end
if #ARGV[3] > 0 then redis.call('SETRANGE', KEYS[2], ARGV[2], ARGV[3]) end
redis.call('HSET', KEYS[1], 'progress', ARGV[4], 'state', ARGV[5])
redis.call('HINCRBY', KEYS[1], 'version', 1)
return 1
)";

// Points the job at a new checkpoint. KEYS: hash. ARGV: generation, key. {1, previous key} or {0}: fenced off.
inline const char* const kCheckpoint = R"(
if redis.call('HGET', KEYS[1], 'generation') ~= ARGV[1] then return {0} end
local old = redis.call('HGET', KEYS[1], 'checkpoint') or ''
redis.call('HSET', KEYS[1], 'checkpoint', ARGV[2])
return {1, old}
)";

// The job's end. KEYS: hash, text, stream, expiry. ARGV: generation, group, msg, state, progress,
// result key, expire_at, id. 0: fenced off.
inline const char* const kFinish = R"(
if redis.call('HGET', KEYS[1], 'generation') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'state', ARGV[4], 'progress', ARGV[5], 'result', ARGV[6], 'owner', '')
redis.call('HINCRBY', KEYS[1], 'generation', 1)
redis.call('HINCRBY', KEYS[1], 'version', 1)
redis.call('DEL', KEYS[2])
redis.call('XACK', KEYS[3], ARGV[2], ARGV[3])
redis.call('XDEL', KEYS[3], ARGV[3])
redis.call('ZADD', KEYS[4], ARGV[7], ARGV[8])
return 1
)";

// Gives the job back (a draining worker): its entry is replaced by a new one at the end of the
// stream, which the next free worker takes as it takes any job; the delivery does not count
// towards max_deliveries. KEYS: hash, stream. ARGV: generation, group, msg, why, id. 0: fenced off.
inline const char* const kRelease = R"(
if redis.call('HGET', KEYS[1], 'generation') ~= ARGV[1] then return 0 end
redis.call('HINCRBY', KEYS[1], 'generation', 1)
redis.call('HINCRBY', KEYS[1], 'deliveries', -1)
redis.call('HINCRBY', KEYS[1], 'version', 1)
redis.call('XACK', KEYS[2], ARGV[2], ARGV[3])
redis.call('XDEL', KEYS[2], ARGV[3])
local msg = redis.call('XADD', KEYS[2], '*', 'job', ARGV[5])
redis.call('HSET', KEYS[1], 'state', 'queued', 'owner', '', 'msg', msg, 'last_error', ARGV[4])
return 1
)";

// KEYS: hash. ARGV: generation, why. The reaper then keeps `why` as the job's last error.
inline const char* const kNoteFailure = R"(
if redis.call('HGET', KEYS[1], 'generation') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[1], 'owner', '', 'last_error', ARGV[2])
return 1
)";

// A client's cancel. KEYS: hash, expiry. ARGV: now, expire_at, id. The job's state after it; nil: no such job.
inline const char* const kCancel = R"(
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return false end
if state ~= 'queued' and state ~= 'running' then return state end
redis.call('HSET', KEYS[1], 'cancel', '1')
redis.call('HINCRBY', KEYS[1], 'version', 1)
if state == 'running' then return state end
local p = cjson.decode(redis.call('HGET', KEYS[1], 'progress'))
p.state = 'cancelled'
p.error_status = 499
p.error = 'cancelled by the client'
p.ended = tonumber(ARGV[1])
redis.call('HSET', KEYS[1], 'state', 'cancelled', 'progress', cjson.encode(p))
redis.call('HINCRBY', KEYS[1], 'generation', 1)
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[3])
return 'cancelled'
)";

}  // namespace fleet_lua

// A job as a worker holds it: which stream entry, which generation.
struct Lease {
  std::string id, stream, msg;
  std::string generation;
  std::string storage_prefix() const { return "jobs/" + id + "/"; }
};

class Fleet {
 public:
  static constexpr const char* kGroup = "workers";
  static constexpr const char* kDeadStream = "uocr:jobs:dead";
  static constexpr const char* kExpiry = "uocr:expiry";

  Fleet(const std::string& queue_url, const std::string& storage_url, double result_ttl_seconds)
      : redis_(queue_url), storage_(open_storage(storage_url)), ttl_(result_ttl_seconds) {}

  Redis& redis() { return redis_; }
  Storage& storage() { return *storage_; }
  static std::string stream(Pool p) { return std::string("uocr:jobs:") + pool_name(p); }
  static std::string hash(const std::string& id) { return "uocr:job:" + id; }
  static std::string text_key(const std::string& id) { return "uocr:text:" + id; }

  // Both pools' streams and the consumer group (idempotent).
  void create_streams() {
    for (Pool p : {Pool::short_documents, Pool::long_documents}) {
      try {
        redis_.command({"XGROUP", "CREATE", stream(p), kGroup, "0", "MKSTREAM"});
      } catch (const uocr::Error& e) {
        if (std::string(e.what()).find("BUSYGROUP") == std::string::npos) throw;
      }
    }
  }

  // ---- API nodes ----

  // Stores the job's uploads and queues it. ApiError 503 when the pool's queue holds
  // `max_waiting` jobs not yet taken (nothing is kept).
  void enqueue(const Job& job, Pool pool, int max_waiting) {
    const std::string prefix = "jobs/" + job.id() + "/";
    const std::vector<std::string> paths = job.input_paths();
    try {
      for (size_t i = 0; i < paths.size(); ++i) {
        const std::vector<uint8_t> bytes = uocr::read_file_capped(paths[i], UINT64_MAX, "upload");
        storage_->put(prefix + "input/" + job.inputs[i], std::string(bytes.begin(), bytes.end()));
      }
      const std::vector<std::string> fields = {
          "created", std::to_string(job.created), "pages_total", std::to_string(job.pages_total),
          "inputs", nlohmann::json(job.inputs).dump(), "options", job.options.to_json().dump(), "pool", pool_name(pool),
          "state", "queued", "progress", progress_json(Job::Progress{}).dump(), "generation", "0", "version", "1",
          "deliveries", "0", "cancel", "0"};
      std::vector<std::string> args = {std::to_string(max_waiting), job.id()};
      args.insert(args.end(), fields.begin(), fields.end());
      if (redis_.eval(fleet_lua::kEnqueue, {hash(job.id()), stream(pool)}, args).number() == 0)
        throw ApiError(503, std::string("the fleet's ") + pool_name(pool) + " document queue is full (queue_max_size " +
                                std::to_string(max_waiting) + "); retry later");
    } catch (...) {
      try {
        storage_->remove_prefix(prefix);
      } catch (const uocr::Error&) {
      }
      throw;
    }
  }

  // The job as the hash describes it now; nullptr when there is none.
  std::shared_ptr<Job> snapshot(const std::string& id) {
    if (!JobStore::is_job_id(id)) return nullptr;
    const RedisReply r = redis_.command({"HGETALL", hash(id)});
    if (r.elements.empty()) return nullptr;
    std::map<std::string, std::string> f;
    for (size_t i = 0; i + 1 < r.elements.size(); i += 2) f[r.elements[i].str] = r.elements[i + 1].str;
    auto job = std::make_shared<Job>(id, std::filesystem::path());
    try {
      job->inputs = nlohmann::json::parse(f.at("inputs")).get<std::vector<std::string>>();
      job->options = JobOptions::from_json(nlohmann::json::parse(f.at("options")));
      job->pages_total = std::stoll(f.at("pages_total"));
      job->created = std::stoll(f.at("created"));
      job->update([&](Job::Progress& p) {
        read_progress(nlohmann::json::parse(f.at("progress")), p);
        p.state = parse_job_state(f.at("state"));
      });
    } catch (const std::exception& e) {
      throw uocr::Error(uocr::Status::io, "job " + id + " is damaged in Redis: " + e.what());
    }
    job->fleet_version = f.count("version") ? std::stoull(f["version"]) : 0;
    job->fleet_result = f.count("result") ? f["result"] : "";
    return job;
  }

  // Bytes from `offset` of the job's Markdown as far as its progress says it was written.
  std::string text(const Job& job, uint64_t offset) {
    const Job::Progress p = job.progress();
    if (offset >= p.output_bytes) return "";
    if (job_ended(p.state)) {
      const std::string all = result(job);
      return offset < all.size() ? all.substr(size_t(offset)) : "";
    }
    std::string t = redis_.command({"GETRANGE", text_key(job.id()), std::to_string(offset), std::to_string(p.output_bytes - 1)}).str;
    return t;
  }

  // The ended job's Markdown ("" when it wrote none).
  std::string result(const Job& job) {
    if (job.fleet_result.empty()) return "";
    std::optional<std::string> bytes = storage_->get(job.fleet_result);
    if (!bytes) throw ApiError(500, "the result of job " + job.id() + " is missing from storage (" + job.fleet_result + ")");
    return *bytes;
  }

  // A client's cancel: a queued job ends now, a running one at its worker's next lease renewal.
  void cancel(const std::string& id) {
    const int64_t now = std::time(nullptr);
    redis_.eval(fleet_lua::kCancel, {hash(id), kExpiry}, {std::to_string(now), std::to_string(now + int64_t(ttl_)), id});
  }

  // Copies the job's uploads into `dir` (a page preview renders from them).
  void fetch_inputs(const Job& job, const std::filesystem::path& dir) {
    std::filesystem::create_directories(dir);
    for (const std::string& name : job.inputs) {
      std::optional<std::string> bytes = storage_->get("jobs/" + job.id() + "/input/" + name);
      uocr::require(bytes.has_value(), uocr::Status::io, [&] { return "upload " + name + " of job " + job.id() + " is missing from storage"; });
      std::ofstream out(dir / name, std::ios::binary);
      out.write(bytes->data(), std::streamsize(bytes->size()));
      uocr::require(bool(out), uocr::Status::io, [&] { return "cannot write " + (dir / name).string(); });
    }
  }

  // Deletes the jobs whose TTL passed: their storage objects, then their keys.
  void expire() {
    const RedisReply ids = redis_.command({"ZRANGEBYSCORE", kExpiry, "-inf", std::to_string(std::time(nullptr)), "LIMIT", "0", "64"});
    for (const RedisReply& r : ids.elements) {
      const std::string& id = r.str;
      if (!JobStore::is_job_id(id)) {
        redis_.command({"ZREM", kExpiry, id});
        continue;
      }
      storage_->remove_prefix("jobs/" + id + "/");
      redis_.command({"DEL", hash(id), text_key(id)});
      redis_.command({"ZREM", kExpiry, id});
    }
  }

  // ---- Workers ----

  // The next job waiting in pool p for this consumer; nullopt after waiting `block_ms` for none.
  std::optional<Lease> take(Pool p, const std::string& consumer, int block_ms) {
    const RedisReply r = redis_.command({"XREADGROUP", "GROUP", kGroup, consumer, "COUNT", "1", "BLOCK", std::to_string(block_ms),
                                         "STREAMS", stream(p), ">"});
    if (r.is_nil() || r.elements.empty() || r.elements[0].elements.size() < 2 || r.elements[0].elements[1].elements.empty())
      return std::nullopt;
    const RedisReply& entry = r.elements[0].elements[1].elements[0];
    Lease lease{"", stream(p), entry.elements.at(0).str, ""};
    const std::vector<RedisReply>& fields = entry.elements.at(1).elements;
    for (size_t i = 0; i + 1 < fields.size(); i += 2)
      if (fields[i].str == "job") lease.id = fields[i + 1].str;
    const long long g = JobStore::is_job_id(lease.id) ? redis_.eval(fleet_lua::kTake, {hash(lease.id)}, {consumer, lease.msg}).number() : -1;
    if (g < 0) {  // gone or ended while it waited: the entry is done with
      redis_.command({"XACK", lease.stream, kGroup, lease.msg});
      redis_.command({"XDEL", lease.stream, lease.msg});
      return std::nullopt;
    }
    lease.generation = std::to_string(g);
    return lease;
  }

  struct Reclaimed {
    std::optional<Lease> lease;  // taken over
    std::string dead_job, dead_error;  // sent to the dead-letter stream instead
  };
  // Takes over one job of pool p whose lease expired, if any (see kReclaim).
  Reclaimed reclaim(Pool p, const std::string& consumer, double lease_seconds, int max_deliveries) {
    const int64_t now = std::time(nullptr);
    const RedisReply r = redis_.eval(fleet_lua::kReclaim, {stream(p), kDeadStream, kExpiry},
                                     {kGroup, consumer, std::to_string(int64_t(lease_seconds * 1000)), std::to_string(max_deliveries),
                                      std::to_string(now), std::to_string(now + int64_t(ttl_))});
    Reclaimed out;
    if (r.is_nil() || r.elements.empty()) return out;
    const std::string kind = r.elements[0].str;
    if (kind == "taken") out.lease = Lease{r.elements.at(1).str, stream(p), r.elements.at(2).str, r.elements.at(3).text()};
    if (kind == "dead") {
      out.dead_job = r.elements.at(1).str;
      out.dead_error = r.elements.at(2).str;
    }
    return out;
  }

  // Renews the lease: -1 lost, 1 cancelled, 0 go on.
  int renew(const Lease& l, const std::string& consumer) {
    return int(redis_.eval(fleet_lua::kRenew, {hash(l.id), l.stream}, {l.generation, kGroup, consumer, l.msg}).number());
  }

  // Shares the text [offset, offset + text.size()) and the progress; false: the lease is lost.
  bool progress(const Lease& l, uint64_t offset, const std::string& text, const Job::Progress& p) {
    return redis_.eval(fleet_lua::kProgress, {hash(l.id), text_key(l.id)},
                       {l.generation, std::to_string(offset), text, progress_json(p).dump(), job_state_name(p.state)}).number() == 1;
  }

  // Stores a checkpoint and points the job at it (the previous one is deleted); false: the lease is lost.
  bool checkpoint(const Lease& l, const std::string& bytes) {
    const std::string key = l.storage_prefix() + "checkpoint-g" + l.generation + "-" + std::to_string(++checkpoints_saved_);
    storage_->put(key, bytes);
    const RedisReply r = redis_.eval(fleet_lua::kCheckpoint, {hash(l.id)}, {l.generation, key});
    if (r.elements.empty() || r.elements[0].number() != 1) {
      storage_->remove(key);
      return false;
    }
    const std::string previous = r.elements.size() > 1 ? r.elements[1].str : "";
    if (!previous.empty() && is_storage_key(previous)) storage_->remove(previous);
    return true;
  }

  // What a worker needs to resume the job: its last checkpoint (empty: none) and its text so far.
  struct Resume {
    std::string checkpoint, text;
  };
  Resume resume_point(const std::string& id) {
    Resume out;
    const std::string key = redis_.command({"HGET", hash(id), "checkpoint"}).str;
    if (!key.empty()) {
      std::optional<std::string> bytes = storage_->get(key);
      uocr::require(bytes.has_value(), uocr::Status::io, [&] { return "checkpoint " + key + " of job " + id + " is missing from storage"; });
      out.checkpoint = std::move(*bytes);
      out.text = redis_.command({"GET", text_key(id)}).str;
    }
    return out;
  }

  // Stores the result and ends the job; false: the lease is lost (the stored result is removed).
  bool finish(const Lease& l, const Job::Progress& p, const std::string& output) {
    const std::string key = l.storage_prefix() + "result-g" + l.generation + ".md";
    storage_->put(key, output);
    const int64_t expire_at = std::time(nullptr) + int64_t(ttl_);
    const bool done = redis_.eval(fleet_lua::kFinish, {hash(l.id), text_key(l.id), l.stream, kExpiry},
                                  {l.generation, kGroup, l.msg, job_state_name(p.state), progress_json(p).dump(), key,
                                   std::to_string(expire_at), l.id}).number() == 1;
    if (!done) {
      storage_->remove(key);
      return false;
    }
    const std::string checkpoint = redis_.command({"HGET", hash(l.id), "checkpoint"}).str;
    if (!checkpoint.empty() && is_storage_key(checkpoint)) storage_->remove(checkpoint);
    return true;
  }

  // Why the worker holding the job could not run it; the job stays taken until its lease runs out
  // (a try that counts towards max_deliveries), and a dead letter quotes the reason.
  void note_failure(const Lease& l, const std::string& why) {
    redis_.eval(fleet_lua::kNoteFailure, {hash(l.id)}, {l.generation, why});
  }

  // Gives the job back for another worker to take now (its checkpoint stays).
  bool release(const Lease& l, const std::string& why) {
    return redis_.eval(fleet_lua::kRelease, {hash(l.id), l.stream}, {l.generation, kGroup, l.msg, why, l.id}).number() == 1;
  }

 private:
  Redis redis_;
  std::unique_ptr<Storage> storage_;
  double ttl_;
  std::atomic<uint64_t> checkpoints_saved_{0};
};

}  // namespace uocr_serve
