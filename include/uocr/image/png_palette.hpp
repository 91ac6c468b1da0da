// PNG palettes as Pillow reads them. Pillow's palette always has 256 entries, those the PLTE chunk
// does not give being black, so a pixel index past the end of PLTE is (0, 0, 0); stb_image would
// read it from uninitialised memory. decode_image therefore hands stb a copy of the file whose
// PLTE chunks are padded to 256 entries with black.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN
namespace detail {

// CRC-32 as PNG chunks carry it (ISO 3309, reflected 0xEDB88320).
inline uint32_t crc32(const uint8_t* p, size_t n) {
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) {
    crc ^= p[i];
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return crc ^ 0xFFFFFFFFu;
}

// One PNG chunk: big-endian length, 4-letter type, data, CRC over type and data.
inline std::vector<uint8_t> png_chunk(const char (&type)[5], const std::vector<uint8_t>& data) {
  std::vector<uint8_t> c;
  const auto put32 = [&](uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) c.push_back(uint8_t(v >> s));
  };
  put32(uint32_t(data.size()));
  c.insert(c.end(), type, type + 4);
  c.insert(c.end(), data.begin(), data.end());
  put32(crc32(c.data() + 4, c.size() - 4));
  return c;
}

// The PNG file with every PLTE chunk of fewer than 256 entries padded to 256 with black; empty
// when there is nothing to pad (not a PNG, or full palettes). A PLTE stb refuses anyway (a length
// that is not a multiple of 3, or over 256 entries) is left as it is, and so is a malformed tail.
inline std::vector<uint8_t> png_with_full_palettes(const uint8_t* data, size_t size) {
  static const uint8_t signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (size < 8 || std::memcmp(data, signature, 8) != 0) return {};
  std::vector<uint8_t> out;
  size_t copied = 0;  // data[0, copied) is in out
  for (size_t at = 8; size - at >= 12;) {
    const uint32_t length = uint32_t(data[at]) << 24 | uint32_t(data[at + 1]) << 16 | uint32_t(data[at + 2]) << 8 | data[at + 3];
    if (length > size - at - 12) break;
    const size_t next = at + 12 + length;
    if (std::memcmp(data + at + 4, "PLTE", 4) == 0 && length < 256 * 3 && length % 3 == 0) {
      out.insert(out.end(), data + copied, data + at);
      std::vector<uint8_t> entries(data + at + 8, data + at + 8 + length);
      entries.resize(256 * 3, 0);
      const std::vector<uint8_t> chunk = png_chunk("PLTE", entries);
      out.insert(out.end(), chunk.begin(), chunk.end());
      copied = next;
    }
    at = next;
  }
  if (out.empty()) return {};
  out.insert(out.end(), data + copied, data + size);
  return out;
}

}  // namespace detail
UOCR_NAMESPACE_END
