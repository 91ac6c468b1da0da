// The service's errors: an HTTP status and OpenAI's error body,
//   {"error": {"message": "...", "type": "invalid_request_error", "param": "messages", "code": 400}}
// (vLLM's ErrorResponse: `code` is the HTTP status). Handlers throw ApiError; the server turns it
// into that body, or, once a stream has begun, into a `data: {"error": ...}` event.
#pragma once
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "uocr/core/error.hpp"

namespace uocr_serve {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string param = "")
      : std::runtime_error(std::move(message)), status_(status), param_(std::move(param)) {}
  int status() const { return status_; }
  const std::string& param() const { return param_; }
  // OpenAI's error type for the status.
  const char* type() const { return error_type(status_); }

  static const char* error_type(int status) {
    switch (status) {
      case 401: return "authentication_error";
      case 404: return "not_found_error";
      case 413: return "request_too_large";
      case 429: return "rate_limit_error";
      case 503: return "service_unavailable";
      case 504: return "timeout";
      default: return status >= 500 ? "internal_error" : "invalid_request_error";
    }
  }

  nlohmann::json body() const { return error_body(status_, what(), param_); }

  static nlohmann::json error_body(int status, const std::string& message, const std::string& param = "") {
    nlohmann::json e = {{"message", message}, {"type", error_type(status)}, {"param", nullptr}, {"code", status}};
    if (!param.empty()) e["param"] = param;
    return {{"error", e}};
  }

 private:
  int status_;
  std::string param_;
};

// A library error as the client sees it: what it sent is wrong (400), or the server failed (5xx).
inline ApiError api_error(const uocr::Error& e) {
  switch (e.status()) {
    case uocr::Status::invalid_argument:
    case uocr::Status::invalid_image:
    case uocr::Status::unsupported:
    case uocr::Status::tokenizer: return ApiError(400, e.what());
    case uocr::Status::out_of_memory: return ApiError(503, e.what());
    case uocr::Status::cancelled: return ApiError(503, e.what());
    default: return ApiError(500, std::string(uocr::status_name(e.status())) + ": " + e.what());
  }
}

}  // namespace uocr_serve
