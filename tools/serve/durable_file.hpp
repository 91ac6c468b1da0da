// Files that survive a crash of the process or of the machine: the bytes are synced to disk, and
// so is the folder that names them. replace_durably() writes a temporary file and renames it over
// the old one, so a reader finds the old bytes or the new, never a part.
#pragma once
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>

#include "uocr/core/error.hpp"

namespace uocr_serve {

namespace durable_detail {
inline void sync_folder(const std::filesystem::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}
}  // namespace durable_detail

// Writes the file (created or truncated) and syncs it and its folder, or throws Error(io).
inline void write_durably(const std::filesystem::path& path, const std::string& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  uocr::require(fd >= 0, uocr::Status::io, [&] { return "cannot write " + path.string() + ": " + std::strerror(errno); });
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += size_t(n);
  }
  const bool ok = done == bytes.size() && ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  uocr::require(ok, uocr::Status::io, [&] { return "cannot write " + path.string() + ": " + std::strerror(err); });
  durable_detail::sync_folder(path.parent_path());
}

// Replaces the file atomically: a temporary file of its own beside it (writers of the same path
// do not share one), written durably, then renamed over it. Throws Error(io); the temporary file
// does not outlive a failure.
inline void replace_durably(const std::filesystem::path& path, const std::string& bytes) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  const std::filesystem::path tmp = path.string() + ".tmp-" + std::to_string(rng());
  try {
    write_durably(tmp, bytes);
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    throw;
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    std::error_code ec;
    std::filesystem::remove(tmp, ec);
    throw uocr::Error(uocr::Status::io, "cannot write " + path.string() + ": " + std::strerror(err));
  }
  durable_detail::sync_folder(path.parent_path());
}

}  // namespace uocr_serve
