// The service's log: one JSON object per line on stderr ({"ts": ..., "level": ..., "event": ...,
// fields}), one line per request and per page, at or above the configured level. API keys and
// document text are never logged.
#pragma once
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

#include "serve_config.hpp"

namespace uocr_serve {

class Log {
 public:
  explicit Log(LogLevel level) : level_(level) {}
  void write(LogLevel level, const std::string& event, nlohmann::json fields = nlohmann::json::object()) {
    if (level < level_) return;
    static const char* names[] = {"debug", "info", "warning", "error"};
    nlohmann::ordered_json line = {{"ts", timestamp()}, {"level", names[int(level)]}, {"event", event}};
    for (auto it = fields.begin(); it != fields.end(); ++it) line[it.key()] = it.value();
    const std::string text = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    std::lock_guard<std::mutex> lock(m_);
    std::fwrite(text.data(), 1, text.size(), stderr);
    std::fflush(stderr);
  }
  void info(const std::string& event, nlohmann::json fields = nlohmann::json::object()) { write(LogLevel::info, event, std::move(fields)); }

 private:
  // UTC, milliseconds: 2026-12-03T15:04:05.123Z
  static std::string timestamp() {
    const auto now = std::chrono::system_clock::now();
    const std::time_t t = std::chrono::system_clock::to_time_t(now);
    const long ms = long(std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char b[96];  // room for any int the fields can hold, which the compiler checks
    std::snprintf(b, sizeof b, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
                  tm.tm_min, tm.tm_sec, ms);
    return b;
  }

  LogLevel level_;
  std::mutex m_;
};

}  // namespace uocr_serve
