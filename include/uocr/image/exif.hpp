// The EXIF orientation of an encoded image, read the way Pillow's Image.getexif() finds it, so
// that decoding can reproduce ImageOps.exif_transpose (the upstream loader applies it to every
// image before anything else).
//
// Sources, in Pillow's order of precedence:
//   JPEG: APP1 "Exif\0\0" segments before the first scan (several are concatenated, as Pillow
//         does), then, only if that EXIF has no Orientation tag, the XMP packet in APP1
//         ("http://ns.adobe.com/xap/1.0/\0") searched for tiff:Orientation="N" / >N<.
//   PNG:  the eXIf chunk (anywhere in the file: exif_transpose loads the image first).
// Not read (Pillow would): PNG XMP iTXt and ImageMagick "Raw profile type exif" text chunks.
// Malformed or absent data yields 1 (no transform): upstream catches Pillow's exceptions and
// falls back to the untransposed image.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

namespace detail {

// Orientation tag (0x0112) of IFD0 in a TIFF-structured EXIF block; 0 if absent or malformed.
inline int tiff_orientation(const uint8_t* p, size_t n) {
  if (n >= 6 && std::memcmp(p, "Exif\0\0", 6) == 0) {
    p += 6;
    n -= 6;
  }
  if (n < 8) return 0;
  bool le;
  if (std::memcmp(p, "II*\0", 4) == 0) {
    le = true;
  } else if (std::memcmp(p, "MM\0*", 4) == 0) {
    le = false;
  } else {
    return 0;
  }
  auto u16 = [&](size_t o) { return le ? uint32_t(p[o] | p[o + 1] << 8) : uint32_t(p[o] << 8 | p[o + 1]); };
  auto u32 = [&](size_t o) {
    return le ? (u16(o) | u16(o + 2) << 16) : (u16(o) << 16 | u16(o + 2));
  };
  const size_t ifd = u32(4);
  if (ifd > n || n - ifd < 2) return 0;
  const size_t count = u16(ifd);
  for (size_t i = 0; i < count; ++i) {
    const size_t e = ifd + 2 + 12 * i;
    if (e > n || n - e < 12) return 0;
    if (u16(e) != 0x0112) continue;
    // A single BYTE/SHORT/LONG value sits in the entry itself; anything else is not an
    // orientation Pillow would act on.
    if (u32(e + 4) != 1) return 0;
    switch (u16(e + 2)) {
      case 1: return p[e + 8];
      case 3: return int(u16(e + 8));
      case 4: return u32(e + 8) <= 8 ? int(u32(e + 8)) : 0;
      default: return 0;
    }
  }
  return 0;
}

// First tiff:Orientation="N" or tiff:Orientation>N in an XMP packet; 0 if none.
inline int xmp_orientation(const uint8_t* p, size_t n) {
  static const char key[] = "tiff:Orientation";
  const size_t k = sizeof(key) - 1;
  for (size_t i = 0; i + k < n; ++i) {
    if (std::memcmp(p + i, key, k) != 0) continue;
    size_t j = i + k;
    if (p[j] == '>') {
      j += 1;
    } else if (p[j] == '=' && j + 1 < n && p[j + 1] == '"') {
      j += 2;
    } else {
      continue;
    }
    if (j < n && p[j] >= '0' && p[j] <= '9') return p[j] - '0';
  }
  return 0;
}

inline int jpeg_orientation(const uint8_t* p, size_t n) {
  std::vector<uint8_t> exif;
  const uint8_t* xmp = nullptr;
  size_t xmp_size = 0;
  static const char xmp_id[] = "http://ns.adobe.com/xap/1.0/";  // followed by NUL
  size_t i = 2;
  while (i + 1 < n) {
    if (p[i] != 0xFF) break;
    const uint8_t marker = p[i + 1];
    if (marker == 0xFF) {  // fill byte
      ++i;
      continue;
    }
    i += 2;
    if (marker == 0xD8 || marker == 0x01 || (marker >= 0xD0 && marker <= 0xD7)) continue;
    if (marker == 0xDA || marker == 0xD9 || i + 2 > n) break;  // scan data or end: header is over
    const size_t len = size_t(p[i] << 8 | p[i + 1]);
    if (len < 2 || len > n - i) break;
    const uint8_t* s = p + i + 2;
    const size_t sn = len - 2;
    if (marker == 0xE1 && sn >= 6 && std::memcmp(s, "Exif\0\0", 6) == 0) {
      exif.insert(exif.end(), s + 6, s + sn);
    } else if (marker == 0xE1 && sn >= sizeof(xmp_id) && std::memcmp(s, xmp_id, sizeof(xmp_id)) == 0) {
      xmp = s + sizeof(xmp_id);
      xmp_size = sn - sizeof(xmp_id);
    }
    i += len;
  }
  const int o = tiff_orientation(exif.data(), exif.size());
  return o != 0 ? o : xmp_orientation(xmp, xmp_size);
}

inline int png_orientation(const uint8_t* p, size_t n) {
  size_t i = 8;
  while (i + 12 <= n) {
    const size_t len = size_t(p[i]) << 24 | size_t(p[i + 1]) << 16 | size_t(p[i + 2]) << 8 | p[i + 3];
    if (len > n - i - 12) break;
    if (std::memcmp(p + i + 4, "eXIf", 4) == 0) return tiff_orientation(p + i + 8, len);
    if (std::memcmp(p + i + 4, "IEND", 4) == 0) break;
    i += 12 + len;
  }
  return 0;
}

}  // namespace detail

// EXIF orientation 1..8 of an encoded JPEG or PNG; 1 when absent, unknown or malformed.
inline int exif_orientation(const uint8_t* data, size_t size) {
  int o = 0;
  if (size >= 3 && data[0] == 0xFF && data[1] == 0xD8) {
    o = detail::jpeg_orientation(data, size);
  } else if (size >= 8 && std::memcmp(data, "\x89PNG\r\n\x1a\n", 8) == 0) {
    o = detail::png_orientation(data, size);
  }
  return o >= 1 && o <= 8 ? o : 1;
}

UOCR_NAMESPACE_END
