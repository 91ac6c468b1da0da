// Everything a session's generation loop carries from one token to the next, besides the
// decoder (uocr/session/session.hpp runs the loop; uocr/session/checkpoint.hpp saves it).
#pragma once
#include <cstdint>
#include <deque>
#include <vector>

#include "uocr/session/loop_guard.hpp"
#include "uocr/session/ngram.hpp"
#include "uocr/session/output_parser.hpp"
#include "uocr/session/page_clock.hpp"
#include "uocr/session/params.hpp"
#include "uocr/session/sampler.hpp"
#include "uocr/tokenizer/utf8.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

struct GenerationState {
  GenerationState(const SessionParams& p, int ngram_window, int64_t fallback)
      : ngram(p.ngram_size, p.ngram_size ? ngram_window : 0), sampler(p.sampling), guard(p.loop_guard_params), clock(fallback) {}
  NoRepeatNgram ngram;
  Sampler sampler;
  LoopGuard guard;
  utf8::StreamDecoder stream;
  OutputParser parser;
  PageClock clock;
  std::deque<int32_t> forced;  // "<PAGE>" tokens written in place of an early EOS
  std::vector<float> logits;   // of the next token
  int64_t generated = 0, early_eos_replaced = 0, markers_completed = 0;
  uint64_t emitted_bytes = 0;  // token text streamed so far
  bool visible = false;        // some of it is not whitespace (the transcript is not empty)
};

UOCR_NAMESPACE_END
