// Per-client request rate (rate_limit_per_minute): a token bucket per API key (per client address
// when the server has no keys) that holds a minute's requests and refills continuously. A request
// that finds its bucket empty is refused with 429 and the seconds until the next token; the
// queues bound the server's load, this bounds one client's share of it.
#pragma once
#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <string>

namespace uocr_serve {

class RateLimiter {
 public:
  explicit RateLimiter(double per_minute) : per_second_(per_minute / 60), capacity_(per_minute) {}
  bool enabled() const { return per_second_ > 0; }

  // Takes one request from `client`'s bucket: 0 when allowed, else the seconds until it would be.
  double take(const std::string& client) {
    if (!enabled()) return 0;
    std::lock_guard<std::mutex> lock(m_);
    const auto now = std::chrono::steady_clock::now();
    if (buckets_.size() >= kMaxClients) forget_full(now);
    auto [it, added] = buckets_.try_emplace(client, Bucket{capacity_, now});
    Bucket& b = it->second;
    b.tokens = level(b, now);
    b.at = now;
    if (b.tokens >= 1) {
      b.tokens -= 1;
      return 0;
    }
    return (1 - b.tokens) / per_second_;
  }

 private:
  struct Bucket {
    double tokens;
    std::chrono::steady_clock::time_point at;
  };
  static constexpr size_t kMaxClients = 4096;

  double level(const Bucket& b, std::chrono::steady_clock::time_point now) const {
    return std::min(capacity_, b.tokens + std::chrono::duration<double>(now - b.at).count() * per_second_);
  }
  // A full bucket is the same as none: dropped, so that many addresses cannot grow the map.
  void forget_full(std::chrono::steady_clock::time_point now) {
    for (auto it = buckets_.begin(); it != buckets_.end();) it = level(it->second, now) >= capacity_ ? buckets_.erase(it) : std::next(it);
  }

  double per_second_, capacity_;
  std::mutex m_;
  std::map<std::string, Bucket> buckets_;
};

}  // namespace uocr_serve
