// uocr::Error: the one exception type the header-only core throws. The C ABI converts it to a
// status code plus message at the boundary, so nothing here may abort on bad input.
#pragma once
#include <stdexcept>
#include <string>
#include <utility>

#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

// Stable numbering: never renumber, only append (mirrored by the C ABI's uocr_status).
enum class Status : int {
  ok = 0,
  invalid_argument = -1,
  io = -2,
  invalid_model = -3,
  invalid_image = -4,
  unsupported = -5,
  out_of_memory = -6,
  tokenizer = -7,
  cancelled = -8,
  internal = -9,
};

inline const char* status_name(Status s) {
  switch (s) {
    case Status::ok: return "ok";
    case Status::invalid_argument: return "invalid argument";
    case Status::io: return "I/O error";
    case Status::invalid_model: return "invalid model";
    case Status::invalid_image: return "invalid image";
    case Status::unsupported: return "unsupported";
    case Status::out_of_memory: return "out of memory";
    case Status::tokenizer: return "tokenizer error";
    case Status::cancelled: return "cancelled";
    case Status::internal: return "internal error";
  }
  return "unknown";
}

class Error : public std::runtime_error {
 public:
  Error(Status status, std::string message)
      : std::runtime_error(std::move(message)), status_(status) {}
  Status status() const noexcept { return status_; }

 private:
  Status status_;
};

// Throws when `condition` is false; `message` is only built on failure.
template <class MessageFn>
inline void require(bool condition, Status status, MessageFn&& message) {
  if (!condition) throw Error(status, message());
}

inline void require(bool condition, Status status, const char* message) {
  if (!condition) throw Error(status, message);
}

UOCR_NAMESPACE_END
