// A JPEG's marker structure, read without decoding it: what the decode budget needs to know in
// builds where stb_image decodes JPEG (no libjpeg, whose progress callback counts scans itself:
// jpeg.hpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN
namespace detail {

inline bool is_jpeg(const uint8_t* data, size_t size) {
  return size >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF;  // Pillow's _accept
}

// The scans (SOS segments) before the end of the image: each marker's payload is skipped by its
// length, a scan's entropy-coded data up to the next marker (0xFF followed by neither a stuffed 0
// nor RSTn, which cannot occur inside it). Stops where the data stops being markers, as decoders
// do. A progressive scan is a pass over the whole image, and a file can repeat one for a few bytes.
inline int64_t jpeg_scan_count(const uint8_t* d, size_t size) {
  int64_t scans = 0;
  size_t at = 2;  // past SOI
  while (at + 1 < size && d[at] == 0xFF) {
    const uint8_t marker = d[at + 1];
    if (marker == 0xFF) {  // fill byte
      ++at;
      continue;
    }
    if (marker == 0xD9) break;  // EOI
    if (marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) {  // TEM, RSTn: no length
      at += 2;
      continue;
    }
    if (size - at < 4) break;
    size_t end = at + 2 + (size_t(d[at + 2]) << 8 | d[at + 3]);
    if (marker == 0xDA) {
      ++scans;
      while (end + 1 < size) {
        const void* ff = std::memchr(d + end, 0xFF, size - 1 - end);
        if (ff == nullptr) return scans;
        end = size_t(static_cast<const uint8_t*>(ff) - d);
        const uint8_t next = d[end + 1];
        if (next != 0 && (next < 0xD0 || next > 0xD7)) break;
        end += 2;
      }
    }
    at = end;
  }
  return scans;
}

}  // namespace detail
UOCR_NAMESPACE_END
