// What a session run streamed, recorded by an event callback (tests/test_infinite.cpp,
// tests/test_resume.cpp, tests/test_session.cpp).
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "uocr/session/params.hpp"

namespace uocr_test {

struct Recorded {
  std::vector<int32_t> tokens;
  std::string text;
  int pages = 0, blocks = 0;
};

// A callback that records every event into `r` and never cancels.
inline std::function<bool(const uocr::Event&)> recorder(Recorded& r) {
  return [&r](const uocr::Event& e) {
    if (e.type == uocr::Event::Type::token) {
      r.tokens.push_back(e.token);
      r.text += e.text;
    }
    r.pages += e.type == uocr::Event::Type::page;
    r.blocks += e.type == uocr::Event::Type::block;
    return true;
  };
}

}  // namespace uocr_test
