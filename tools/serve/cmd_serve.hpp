// `uocr serve`: the OCR service (docs/SERVING.md). Loads the model once, queues the jobs a previous
// run left unfinished, then answers HTTP until SIGTERM, SIGINT or SIGHUP, when it stops taking
// requests, ends the running ones (their clients get an error, not a cut-off text; jobs keep
// their checkpoints and resume at the next start) and exits 0. Start-up writes three log lines: weights_loaded,
// workspace_ready, listening (with the port, useful with --port 0).
#pragma once
#include <pthread.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "../cli/args.hpp"
#include "server.hpp"

namespace uocr_serve {

// SIGTERM, SIGINT and SIGHUP blocked in this thread and so in every thread started from here on
// (HTTP pool, workers, OpenMP): they reach only the caller's sigwait on the set returned. SIGPIPE
// ignored: a client that goes away must not kill the process.
inline sigset_t block_stop_signals() {
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  return stop_signals;
}

inline const char* stop_signal_name(int signal) { return signal == SIGTERM ? "SIGTERM" : signal == SIGINT ? "SIGINT" : "SIGHUP"; }

inline int cmd_serve(const uocr_cli::Args& args) {
  sigset_t stop_signals = block_stop_signals();

  const ServeConfig config = load_serve_config(args);
  Log log(config.log_level);
  const std::set<std::string> keys = load_api_keys(config.api_keys_file);
  const auto t0 = std::chrono::steady_clock::now();
  const auto model = uocr::Model::load(config.model);
  const uocr::DecoderConfig& d = model->config().decoder;
  log.info("weights_loaded", {{"model", config.model},
                              {"seconds", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()},
                              {"layers", d.layers}, {"hidden", d.hidden}, {"vocab", d.vocab}});

  Server server(config, model, keys, log);  // opens the engine: a missing backend or device fails here
  const uocr::EngineInfo info = server.engine_info();
  log.info("workspace_ready", {{"backend", config.backend}, {"device", info.device}, {"precision", uocr::precision_name(info.precision)}, {"max_concurrency", config.max_concurrency},
                               {"visual_cache_bytes", config.visual_cache_bytes}, {"queue_max_size", config.queue_max_size},
                               {"api_keys", keys.size()}, {"data_dir", config.data_dir},
                               {"queue", config.queue.empty() ? "" : RedisAddress::parse(config.queue).url()}, {"storage", config.storage}});
  server.recover_jobs();
  const int port = server.bind();
  log.info("listening", {{"host", config.host}, {"port", port}});
  std::thread http([&] { server.listen(); });
  int signal = 0;
  sigwait(&stop_signals, &signal);
  log.info("shutting_down", {{"signal", stop_signal_name(signal)}});
  server.stop();
  http.join();
  log.info("stopped");
  return 0;
}

}  // namespace uocr_serve
