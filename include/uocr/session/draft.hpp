// Draft decoding: the page's own text (a PDF's text layer, an earlier OCR pass:
// PageSource::draft_text) proposes the next tokens, and one decoder pass verifies them all.
//
// Exact by construction. The decoder's verify() gives each proposed token's row the bits a step
// would give it (BasicPageGroupDecoder::verify); the session still picks every token from its
// row with the same logit rules (n-gram ban, EOS minimum, marker completion); a proposed token is
// used only when it is the token picked, and settle() forgets the rows after the first one that
// is not. A draft can save passes, never change the text: the Markdown, the tables, the reading
// order all still come from the model. Greedy decoding only (a sampled token depends on the RNG,
// and a draft would not save passes there): with temperature > 0 it is off.
//
// Proposals are prompt lookup (no draft model): the last generated tokens are matched against the
// draft's tokens (the longest suffix of up to kMaxMatch tokens, searched forward from where the
// last proposal was found, so that reading in order costs O(1) per pass), and what followed that
// match in the draft is proposed. The count proposed adapts to how many were accepted lately,
// and drafting rests while its passes cost more time per token than plain steps (measured as it
// runs: which passes are drafted depends on timing, the text never does).
//
// Thread-safety: one per session run.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "uocr/core/error.hpp"
#include "uocr/engine/engine.hpp"
#include "uocr/session/page_source.hpp"
#include "uocr/tokenizer/tokenizer.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

struct DraftParams {
  // Verify the page's draft text when the page source has one (greedy decoding, a backend
  // with multi-token steps: the CPU, Vulkan). Off: one pass per token.
  bool enabled = true;
  static constexpr int kMaxTokens = 256;
  int max_tokens = 16;  // the most tokens proposed for one pass (1..kMaxTokens)
  // Rest while verified tokens cost more time than steps (measured as the run goes). Off: the
  // passes drafted depend on the drafts only (tests that count passes).
  bool measure_cost = true;
};

inline void validate(const DraftParams& p) {
  require(p.max_tokens >= 1 && p.max_tokens <= DraftParams::kMaxTokens, Status::invalid_argument, [&] {
    return "draft max_tokens must be in 1.." + std::to_string(DraftParams::kMaxTokens) + ", got " + std::to_string(p.max_tokens);
  });
}

// What drafting did in a run. Without drafting, passes = generated tokens.
struct DraftStats {
  int64_t passes = 0;         // decoder passes of the generation loop (steps and verifications)
  int64_t verify_passes = 0;  // of those, passes that verified a draft
  int64_t drafted = 0;        // tokens proposed
  int64_t accepted = 0;       // proposed tokens that were the tokens picked
};

// Proposes what follows the generated text in a draft's tokens.
class DraftLookup {
 public:
  static constexpr int kMaxMatch = 4;  // the longest suffix of the generated text matched

  void set(std::vector<int32_t> draft) {
    draft_ = std::move(draft);
    anchor_ = 0;
  }

  // Up to `k` tokens that followed the last `n_recent` generated tokens (`recent`, oldest first)
  // in the draft: after the longest suffix that occurs there, its first occurrence at or after
  // the last proposal's place, else its first one. `out` is empty when nothing matches.
  void propose(const int32_t* recent, int64_t n_recent, int64_t k, std::vector<int32_t>& out) {
    out.clear();
    const int64_t size = int64_t(draft_.size());
    for (int64_t m = std::min<int64_t>(kMaxMatch, n_recent); m >= 1 && k > 0; --m) {
      const int32_t* tail = recent + n_recent - m;
      auto matches = [&](int64_t j) { return std::equal(tail, tail + m, draft_.begin() + (j - m)); };
      int64_t at = -1;
      for (int64_t j = std::max<int64_t>(anchor_, m); j < size && at < 0; ++j)
        if (matches(j)) at = j;
      for (int64_t j = m; j < std::min(anchor_, size) && at < 0; ++j)
        if (matches(j)) at = j;
      if (at < 0) continue;
      anchor_ = at;
      out.assign(draft_.begin() + at, draft_.begin() + std::min(size, at + k));
      return;
    }
  }

 private:
  std::vector<int32_t> draft_;
  int64_t anchor_ = 0;  // where the last proposal began in the draft
};

// The draft tokens of a page source's pages: page p's draft text, then page p + 1's (the output
// crosses into it before the page clock does). Each text is tokenized twice: as it is, and as
// Markdown would hold its lines, each opened by a space (the form a line's first word takes after
// "# ", "- ", "| " or a wrapped line's predecessor) and set apart by a blank line. Each page's
// text is read and tokenized once (the next page's is kept for when the clock reaches it).
class PageDrafts {
 public:
  PageDrafts(const PageSource& pages, const Tokenizer& tokenizer) : pages_(pages), tok_(tokenizer) {}

  std::vector<int32_t> tokens_from(int64_t page) {
    std::vector<int32_t> ids = page_tokens(page);
    const std::vector<int32_t> next = page_tokens(page + 1);
    ids.insert(ids.end(), next.begin(), next.end());
    return ids;
  }

 private:
  std::vector<int32_t> page_tokens(int64_t page) {
    for (const Cached& c : cache_)
      if (c.page == page) return c.ids;
    Cached& c = cache_[next_slot_];
    next_slot_ ^= 1;
    c = Cached{page, {}};
    if (page < pages_.count()) {
      const std::string text = pages_.draft_text(page);
      if (!text.empty()) {
        c.ids = tok_.encode(text);
        std::string spaced;
        for (size_t at = 0; at < text.size();) {
          const size_t end = std::min(text.find('\n', at), text.size());
          if (end > at) spaced += (spaced.empty() ? " " : "\n\n ") + text.substr(at, end - at);
          at = end + 1;
        }
        const std::vector<int32_t> more = tok_.encode(spaced);
        c.ids.insert(c.ids.end(), more.begin(), more.end());
      }
    }
    return c.ids;
  }

