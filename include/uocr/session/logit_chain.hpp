// The logit chain: the rules that turn one step's logits into the next token, in this order:
//  1. EOS is banned until min_new_tokens tokens were generated (as Hugging Face generate's);
//  2. while a "<PAGE>" marker is being written and pages follow (marker completion,
//     marker_completion.hpp), only tokens that continue it remain, free of the n-gram rule;
//     otherwise the no-repeat n-gram rule bans the tokens it lists (ngram.hpp);
//  3. the sampler picks (greedy, or temperature / top-p; sampler.hpp), -1 when every token is banned.
// The session runs it once per step; it holds no state of its own, so a step can be replayed.
#pragma once
#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "uocr/core/error.hpp"
#include "uocr/session/marker_completion.hpp"
#include "uocr/session/sampler.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

class LogitChain {
 public:
  // completion: null when markers are not completed (every page in one group, or switched off).
  LogitChain(int64_t vocab, int64_t min_new_tokens, int32_t eos, const MarkerCompletion* completion)
      : vocab_(vocab), min_new_tokens_(min_new_tokens), eos_(eos), completion_(completion) {}

  // What the rules read about the document at this step.
  struct Step {
    int64_t generated = 0;         // tokens generated before this one
    int64_t token_number = 0;      // this token's number (generated + 1), for the sampler's errors
    size_t marker_prefix = 0;      // bytes of a begun "<PAGE>" marker (PageClock::marker_prefix)
    bool pages_follow = false;     // a page follows the one being written
    std::vector<int32_t> banned;   // the n-gram rule's tokens
  };
  struct Pick {
    int32_t token = -1;            // -1: every token was banned
    bool completed_marker = false; // greedy decoding under the n-gram rule would have left the marker
  };

  // Applies the rules to `logits` (changed in place) and picks the next token.
  Pick next(std::vector<float>& logits, const Step& s, Sampler& sampler) const {
    Pick p;
    if (s.generated < min_new_tokens_) ban(logits, eos_);
    if (completion_ && s.pages_follow && completion_->writing(s.marker_prefix)) {
      p.completed_marker = !completion_->continues(s.marker_prefix, most_likely(logits, s.banned));
      completion_->restrict(s.marker_prefix, logits);
    } else {
      for (int32_t b : s.banned) ban(logits, b);
    }
    p.token = sampler.pick(logits.data(), vocab_, s.token_number);
    return p;
  }

 private:
  // Ids are checked where they are read (config, checkpoint); this check keeps a missed one from
  // ever writing outside the logits.
  static void ban(std::vector<float>& logits, int32_t token) {
    require(token >= 0 && size_t(token) < logits.size(), Status::internal,
            [&] { return "token id " + std::to_string(token) + " to ban is outside the logits"; });
    logits[size_t(token)] = -std::numeric_limits<float>::infinity();
  }

  // The token greedy decoding would pick with `banned` excluded.
  static int32_t most_likely(const std::vector<float>& logits, std::vector<int32_t> banned) {
    std::sort(banned.begin(), banned.end());
    int32_t best = -1;
    for (size_t id = 0; id < logits.size(); ++id)
      if ((best < 0 || logits[id] > logits[size_t(best)]) && !std::binary_search(banned.begin(), banned.end(), int32_t(id)))
        best = int32_t(id);
    return best;
  }

  int64_t vocab_, min_new_tokens_;
  int32_t eos_;
  const MarkerCompletion* completion_;
};

UOCR_NAMESPACE_END
