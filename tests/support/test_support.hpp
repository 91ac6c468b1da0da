// Shared helpers for the test executables: where the fixtures live, reading them, what an API call threw.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "uocr/core/error.hpp"
#include "uocr/image/image.hpp"
#include "uocr/image/preprocess.hpp"
#include "uocr/io/npy.hpp"

namespace uocr_test {

inline std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : std::string(fallback);
}
inline std::string source_dir() { return env_or("UOCR_SOURCE_DIR", "."); }
inline std::string cli_path() { return env_or("UOCR_CLI", "uocr"); }
// The upstream reference cases checked into tests/data/reference (tiny-b, multi-page cases, images,
// the golden set), made by python/uocr_dev/fixtures/make_reference.py.
inline std::string reference_dir() { return source_dir() + "/tests/data/reference"; }
// The published Unlimited-OCR folder's small files (config.json, tokenizer), without the weights.
inline std::string published_dir() { return source_dir() + "/tests/data/unlimited-ocr"; }
// The golden model: tiny-b, a complete model folder (random weights, the published tokenizer).
inline std::string golden_model_dir() { return reference_dir() + "/tiny-b"; }
// Optional extra fixtures (../shared, or UOCR_SHARED_DIR): "" when there are none. Nothing the
// suite needs lives there; tests that can use it run extra cases.
inline std::string shared_dir() { return env_or("UOCR_SHARED_DIR", ""); }

inline std::vector<int32_t> npy_ids(const std::string& path) {
  const std::vector<int64_t> v = uocr::read_npy(path).to_i64();
  return std::vector<int32_t>(v.begin(), v.end());
}
// A file of the golden set: upstream's outputs for golden/page.png on tiny-b (base mode, vision
// stages, prefix logits, 300 teacher-forced steps under full attention and R-SWA n = 128 / 8), and
// its .npy files read as float32 values or int32 ids.
inline std::string golden(const std::string& file) { return reference_dir() + "/golden/" + file; }
inline std::vector<float> golden_f32(const std::string& file) { return uocr::read_npy(golden(file)).to_f32(); }
inline std::vector<int32_t> golden_ids(const std::string& file) { return npy_ids(golden(file)); }

// Exact checksum of a bf16-valued view (the generator's bf16_hash): sum over the flat CHW index i
// of bits16(x_i) * (i * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) mod 2^64. *all_bf16 says whether
// every value was bf16-exact.
inline std::string bf16_hash(const std::vector<float>& v, bool* all_bf16 = nullptr) {
  uint64_t h = 0;
  bool exact = true;
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t b;
    std::memcpy(&b, &v[i], 4);
    exact &= (b & 0xFFFFu) == 0;
    h += uint64_t(b >> 16) * (uint64_t(i) * 0x9E3779B97F4A7C15ull + 0x632BE59BD9B4E019ull);
  }
  if (all_bf16) *all_bf16 = exact;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// The golden page as upstream's base mode feeds it to the model: the 1024 px view, CHW. Its bf16
// checksum equals upstream's captured tensor (tests/test_preprocess.cpp), so this is upstream's input.
inline const std::vector<float>& golden_view() {
  static const std::vector<float> view =
      uocr::prepare_image(uocr::load_image(golden("page.png")), uocr::PreprocessConfig{1024, 1024, false}).global_chw;
  return view;
}

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

// Seconds from t0 to now.
inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace uocr_test
