// Whole-file reads with a size cap, for files whose path a caller hands over (page images,
// checkpoints): only a regular file of at most `max_bytes` is read, so that a device
// (/dev/zero: endless), a FIFO (blocks until a writer comes) or a directory fails at once with
// an error naming the path, instead of eating memory, hanging, or failing obscurely.
//
//   std::vector<uint8_t> bytes = uocr::read_file_capped(path, limit, "checkpoint");
//   uocr::require_regular_file(path, "input");  // the same refusals, before any expensive work
//
// Thread-safe.
#pragma once
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "uocr/core/error.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

namespace detail {

[[noreturn]] inline void cannot_read(const std::string& what, const std::string& path, const std::string& why,
                                     Status status = Status::io) {
  throw Error(status, "cannot read " + what + " " + path + ": " + why);
}

// Throws Error(io) naming what `st` is, unless it is a regular file.
inline void require_regular(const struct stat& st, const std::string& what, const std::string& path) {
  if (S_ISREG(st.st_mode)) return;
  const char* kind = S_ISDIR(st.st_mode)    ? "a directory"
                     : S_ISFIFO(st.st_mode) ? "a FIFO"
                     : S_ISCHR(st.st_mode)  ? "a character device"
                     : S_ISBLK(st.st_mode)  ? "a block device"
                     : S_ISSOCK(st.st_mode) ? "a socket"
                                            : "not a regular file";
  cannot_read(what, path, std::string("it is ") + kind);
}

}  // namespace detail

// The bytes of regular file `path`, which must hold at most `max_bytes`. `what` names the file in
// errors ("image file"). Throws Error(io) when the path cannot be opened, is not a regular file
// (directory, FIFO, device, socket) or cannot be read in full, and Error(too_large) when it holds
// more than `max_bytes` (a caller's budget: an image over it is Status::invalid_image).
inline std::vector<uint8_t> read_file_capped(const std::string& path, uint64_t max_bytes, const std::string& what,
                                             Status too_large = Status::io) {
  // O_NONBLOCK: opening a FIFO without it waits for a writer; regular files ignore it.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) detail::cannot_read(what, path, std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) detail::cannot_read(what, path, std::strerror(errno));
  detail::require_regular(st, what, path);
  const uint64_t size = uint64_t(st.st_size);
  if (size > max_bytes)
    detail::cannot_read(what, path, std::to_string(size) + " bytes, more than the limit of " + std::to_string(max_bytes) + " bytes",
                        too_large);
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  for (size_t got = 0; got < bytes.size();) {
    const ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) detail::cannot_read(what, path, std::strerror(errno));
    if (n == 0) detail::cannot_read(what, path, "the file shrank while it was read");
    got += size_t(n);
  }
  return bytes;
}

// Throws as read_file_capped does when `path` is missing or not a regular file, without opening
// it: for inputs checked before expensive work (the CLI checks its pages before loading a model).
inline void require_regular_file(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) detail::cannot_read(what, path, std::strerror(errno));
  detail::require_regular(st, what, path);
}

UOCR_NAMESPACE_END
