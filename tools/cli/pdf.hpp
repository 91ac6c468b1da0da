// PDF pages as a page source: the page count from poppler's pdfinfo, each page rendered by
// pdftoppm (Debian poppler-utils) only when the session pulls it, into a private temporary
// folder that is removed afterwards. One page image exists at a time; the model never sees the
// PDF itself.
#pragma once
#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include <sys/wait.h>

#include "uocr/core/error.hpp"
#include "uocr/image/image.hpp"
#include "uocr/io/read_file.hpp"
#include "uocr/session/page_source.hpp"

namespace uocr_cli {

inline bool is_pdf(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return ext == ".pdf";
}

inline std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Runs a poppler tool; a missing tool is Status::unsupported, a failure Status::invalid_image.
inline std::string run_poppler(const std::string& tool, const std::string& args, const std::string& pdf) {
  const std::string cmd = tool + " " + args + " 2>/dev/null";
  FILE* p = ::popen(cmd.c_str(), "r");
  uocr::require(p != nullptr, uocr::Status::io, [&] { return "cannot start " + tool; });
  std::string out;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int st = ::pclose(p);
  if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
    const bool missing = WIFEXITED(st) && WEXITSTATUS(st) == 127;
    throw uocr::Error(missing ? uocr::Status::unsupported : uocr::Status::invalid_image,
                      missing ? "reading a PDF needs " + tool + " (Debian package poppler-utils)"
                              : pdf + ": " + tool + " could not read it (not a valid PDF?)");
  }
  return out;
}

class PdfPages final : public uocr::PageSource {
 public:
  PdfPages(std::string path, int dpi, uocr::DecodeLimits limits) : path_(std::move(path)), dpi_(dpi), limits_(limits) {
    namespace fs = std::filesystem;
    uocr::require_regular_file(path_, "PDF");
    uocr::require(dpi_ >= 36 && dpi_ <= 1200, uocr::Status::invalid_argument, "--dpi must be in 36..1200");
    const std::string info = run_poppler("pdfinfo", shell_quote(path_), path_);
    const size_t at = info.find("\nPages:");
    const size_t line = at == std::string::npos ? info.rfind("Pages:", 0) : at + 1;
    if (line != std::string::npos) count_ = std::atoll(info.c_str() + line + 6);
    uocr::require(count_ > 0, uocr::Status::invalid_image, [&] { return path_ + " has no pages"; });
    std::string tmpl = (fs::temp_directory_path() / "uocr-pdf-XXXXXX").string();
    uocr::require(::mkdtemp(tmpl.data()) != nullptr, uocr::Status::io, "cannot create a temporary folder");
    dir_ = tmpl;
  }
  ~PdfPages() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  PdfPages(const PdfPages&) = delete;
  PdfPages& operator=(const PdfPages&) = delete;

  int64_t count() const override { return count_; }
  bool next(uocr::ImageU8& page) override {
    if (next_ >= count_) return false;
    const std::string n = std::to_string(++next_);  // pdftoppm counts pages from 1
    const std::string prefix = dir_ + "/page";
    run_poppler("pdftoppm", "-f " + n + " -l " + n + " -singlefile -r " + std::to_string(dpi_) + " -png " +
                                shell_quote(path_) + " " + shell_quote(prefix),
                path_);
    page = uocr::load_image(prefix + ".png", limits_);
    std::filesystem::remove(prefix + ".png");
    return true;
  }
  void skip(int64_t n) override { next_ = std::min(count_, next_ + n); }
  std::string identity() const override {
    uocr::Fnv64 h;
    uocr::fingerprint_file(h, path_);
    return "pdf:" + h.hex() + "@" + std::to_string(dpi_) + "dpi";
  }

 private:
  std::string path_, dir_;
  int dpi_;
  uocr::DecodeLimits limits_;  // of each rendered page
  int64_t count_ = 0, next_ = 0;
};

}  // namespace uocr_cli
