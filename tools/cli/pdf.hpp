// PDF pages as images, rendered by poppler's pdftoppm (Debian poppler-utils) into a private
// temporary folder that is removed afterwards; the model never sees the PDF itself.
#pragma once
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <sys/wait.h>

#include "uocr/core/error.hpp"
#include "uocr/image/image.hpp"

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

inline std::vector<uocr::ImageU8> render_pdf(const std::string& path, int dpi) {
  namespace fs = std::filesystem;
  uocr::require(fs::is_regular_file(path), uocr::Status::io, [&] { return "cannot open " + path; });
  uocr::require(dpi >= 36 && dpi <= 1200, uocr::Status::invalid_argument, "--dpi must be in 36..1200");
  std::string tmpl = (fs::temp_directory_path() / "uocr-pdf-XXXXXX").string();
  uocr::require(::mkdtemp(tmpl.data()) != nullptr, uocr::Status::io, "cannot create a temporary folder");
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } cleanup{tmpl};
  const std::string cmd = "pdftoppm -r " + std::to_string(dpi) + " -png " + shell_quote(path) + " " +
                          shell_quote(tmpl + "/page") + " 2>" + shell_quote(tmpl + "/err");
  const int st = std::system(cmd.c_str());
  if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
    const bool missing = WIFEXITED(st) && WEXITSTATUS(st) == 127;
    throw uocr::Error(missing ? uocr::Status::unsupported : uocr::Status::invalid_image,
                      missing ? "rendering a PDF needs pdftoppm (Debian package poppler-utils)"
                              : path + ": pdftoppm could not render it (not a valid PDF?)");
  }
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(tmpl))
    if (e.path().extension() == ".png") files.push_back(e.path().string());
  std::sort(files.begin(), files.end());  // page-01.png ... (zero-padded by pdftoppm)
  uocr::require(!files.empty(), uocr::Status::invalid_image, [&] { return path + " has no pages"; });
  std::vector<uocr::ImageU8> pages;
  for (const std::string& f : files) pages.push_back(uocr::load_image(f));
  return pages;
}

}  // namespace uocr_cli
