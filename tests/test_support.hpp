// Shared helpers for the test executables: where the fixtures live, reading them, what an API call threw.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "uocr/core/error.hpp"
#include "uocr/io/npy.hpp"

namespace uocr_test {

inline std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : std::string(fallback);
}
inline std::string shared_dir() { return env_or("UOCR_SHARED_DIR", "../shared"); }
inline std::string golden_dir(const std::string& name) { return shared_dir() + "/golden/" + name; }
inline std::string source_dir() { return env_or("UOCR_SOURCE_DIR", "."); }
inline std::string cli_path() { return env_or("UOCR_CLI", "uocr"); }
// The upstream reference cases checked into tests/data/reference (tiny-b, multi-page cases, images).
inline std::string reference_dir() { return source_dir() + "/tests/data/reference"; }

// An .npy file of token ids (stored as int64) as the int32 ids the decoder takes.
inline std::vector<int32_t> npy_ids(const std::string& path) {
  const std::vector<int64_t> v = uocr::read_npy(path).to_i64();
  return std::vector<int32_t>(v.begin(), v.end());
}
// A file of the tiny-a golden model (random weights and the upstream reference outputs), and its
// .npy files read as float32 values or int32 ids.
inline std::string tiny_a(const std::string& file) { return golden_dir("tiny-a") + "/" + file; }
inline std::vector<float> tiny_a_f32(const std::string& file) { return uocr::read_npy(tiny_a(file)).to_f32(); }
inline std::vector<int32_t> tiny_a_ids(const std::string& file) { return npy_ids(tiny_a(file)); }

// Whether two logits rows are the same to the bit.
inline bool bit_identical(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
// Index of the largest value (the first one on ties).
inline size_t argmax(const std::vector<float>& v) { return size_t(std::max_element(v.begin(), v.end()) - v.begin()); }

// The status a call failed with (Status::ok when it returned normally), and its message in
// *message when given.
template <class F>
uocr::Status status_of(F&& f, std::string* message = nullptr) {
  try {
    f();
  } catch (const uocr::Error& e) {
    if (message) *message = e.what();
    return e.status();
  }
  return uocr::Status::ok;
}

// The message a call failed with ("" when it returned normally).
template <class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const uocr::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace uocr_test
