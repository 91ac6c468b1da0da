// Streaming clean-up of the model's raw output into Markdown, as upstream's post-processing
// does: layout tags <|det|>...<|/det|> are dropped (their content follows them and is kept),
// <|ref|>/<|/ref|> tag pairs are unwrapped, and every "<PAGE>" marker gets a line of its own
// (upstream's infer_multi joins the pages as "<PAGE>\n" + "\n<PAGE>\n".join(pages), so a page's
// first heading is a heading); everything else passes through. Text that might be
// the start of a tag is held back until it is decided, so streamed output never shows half a tag.
#pragma once
#include <string>
#include <string_view>
#include <utility>

#include "uocr/session/output_parser.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

class MarkdownFilter {
 public:
  std::string feed(std::string_view text) {
    buf_.append(text.data(), text.size());
    return drain(false);
  }
  std::string flush() { return drain(true); }

  // Text held back (a tag that may still be arriving), for checkpoints; restore() puts it back,
  // `emitted`: whether any text had been returned before (a later marker opens a new line).
  const std::string& pending() const { return buf_; }
  void restore(std::string pending, bool emitted) {
    buf_ = std::move(pending);
    emitted_ = emitted;
  }

 private:
  static constexpr size_t kMaxTag = 256;  // a det block longer than this is treated as text

  std::string drain(bool at_end) {
    std::string out = clean(at_end);
    emitted_ = emitted_ || !out.empty();
    return out;
  }

  std::string clean(bool at_end) {
    static const std::string det_open = "<|det|>", det_close = "<|/det|>", ref_open = "<|ref|>", ref_close = "<|/ref|>";
    const std::string_view page = kPageMarker;
    std::string out;
    size_t i = 0;
    while (i < buf_.size()) {
      const size_t lt = buf_.find('<', i);
      if (lt == std::string::npos) {
        out.append(buf_, i, std::string::npos);
        i = buf_.size();
        break;
      }
      out.append(buf_, i, lt - i);
      const std::string_view rest(buf_.data() + lt, buf_.size() - lt);
      if (starts(rest, det_open)) {
        const size_t end = rest.find(det_close);
        if (end != std::string::npos) {
          i = lt + end + det_close.size();
          continue;
        }
        if (!at_end && rest.size() < kMaxTag) return keep(out, lt);
      } else if (starts(rest, page)) {
        if (emitted_ || !out.empty()) out += '\n';
        out.append(page).push_back('\n');
        i = lt + page.size();
        continue;
      } else if (starts(rest, ref_open) || starts(rest, ref_close)) {
        i = lt + (starts(rest, ref_open) ? ref_open.size() : ref_close.size());
        continue;
      } else if (!at_end && (is_prefix(rest, det_open) || is_prefix(rest, ref_open) || is_prefix(rest, ref_close) ||
                             is_prefix(rest, page))) {
        return keep(out, lt);
      }
      out.push_back('<');
      i = lt + 1;
    }
    buf_.clear();
    return out;
  }
  // Holds buf_[from..] back for the next call.
  std::string keep(std::string& out, size_t from) {
    buf_.erase(0, from);
    return std::move(out);
  }
  static bool starts(std::string_view s, std::string_view t) { return s.size() >= t.size() && s.compare(0, t.size(), t) == 0; }
  // s is shorter than t and is its beginning (the tag may still be arriving).
  static bool is_prefix(std::string_view s, std::string_view t) { return s.size() < t.size() && t.compare(0, s.size(), s) == 0; }

  std::string buf_;
  bool emitted_ = false;
};

UOCR_NAMESPACE_END
