// BMP palettes as Pillow reads them. Pillow's palette is the header's colour count (biClrUsed, else
// 2^bits; always 2^bits for an OS/2 header) of entries read from just after the info header, and a
// pixel index past those entries is black; an 8-bit palette that is the grey ramp (entry i =
// (i, i, i)) makes Pillow read the pixels as grey levels, so an index past it is that grey. stb_image
// instead takes the entries between the header and the pixel data (four too few under an OS/2
// header) and reads an index past them from uninitialised memory. decode_image therefore hands stb
// a copy of the file whose palette is Pillow's, filled out to 2^bits entries, under a 40-byte header.
// Not reproduced: Pillow's reading of a grey-ramp palette that is not 8-bit, or has at most two
// entries, as the pixel format of "L" or "1" images, and of the pixels from after the palette when
// the header's pixel offset is 0 or points at the palette.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN
namespace detail {

// The BMP file rewritten as above; empty when there is nothing to rewrite (not an uncompressed
// 1/4/8-bit BMP with a header stb reads, or one whose palette stb already reads as Pillow does).
inline std::vector<uint8_t> bmp_with_pillow_palette(const uint8_t* data, size_t size) {
  const auto le16 = [&](size_t at) { return uint32_t(data[at]) | uint32_t(data[at + 1]) << 8; };
  const auto le32 = [&](size_t at) { return le16(at) | le16(at + 2) << 16; };
  if (size < 26 || data[0] != 'B' || data[1] != 'M') return {};
  const uint64_t offset = le32(10), hsz = le32(14);
  if ((hsz != 12 && hsz != 40 && hsz != 56 && hsz != 108 && hsz != 124) || size < 14 + hsz) return {};
  const uint32_t bits = hsz == 12 ? le16(24) : le16(28);
  if ((bits != 1 && bits != 4 && bits != 8) || (hsz != 12 && le32(30) != 0)) return {};  // compression 0 only
  const uint64_t full = uint64_t(1) << bits, colors = hsz == 12 || le32(46) == 0 ? full : le32(46);
  if (colors > 65536) return {};  // Pillow refuses the file
  const uint64_t palette_at = 14 + hsz;
  if (hsz != 12 && offset >= palette_at && (offset - palette_at) / 4 >= full && (offset - palette_at) / 4 <= 256 &&
      colors >= full)
    return {};  // stb reads the same 2^bits entries as Pillow

  const uint64_t entry = hsz == 12 ? 3 : 4;
  const uint64_t present = std::min(std::min(colors, full), (size - palette_at) / entry);
  bool grey = bits == 8 && colors > 2 && present == colors;
  for (uint64_t i = 0; grey && i < present; ++i)
    for (uint64_t c = 0; c < 3; ++c) grey = grey && data[palette_at + i * entry + c] == i;

  const uint64_t header = 14 + 40 + 4 * full, pixels = offset < size ? size - offset : 0;
  std::vector<uint8_t> out(header + pixels, 0);
  const auto put32 = [&](size_t at, uint64_t v) {
    for (int k = 0; k < 4; ++k) out[at + size_t(k)] = uint8_t(v >> (8 * k));
  };
  out[0] = 'B';
  out[1] = 'M';
  put32(2, out.size());
  put32(10, header);
  put32(14, 40);
  if (hsz == 12) {  // OS/2: 16-bit width and height, planes, bits; the rest of a 40-byte header is 0
    put32(18, le16(18));
    put32(22, le16(20));
    for (size_t k = 0; k < 4; ++k) out[26 + k] = data[22 + k];
  } else {
    std::copy(data + 18, data + 18 + 36, out.begin() + 18);  // the 40-byte header's fields; V4/V5 extras are for 16/32 bits
  }
  for (uint64_t i = 0; i < full; ++i) {
    uint8_t* e = out.data() + 54 + 4 * i;  // B, G, R, 0
    if (i < present)
      for (uint64_t c = 0; c < 3; ++c) e[c] = data[palette_at + i * entry + c];
    else if (grey)
      e[0] = e[1] = e[2] = uint8_t(i);
  }
  std::copy(data + (size - pixels), data + size, out.begin() + long(header));
  return out;
}

}  // namespace detail
UOCR_NAMESPACE_END
