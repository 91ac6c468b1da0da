// The page clock: decides when generated text has passed a page boundary, from the model's
// "<PAGE>" markers, a fallback after page_fallback_tokens tokens without one, and early EOS
// (the policy is described at the top of uocr/session/session.hpp, which runs it).
#pragma once
#include <cstdint>
#include <string>

#include "uocr/core/error.hpp"
#include "uocr/session/output_parser.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

class PageClock {
 public:
  explicit PageClock(int64_t fallback_tokens = 4096) : fallback_(fallback_tokens) {
    require(fallback_ >= 0, Status::invalid_argument, "page fallback tokens must be >= 0");
    parser_.on_page = [this](int m) {
      since_marker_ = 0;
      lead_ = fed_ - 1 - hold_start_;
      if (m > page_) {
        pending_ += m - page_;
        markers_ += m - page_;
        page_ = m;
      }
    };
  }
  PageClock(const PageClock&) = delete;  // parser_'s callback points at this object
  PageClock& operator=(const PageClock&) = delete;

  // Feeds one generated token's text; returns the page boundaries it passed (usually 0 or 1).
  int64_t feed(const std::string& text) {
    if (!parser_.holding()) hold_start_ = fed_;  // a marker completed later starts at this token
    ++fed_;
    pending_ = 0;
    ++since_marker_;
    parser_.feed(text);
    if (fallback_ > 0 && since_marker_ >= fallback_) force();
    const int64_t n = pending_;
    pending_ = 0;
    return n;
  }
  // Advances one page now (fallback, early EOS); returns 1.
  int64_t force() {
    lead_ = 0;
    ++page_;
    ++forced_;
    ++pending_;
    since_marker_ = 0;
    return 1;
  }

  int64_t page() const { return page_; }
  // Bytes of a "<PAGE>" marker begun and not yet complete (0: none).
  size_t marker_prefix() const { return parser_.page_marker_prefix(); }
  int64_t marker_boundaries() const { return markers_; }
  // Tokens before the last one fed that belong to the boundary it passed (the start of its
  // marker): they begin the new page's text. 0 for a forced boundary.
  int64_t marker_lead() const { return lead_; }
  int64_t forced_boundaries() const { return forced_; }

  // Between two feed() calls (for checkpoints). marker_lead() is not part of it: it is read
  // right after the feed() that set it.
  struct State {
    OutputParser::State parser;
    int64_t page = 0, since_marker = 0, markers = 0, forced = 0, fed = 0, hold_start = 0;
  };
  State state() const { return {parser_.state(), page_, since_marker_, markers_, forced_, fed_, hold_start_}; }
  void restore(const State& s) {
    parser_.restore(s.parser);
    page_ = s.page;
    since_marker_ = s.since_marker;
    markers_ = s.markers;
    forced_ = s.forced;
    fed_ = s.fed;
    hold_start_ = s.hold_start;
    lead_ = 0;
  }

 private:
  OutputParser parser_;
  int64_t fallback_;
  int64_t page_ = 0, pending_ = 0, since_marker_ = 0, markers_ = 0, forced_ = 0;
  int64_t fed_ = 0, hold_start_ = 0, lead_ = 0;  // tokens fed; where the held text began; marker_lead()
};

UOCR_NAMESPACE_END
