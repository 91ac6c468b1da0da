// A job's callback: when a job ends, its status (GET /v1/jobs/{id}'s body) is POSTed to the
// callback_url the client gave, signed with the server's callback secret:
//   X-UOCR-Signature: sha256=<hex of HMAC-SHA256(secret, body)>
// A receiver recomputes the HMAC over the raw body and compares. Delivery is tried 3 times (1 s,
// then 4 s apart) on a thread of its own, so a slow receiver never holds up decoding.
#pragma once
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include <httplib.h>

#include "job_options.hpp"
#include "log.hpp"
#include "uocr/io/sha256.hpp"

namespace uocr_serve {

inline std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out.push_back(char(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

// RFC 2104 over SHA-256, as hex.
inline std::string hmac_sha256_hex(std::string key, const std::string& message) {
  constexpr size_t block = 64;
  if (key.size() > block) {
    uocr::Sha256 h;
    h.update(key);
    key = from_hex(h.hex());
  }
  key.resize(block, '\0');
  std::string inner_pad(block, '\0'), outer_pad(block, '\0');
  for (size_t i = 0; i < block; ++i) {
    inner_pad[i] = char(uint8_t(key[i]) ^ 0x36);
    outer_pad[i] = char(uint8_t(key[i]) ^ 0x5c);
  }
  uocr::Sha256 inner;
  inner.update(inner_pad);
  inner.update(message);
  uocr::Sha256 outer;
  outer.update(outer_pad);
  outer.update(from_hex(inner.hex()));
  return outer.hex();
}

class Notifier {
 public:
  Notifier(std::string secret, Log& log) : secret_(std::move(secret)), log_(log), thread_([this] { deliver(); }) {}
  ~Notifier() {
    {
      std::lock_guard<std::mutex> lock(m_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  bool has_secret() const { return !secret_.empty(); }

  void post(const std::string& url, const std::string& job_id, std::string body) {
    {
      std::lock_guard<std::mutex> lock(m_);
      queue_.push_back({url, job_id, std::move(body)});
    }
    cv_.notify_all();
  }

 private:
  struct Call {
    std::string url, job_id, body;
  };

  void deliver() {
    for (;;) {
      Call call;
      {
        std::unique_lock<std::mutex> lock(m_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        call = std::move(queue_.front());
        queue_.pop_front();
      }
      std::string origin, path;
      if (!split_url(call.url, origin, path)) continue;  // refused when the job was submitted
      const std::string signature = "sha256=" + hmac_sha256_hex(secret_, call.body);
      int status = 0;
      std::string failure;
      for (int attempt = 0; attempt < 3 && status / 100 != 2; ++attempt) {
        if (attempt > 0 && sleep_or_stop(attempt == 1 ? 1 : 4)) break;
        httplib::Client client(origin);
        client.set_connection_timeout(5, 0);
        client.set_read_timeout(10, 0);
        client.set_write_timeout(10, 0);
        const httplib::Result r = client.Post(path, {{"X-UOCR-Signature", signature}}, call.body, "application/json");
        status = r ? r->status : 0;
        failure = r ? "HTTP " + std::to_string(r->status) : httplib::to_string(r.error());
      }
      log_.write(status / 100 == 2 ? LogLevel::info : LogLevel::warning, "callback",
                 {{"id", call.job_id}, {"url_host", origin}, {"delivered", status / 100 == 2}, {"result", failure}});
    }
  }
  // Waits `seconds` unless the notifier stops first (then true).
  bool sleep_or_stop(int seconds) {
    std::unique_lock<std::mutex> lock(m_);
    return cv_.wait_for(lock, std::chrono::seconds(seconds), [&] { return stopping_; });
  }

  std::string secret_;
  Log& log_;
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<Call> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace uocr_serve
