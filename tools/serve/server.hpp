// The HTTP side of `uocr serve` (cpp-httplib): routes, authentication, admission before the body
// is read, OpenAI-shaped answers and errors, vLLM-style streaming, health and metrics. The
// decoding itself is the Scheduler's (scheduler.hpp).
//
//   POST /v1/chat/completions   OpenAI chat completions (chat_request.hpp), streamed or not
//   GET  /v1/models             the served model names
//   GET  /health                200 while the engine serves, 503 when not (vLLM's)
//   GET  /healthz               liveness: 200 while the process answers
//   GET  /readyz                readiness: model loaded, workers running, short queue not full
//   GET  /metrics               Prometheus text (metrics.hpp)
//   POST /v1/jobs               a document job (job_request.hpp): 202 and the job
//   GET  /v1/jobs/{id}          its state and progress; ?wait=S: answers when it ends or after S seconds
//   GET  /v1/jobs/{id}/result   its Markdown in page order; ?format=json: per page
//   GET  /v1/jobs/{id}/events   SSE: status, text, page and end events
//   GET  /v1/jobs/{id}/pages/{n}/image   page n (0-based) as PNG, for previews
//   DELETE /v1/jobs/{id}        cancels it (the work stops at the next token)
// With --queue (a fleet, docs/SCALING.md) the job calls are answered from Redis and storage and
// the jobs are decoded by `uocr worker`s; chat completions are still decoded here.
//   GET  /                      the web page (web_page.hpp)
// Paths under /v1/ need "Authorization: Bearer KEY" when API keys are configured; requests that
// create work (chat completions, jobs) count against rate_limit_per_minute (rate_limit.hpp).
#pragma once
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "api_error.hpp"
#include "chat_request.hpp"
#include "job_request.hpp"
#include "jobs.hpp"
#include "log.hpp"
#include "metrics.hpp"
#include "rate_limit.hpp"
#include "scheduler.hpp"
#include "serve_config.hpp"
#include "web_page.hpp"

namespace uocr_serve {

using json = nlohmann::json;

class Server {
 public:
  Server(const ServeConfig& config, std::shared_ptr<const uocr::Model> model, std::set<std::string> api_keys, Log& log)
      : config_(config), model_(std::move(model)), api_keys_(std::move(api_keys)), log_(log),
        names_(config.served_model_names), metrics_(names_.empty() ? folder_name() : names_.front()),
        scheduler_(model_, config_, metrics_, log_),
        fleet_(config_.queue.empty() ? nullptr : std::make_unique<Fleet>(config_.queue, config_.storage, config_.result_ttl_seconds)),
        jobs_(config_, model_, scheduler_, log_, [this](const Document& d, int status) { finish_request(d, status, "job"); }, fleet_.get()),
        created_(std::time(nullptr)) {
    if (names_.empty()) names_.push_back(folder_name());
    if (fleet_) fleet_->create_streams();  // Redis out of reach: the server does not start
    // Threads for the requests admission lets in (running, both queues) and for quick answers;
    // every request past those is refused at once, so a burst does not pile up in httplib's queue.
    const size_t threads = size_t(config_.max_concurrency) + 2 * size_t(config_.queue_max_size) + 16;
    http_.new_task_queue = [threads] { return new httplib::ThreadPool(std::min<size_t>(threads, 2048)); };
    http_.set_payload_max_length(size_t(config_.max_body_bytes));
    http_.set_read_timeout(60, 0);
    http_.set_write_timeout(30, 0);
    routes();
  }
  ~Server() { stop(); }

  // The backend and device the documents run on.
  uocr::EngineInfo engine_info() const { return scheduler_.engine()->info(); }

