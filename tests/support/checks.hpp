// doctest checks shared by the test files.
#pragma once
#include <doctest/doctest.h>

#include <string>

#include "support/test_support.hpp"
#include "uocr/core/error.hpp"

namespace uocr_test {

// The message of the error `f` must fail with, of status `expected` (checked).
template <class F>
std::string error_of(F&& f, uocr::Status expected) {
  std::string message;
  CHECK(status_of(f, &message) == expected);
  return message;
}

}  // namespace uocr_test
