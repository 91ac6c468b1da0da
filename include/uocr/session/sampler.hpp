// Next-token choice. Greedy (upstream's default: temperature 0) takes the lowest index among
// equal maxima, as torch.argmax does. Temperature/top-p sampling uses a seeded generator whose
// output is defined here bit for bit, so a seed reproduces a transcript on every platform.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <vector>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "uocr/core/error.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

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

  // `logits` may hold -inf for banned tokens; returns -1 when every token is banned. A NaN or +inf
  // leaves no meaningful choice and comes only from weights that hold NaN or overflow: it is an
  // Error(invalid_model) naming `token_number`, the generated token being chosen (1 for the
  // first). The check rides on argmax's one pass over the row.
  int32_t pick(const float* logits, int64_t n, int64_t token_number) {
    bool nan = false;
    const int32_t best = argmax(logits, n, nan);
    if (nan || (best >= 0 && std::isinf(logits[best])))
      throw Error(Status::invalid_model, "the model produced non-finite logits (" + std::string(nan ? "NaN" : "+inf") +
                                             ") at generated token " + std::to_string(token_number) +
                                             ": its weights may be damaged");
    if (best < 0 || params_.temperature == 0.f) return best;
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

  // Index of the largest value, the lowest one among equal maxima (torch.argmax); NaN is never
  // chosen; -1 when n == 0 or every value is -inf or NaN.
  static int32_t argmax(const float* logits, int64_t n) {
    bool nan = false;
    return argmax(logits, n, nan);
  }

 private:
  static constexpr int64_t kArgmaxBlock = 1024;

  // As argmax, and sets `nan` when a value is NaN. Blocks of kArgmaxBlock values are reduced with a
  // SIMD max; only the first block whose maximum is the largest (strictly larger than every earlier
  // block's) is scanned again for the index.
  static int32_t argmax(const float* logits, int64_t n, bool& nan) {
    float best = -std::numeric_limits<float>::infinity();
    int64_t best_block = -1;
    for (int64_t b = 0; b < n; b += kArgmaxBlock) {
      const float m = block_max(logits + b, std::min(kArgmaxBlock, n - b), nan);
      if (m > best) {
        best = m;
        best_block = b;
      }
    }
    if (best_block < 0) return -1;
    return int32_t(find_first(logits, best_block, n, best));
  }

  // max over x[0..len) ignoring NaN (x > m is false for NaN); -inf when there is nothing else.
  // Sets `nan` when a value is NaN.
  static float block_max(const float* x, int64_t len, bool& nan) {
    float m = -std::numeric_limits<float>::infinity();
    int64_t i = 0;
#if defined(__SSE2__)
    // _mm_max_ps(a, b) is a > b ? a : b in every lane: a NaN in `a` keeps b. Four accumulators
    // keep the max latency off the critical path. _mm_cmpunord_ps(a, b) flags a lane where a or b
    // is NaN, so two of them cover four vectors.
    __m128 acc[4] = {_mm_set1_ps(m), _mm_set1_ps(m), _mm_set1_ps(m), _mm_set1_ps(m)};
    __m128 unordered = _mm_setzero_ps();
    for (; i + 16 <= len; i += 16) {
      __m128 v[4];
      for (int k = 0; k < 4; ++k) {
        v[k] = _mm_loadu_ps(x + i + 4 * k);
        acc[k] = _mm_max_ps(v[k], acc[k]);
      }
      unordered = _mm_or_ps(unordered, _mm_or_ps(_mm_cmpunord_ps(v[0], v[1]), _mm_cmpunord_ps(v[2], v[3])));
    }
    nan = nan || _mm_movemask_ps(unordered) != 0;
    float lanes[4];
    _mm_storeu_ps(lanes, _mm_max_ps(_mm_max_ps(acc[0], acc[1]), _mm_max_ps(acc[2], acc[3])));
    for (float v : lanes) m = v > m ? v : m;
#endif
    for (; i < len; ++i) {
      m = x[i] > m ? x[i] : m;
      nan = nan || std::isnan(x[i]);
    }
    return m;
  }

  // The first index in [i, n) whose value equals v (one exists). -0 == +0, as for `>` above.
  static int64_t find_first(const float* x, int64_t i, int64_t n, float v) {
#if defined(__SSE2__)
    const __m128 target = _mm_set1_ps(v);
    for (; i + 4 <= n; i += 4) {
      const int hit = _mm_movemask_ps(_mm_cmpeq_ps(_mm_loadu_ps(x + i), target));
      if (hit != 0) return i + __builtin_ctz(unsigned(hit));
    }
#endif
    while (!(x[i] == v)) ++i;
    return i;
  }

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

UOCR_NAMESPACE_END
