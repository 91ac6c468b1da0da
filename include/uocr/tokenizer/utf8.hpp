// UTF-8 helpers for the tokenizer: strict decoding of input text, encoding of code points, and
// lossy decoding of token bytes that replaces invalid sequences with U+FFFD exactly as Python's
// bytes.decode('utf-8', errors='replace') and Rust's String::from_utf8_lossy do (one U+FFFD per
// maximal invalid subpart), also when the bytes arrive in pieces.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN
namespace utf8 {

inline constexpr char32_t kReplacement = 0xFFFD;

enum class Scan { complete, invalid, truncated };

// Examines the sequence that starts at p[0] (n >= 1 bytes available) and sets `len`:
//  complete  - a well-formed character of `len` bytes;
//  invalid   - the first `len` bytes are one maximal invalid subpart (one U+FFFD);
//  truncated - all n bytes form a valid prefix of a longer character, more are needed.
inline Scan scan(const unsigned char* p, size_t n, size_t& len) {
  const unsigned char b = p[0];
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b < 0x80) {
    len = 1;
    return Scan::complete;
  } else if (b >= 0xC2 && b <= 0xDF) {
    need = 2;
  } else if (b >= 0xE0 && b <= 0xEF) {
    need = 3;
    if (b == 0xE0) lo = 0xA0;  // overlong
    if (b == 0xED) hi = 0x9F;  // surrogates
  } else if (b >= 0xF0 && b <= 0xF4) {
    need = 4;
    if (b == 0xF0) lo = 0x90;  // overlong
    if (b == 0xF4) hi = 0x8F;  // beyond U+10FFFF
  } else {
    len = 1;
    return Scan::invalid;
  }
  for (size_t k = 1; k < need; ++k) {
    if (k >= n) {
      len = n;
      return Scan::truncated;
    }
    const unsigned char c = p[k];
    const bool ok = k == 1 ? (c >= lo && c <= hi) : (c >= 0x80 && c <= 0xBF);
    if (!ok) {
      len = k;
      return Scan::invalid;
    }
  }
  len = need;
  return Scan::complete;
}

// Code point of a sequence that scan() reported complete.
inline char32_t decode_complete(const unsigned char* p, size_t len) {
  switch (len) {
    case 1:
      return p[0];
    case 2:
      return (char32_t(p[0] & 0x1F) << 6) | (p[1] & 0x3F);
    case 3:
      return (char32_t(p[0] & 0x0F) << 12) | (char32_t(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
    default:
      return (char32_t(p[0] & 0x07) << 18) | (char32_t(p[1] & 0x3F) << 12) |
             (char32_t(p[2] & 0x3F) << 6) | (p[3] & 0x3F);
  }
}

inline void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

// Byte offset of the first ill-formed byte, or s.size() when `s` is valid UTF-8.
inline size_t find_invalid(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t i = 0, len = 0;
  while (i < s.size()) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    if (scan(p + i, s.size() - i, len) != Scan::complete) return i;
    i += len;
  }
  return s.size();
}

// Decodes the character at byte offset i of valid UTF-8 text and advances i past it.
inline char32_t next(std::string_view s, size_t& i) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data()) + i;
  size_t len = p[0] < 0x80 ? 1 : p[0] < 0xE0 ? 2 : p[0] < 0xF0 ? 3 : 4;
  i += len;
  return decode_complete(p, len);
}

// Incremental lossy decoder: feed() returns only whole characters and keeps an incomplete tail
// until the next feed() or flush(), so concatenating its outputs equals decoding all at once.
class StreamDecoder {
 public:
  std::string feed(std::string_view bytes) {
    pending_.append(bytes.data(), bytes.size());
    return drain(false);
  }
  // Ends the stream: a held-back incomplete sequence becomes one U+FFFD.
  std::string flush() { return drain(true); }
  // Bytes held back (an incomplete character); feeding them to a fresh decoder restores it.
  const std::string& pending() const { return pending_; }

 private:
  std::string drain(bool at_end) {
    std::string out;
    const auto* p = reinterpret_cast<const unsigned char*>(pending_.data());
    const size_t n = pending_.size();
    size_t i = 0, len = 0;
    while (i < n) {
      const Scan s = scan(p + i, n - i, len);
      if (s == Scan::truncated && !at_end) break;
      if (s == Scan::complete) {
        out.append(pending_, i, len);
      } else {
        append(out, kReplacement);
      }
      i += len;
    }
    pending_.erase(0, i);
    return out;
  }

  std::string pending_;
};

// One-shot lossy decode (Python errors='replace').
inline std::string sanitize(std::string_view bytes) {
  StreamDecoder d;
  std::string out = d.feed(bytes);
  out += d.flush();
  return out;
}

}  // namespace utf8
UOCR_NAMESPACE_END
