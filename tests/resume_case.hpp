// The document settings of the resume tests (CPU: tests/test_resume.cpp; Vulkan and across
// backends: tests/test_vulkan_session.cpp): sampled, so the RNG state matters; two pages held of
// three; the fallback sliding every 8 tokens when the output has no <PAGE>.
#pragma once
#include "uocr/session/infinite.hpp"

namespace uocr_test {

inline uocr::SessionParams resume_params(uocr::Backend backend = uocr::Backend::cpu) {
  uocr::SessionParams p;
  p.backend = backend;
  p.max_new_tokens = 40;
  p.sampling.temperature = 0.8f;
  p.sampling.seed = 7;
  return p;
}

inline uocr::InfiniteParams resume_groups() {
  uocr::InfiniteParams ip;
  ip.groups.group_pages = 2;
  ip.groups.overlap_pages = 1;
  ip.page_fallback_tokens = 8;
  return ip;
}

}  // namespace uocr_test
