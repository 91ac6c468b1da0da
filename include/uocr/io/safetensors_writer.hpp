// Writes a safetensors file as Hugging Face's writer does: 8-byte little-endian header length,
// the JSON header padded with spaces to a multiple of 8 (so the data section is aligned), then
// the tensors' bytes back to back in the order given. Each tensor's bytes come from a callback,
// so a converter streams a multi-gigabyte file without holding it.
#pragma once
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "uocr/core/dtype.hpp"
#include "uocr/core/error.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  // Writes exactly the tensor's bytes through `put` (called as often as it likes).
  std::function<void(const std::function<void(const void*, size_t)>& put)> write;

  uint64_t bytes() const {
    uint64_t n = dtype_size(dtype);
    for (int64_t d : shape) n *= uint64_t(d);
    return n;
  }
};

inline void write_safetensors(const std::string& path, const std::vector<SafetensorsEntry>& entries) {
  nlohmann::ordered_json header;
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t offset = 0;
  for (const SafetensorsEntry& e : entries) {
    header[e.name] = {{"dtype", dtype_name(e.dtype)}, {"shape", e.shape}, {"data_offsets", {offset, offset + e.bytes()}}};
    offset += e.bytes();
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"), &std::fclose);
  require(f != nullptr, Status::io, [&] { return "cannot create " + path; });
  auto put = [&](const void* data, size_t n) {
    require(std::fwrite(data, 1, n, f.get()) == n, Status::io, [&] { return "cannot write " + path + " (disk full?)"; });
  };
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = uint8_t((uint64_t(text.size()) >> (8 * i)) & 0xff);
  put(len, 8);
  put(text.data(), text.size());
  for (const SafetensorsEntry& e : entries) {
    uint64_t written = 0;
    e.write([&](const void* data, size_t n) {
      written += n;
      put(data, n);
    });
    require(written == e.bytes(), Status::internal, [&] {
      return path + ": tensor " + e.name + " wrote " + std::to_string(written) + " bytes, its shape needs " +
             std::to_string(e.bytes());
    });
  }
  require(std::fclose(f.release()) == 0, Status::io, [&] { return "cannot write " + path + " (disk full?)"; });
}

UOCR_NAMESPACE_END
