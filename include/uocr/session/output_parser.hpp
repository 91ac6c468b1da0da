// Structure found in the model's output text as it streams: the literal "<PAGE>" the model
// writes at each page start in multi-page output, and layout blocks
// "<|det|>label [x1, y1, x2, y2]<|/det|>" whose 0..999 coordinates refer to the page image.
// Only a bounded tail of the text is kept.
#pragma once
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <string>
#include <string_view>

#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

// What the model writes at the start of every page of a multi-page transcript.
inline constexpr std::string_view kPageMarker = "<PAGE>";

struct LayoutBlock {
  int page = 0;
  std::string label;
  int box[4] = {0, 0, 0, 0};  // x1, y1, x2, y2 in 0..999 as written by the model
};

class OutputParser {
 public:
  std::function<void(int page)> on_page;
  std::function<void(const LayoutBlock&)> on_block;

  void feed(const std::string& text) {
    buf_ += text;
    size_t pos = 0;
    while (pos < buf_.size()) {
      const size_t lt = buf_.find('<', pos);
      if (lt == std::string::npos) {
        pos = buf_.size();
        break;
      }
      const size_t used = match_at(lt);
      if (used == kIncomplete) {
        pos = lt;
        break;
      }
      pos = lt + (used ? used : 1);
    }
    buf_.erase(0, pos);
  }

  // Text held back (a construct still arriving) and markers seen: the parser's whole state.
  struct State {
    std::string pending;
    int pages = 0;
  };
  State state() const { return {buf_, pages_}; }
  void restore(const State& s) {
    buf_ = s.pending;
    pages_ = s.pages;
  }

  int pages_seen() const { return pages_; }
  // Text is held back: it may start a construct (a marker) that later text completes.
  bool holding() const { return !buf_.empty(); }
  // Bytes of a "<PAGE>" marker written so far while it is not complete yet (0: none held).
  size_t page_marker_prefix() const {
    return buf_.size() < kPageMarker.size() && kPageMarker.substr(0, buf_.size()) == buf_ ? buf_.size() : 0;
  }
  // Page the text currently streaming belongs to (0 before any marker).
  int current_page() const { return pages_ > 0 ? pages_ - 1 : 0; }

 private:
  static constexpr size_t kIncomplete = size_t(-1);
  static constexpr size_t kMaxBlock = 256;  // a det block longer than this is not one

  // Returns bytes consumed by a construct starting at buf_[at], 0 if none, kIncomplete if the
  // text so far is a prefix of one.
  size_t match_at(size_t at) {
    static const std::string open = "<|det|>", close = "<|/det|>";
    const std::string_view page = kPageMarker;
    const std::string_view rest(buf_.data() + at, buf_.size() - at);
    if (is_prefix(rest, page)) {
      if (rest.size() < page.size()) return kIncomplete;
      ++pages_;
      if (on_page) on_page(pages_ - 1);
      return page.size();
    }
    if (!is_prefix(rest, open)) return 0;
    if (rest.size() < open.size()) return kIncomplete;
    const size_t end = rest.find(close);
    if (end == std::string::npos) return rest.size() < kMaxBlock ? kIncomplete : 0;
    LayoutBlock b;
    if (parse_block(rest.substr(open.size(), end - open.size()), b)) {
      b.page = current_page();
      if (on_block) on_block(b);
    }
    return end + close.size();
  }

  static bool is_prefix(std::string_view s, std::string_view token) {
    return token.compare(0, std::min(s.size(), token.size()), s.substr(0, std::min(s.size(), token.size()))) == 0;
  }

  // "label [x1, y1, x2, y2]" with optional whitespace, as upstream's regex
  // <|det|>\s*([A-Za-z_][\w-]*)\s*(\[[^\]]+\])\s*<|/det|> accepts.
  static bool parse_block(std::string_view s, LayoutBlock& b) {
    size_t i = 0;
    auto skip_ws = [&] { while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i; };
    skip_ws();
    const size_t l0 = i;
    if (i >= s.size() || !(std::isalpha(static_cast<unsigned char>(s[i])) || s[i] == '_')) return false;
    while (i < s.size() && (std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '_' || s[i] == '-')) ++i;
    b.label = std::string(s.substr(l0, i - l0));
    skip_ws();
    if (i >= s.size() || s[i] != '[') return false;
    ++i;
    for (int k = 0; k < 4; ++k) {
      skip_ws();
      const size_t d0 = i;
      while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
      if (i == d0 || i - d0 > 6) return false;
      b.box[k] = std::atoi(std::string(s.substr(d0, i - d0)).c_str());
      skip_ws();
      if (k < 3) {
        if (i >= s.size() || s[i] != ',') return false;
        ++i;
      }
    }
    if (i >= s.size() || s[i] != ']') return false;
    ++i;
    skip_ws();
    return i == s.size();
  }

  std::string buf_;
  int pages_ = 0;
};

// Upstream's de-normalisation: x_px = int(x / 999 * width).
inline int box_to_pixels(int v, int extent) { return int(double(v) / 999.0 * double(extent)); }

UOCR_NAMESPACE_END
