// Next-token choice. Greedy (upstream's default: temperature 0) takes the lowest index among
// equal maxima, as torch.argmax does. Temperature/top-p sampling uses a seeded generator whose
// output is defined here bit for bit, so a seed reproduces a transcript on every platform.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

#include "uocr/core/error.hpp"

namespace uocr {

struct SamplingParams {
  float temperature = 0.f;  // 0 = greedy
  float top_p = 1.f;        // nucleus mass kept when sampling, in (0, 1]
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p) : params_(p), state_(p.seed ^ 0x9e3779b97f4a7c15ull) {
    require(p.temperature >= 0.f && std::isfinite(p.temperature), Status::invalid_argument,
            "temperature must be a finite number >= 0");
    require(p.top_p > 0.f && p.top_p <= 1.f, Status::invalid_argument, "top_p must be in (0, 1]");
  }

  // `logits` may hold -inf for banned tokens; returns -1 when every token is banned.
  int32_t pick(const float* logits, int64_t n) {
    if (params_.temperature == 0.f) return argmax(logits, n);
    const int32_t best = argmax(logits, n);
    if (best < 0) return -1;
    const float mx = logits[best];
    probs_.resize(size_t(n));
    double total = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double p = std::isfinite(logits[i]) ? std::exp(double(logits[i] - mx) / params_.temperature) : 0.0;
      probs_[size_t(i)] = p;
      total += p;
    }
    order_.resize(size_t(n));
    std::iota(order_.begin(), order_.end(), 0);
    std::stable_sort(order_.begin(), order_.end(), [&](int32_t a, int32_t b) { return probs_[size_t(a)] > probs_[size_t(b)]; });
    // Keep the smallest prefix whose mass reaches top_p (at least one token).
    double kept = 0;
    size_t count = 0;
    while (count < order_.size() && probs_[size_t(order_[count])] > 0 && (count == 0 || kept < params_.top_p * total))
      kept += probs_[size_t(order_[count++])];
    double r = uniform() * kept;
    for (size_t i = 0; i < count; ++i) {
      r -= probs_[size_t(order_[i])];
      if (r < 0) return order_[i];
    }
    return order_[count - 1];
  }

  // The generator's position, so that a checkpointed run draws the same numbers after resuming.
  uint64_t rng_state() const { return state_; }
  void restore_rng_state(uint64_t s) { state_ = s; }

  static int32_t argmax(const float* logits, int64_t n) {
    int32_t best = -1;
    float best_v = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < n; ++i)
      if (logits[i] > best_v) {
        best_v = logits[i];
        best = int32_t(i);
      }
    return best;
  }

 private:
  // splitmix64 -> 53-bit uniform in [0, 1).
  double uniform() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return double(z >> 11) * (1.0 / 9007199254740992.0);
  }

  SamplingParams params_;
  uint64_t state_;
  std::vector<double> probs_;
  std::vector<int32_t> order_;
};

}  // namespace uocr
