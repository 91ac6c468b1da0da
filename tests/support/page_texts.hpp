// The pages of a multi-page transcript, for tests that give a page's own text back as its draft.
#pragma once
#include <string>
#include <vector>

namespace uocr_test {

// Each page's text: what follows each "<PAGE>".
inline std::vector<std::string> page_texts(const std::string& text) {
  std::vector<std::string> pages;
  for (size_t at = text.find("<PAGE>"); at != std::string::npos;) {
    const size_t next = text.find("<PAGE>", at + 6);
    pages.push_back(text.substr(at + 6, next == std::string::npos ? std::string::npos : next - at - 6));
    at = next;
  }
  return pages;
}

}  // namespace uocr_test
