// `uocr serve`'s settings: a JSON file (--config FILE) whose keys are the options' names with
// underscores, overridden by the options given on the command line:
//   {"model": "/models/Unlimited-OCR", "port": 8000, "max_concurrency": 16, "queue_max_size": 64,
//    "api_keys_file": "/etc/uocr/keys"}
// Unknown keys and values of the wrong type are refused by name.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../cli/args.hpp"
#include "../cli/decode_limits.hpp"
#include "../cli/model_dir.hpp"
#include "uocr/core/error.hpp"
#include "uocr/core/precision.hpp"
#include "uocr/engine/backend.hpp"
#include "uocr/image/image.hpp"
#include "uocr/io/read_file.hpp"

namespace uocr_serve {

enum class LogLevel { debug, info, warning, error };

struct ServeConfig {
  std::string model;                       // model folder (uocr run's rules when unset)
  std::string backend = "cpu";             // cpu | vulkan | cuda
  int device = 0;
  // The vision encoder's and the prefill's products (uocr run --precision); bf16 runs where the
  // backend and CPU have it, else f32. A job's checkpoint resumes only in the precision it ran in
  // (another starts the job over); the workspace_ready and worker_ready log lines name it.
  uocr::Precision precision = uocr::Precision::f32;
  std::string host = "127.0.0.1";
  int port = 8000;                         // 0: any free port (the "listening" log line names it)
  std::vector<std::string> served_model_names;  // what clients put in "model"; default: the folder's name
  int max_concurrency = 16;                // documents decoded at once (their steps are batched)
  int max_pages_per_request = 300;
  double request_timeout_seconds = 300;    // per page: a document of N pages gets N times this
  uint64_t visual_cache_bytes = uint64_t(8) << 30;  // KV that running documents may hold together
  int queue_max_size = 64;                 // waiting documents per pool (short, long)
  int long_document_pages = 16;            // documents of more pages use the long pool
  int max_long_running = 0;                // long documents decoded at once; 0: half of max_concurrency
  uint64_t max_body_bytes = uint64_t(512) << 20;
  int max_streams = 64;                    // open streamed responses
  std::string api_keys_file;               // one key per line; none: no authentication
  double rate_limit_per_minute = 0;        // requests that create work, per API key (or address); 0: no limit
  std::string data_dir;                    // jobs: uploads, checkpoints, results ("": $XDG_STATE_HOME/uocr-serve)
  double result_ttl_seconds = 86400;       // ended jobs are deleted this long after they ended
  int checkpoint_every_tokens = 256;       // jobs: a checkpoint every N tokens, besides every page boundary
  int page_render_timeout_seconds = 120;   // PDF pages: what rendering one may take (0: no limit)
  // Every page image, uploaded or rendered: pixels, decoded bytes, JPEG scans (uocr run's
  // --max-image-pixels, --max-image-bytes, --max-jpeg-scans; the library's defaults).
  uocr::DecodeLimits decode_limits;
  std::string callback_secret_file;        // the key that signs job callbacks (its first line)
  std::string callback_secret;             // read from callback_secret_file
  LogLevel log_level = LogLevel::info;
  // A fleet (docs/SCALING.md): API nodes and workers share a Redis and a storage.
  std::string queue;                       // redis://HOST:PORT[/DB]; "": jobs run in this process
  std::string storage;                     // file:///path or s3://bucket/prefix (needed with queue)
  double lease_seconds = 30;               // workers: a job whose lease was not renewed this long moves to another worker
  int max_deliveries = 3;                  // workers: a job taken this often without ending goes to the dead-letter stream
  std::vector<std::string> pools = {"short", "long"};  // workers: the pools they take jobs from
  std::string worker_name;                 // workers: the consumer name ("": HOST-PID)