  struct Cached {
    int64_t page = -1;
    std::vector<int32_t> ids;
  };
  const PageSource& pages_;
  const Tokenizer& tok_;
  Cached cache_[2];  // the last two pages read
  int next_slot_ = 0;
};

// DecoderEngine::step() with drafts: a step whose token begins a verified draft's rows is served
// from them. Call settle() before any other call on the engine (next_page, checkpoints, the end
// of a run): it forgets the rows not used.
class DraftedSteps {
 public:
  // on = false: every step() is the engine's.
  DraftedSteps(DecoderEngine& engine, const DraftParams& params, bool on)
      : engine_(engine), on_(on), measure_(params.measure_cost), max_(params.max_tokens), k_(std::max(1, params.max_tokens / 2)) {
    validate(params);
  }

  // The tokens proposals are taken from (the current page's draft and the next one's).
  void set_draft(std::vector<int32_t> ids) { lookup_.set(std::move(ids)); }

  // As engine.step(token): the logits of the token after `token`.
  const std::vector<float>& step(int32_t token) {
    if (on_) {
      recent_.push_back(token);
      if (int64_t(recent_.size()) > DraftLookup::kMaxMatch) recent_.erase(recent_.begin());
      if (rows_ > 0 && used_ < rows_ && pass_[size_t(used_)] == token) return take_row();
      settle();
      const int64_t room = std::min<int64_t>(engine_.verify_limit(), int64_t(k_) + 1);
      proposal_.clear();
      if (room >= 2 && rest_ == 0) lookup_.propose(recent_.data(), int64_t(recent_.size()), room - 1, proposal_);
      rest_ = std::max(0, rest_ - 1);
      if (!proposal_.empty()) {
        pass_.assign(1, token);
        pass_.insert(pass_.end(), proposal_.begin(), proposal_.end());
        const auto t0 = std::chrono::steady_clock::now();
        rows_logits_ = &engine_.verify(pass_.data(), int64_t(pass_.size()));
        pass_seconds_ = seconds_since(t0);
        ++stats_.passes;
        ++stats_.verify_passes;
        stats_.drafted += int64_t(proposal_.size());
        rows_ = int64_t(pass_.size());
        used_ = 0;
        return take_row();
      }
    }
    ++stats_.passes;
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<float>& logits = engine_.step(token);
    step_seconds_.add(seconds_since(t0));
    return logits;
  }

  // Forgets the verified rows no step used (none open: nothing to do).
  void settle() {
    if (rows_ == 0) return;
    engine_.settle(used_);
    const int64_t proposed = rows_ - 1, accepted = used_ - 1;
    stats_.accepted += accepted;
    if (accepted == proposed) k_ = std::min(max_, 2 * k_);
    else if (2 * accepted < proposed) k_ = std::max(1, k_ / 2);
    // A draft that keeps missing (a wrong text layer) rests for longer and longer stretches.
    misses_ = accepted == 0 ? std::min(misses_ + 1, kMaxRest) : 0;
    rest_ = misses_ > 1 ? 1 << (misses_ - 1) : 0;
    // So does drafting whose verified tokens cost more time than steps: where a pass over several
    // tokens costs nearly what as many steps cost (arithmetic-bound, not bound by reading the
    // weights), it would only slow decoding down. The first pass is not timed (buffers grow).
    if (measure_ && ++timed_passes_ > 1) {
      token_seconds_.add(pass_seconds_ / double(used_));
      if (token_seconds_.n >= 2 && step_seconds_.n >= 4 && token_seconds_.mean > step_seconds_.mean)
        rest_ = std::max(rest_, kCostRest);
    }
    rows_ = 0;
  }

  // The engine's next position as the steps so far left it (rows not yet used do not count).
  int64_t next_position() const { return engine_.next_position() - (rows_ > 0 ? rows_ - used_ : 0); }
  const DraftStats& stats() const { return stats_; }

 private:
  const std::vector<float>& take_row() {
    const int64_t vocab = int64_t(rows_logits_->size()) / rows_;
    row_.assign(rows_logits_->begin() + used_ * vocab, rows_logits_->begin() + (used_ + 1) * vocab);
    ++used_;
    return row_;
  }

  static double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  // A moving mean of recent times (the newest weighs a quarter).
  struct RecentMean {
    double mean = 0;
    int64_t n = 0;
    void add(double v) { mean = n++ == 0 ? v : mean + 0.25 * (v - mean); }
  };

  static constexpr int kMaxRest = 6;    // rests of up to 2^5 steps
  static constexpr int kCostRest = 32;  // steps before a pass is timed again

  DecoderEngine& engine_;
  bool on_, measure_;
  int64_t timed_passes_ = 0;
  int max_, k_;  // the most tokens proposed, and how many now
  int misses_ = 0, rest_ = 0;  // passes in a row that accepted nothing; steps left without proposals
  RecentMean step_seconds_, token_seconds_;  // a plain step; a verified pass per token it gave
  double pass_seconds_ = 0;                  // the open verification's
  DraftLookup lookup_;
  std::vector<int32_t> recent_, proposal_, pass_;
  const std::vector<float>* rows_logits_ = nullptr;  // the open verification's rows
  int64_t rows_ = 0, used_ = 0;                        // its rows (0: none open) and those steps used
  std::vector<float> row_;
  DraftStats stats_;
};

UOCR_NAMESPACE_END
