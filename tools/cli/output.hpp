// Where a transcript goes (a file or stdout) and how much of it has been written, so that a
// checkpoint can record it and a resumed run can cut the file back to it and append: the file
// ends up byte-identical to an uninterrupted run. Every write, flush and close is checked: text
// that did not arrive is an error, not a normal stop. Used by `uocr run` and `uocr serve`'s jobs.
#pragma once
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include <fcntl.h>
#include <unistd.h>

#include "uocr/core/error.hpp"
#include "uocr/session/checkpoint.hpp"
#include "uocr/session/markdown.hpp"

namespace uocr_cli {

struct Output {
  std::string path;  // "" = stdout
  FILE* file = nullptr;
  uint64_t written = 0;
  uocr::MarkdownFilter filter;
  bool raw = false;

  // Before any file is opened: a closed stdout's descriptor would go to the next file opened,
  // which would then receive the text.
  void check_stdout_open() const {
    if (path.empty()) check(::fcntl(STDOUT_FILENO, F_GETFD) != -1);
  }
  void open() {
    file = path.empty() ? stdout : std::fopen(path.c_str(), "wb");
    check(file != nullptr);
  }
  void write(const std::string& text) {
    put(raw ? text : filter.feed(text));
    check(std::fflush(file) == 0);
  }
  // The end of the text: what the filter holds back and a newline, then the file closed.
  void finish() {
    put((raw ? std::string() : filter.flush()) + "\n");
    const int closed = std::fclose(file);
    file = nullptr;
    check(closed == 0);
  }
  // Closes the file without ending the text (a run that will be resumed from its checkpoint).
  void close_unfinished() {
    if (file == nullptr || file == stdout) return;
    std::fclose(file);
    file = nullptr;
  }
  // What a checkpoint records: bytes written and text the filter holds back, on disk first.
  std::string state() {
    check(std::fflush(file) == 0);
    if (file != stdout) uocr::require(::fsync(::fileno(file)) == 0, uocr::Status::io, [&] { return "cannot sync " + path; });
    uocr::StateWriter w;
    w.put(written);
    w.put(filter.pending());
    return w.bytes();
  }
  // Resuming: back to the state of the checkpoint (see the top of this file).
  void restore(const std::string& bytes, const std::string& checkpoint) {
    uocr::StateReader r(bytes, checkpoint);
    r.get(written);
    std::string pending;
    r.get(pending);
    filter.restore(std::move(pending), written > 0);
    if (path.empty()) return;
    std::error_code ec;
    const uint64_t size = std::filesystem::file_size(path, ec);
    uocr::require(!ec && size >= written, uocr::Status::io, [&] {
      return "cannot resume into " + path + ": it must hold the " + std::to_string(written) +
             " bytes written before the checkpoint, but " + (ec ? "it cannot be read" : "it has " + std::to_string(size));
    });
    std::filesystem::resize_file(path, written);
    file = std::fopen(path.c_str(), "ab");
    check(file != nullptr);
  }

 private:
  void put(const std::string& text) {
    check(std::fwrite(text.data(), 1, text.size(), file) == text.size());
    written += text.size();
  }
  // Throws Error(io) naming the output and the reason errno gives, unless `ok`.
  void check(bool ok) const {
    const int err = errno;
    uocr::require(ok, uocr::Status::io,
                  [&] { return "cannot write " + (path.empty() ? std::string("stdout") : path) + ": " + std::strerror(err); });
  }
};

}  // namespace uocr_cli
