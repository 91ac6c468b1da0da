// The time by which a run must stop (SessionParams::page_time_budget_seconds). A session checks
// it between two tokens and hands it to its pages and its decoder, so that the work before a
// page's first token stops too: a page source waiting for or rendering a page, libjpeg between
// two rows of a scan, the encoder between two views of a page and, on the CPU, between two blocks
// of a view, a prefill before each decoder layer (uocr/session/page_source.hpp,
// uocr/image/image.hpp, uocr/vision/encoder.hpp, uocr/decoder/decoder.hpp).
#pragma once
#include <chrono>
#include <string>

#include "uocr/core/error.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

// Work stopped because its deadline passed (Status::cancelled). A session turns it into
// StopReason::time_budget; outside a session it is an error like any other.
class DeadlinePassed final : public Error {
 public:
  explicit DeadlinePassed(const std::string& doing) : Error(Status::cancelled, doing + " ran past the run's time budget") {}
};

struct Deadline {
  using Clock = std::chrono::steady_clock;
  Clock::time_point at = Clock::time_point::max();  // max: none

  // `seconds` after `start`; none for seconds <= 0 and for budgets past any clock (a century).
  static Deadline after(Clock::time_point start, double seconds) {
    Deadline d;
    if (seconds > 0 && seconds < 3.2e9)
      d.at = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
    return d;
  }
  bool none() const { return at == Clock::time_point::max(); }
  bool passed() const { return !none() && Clock::now() >= at; }
  // Throws DeadlinePassed, naming what was being done, once the deadline has passed.
  void check(const std::string& doing) const {
    if (passed()) throw DeadlinePassed(doing);
  }
};

UOCR_NAMESPACE_END
