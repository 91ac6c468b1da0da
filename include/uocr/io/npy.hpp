// NumPy .npy files (format 1.0/2.0/3.0, little-endian, C order): the exchange format of the
// parity tools and `uocr inspect`.
#pragma once
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "uocr/core/dtype.hpp"
#include "uocr/core/error.hpp"
#include "uocr/io/mapped_file.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

struct NpyArray {
  std::string descr;  // e.g. "<f4", "<f2", "<i8", "|b1"
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;

  int64_t numel() const {
    // Any 0 first: the other dimensions of an empty array may multiply past int64 (read_npy
    // bounds the product only when there is data).
    if (std::count(shape.begin(), shape.end(), 0)) return 0;
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  std::vector<float> to_f32() const {
    std::vector<float> out(static_cast<size_t>(numel()));
    const uint8_t* p = bytes.data();
    if (descr == "<f4") {
      if (!out.empty()) std::memcpy(out.data(), p, out.size() * 4);  // an empty vector's data() may be null
    } else if (descr == "<f2") {
      for (size_t i = 0; i < out.size(); ++i) out[i] = f16_to_f32(uint16_t(p[2 * i] | (p[2 * i + 1] << 8)));
    } else if (descr == "<f8") {
      for (size_t i = 0; i < out.size(); ++i) {
        double d;
        std::memcpy(&d, p + 8 * i, 8);
        out[i] = float(d);
      }
    } else {
      throw Error(Status::invalid_argument, "npy dtype " + descr + " is not a float type");
    }
    return out;
  }
  std::vector<int64_t> to_i64() const {
    std::vector<int64_t> out(static_cast<size_t>(numel()));
    const uint8_t* p = bytes.data();
    for (size_t i = 0; i < out.size(); ++i) {
      if (descr == "<i8") {
        std::memcpy(&out[i], p + 8 * i, 8);
      } else if (descr == "<i4") {
        int32_t v;
        std::memcpy(&v, p + 4 * i, 4);
        out[i] = v;
      } else if (descr == "|b1" || descr == "|u1") {
        out[i] = p[i];
      } else {
        throw Error(Status::invalid_argument, "npy dtype " + descr + " is not an integer type");
      }
    }
    return out;
  }
};

namespace detail {
inline size_t npy_item_size(const std::string& descr) {
  if (descr == "<f4" || descr == "<i4") return 4;
  if (descr == "<f8" || descr == "<i8") return 8;
  if (descr == "<f2") return 2;
  if (descr == "|b1" || descr == "|u1") return 1;
  return 0;
}
// Value of `'key': ` in the header dict, up to the next top-level comma or closing brace.
inline std::string npy_field(const std::string& header, const std::string& key, const std::string& path) {
  const size_t k = header.find("'" + key + "'");
  require(k != std::string::npos, Status::invalid_argument, [&] { return path + ": npy header lacks " + key; });
  size_t v = header.find(':', k);
  require(v != std::string::npos, Status::invalid_argument, [&] { return path + ": malformed npy header"; });
  ++v;
  while (v < header.size() && header[v] == ' ') ++v;
  size_t e = v;
  if (header[v] == '(') {
    e = header.find(')', v);
    require(e != std::string::npos, Status::invalid_argument, [&] { return path + ": malformed npy shape"; });
    return header.substr(v, e - v + 1);
  }
  while (e < header.size() && header[e] != ',' && header[e] != '}') ++e;
  std::string s = header.substr(v, e - v);
  while (!s.empty() && s.back() == ' ') s.pop_back();
  if (s.size() >= 2 && s.front() == '\'') s = s.substr(1, s.size() - 2);
  return s;
}
}  // namespace detail

inline NpyArray read_npy(const std::string& path) {
  MappedFile f(path);
  const uint8_t* p = f.data();
  const size_t n = f.size();
  require(n >= 10 && std::memcmp(p, "\x93NUMPY", 6) == 0, Status::invalid_argument,
          [&] { return path + ": not a .npy file"; });
  const int major = p[6];
  require(major >= 1 && major <= 3, Status::invalid_argument,
          [&] { return path + ": npy format version " + std::to_string(major) + " is not 1, 2 or 3"; });
  size_t header_len, offset;
  if (major == 1) {
    header_len = size_t(p[8]) | (size_t(p[9]) << 8);
    offset = 10;
  } else {
    require(n >= 12, Status::invalid_argument, [&] { return path + ": truncated .npy header"; });
    header_len = size_t(p[8]) | (size_t(p[9]) << 8) | (size_t(p[10]) << 16) | (size_t(p[11]) << 24);
    offset = 12;
  }
  require(offset + header_len <= n, Status::invalid_argument, [&] { return path + ": truncated .npy header"; });
  const std::string header(reinterpret_cast<const char*>(p + offset), header_len);
  NpyArray a;
  a.descr = detail::npy_field(header, "descr", path);
  if (a.descr == "<b1" || a.descr == "<u1") a.descr = "|" + a.descr.substr(1);
  require(detail::npy_field(header, "fortran_order", path) == "False", Status::invalid_argument,
          [&] { return path + ": Fortran-ordered arrays are not supported"; });
  const size_t item = detail::npy_item_size(a.descr);
  require(item != 0, Status::invalid_argument, [&] { return path + ": unsupported npy dtype " + a.descr; });
  const std::string shape = detail::npy_field(header, "shape", path);
  for (size_t i = 1; i < shape.size();) {
    while (i < shape.size() && (shape[i] == ' ' || shape[i] == ',')) ++i;
    if (i >= shape.size() || shape[i] == ')') break;
    uint64_t d = 0;
    size_t j = i;
    for (; j < shape.size() && std::isdigit(static_cast<unsigned char>(shape[j])); ++j) {
      d = d * 10 + uint64_t(shape[j] - '0');
      require(d <= uint64_t(1) << 62, Status::invalid_argument,
              [&] { return path + ": npy shape " + shape + " has a dimension over 2^62"; });
    }
    require(j > i, Status::invalid_argument, [&] { return path + ": malformed npy shape " + shape; });
    a.shape.push_back(int64_t(d));
    i = j;
  }
  const size_t data_off = offset + header_len;
  // The data must hold numel() items: checked factor by factor, so that no product overflows.
  const uint64_t room = (n - data_off) / item;
  uint64_t count = std::count(a.shape.begin(), a.shape.end(), 0) ? 0 : 1;
  for (size_t k = 0; count != 0 && k < a.shape.size(); ++k) {
    require(uint64_t(a.shape[k]) <= room / count, Status::invalid_argument, [&] { return path + ": truncated .npy data"; });
    count *= uint64_t(a.shape[k]);
  }
  const size_t bytes = size_t(count) * item;
  a.bytes.assign(p + data_off, p + data_off + bytes);
  return a;
}

inline void write_npy(const std::string& path, const std::string& descr, const std::vector<int64_t>& shape,
                      const void* data, size_t item_size) {
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (";
  size_t numel = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    header += std::to_string(shape[i]) + (shape.size() == 1 || i + 1 < shape.size() ? "," : "");
    if (i + 1 < shape.size()) header += " ";
    numel *= size_t(shape[i]);
  }
  header += "), }";
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  FILE* f = std::fopen(path.c_str(), "wb");
  require(f != nullptr, Status::io, [&] { return "cannot write " + path + ": " + std::strerror(errno); });
  const uint8_t magic[8] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  const uint16_t hl = uint16_t(header.size());
  const uint8_t hlb[2] = {uint8_t(hl & 0xff), uint8_t(hl >> 8)};
  bool ok = std::fwrite(magic, 1, 8, f) == 8 && std::fwrite(hlb, 1, 2, f) == 2 &&
            std::fwrite(header.data(), 1, header.size(), f) == header.size() &&
            std::fwrite(data, item_size, numel, f) == numel;
  ok = (std::fclose(f) == 0) && ok;
  require(ok, Status::io, [&] { return "failed writing " + path; });
}

inline void write_npy_f32(const std::string& path, const std::vector<int64_t>& shape, const float* data) {
  write_npy(path, "<f4", shape, data, 4);
}

UOCR_NAMESPACE_END
