// `uocr worker`: a fleet worker (docs/SCALING.md, worker.hpp). Loads the model once, then takes
// jobs from the fleet's Redis until SIGTERM, SIGINT or SIGHUP, when it drains: takes no new
// job, gives each running one back right after its next checkpoint (or after one lease) and
// exits 0. /metrics, /healthz and /readyz answer on --host:--port (port 0: any; the "listening"
// log line names it).
#pragma once
#include <pthread.h>
#include <signal.h>

#include <chrono>
#include <thread>

#include <httplib.h>

#include "../cli/args.hpp"
#include "cmd_serve.hpp"
#include "worker.hpp"

namespace uocr_serve {

inline int cmd_worker(const uocr_cli::Args& args) {
  sigset_t stop_signals = block_stop_signals();

  ServeConfig config = load_serve_config(args);
  uocr::require(!config.queue.empty(), uocr::Status::invalid_argument, "uocr worker needs --queue redis://HOST:PORT and --storage URL");
  Log log(config.log_level);
  const auto t0 = std::chrono::steady_clock::now();
  const auto model = uocr::Model::load(config.model);
  log.info("weights_loaded", {{"model", config.model}, {"seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()}});
  Metrics metrics(std::filesystem::path(model->dir()).lexically_normal().filename().string());
  if (config.worker_name.empty()) config.worker_name = default_worker_name();
  // Each worker keeps its jobs' working copies apart: two workers on one machine may hold the
  // same job for a moment (one lost its lease and has not noticed yet).
  config.data_dir += "/worker-" + config.worker_name;
  std::error_code ec;
  std::filesystem::remove_all(config.data_dir, ec);  // what a previous run left belongs to the fleet now
  Worker worker(config, model, metrics, log);

  httplib::Server http;
  http.Get("/metrics", [&](const httplib::Request&, httplib::Response& res) {
    std::vector<Metrics::Gauge> g = scheduler_gauges(worker.scheduler(), config);
    for (Metrics::Gauge& p : process_gauges()) g.push_back(std::move(p));
    res.set_content(metrics.render(g), "text/plain; version=0.0.4");
  });
  http.Get("/healthz", [](const httplib::Request&, httplib::Response& res) { res.set_content("{\"status\": \"ok\"}", "application/json"); });
  std::atomic<bool> draining{false};
  http.Get("/readyz", [&](const httplib::Request&, httplib::Response& res) {
    if (draining) {
      res.status = 503;
      return res.set_content(ApiError(503, "draining").body().dump(), "application/json");
    }
    res.set_content("{\"status\": \"ready\"}", "application/json");
  });
  const int port = config.port == 0 ? http.bind_to_any_port(config.host) : (http.bind_to_port(config.host, config.port) ? config.port : -1);
  uocr::require(port > 0, uocr::Status::io, [&] { return "cannot listen on " + config.host + ":" + std::to_string(config.port); });
  std::thread listener([&] { http.listen_after_bind(); });
  worker.start();
  const uocr::EngineInfo info = worker.scheduler().engine()->info();
  log.info("worker_ready", {{"worker", worker.name()}, {"backend", config.backend}, {"device", info.device},
                            {"precision", uocr::precision_name(info.precision)}, {"queue", RedisAddress::parse(config.queue).url()}, {"storage", config.storage}, {"pools", config.pools},
                            {"max_concurrency", config.max_concurrency}, {"lease_seconds", config.lease_seconds}});
  log.info("listening", {{"host", config.host}, {"port", port}});
  int signal = 0;
  sigwait(&stop_signals, &signal);
  draining = true;
  log.info("draining", {{"signal", stop_signal_name(signal)}, {"running", worker.running()}});
  worker.drain();
  http.stop();
  listener.join();
  log.info("stopped");
  return 0;
}

}  // namespace uocr_serve
