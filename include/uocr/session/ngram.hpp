// Upstream's SlidingWindowNoRepeatNgramProcessor (modeling_unlimitedocr.py): a token is banned
// when emitting it would repeat an n-gram that already occurs within the last `window` tokens of
// the full sequence (prompt ids included). Only the last `window` tokens are kept, so memory is
// constant however long the document runs.
#pragma once
#include <algorithm>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "uocr/core/error.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

class NoRepeatNgram {
 public:
  // n == 0 disables the rule. window == 0 means the whole sequence (HF's plain NoRepeatNGram),
  // which is not constant-memory and therefore rejected here.
  NoRepeatNgram(int n, int window) : n_(n), window_(window) {
    require(n >= 0, Status::invalid_argument, "no-repeat n-gram size must be >= 0");
    require(n == 0 || window > 0, Status::invalid_argument, "no-repeat n-gram window must be > 0");
  }

  void reset() {
    tail_.clear();
    length_ = 0;
  }
  void push(int32_t token) {
    tail_.push_back(token);
    ++length_;
    if (int64_t(tail_.size()) > std::max(window_, n_)) tail_.pop_front();
  }
  // `count` copies of `token` (a prompt's image placeholders): only the last max(window, n) are
  // kept, so the cost is bounded by the window, whatever the count.
  void push_repeated(int32_t token, int64_t count) {
    const int64_t kept = std::min<int64_t>(count, std::max(window_, n_));
    for (int64_t i = 0; i < kept; ++i) push(token);
    length_ += count - kept;
  }
  template <class It>
  void push(It begin, It end) {
    for (; begin != end; ++begin) push(*begin);
  }

  // Tokens that must not come next (ascending, unique).
  std::vector<int32_t> banned() const {
    std::vector<int32_t> out;
    if (n_ == 0 || length_ < n_) return out;
    const int64_t L = length_;
    const int64_t start = std::max<int64_t>(0, L - window_);
    const int64_t end = L - n_ + 1;
    if (end <= start) return out;
    const int64_t base = L - int64_t(tail_.size());  // absolute index of tail_[0]
    auto at = [&](int64_t abs) { return tail_[size_t(abs - base)]; };
    for (int64_t idx = start; idx < end; ++idx) {
      bool match = true;
      for (int64_t k = 0; k < n_ - 1 && match; ++k) match = at(idx + k) == at(L - n_ + 1 + k);
      if (match) out.push_back(at(idx + n_ - 1));
    }
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }

  int n() const { return n_; }
  int window() const { return window_; }

  // The kept tail and the sequence length: all a checkpoint needs to continue the rule exactly.
  struct State {
    std::vector<int32_t> tail;
    int64_t length = 0;
  };
  State state() const { return {std::vector<int32_t>(tail_.begin(), tail_.end()), length_}; }
  // banned() indexes the tail by sequence position: it must hold exactly what push() keeps.
  void restore(const State& s) {
    require(s.length >= 0 && int64_t(s.tail.size()) == std::min<int64_t>(s.length, std::max(window_, n_)), Status::invalid_argument,
            [&] {
              return "n-gram state: a history of " + std::to_string(s.tail.size()) + " tokens for a sequence of " +
                     std::to_string(s.length) + " does not fit this rule's window";
            });
    tail_.assign(s.tail.begin(), s.tail.end());
    length_ = s.length;
  }

 private:
  int n_;
  int window_;
  std::deque<int32_t> tail_;
  int64_t length_ = 0;
};

UOCR_NAMESPACE_END
