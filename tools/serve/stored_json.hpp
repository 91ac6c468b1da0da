// Numbers of the state the server wrote itself (job.json, a fleet's job hash), read back as
// untrusted: a damaged disk or another writer of the same Redis may have put anything there.
// A missing field, a wrong type or a number the C++ type cannot hold is an invalid_argument
// error, never a conversion the language leaves undefined.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "uocr/core/error.hpp"

namespace uocr_serve {

template <class Int>
Int stored_integer(const nlohmann::json& j, const char* key) {
  static_assert(std::is_integral_v<Int>);
  auto bad = [&] { return uocr::Error(uocr::Status::invalid_argument, std::string("stored field '") + key + "' is not an integer the server writes"); };
  const auto it = j.find(key);
  if (it == j.end()) throw bad();
  // Redis's Lua (cjson) may give an integer back as a float with no fraction.
  if (it->is_number_float()) {
    const double x = it->get<double>();
    const double end = std::ldexp(1.0, std::numeric_limits<Int>::digits);  // max + 1, exact in a double
    if (!(x == std::floor(x) && x >= double(std::numeric_limits<Int>::min()) && x < end)) throw bad();
  }
  if (!it->is_number()) throw bad();
  if (it->is_number_unsigned()) {
    const uint64_t u = it->get<uint64_t>();
    if (u > uint64_t(std::numeric_limits<Int>::max())) throw bad();
    return Int(u);
  }
  if (it->is_number_integer()) {
    const int64_t s = it->get<int64_t>();
    if (s < int64_t(std::numeric_limits<Int>::min()) || (s > 0 && uint64_t(s) > uint64_t(std::numeric_limits<Int>::max()))) throw bad();
    return Int(s);
  }
  return Int(it->get<double>());
}

inline double stored_number(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number())
    throw uocr::Error(uocr::Status::invalid_argument, std::string("stored field '") + key + "' is not a number");
  return it->get<double>();
}

}  // namespace uocr_serve
