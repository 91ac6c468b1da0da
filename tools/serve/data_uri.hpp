// `data:image/png;base64,....` URIs, the only image references the service takes: fetching URLs
// would let any client make the server reach into the intranet.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <utility>

#include "api_error.hpp"

namespace uocr_serve {

// RFC 4648 base64 (padding optional, no whitespace inside); anything else is an ApiError(400)
// naming `param`.
inline std::string decode_base64(const std::string& in, size_t begin, const std::string& param) {
  static const std::array<int8_t, 256> table = [] {
    std::array<int8_t, 256> t{};
    t.fill(-1);
    const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 64; ++i) t[uint8_t(alphabet[i])] = int8_t(i);
    return t;
  }();
  size_t end = in.size();
  while (end > begin && in[end - 1] == '=' && in.size() - end < 2) --end;  // at most two pad bytes
  std::string out;
  out.reserve((end - begin) / 4 * 3 + 3);
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = begin; i < end; ++i) {
    const int8_t v = table[uint8_t(in[i])];
    if (v < 0) throw ApiError(400, "the image's data URI is not valid base64 (byte " + std::to_string(i - begin) + ")", param);
    acc = (acc << 6) | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(char((acc >> bits) & 0xff));
    }
  }
  if (bits >= 6) throw ApiError(400, "the image's data URI is cut short (base64 length)", param);
  return out;
}

struct DataUri {
  std::string mime;   // "image/png"
  std::string bytes;
};

// `data:<mime>;base64,<data>` with some data.
inline DataUri decode_data_uri(const std::string& uri, const std::string& param) {
  if (uri.rfind("data:", 0) != 0)
    throw ApiError(400, "files must be data: URIs (data:image/png;base64,...); the server fetches no URLs", param);
  const size_t comma = uri.find(',');
  if (comma == std::string::npos) throw ApiError(400, "the data URI has no ',' before its data", param);
  const std::string header = uri.substr(5, comma - 5);
  const std::string suffix = ";base64";
  if (header.size() < suffix.size() || header.compare(header.size() - suffix.size(), suffix.size(), suffix) != 0)
    throw ApiError(400, "the data URI must be base64 (data:image/...;base64,...)", param);
  DataUri d{header.substr(0, header.size() - suffix.size()), decode_base64(uri, comma + 1, param)};
  if (d.bytes.empty()) throw ApiError(400, "the data URI holds no data", param);
  return d;
}

// The bytes of an image's data URI (type image/*).
inline std::string decode_image_data_uri(const std::string& uri, const std::string& param) {
  DataUri d = decode_data_uri(uri, param);
  if (d.mime.rfind("image/", 0) != 0) throw ApiError(400, "the data URI's type is '" + d.mime + "', not an image", param);
  return std::move(d.bytes);
}

}  // namespace uocr_serve
