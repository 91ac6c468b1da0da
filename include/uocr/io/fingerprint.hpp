// Fingerprints and checksums: 64-bit FNV-1a over bytes, and a cheap fingerprint of a file.
// Checkpoints use them to recognise their model, parameters and input pages, and as the
// checksum of their payload (uocr/session/checkpoint.hpp).
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "uocr/core/error.hpp"
#include "uocr/io/read_file.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

// 64-bit FNV-1a: a checksum against corruption and a fingerprint of inputs, not a defence
// against deliberate forgery.
class Fnv64 {
 public:
  Fnv64& add(const void* data, size_t n) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) h_ = (h_ ^ p[i]) * 0x100000001b3ull;
    return *this;
  }
  Fnv64& add(const std::string& s) {
    const uint64_t n = s.size();
    add(&n, sizeof n);
    return add(s.data(), s.size());
  }
  uint64_t value() const { return h_; }
  std::string hex() const {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h_));
    return buf;
  }

 private:
  uint64_t h_ = 0xcbf29ce484222325ull;
};

// Fingerprint of a file: its size, its first MiB (a safetensors header lives there) and 32
// 4-KiB samples spread over the rest. Cheap on multi-GB weights, and any retraining changes it.
inline void fingerprint_file(Fnv64& h, const std::string& path) {
  require_regular_file(path, "input");  // a FIFO or device would block or never end
  std::ifstream f(path, std::ios::binary);
  require(bool(f), Status::io, [&] { return "cannot read " + path; });
  f.seekg(0, std::ios::end);
  const uint64_t size = uint64_t(f.tellg());
  h.add(&size, sizeof size);
  std::vector<char> buf;
  auto sample = [&](uint64_t at, uint64_t n) {
    buf.resize(size_t(n));
    f.seekg(std::streamoff(at));
    f.read(buf.data(), std::streamsize(n));
    require(bool(f), Status::io, [&] { return "cannot read " + path; });
    h.add(buf.data(), buf.size());
  };
  const uint64_t head = std::min<uint64_t>(size, 1 << 20);
  sample(0, head);
  const uint64_t rest = size - head, chunk = 4096;
  if (rest >= 32 * chunk)
    for (uint64_t i = 0; i < 32; ++i) sample(head + i * ((rest - chunk) / 31), chunk);
  else if (rest > 0)
    sample(head, rest);
}

UOCR_NAMESPACE_END