  int long_running_limit() const { return max_long_running > 0 ? max_long_running : std::max(1, max_concurrency / 2); }
};

inline uocr_cli::CommandOptions serve_options() {
  uocr_cli::CommandOptions o{"serve",
                             {"--config", "--model", "--backend", "--device", "--precision", "--host", "--port", "--served-model-name",
                              "--max-concurrency", "--max-pages-per-request", "--request-timeout-seconds", "--visual-cache-bytes",
                              "--queue-max-size", "--long-document-pages", "--max-long-running", "--max-body-bytes", "--max-streams",
                              "--api-keys-file", "--log-level", "--rate-limit-per-minute", "--data-dir", "--result-ttl-seconds",
                              "--checkpoint-every-tokens", "--page-render-timeout-seconds", "--callback-secret-file", "--queue",
                              "--storage"},
                             {},
                             false,
                             {}};
  for (const std::string& limit : uocr_cli::decode_limit_options()) o.values.push_back(limit);
  return o;
}

// `uocr worker`: the settings of `uocr serve` that apply to decoding, and the fleet's.
inline uocr_cli::CommandOptions worker_options() {
  uocr_cli::CommandOptions o{"worker",
                             {"--config", "--model", "--backend", "--device", "--precision", "--host", "--port", "--max-concurrency",
                              "--request-timeout-seconds", "--visual-cache-bytes", "--long-document-pages", "--max-long-running",
                              "--log-level", "--data-dir", "--result-ttl-seconds", "--checkpoint-every-tokens",
                              "--page-render-timeout-seconds", "--callback-secret-file", "--queue", "--storage", "--lease-seconds",
                              "--max-deliveries", "--pools", "--worker-name"},
                             {},
                             false,
                             {}};
  for (const std::string& limit : uocr_cli::decode_limit_options()) o.values.push_back(limit);
  return o;
}

inline LogLevel parse_log_level(const std::string& s) {
  if (s == "debug") return LogLevel::debug;
  if (s == "info") return LogLevel::info;
  if (s == "warning") return LogLevel::warning;
  if (s == "error") return LogLevel::error;
  throw uocr::Error(uocr::Status::invalid_argument, "log_level must be debug, info, warning or error, got '" + s + "'");
}

inline uocr::Precision parse_serve_precision(const std::string& s) {
  uocr::Precision p;
  uocr::require(uocr::parse_precision(s, p), uocr::Status::invalid_argument, [&] { return "precision must be bf16 or f32, got '" + s + "'"; });
  return p;
}

inline std::vector<std::string> split_names(const std::string& list) {
  std::vector<std::string> names;
  std::stringstream in(list);
  for (std::string n; std::getline(in, n, ',');)
    if (!n.empty()) names.push_back(n);
  return names;
}

// $XDG_STATE_HOME/uocr-serve, else ~/.local/state/uocr-serve.
inline std::string default_data_dir() {
  if (const char* state = std::getenv("XDG_STATE_HOME"); state != nullptr && *state == '/') return std::string(state) + "/uocr-serve";
  const char* home = std::getenv("HOME");
  uocr::require(home != nullptr && *home == '/', uocr::Status::invalid_argument, "no data directory: give --data-dir DIR");
  return std::string(home) + "/.local/state/uocr-serve";
}

// The settings file's values, then the command line's.
inline ServeConfig load_serve_config(const uocr_cli::Args& args) {
  ServeConfig c;
  if (args.has("--config")) {
    const std::string path = args.get("--config", "");
    nlohmann::json j;
    try {
      const std::vector<uint8_t> bytes = uocr::read_file_capped(path, uint64_t(1) << 20, "serve config");
      j = nlohmann::json::parse(bytes.begin(), bytes.end());
    } catch (const nlohmann::json::exception& e) {
      throw uocr::Error(uocr::Status::invalid_argument, path + " is not JSON: " + e.what());
    }
    uocr::require(j.is_object(), uocr::Status::invalid_argument, [&] { return path + " must hold a JSON object"; });
    for (auto it = j.begin(); it != j.end(); ++it) {
      const std::string& k = it.key();
      const nlohmann::json& v = it.value();
      auto want = [&](bool ok, const char* what) {
        uocr::require(ok, uocr::Status::invalid_argument, [&] { return path + ": \"" + k + "\" must be " + what; });
      };
      auto integer = [&](int64_t lo, int64_t hi) {
        want(v.is_number_integer() && v.get<int64_t>() >= lo && v.get<int64_t>() <= hi, "an integer in range");
        return v.get<int64_t>();
      };
      auto text = [&] {
        want(v.is_string(), "a string");
        return v.get<std::string>();
      };
      if (k == "model") c.model = text();
      else if (k == "backend") c.backend = text();
      else if (k == "device") c.device = int(integer(0, 1 << 16));
      else if (k == "precision") c.precision = parse_serve_precision(text());
      else if (k == "host") c.host = text();
      else if (k == "port") c.port = int(integer(0, 65535));
      else if (k == "served_model_name") {
        want(v.is_string() || v.is_array(), "a string or a list of strings");
        if (v.is_string()) c.served_model_names = split_names(v.get<std::string>());
        else
          for (const auto& n : v) {
            want(n.is_string(), "a list of strings");
            c.served_model_names.push_back(n.get<std::string>());
          }
      } else if (k == "max_concurrency") c.max_concurrency = int(integer(1, 4096));
      else if (k == "max_pages_per_request") c.max_pages_per_request = int(integer(1, 1 << 24));
      else if (k == "request_timeout_seconds") {
        want(v.is_number() && v.get<double>() > 0, "a number of seconds > 0");
        c.request_timeout_seconds = v.get<double>();
      } else if (k == "visual_cache_bytes") c.visual_cache_bytes = uint64_t(integer(1, INT64_MAX));
      else if (k == "queue_max_size") c.queue_max_size = int(integer(0, 1 << 20));
      else if (k == "long_document_pages") c.long_document_pages = int(integer(1, 1 << 24));
      else if (k == "max_long_running") c.max_long_running = int(integer(0, 4096));
      else if (k == "max_body_bytes") c.max_body_bytes = uint64_t(integer(1, INT64_MAX));
      else if (k == "max_streams") c.max_streams = int(integer(1, 1 << 20));
      else if (k == "api_keys_file") c.api_keys_file = text();
      else if (k == "log_level") c.log_level = parse_log_level(text());
      else if (k == "data_dir") c.data_dir = text();
      else if (k == "rate_limit_per_minute") {
        want(v.is_number() && v.get<double>() >= 0, "a number >= 0 (0: no limit)");
        c.rate_limit_per_minute = v.get<double>();
      }
      else if (k == "result_ttl_seconds") {
        want(v.is_number() && v.get<double>() > 0, "a number of seconds > 0");
        c.result_ttl_seconds = v.get<double>();
      } else if (k == "checkpoint_every_tokens") c.checkpoint_every_tokens = int(integer(0, 1 << 30));
      else if (k == "page_render_timeout_seconds") c.page_render_timeout_seconds = int(integer(0, 86400));
      else if (k == "max_image_pixels") c.decode_limits.max_pixels = uint64_t(integer(1, INT64_MAX));
      else if (k == "max_image_bytes") c.decode_limits.max_bytes = uint64_t(integer(1, INT64_MAX));
      else if (k == "max_jpeg_scans") c.decode_limits.max_jpeg_scans = int(integer(1, 1 << 30));
      else if (k == "callback_secret_file") c.callback_secret_file = text();
      else if (k == "queue") c.queue = text();
      else if (k == "storage") c.storage = text();
      else if (k == "lease_seconds") {
        want(v.is_number() && v.get<double>() >= 1 && v.get<double>() <= 86400, "a number of seconds in 1..86400");
        c.lease_seconds = v.get<double>();
      } else if (k == "max_deliveries") c.max_deliveries = int(integer(1, 1000));
      else if (k == "pools") c.pools = split_names(text());
      else if (k == "worker_name") c.worker_name = text();
      else throw uocr::Error(uocr::Status::invalid_argument, path + ": unknown setting \"" + k + "\" (see uocr serve --help)");
    }
  }
  // `uocr worker` takes a part of these options.
  auto given = [&](const char* name) { return args.accepts(name) && args.has(name); };
  if (given("--model")) c.model = args.get("--model", "");
  if (c.model.empty()) c.model = uocr_cli::model_dir(args);
  if (args.accepts("--backend")) c.backend = args.get("--backend", c.backend);
  (void)uocr::parse_backend(c.backend);  // refuses an unknown name now
  if (args.accepts("--device")) c.device = args.integer("--device", c.device);
  if (given("--precision")) c.precision = parse_serve_precision(args.get("--precision", ""));
  if (args.accepts("--host")) c.host = args.get("--host", c.host);
  if (args.accepts("--port")) c.port = args.integer("--port", c.port);
  if (given("--served-model-name")) c.served_model_names = split_names(args.get("--served-model-name", ""));
  if (args.accepts("--max-concurrency")) c.max_concurrency = args.integer("--max-concurrency", c.max_concurrency);
  if (args.accepts("--max-pages-per-request")) c.max_pages_per_request = args.integer("--max-pages-per-request", c.max_pages_per_request);
  if (args.accepts("--request-timeout-seconds")) c.request_timeout_seconds = args.number<double>("--request-timeout-seconds", c.request_timeout_seconds);
  if (args.accepts("--visual-cache-bytes")) c.visual_cache_bytes = args.number<uint64_t>("--visual-cache-bytes", c.visual_cache_bytes);
  if (args.accepts("--queue-max-size")) c.queue_max_size = args.integer("--queue-max-size", c.queue_max_size);
  if (args.accepts("--long-document-pages")) c.long_document_pages = args.integer("--long-document-pages", c.long_document_pages);
  if (args.accepts("--max-long-running")) c.max_long_running = args.integer("--max-long-running", c.max_long_running);
  if (args.accepts("--max-body-bytes")) c.max_body_bytes = args.number<uint64_t>("--max-body-bytes", c.max_body_bytes);
  if (args.accepts("--max-streams")) c.max_streams = args.integer("--max-streams", c.max_streams);
  if (args.accepts("--api-keys-file")) c.api_keys_file = args.get("--api-keys-file", c.api_keys_file);
  if (given("--log-level")) c.log_level = parse_log_level(args.get("--log-level", ""));
  if (args.accepts("--rate-limit-per-minute")) c.rate_limit_per_minute = args.number<double>("--rate-limit-per-minute", c.rate_limit_per_minute);
  if (args.accepts("--data-dir")) c.data_dir = args.get("--data-dir", c.data_dir);
  if (args.accepts("--result-ttl-seconds")) c.result_ttl_seconds = args.number<double>("--result-ttl-seconds", c.result_ttl_seconds);
  if (args.accepts("--checkpoint-every-tokens")) c.checkpoint_every_tokens = args.integer("--checkpoint-every-tokens", c.checkpoint_every_tokens);
  if (args.accepts("--page-render-timeout-seconds")) c.page_render_timeout_seconds = args.integer("--page-render-timeout-seconds", c.page_render_timeout_seconds);
  c.decode_limits = uocr_cli::decode_limits(args, c.decode_limits);
  if (args.accepts("--callback-secret-file")) c.callback_secret_file = args.get("--callback-secret-file", c.callback_secret_file);
  if (args.accepts("--queue")) c.queue = args.get("--queue", c.queue);
  if (args.accepts("--storage")) c.storage = args.get("--storage", c.storage);
  if (args.accepts("--lease-seconds")) c.lease_seconds = args.number<double>("--lease-seconds", c.lease_seconds);
  if (args.accepts("--max-deliveries")) c.max_deliveries = args.integer("--max-deliveries", c.max_deliveries);
  if (given("--pools")) c.pools = split_names(args.get("--pools", ""));
  if (args.accepts("--worker-name")) c.worker_name = args.get("--worker-name", c.worker_name);
  if (c.data_dir.empty()) c.data_dir = default_data_dir();
  if (!c.callback_secret_file.empty()) {
    const std::vector<uint8_t> bytes = uocr::read_file_capped(c.callback_secret_file, 4096, "callback secret file");
    c.callback_secret.assign(bytes.begin(), std::find(bytes.begin(), bytes.end(), uint8_t('\n')));
    while (!c.callback_secret.empty() && c.callback_secret.back() == '\r') c.callback_secret.pop_back();
    uocr::require(c.callback_secret.size() >= 16, uocr::Status::invalid_argument,
                  "the callback secret (first line of callback_secret_file) must have at least 16 bytes");
  }

  using uocr::require;
  const auto bad = uocr::Status::invalid_argument;
  require(c.port >= 0 && c.port <= 65535, bad, "port must be in 0..65535");
  require(c.device >= 0, bad, "device must be >= 0");
  require(c.max_concurrency >= 1 && c.max_concurrency <= 4096, bad, "max_concurrency must be in 1..4096");
  require(c.max_pages_per_request >= 1, bad, "max_pages_per_request must be >= 1");
  require(c.request_timeout_seconds > 0, bad, "request_timeout_seconds must be > 0");
  require(c.visual_cache_bytes > 0, bad, "visual_cache_bytes must be > 0");
  require(c.queue_max_size >= 0, bad, "queue_max_size must be >= 0");
  require(c.long_document_pages >= 1, bad, "long_document_pages must be >= 1");
  require(c.max_long_running >= 0 && c.max_long_running <= c.max_concurrency, bad,
          "max_long_running must be in 0..max_concurrency (0: half of it)");
  require(c.max_body_bytes > 0, bad, "max_body_bytes must be > 0");
  require(c.max_streams >= 1, bad, "max_streams must be >= 1");
  require(c.result_ttl_seconds > 0, bad, "result_ttl_seconds must be > 0");
  require(c.rate_limit_per_minute >= 0, bad, "rate_limit_per_minute must be >= 0 (0: no limit)");
  require(c.checkpoint_every_tokens >= 0, bad, "checkpoint_every_tokens must be >= 0 (0: at page boundaries only)");
  require(c.page_render_timeout_seconds >= 0 && c.page_render_timeout_seconds <= 86400, bad,
          "page_render_timeout_seconds must be in 0..86400 (0: no limit)");
  for (const std::string& n : c.served_model_names) require(!n.empty(), bad, "served model names must not be empty");
  require(c.queue.empty() == c.storage.empty(), bad, "queue and storage go together: a fleet needs both (docs/SCALING.md)");
  require(c.lease_seconds >= 1 && c.lease_seconds <= 86400, bad, "lease_seconds must be in 1..86400");
  require(c.max_deliveries >= 1 && c.max_deliveries <= 1000, bad, "max_deliveries must be in 1..1000");
  require(!c.pools.empty(), bad, "pools must name short, long or both");
  for (const std::string& p : c.pools) require(p == "short" || p == "long", bad, [&] { return "pools: '" + p + "' is neither short nor long"; });
  require(c.worker_name.find_first_of(" \t\r\n") == std::string::npos && c.worker_name.size() <= 200, bad,
          "worker_name must be one word of at most 200 characters");
  return c;
}

// The keys of an API keys file: one per line, blank lines and lines starting with '#' ignored.
inline std::set<std::string> load_api_keys(const std::string& path) {
  std::set<std::string> keys;
  if (path.empty()) return keys;
  const std::vector<uint8_t> bytes = uocr::read_file_capped(path, uint64_t(16) << 20, "API keys file");
  std::istringstream in(std::string(bytes.begin(), bytes.end()));
  for (std::string line; std::getline(in, line);) {
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.pop_back();
    const size_t b = line.find_first_not_of(" \t");
    if (b == std::string::npos || line[b] == '#') continue;
    keys.insert(line.substr(b));
  }
  uocr::require(!keys.empty(), uocr::Status::invalid_argument, [&] { return path + " holds no API key (one per line)"; });
  return keys;
}

}  // namespace uocr_serve