  // Binds host:port (port 0: a free one) and returns the port; throws uocr::Error(io) when it cannot.
  int bind() {
    // Debian's cpp-httplib listens with a backlog of 5: a burst of connections would overflow it
    // and clients would wait seconds for SYN retries. The listening socket's backlog is raised
    // once bound (listen() again on a listening socket only changes it).
    int listening = -1;
    http_.set_socket_options([&listening](socket_t sock) {
      int yes = 1;
      ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
      listening = sock;
    });
    const int port = config_.port == 0 ? http_.bind_to_any_port(config_.host) : (http_.bind_to_port(config_.host, config_.port) ? config_.port : -1);
    uocr::require(port > 0, uocr::Status::io, [&] { return "cannot listen on " + config_.host + ":" + std::to_string(config_.port); });
    uocr::require(::listen(listening, SOMAXCONN) == 0, uocr::Status::io, "cannot raise the listening socket's backlog");
    return port;
  }
  // Queues the jobs that had not ended when the server last stopped (they resume from their checkpoints).
  void recover_jobs() { jobs_.recover(); }
  void listen() { http_.listen_after_bind(); }
  // Ends every document (running ones are cancelled, their clients told; jobs keep their
  // checkpoints for the next start), then stops the HTTP server.
  void stop() {
    stopping_ = true;
    jobs_.stop();
    scheduler_.shutdown();
    http_.stop();
  }

 private:
  // The model folder's name ("/models/Unlimited-OCR/" -> "Unlimited-OCR"): what clients name the model by default.
  std::string folder_name() const {
    std::filesystem::path p = std::filesystem::path(model_->dir()).lexically_normal();
    if (p.filename().empty()) p = p.parent_path();
    return p.filename().string();
  }

  static void send_error(httplib::Response& res, const ApiError& e) {
    res.status = e.status();
    res.set_content(e.body().dump(), "application/json");
  }

  // Seconds a refused client should wait: the recent mean request time, spread over the workers.
  int retry_after() const {
    const Scheduler::Load l = scheduler_.load();
    const double mean = mean_request_seconds_.load();
    const double wait = mean * double(1 + l.waiting_short + l.waiting_long) / double(config_.max_concurrency);
    return int(std::clamp(std::ceil(wait), 1.0, 600.0));
  }
  void send_overloaded(httplib::Response& res, const ApiError& e) {
    send_error(res, e);
    res.set_header("Retry-After", std::to_string(retry_after()));
  }

  bool authorized(const httplib::Request& req) const {
    if (api_keys_.empty()) return true;
    const std::string h = req.get_header_value("Authorization");
    const std::string bearer = "Bearer ";
    if (h.size() <= bearer.size() || h.compare(0, bearer.size(), bearer) != 0) return false;
    const std::string key = h.substr(bearer.size());
    bool found = false;
    for (const std::string& k : api_keys_) found |= constant_time_equal(k, key);  // every key compared: no timing hint
    return found;
  }
  static bool constant_time_equal(const std::string& a, const std::string& b) {
    unsigned diff = unsigned(a.size() ^ b.size());
    for (size_t i = 0; i < a.size(); ++i) diff |= unsigned(uint8_t(a[i]) ^ uint8_t(i < b.size() ? b[i] : 0));
    return diff == 0;
  }

  // What is decided from a request's headers alone (see routes()).
  httplib::Server::HandlerResponse admit(const httplib::Request& req, httplib::Response& res) {
    if (req.path.rfind("/v1/", 0) == 0 && !authorized(req)) {
      send_error(res, ApiError(401, "a valid API key is needed: send \"Authorization: Bearer KEY\""));
      res.set_header("WWW-Authenticate", "Bearer");
      count_error(401);
      return httplib::Server::HandlerResponse::Handled;
    }
    if (req.method == "POST" && (req.path == "/v1/chat/completions" || req.path == "/v1/jobs")) {
      const std::string key = req.get_header_value("Authorization");
      const double wait = rate_limiter_.take(api_keys_.empty() ? req.remote_addr : key);
      if (wait > 0) {
        send_error(res, ApiError(429, "too many requests from this client (rate_limit_per_minute " +
                                          std::to_string(config_.rate_limit_per_minute) + "); retry later"));
        res.set_header("Retry-After", std::to_string(int(std::ceil(wait))));
        count_error(429);
        return httplib::Server::HandlerResponse::Handled;
      }
      const std::string declared = req.get_header_value("Content-Length");
      const uint64_t length = declared.empty() ? 0 : std::strtoull(declared.c_str(), nullptr, 10);
      if (length > config_.max_body_bytes) {
        send_error(res, ApiError(413, "the request body has " + std::to_string(length) + " bytes, more than max_body_bytes (" +
                                          std::to_string(config_.max_body_bytes) + ")"));
        count_error(413);
        return httplib::Server::HandlerResponse::Handled;
      }
      if (stopping_ || (scheduler_.full(Pool::short_documents) && scheduler_.full(Pool::long_documents))) {
        send_overloaded(res, ApiError(503, stopping_ ? "the server is shutting down" : "every document queue is full; retry later"));
        count_error(503);
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    return httplib::Server::HandlerResponse::Unhandled;
  }

  void routes() {
    // Before the body is read: authentication, the client's rate, the body's size, and whether
    // any queue has room. A refusal here leaves the body unread, so it closes the connection (the
    // body's bytes must not be read as the next request).
    http_.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      const httplib::Server::HandlerResponse handled = admit(req, res);
      if (handled == httplib::Server::HandlerResponse::Handled) res.set_header("Connection", "close");
      return handled;
    });
    // What cpp-httplib refused before any route saw the request.
    http_.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      const std::string message = res.status == 404   ? "no route " + req.method + " " + req.path
                                  : res.status == 413 ? "the request body is larger than max_body_bytes"
                                  : res.status == 414 ? "the request's URI is too long"
                                  : res.status == 400 ? "the request could not be read as HTTP: its request line, headers or body "
                                                        "(chunks, multipart parts) are malformed or past the HTTP library's limits"
                                                      : "HTTP " + std::to_string(res.status);
      send_error(res, ApiError(res.status, message));
    });
    http_.set_exception_handler([this](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "unknown error";
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      log_.write(LogLevel::error, "internal_error", {{"message", what}});
      send_error(res, ApiError(500, "internal error: " + what));
      count_error(500);
    });

