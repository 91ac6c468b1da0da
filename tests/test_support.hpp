// Shared helpers for the test executables: where the fixtures live.
#pragma once
#include <cstdlib>
#include <string>

namespace uocr_test {

inline std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : std::string(fallback);
}
inline std::string shared_dir() { return env_or("UOCR_SHARED_DIR", "../shared"); }
inline std::string golden_dir(const std::string& name) { return shared_dir() + "/golden/" + name; }
inline std::string source_dir() { return env_or("UOCR_SOURCE_DIR", "."); }
inline std::string cli_path() { return env_or("UOCR_CLI", "uocr"); }

}  // namespace uocr_test
