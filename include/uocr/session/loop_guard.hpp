// Catches the degenerate loops the n-gram rule misses: the model repeating a block whose only
// changes are the numbers inside <|det|> boxes (a known failure of this model), or repeating
// text too long for a 35-gram window. Works on the decoded text tail, so memory is bounded.
#pragma once
#include <cstddef>
#include <string>

#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

struct LoopGuardParams {
  size_t min_repeats = 16;     // a block must repeat at least this often in a row ...
  size_t min_span = 1024;      // ... and the repetition must cover at least this many bytes
  size_t max_period = 2048;    // longest block considered
  size_t check_every = 64;     // bytes of new text between checks (bounds the cost)
};

class LoopGuard {
 public:
  explicit LoopGuard(const LoopGuardParams& p = {}) : p_(p) {}

  // Feeds decoded text; returns true once the tail is a loop.
  bool push(const std::string& text) {
    for (char c : text) append(c);
    if (pending_ < p_.check_every) return false;
    pending_ = 0;
    return looping();
  }
  void reset() {
    tail_.clear();
    pending_ = 0;
    in_box_ = false;
  }
  // The repeating block found by the last positive check (normalised), for diagnostics.
  const std::string& block() const { return block_; }

  // Everything push() depends on (for checkpoints).
  struct State {
    std::string tail;
    size_t pending = 0;
    bool in_box = false;
  };
  State state() const { return {tail_, pending_, in_box_}; }
  void restore(const State& s) {
    tail_ = s.tail;
    pending_ = s.pending;
    in_box_ = s.in_box;
  }

 private:
  // Digits inside <|det|>...<|/det|> are normalised to '#' so varying coordinates still repeat.
  void append(char c) {
    tail_.push_back(in_box_ && c >= '0' && c <= '9' ? '#' : c);
    ++pending_;
    static const std::string open = "<|det|>", close = "<|/det|>";
    if (ends_with(open)) in_box_ = true;
    if (ends_with(close)) in_box_ = false;
    const size_t keep = p_.max_period * p_.min_repeats + p_.min_span;
    if (tail_.size() > 2 * keep) tail_.erase(0, tail_.size() - keep);
  }
  bool ends_with(const std::string& s) const {
    return tail_.size() >= s.size() && tail_.compare(tail_.size() - s.size(), s.size(), s) == 0;
  }
  bool looping() {
    const size_t n = tail_.size();
    for (size_t period = 1; period <= p_.max_period && period * 2 <= n; ++period) {
      // Length of the suffix that is periodic with this period.
      size_t run = period;
      while (run < n && tail_[n - 1 - run] == tail_[n - 1 - run + period]) ++run;
      if (run / period >= p_.min_repeats && run >= p_.min_span) {
        block_ = tail_.substr(n - period);
        return true;
      }
    }
    return false;
  }

  LoopGuardParams p_;
  std::string tail_;
  std::string block_;
  size_t pending_ = 0;
  bool in_box_ = false;
};

UOCR_NAMESPACE_END