    http_.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) { chat(req, res); });
    http_.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      json data = json::array();
      for (const std::string& n : names_)
        data.push_back({{"id", n}, {"object", "model"}, {"created", created_}, {"owned_by", "uocr"}, {"root", model_->dir()},
                        {"parent", nullptr}, {"max_model_len", model_->config().decoder.max_positions}});
      res.set_content(json{{"object", "list"}, {"data", data}}.dump(), "application/json");
    });
    http_.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      if (stopping_ || !scheduler_.workers_alive()) send_error(res, ApiError(503, "the engine is not serving"));
    });
    http_.Get("/healthz", [](const httplib::Request&, httplib::Response& res) { res.set_content("{\"status\": \"ok\"}", "application/json"); });
    http_.Get("/readyz", [this](const httplib::Request&, httplib::Response& res) {
      const bool ready = !stopping_ && scheduler_.workers_alive() && !scheduler_.full(Pool::short_documents);
      if (!ready) return send_error(res, ApiError(503, stopping_ ? "shutting down" : "not ready: the short document queue is full"));
      if (fleet_) {
        try {
          fleet_->redis().command({"PING"});
        } catch (const uocr::Error& e) {
          return send_error(res, ApiError(503, std::string("not ready: ") + e.what()));
        }
      }
      res.set_content("{\"status\": \"ready\"}", "application/json");
    });
    http_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics_.render(gauges()), "text/plain; version=0.0.4");
    });

    http_.Post("/v1/jobs", [this](const httplib::Request& req, httplib::Response& res) {
      try {
        const std::shared_ptr<Job> job = jobs_.submit(parse_job_request(req));
        res.status = 202;
        res.set_header("Location", "/v1/jobs/" + job->id());
        res.set_content(job->status_json().dump(), "application/json");
      } catch (const ApiError& e) {
        e.status() == 503 ? send_overloaded(res, e) : send_error(res, e);
        count_error(e.status());
      }
    });
    http_.Get(kJobPath, [this](const httplib::Request& req, httplib::Response& res) {
      with_job(req, res, [&](std::shared_ptr<Job> job) {
        const double wait = req.has_param("wait") ? parse_wait(req.get_param_value("wait")) : 0;
        const auto until = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(wait));
        for (uint64_t seen = jobs_.version(*job); !job_ended(job->progress().state) && std::chrono::steady_clock::now() < until && !stopping_;)
          job = jobs_.await(job, seen, std::chrono::milliseconds(500));
        res.set_content(job->status_json().dump(), "application/json");
      });
    });
    http_.Delete(kJobPath, [this](const httplib::Request& req, httplib::Response& res) {
      with_job(req, res, [&](std::shared_ptr<Job> job) {
        jobs_.cancel(job);
        // The work stops at its next token; answer once it has (or after 10 s, still cancelling).
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        job = jobs_.find(job->id());
        for (uint64_t seen = job ? jobs_.version(*job) : 0; job && !job_ended(job->progress().state) && std::chrono::steady_clock::now() < until;)
          job = jobs_.await(job, seen, std::chrono::milliseconds(200));
        if (!job) throw ApiError(404, "no job " + std::string(req.matches[1]), "id");
        res.set_content(job->status_json().dump(), "application/json");
      });
    });
    http_.Get(kJobPath + "/result", [this](const httplib::Request& req, httplib::Response& res) {
      with_job(req, res, [&](const std::shared_ptr<Job>& job) { job_result(req, res, *job); });
    });
    http_.Get(kJobPath + "/pages/([0-9]{1,9})/image", [this](const httplib::Request& req, httplib::Response& res) {
      with_job(req, res, [&](const std::shared_ptr<Job>& job) { res.set_content(jobs_.page_png(*job, std::stoll(req.matches[2])), "image/png"); });
    });
    http_.Get("/", [](const httplib::Request&, httplib::Response& res) { res.set_content(kWebPage, "text/html; charset=utf-8"); });
    http_.Get(kJobPath + "/events", [this](const httplib::Request& req, httplib::Response& res) {
      with_job(req, res, [&](const std::shared_ptr<Job>& job) {
        if (streams_.load() >= config_.max_streams)
          throw ApiError(503, "too many open streams (max_streams " + std::to_string(config_.max_streams) + "); retry later");
        job_events(res, job);
      });
    });
  }

  static double parse_wait(const std::string& v) {
    char* end = nullptr;
    const double w = std::strtod(v.c_str(), &end);
    if (v.empty() || end != v.c_str() + v.size() || !(w >= 0 && w <= 300))
      throw ApiError(400, "'wait' must be a number of seconds in 0..300", "wait");
    return w;
  }

  // Runs `fn` on the job the path names; 404 for an unknown id, any ApiError as its answer.
  template <class Fn>
  void with_job(const httplib::Request& req, httplib::Response& res, Fn fn) {
    try {
      const std::shared_ptr<Job> job = jobs_.find(req.matches[1]);
      if (!job) throw ApiError(404, "no job " + std::string(req.matches[1]), "id");
      fn(job);
    } catch (const ApiError& e) {
      e.status() == 503 ? send_overloaded(res, e) : send_error(res, e);
      count_error(e.status());
    }
  }

  // The pages of a transcript whose "<PAGE>" markers stand on lines of their own (MarkdownFilter).
  static std::vector<std::string> split_pages(const std::string& text) {
    std::vector<std::string> pages;
    const std::string marker = "<PAGE>";
    size_t begin = 0;
    bool opened_by_marker = false;
    for (size_t at = text.find(marker); ; at = text.find(marker, at + marker.size())) {
      const bool line_start = at != std::string::npos && (at == 0 || text[at - 1] == '\n');
      const size_t after = at == std::string::npos ? 0 : at + marker.size();
      const bool line_end = at != std::string::npos && (after == text.size() || text[after] == '\n');
      if (at != std::string::npos && !(line_start && line_end)) continue;
      size_t end = at == std::string::npos ? text.size() : at;
      std::string page = text.substr(begin, end - begin);
      while (!page.empty() && page.back() == '\n') page.pop_back();
      if (opened_by_marker || !page.empty()) pages.push_back(page);
      if (at == std::string::npos) break;
      begin = std::min(text.size(), after + 1);
      opened_by_marker = true;
    }
    return pages;
  }

  void job_result(const httplib::Request& req, httplib::Response& res, const Job& job) {
    const Job::Progress p = job.progress();
    if (!job_ended(p.state)) throw ApiError(409, "job " + job.id() + " is " + job_state_name(p.state) + ": poll GET /v1/jobs/" + job.id() + "?wait=60");
    if (p.state == JobState::failed) throw ApiError(409, "job " + job.id() + " failed: " + p.error);
    const std::string text = jobs_.result(job);
    res.set_header("X-Job-State", job_state_name(p.state));
    const std::string format = req.has_param("format") ? req.get_param_value("format") : "markdown";
    if (format == "markdown") return res.set_content(text, "text/markdown; charset=utf-8");
    if (format != "json") throw ApiError(400, "'format' must be markdown or json", "format");
    json pages = json::array();
    const std::vector<std::string> split = split_pages(text);
    for (size_t i = 0; i < split.size(); ++i) pages.push_back({{"index", i}, {"markdown", split[i]}});
    json j = {{"id", job.id()}, {"object", "job.result"}, {"state", job_state_name(p.state)}, {"pages_total", job.pages_total},
              {"pages", pages}, {"usage", {{"prompt_tokens", p.prompt_tokens}, {"completion_tokens", p.tokens}}}};
    if (!p.finish_reason.empty()) j["finish_reason"] = p.finish_reason;
    res.set_content(j.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
  }

  // SSE of a job: "status" first, then "text" (Markdown as it is written), "page" (pages_done
  // moved) and "end" (the job's final status), with comments while nothing happens.
  void job_events(httplib::Response& res, const std::shared_ptr<Job>& job) {
    ++streams_;
    struct State {
      bool status_sent = false;
      uint64_t offset = 0;
      int64_t pages_done = -1;
      uint64_t seen = 0;  // the job's version when it was last looked at
      std::shared_ptr<Job> job;
    };
    auto state = std::make_shared<State>();
    state->job = job;
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, state](size_t, httplib::DataSink& sink) {
          auto event = [](const char* name, const json& data) {
            return std::string("event: ") + name + "\ndata: " + data.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
          };
          std::string out;
          std::shared_ptr<Job>& job = state->job;
          try {
            if (!state->status_sent) {
              state->status_sent = true;
              state->seen = jobs_.version(*job);
              out = event("status", job->status_json());
            } else {
              job = jobs_.await(job, state->seen, std::chrono::milliseconds(1000));
            }
            // A resumed job's text is the same bytes again up to where this stream is: only what
            // lies beyond is sent.
            const std::string text = jobs_.text(*job, state->offset);
            state->offset += text.size();
            if (!text.empty()) out += event("text", {{"text", text}});
          } catch (const ApiError& e) {  // the fleet out of reach: this stream ends with the error
            out += event("error", e.body()["error"]);
            sink.write(out.data(), out.size());
            sink.done();
            return true;
          }
          const Job::Progress p = job->progress();
          if (p.pages_done != state->pages_done) {
            state->pages_done = p.pages_done;
            out += event("page", {{"pages_done", p.pages_done}, {"pages_total", job->pages_total}});
          }
          const bool ended = job_ended(p.state);
          if (ended) out += event("end", job->status_json());
          if (out.empty()) out = ": keep-alive\n\n";
          if (!sink.write(out.data(), out.size())) return false;
          if (ended || stopping_) sink.done();
          return true;
        },
        [this](bool) { --streams_; });
  }

  std::vector<Metrics::Gauge> gauges() const {
    std::vector<Metrics::Gauge> g = scheduler_gauges(scheduler_, config_);
    g.push_back({"uocr:num_streams_open", "Streamed responses open.", "", double(streams_.load())});
    for (Metrics::Gauge& p : process_gauges()) g.push_back(std::move(p));
    return g;
  }

  void count_error(int status) { metrics_.add("uocr:errors_total", 1, "code=\"" + std::to_string(status) + "\""); }

  static std::string new_id() {
    static std::atomic<uint64_t> counter{0};
    static const uint64_t salt = std::random_device{}() * 0x9e3779b97f4a7c15ull ^ uint64_t(std::time(nullptr));
    char b[40];
    std::snprintf(b, sizeof b, "chatcmpl-%016llx%04llx", (unsigned long long)salt, (unsigned long long)(++counter & 0xffff));
    return b;
  }

  // Why the model stopped when it did not end the text itself (vLLM's stop_reason field).
  static json stop_reason(uocr::StopReason s) {
    return s == uocr::StopReason::eos ? json(nullptr) : json(uocr::stop_reason_name(s));
  }
  static json usage(const uocr::RunSummary& s) {
    return {{"prompt_tokens", s.prompt_tokens}, {"completion_tokens", s.generated_tokens}, {"total_tokens", s.prompt_tokens + s.generated_tokens}};
  }

  // Metrics and the log line of a request that reached a Document (kind: chat, stream or job).
  void finish_request(const Document& d, int status, const char* kind) {
    const double seconds = count_document(metrics_, d, status);
    const uocr::RunSummary& s = d.summary();
    if (status == 200) {
      const double old = mean_request_seconds_.load();
      mean_request_seconds_.store(old == 0 ? seconds : 0.8 * old + 0.2 * seconds);
    } else {
      count_error(status);
    }
    json line = {{"id", d.id()}, {"kind", kind}, {"status", status}, {"pages", d.pages()}, {"seconds", seconds},
                 {"prompt_tokens", s.prompt_tokens}, {"generated_tokens", s.generated_tokens}, {"stop", uocr::stop_reason_name(s.stop)},
                 {"decode_passes", d.draft().passes}, {"drafted_tokens", d.draft().drafted}, {"accepted_tokens", d.draft().accepted}};
    if (d.seconds_to_first_token() >= 0) line["time_to_first_token"] = d.seconds_to_first_token();
    if (d.error()) line["error"] = d.error()->what();
    log_.info("request", line);
  }

  void chat(const httplib::Request& req, httplib::Response& res) {
    std::shared_ptr<Document> doc;
    bool streamed = false;
    try {
      ChatRequest r = parse_chat_request(req.body, config_.max_pages_per_request);
      if (!r.model.empty() && std::find(names_.begin(), names_.end(), r.model) == names_.end())
        throw ApiError(404, "The model `" + r.model + "` does not exist (this server serves " + names_.front() + ")", "model");
      if (!r.mode_given) r.params.mode = model_->config().sam.image_size == 1024 ? uocr::ImageMode::gundam : uocr::ImageMode::base;
      // Refused before the pages are decoded: under overload a refusal costs no image work.
      const Pool pool = scheduler_.pool_for(int64_t(r.images.size()));
      if (scheduler_.full(pool))
        throw ApiError(503, std::string("the ") + pool_name(pool) + " document queue is full (queue_max_size " +
                                std::to_string(config_.queue_max_size) + "); retry later");
      scheduler_.add_server_settings(r.params);
      try {
        uocr::validate(*model_, r.params);
      } catch (const uocr::Error& e) {
        throw ApiError(400, e.what());
      }
      // Every page decoded once now, so that a page that is no image, or too large an image, is
      // refused before the 200; the pixels are dropped and decoded again when the page is read.
      std::vector<uocr::ImageU8> sizes;
      for (size_t i = 0; i < r.images.size(); ++i) {
        try {
          const uocr::ImageU8 page =
              uocr::decode_image(reinterpret_cast<const uint8_t*>(r.images[i].data()), r.images[i].size(), config_.decode_limits);
          sizes.push_back({page.width, page.height, {}});
        } catch (const uocr::Error& e) {
          throw ApiError(e.status() == uocr::Status::out_of_memory ? 503 : 400, "page " + std::to_string(i + 1) + " is not a usable image: " + e.what(),
                         "messages");
        }
      }
      if (r.stream && streams_.load() >= config_.max_streams)
        throw ApiError(503, "too many open streams (max_streams " + std::to_string(config_.max_streams) + "); retry later");
      const uint64_t kv = scheduler_.kv_bytes(sizes, r.params);
      const int64_t pages = int64_t(r.images.size());
      DocumentWork work;
      work.open_pages = [images = std::make_shared<std::vector<std::string>>(std::move(r.images)), limits = config_.decode_limits] {
        return std::make_unique<uocr::CallbackPages>(int64_t(images->size()), [images, limits](int64_t i, uocr::ImageU8& page) {
          const std::string& bytes = (*images)[size_t(i)];
          page = uocr::decode_image(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), limits);
          return true;
        });
      };
      doc = std::make_shared<Document>(new_id(), pages, r.params, config_.request_timeout_seconds * double(pages), std::move(work));
      scheduler_.submit(doc, kv);
      streamed = r.stream;
      if (r.stream) return stream(res, doc, r.include_usage);
    } catch (const ApiError& e) {
      e.status() == 503 ? send_overloaded(res, e) : send_error(res, e);
      if (!doc) count_error(e.status());
      if (doc) finish_request(*doc, e.status(), streamed ? "stream" : "chat");
      return;
    }
    // Not streamed: the whole text, once the document ends.
    std::string text, part;
    while (doc->take(part, std::chrono::milliseconds(1000)) != Document::Wait::finished) text += part;
    if (doc->error()) {
      send_error(res, *doc->error());
    } else {
      const uocr::RunSummary& s = doc->summary();
      json choice = {{"index", 0}, {"message", {{"role", "assistant"}, {"content", text}}}, {"logprobs", nullptr},
                     {"finish_reason", finish_reason(s.stop)}, {"stop_reason", stop_reason(s.stop)}};
      res.set_content(json{{"id", doc->id()}, {"object", "chat.completion"}, {"created", std::time(nullptr)}, {"model", names_.front()},
                           {"choices", json::array({choice})}, {"usage", usage(s)}}.dump(-1, ' ', false, json::error_handler_t::replace),
                      "application/json");
    }
    finish_request(*doc, doc->error() ? doc->error()->status() : 200, "chat");
  }

  // vLLM's stream: a chunk per piece of text (the first with the role), a last chunk with the
  // finish reason and usage, `data: [DONE]`. An error after the 200 is a `data: {"error": ...}`
  // event. A client that goes away cancels the document; idle seconds send an SSE comment, which
  // also finds out whether the client is still there.
  void stream(httplib::Response& res, const std::shared_ptr<Document>& doc, bool include_usage) {
    ++streams_;
    struct State {
      bool role_sent = false;
      bool counted = false;  // the document's end is in the metrics and the log
    };
    auto state = std::make_shared<State>();
    const std::string model = names_.front();
    const std::time_t created = std::time(nullptr);
    auto chunk = [doc, model, created](json delta, json finish, json stop) {
      json c = {{"id", doc->id()}, {"object", "chat.completion.chunk"}, {"created", created}, {"model", model},
                {"choices", json::array({{{"index", 0}, {"delta", std::move(delta)}, {"logprobs", nullptr}, {"finish_reason", std::move(finish)},
                                          {"stop_reason", std::move(stop)}}})}};
      return c;
    };
    auto sse = [](const json& j) { return "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n"; };
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, doc, state, chunk, sse, include_usage](size_t, httplib::DataSink& sink) {
          auto send = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
          if (!state->role_sent) {
            state->role_sent = true;
            return send(sse(chunk({{"role", "assistant"}, {"content", ""}}, nullptr, nullptr)));
          }
          std::string text;
          switch (doc->take(text, std::chrono::milliseconds(1000))) {
            case Document::Wait::text: return send(sse(chunk({{"content", text}}, nullptr, nullptr)));
            case Document::Wait::idle: return send(": keep-alive\n\n");
            case Document::Wait::finished: break;
          }
          std::string tail;
          if (doc->error()) {
            tail = sse(doc->error()->body());
          } else {
            const uocr::RunSummary& s = doc->summary();
            json last = chunk(json::object(), finish_reason(s.stop), stop_reason(s.stop));
            last["usage"] = usage(s);
            tail = sse(last);
            if (include_usage) {
              json u = chunk(json::object(), nullptr, nullptr);
              u["choices"] = json::array();
              u["usage"] = usage(s);
              tail += sse(u);
            }
          }
          tail += "data: [DONE]\n\n";
          // Counted before the last write, as a reply that is not streamed is: the document has
          // ended, and a client that closes its end on reading [DONE] must not turn it into a 499.
          state->counted = true;
          finish_request(*doc, doc->error() ? doc->error()->status() : 200, "stream");
          if (!send(tail)) return false;
          sink.done();
          return true;
        },
        [this, doc, state](bool) {
          if (!state->counted) {
            scheduler_.cancel(doc);  // the client went away before the end: stop the work
            // The worker may still be ending the document: its summary is read once it has.
            std::string ignored;
            while (doc->take(ignored, std::chrono::milliseconds(1000)) != Document::Wait::finished) {}
            finish_request(*doc, 499, "stream");
          }
          --streams_;
        });
  }

  const ServeConfig& config_;
  std::shared_ptr<const uocr::Model> model_;
  std::set<std::string> api_keys_;
  Log& log_;
  std::vector<std::string> names_;
  Metrics metrics_;
  Scheduler scheduler_;
  std::unique_ptr<Fleet> fleet_;  // --queue: jobs go to the fleet's workers
  Jobs jobs_;
  std::time_t created_;
  httplib::Server http_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> streams_{0};
  RateLimiter rate_limiter_{config_.rate_limit_per_minute};
  std::atomic<double> mean_request_seconds_{0};
};

}  // namespace uocr_serve
