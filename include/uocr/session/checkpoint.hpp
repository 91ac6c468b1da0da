// Checkpoint files: the byte format and the crash-safe write that uocr::Session uses to
// save its constant-size state (uocr/session/session.hpp says what goes in it).
//
// File: "UOCRCKPT" | u32 format version | u32 0 | u64 payload bytes | u64 FNV-1a of the payload |
// payload. Integers are little-endian as the machine writes them (checkpoints are resumed on the
// machine that wrote them; a foreign byte order fails the magic check). Written to PATH.tmp,
// fsync'ed, renamed over PATH and the folder fsync'ed: a crash leaves either the old or the new
// checkpoint, never a torn one. Anything else (truncated, flipped bits, another format version)
// is rejected with Status::io and a message saying what is wrong. The checksum does not stop a
// forged file: the reader checks every value it restores (uocr/session/session.hpp).
#pragma once
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <type_traits>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include "uocr/core/error.hpp"
#include "uocr/io/read_file.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

inline constexpr uint32_t kCheckpointVersion = 5;  // 2: memory peaks of the run so far; 3: group positions;
                                                   // 4: the page clock without its marker lead,
                                                   //    the window's token ids (recompute_on_slide);
                                                   // 5: markers completed

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

// Appends plain values to a payload.
class StateWriter {
 public:
  template <class T>
  void put(const T& v) {
    static_assert(std::is_trivially_copyable<T>::value, "put() takes plain values");
    bytes_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void put(const std::string& s) {
    put(uint64_t(s.size()));
    bytes_.append(s);
  }
  template <class T>
  void put(const std::vector<T>& v) {
    put(uint64_t(v.size()));
    put_array(v.data(), v.size());
  }
  template <class T>
  void put_array(const T* data, size_t n) {
    static_assert(std::is_trivially_copyable<T>::value, "put_array() takes plain values");
    bytes_.append(reinterpret_cast<const char*>(data), n * sizeof(T));
  }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

// Reads a payload back; running past its end is a corrupt checkpoint.
class StateReader {
 public:
  StateReader(const std::string& bytes, std::string file) : bytes_(bytes), file_(std::move(file)) {}

  template <class T>
  T get() {
    T v;
    get_array(&v, 1);
    return v;
  }
  template <class T>
  void get(T& v) { v = get<T>(); }
  void get(std::string& s) {
    const uint64_t n = get<uint64_t>();
    need(n);
    s.assign(bytes_, size_t(at_), size_t(n));
    at_ += n;
  }
  template <class T>
  void get(std::vector<T>& v) {
    const uint64_t n = get<uint64_t>();
    if (n > (bytes_.size() - at_) / sizeof(T)) corrupt("its state ends early");  // not need(n * sizeof(T)): it can wrap
    v.resize(size_t(n));
    get_array(v.data(), v.size());
  }
  template <class T>
  void get_array(T* data, size_t n) {
    static_assert(std::is_trivially_copyable<T>::value, "get_array() takes plain values");
    need(uint64_t(n) * sizeof(T));
    if (n == 0) return;  // data may be null (an empty vector): memcpy must not see it
    std::memcpy(static_cast<void*>(data), bytes_.data() + at_, n * sizeof(T));
    at_ += n * sizeof(T);
  }
  bool at_end() const { return at_ == bytes_.size(); }
  // A value that cannot be right: the file is damaged or forged (or not written by this code).
  [[noreturn]] void corrupt(const std::string& what) const {
    throw Error(Status::io, "checkpoint " + file_ + " is corrupt: " + what);
  }

 private:
  void need(uint64_t n) const {
    if (n > bytes_.size() - at_) corrupt("its state ends early");
  }
  const std::string& bytes_;
  std::string file_;
  uint64_t at_ = 0;
};

namespace detail {
inline constexpr char kCheckpointMagic[8] = {'U', 'O', 'C', 'R', 'C', 'K', 'P', 'T'};
inline void write_all(int fd, const char* p, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    require(w > 0, Status::io, [&] { return "cannot write checkpoint " + path + ": " + std::strerror(errno); });
    p += w;
    n -= size_t(w);
  }
}
}  // namespace detail

// Writes `payload` as checkpoint `path`, atomically (see the top of this file).
inline void write_checkpoint(const std::string& path, const std::string& payload) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  require(fd >= 0, Status::io, [&] { return "cannot create checkpoint " + tmp + ": " + std::strerror(errno); });
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  const uint32_t version = kCheckpointVersion, zero = 0;
  const uint64_t size = payload.size(), sum = Fnv64().add(payload.data(), payload.size()).value();
  std::string header(detail::kCheckpointMagic, 8);
  header.append(reinterpret_cast<const char*>(&version), 4).append(reinterpret_cast<const char*>(&zero), 4);
  header.append(reinterpret_cast<const char*>(&size), 8).append(reinterpret_cast<const char*>(&sum), 8);
  detail::write_all(fd, header.data(), header.size(), tmp);
  detail::write_all(fd, payload.data(), payload.size(), tmp);
  require(::fsync(fd) == 0, Status::io, [&] { return "cannot sync checkpoint " + tmp + ": " + std::strerror(errno); });
  require(std::rename(tmp.c_str(), path.c_str()) == 0, Status::io,
          [&] { return "cannot rename " + tmp + " to " + path + ": " + std::strerror(errno); });
  // The rename itself must reach the disk before the checkpoint counts as written.
  std::string dir = std::filesystem::path(path).parent_path().string();
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

// Reads and verifies checkpoint `path`; returns its payload.
inline std::string read_checkpoint(const std::string& path) {
  // Any size a regular file has: the checksum below decides whether it is ours.
  const std::vector<uint8_t> raw = read_file_capped(path, UINT64_MAX, "checkpoint");
  const std::string bytes(raw.begin(), raw.end());
  auto fail = [&](const std::string& why) { throw Error(Status::io, "checkpoint " + path + " is unusable: " + why); };
  if (bytes.size() < 32 || std::memcmp(bytes.data(), detail::kCheckpointMagic, 8) != 0)
    fail("not a uocr checkpoint (wrong magic or too short)");
  uint32_t version;
  uint64_t size, sum;
  std::memcpy(&version, bytes.data() + 8, 4);
  std::memcpy(&size, bytes.data() + 16, 8);
  std::memcpy(&sum, bytes.data() + 24, 8);
  if (version != kCheckpointVersion)
    fail("format version " + std::to_string(version) + ", this build reads version " + std::to_string(kCheckpointVersion));
  if (size != bytes.size() - 32)
    fail("it holds " + std::to_string(bytes.size() - 32) + " payload bytes, its header says " + std::to_string(size) +
         " (truncated?)");
  if (Fnv64().add(bytes.data() + 32, size_t(size)).value() != sum) fail("checksum mismatch (the file is damaged)");
  return bytes.substr(32);
}

UOCR_NAMESPACE_END
