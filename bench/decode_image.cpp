// What decoding an image file costs within uocr's default decode budget: one JSON line per file
// with its width, height and seconds (or the error that refused it), optionally under a time
// budget. Files that cost the most within the budget are made by bench/worst_images.py;
// docs/RELIABILITY.md has the figures.
//
//   decode_image [--budget SECONDS] FILE...
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "uocr/core/deadline.hpp"
#include "uocr/core/error.hpp"
#include "uocr/image/image.hpp"

int main(int argc, char** argv) {
  const char* const usage = "usage: decode_image [--budget SECONDS] FILE...\n";
  double budget = 0;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--budget" && i + 1 < argc) {
      char* end = nullptr;
      budget = std::strtod(argv[++i], &end);
      if (*end != '\0' || !(budget > 0)) {
        std::fprintf(stderr, "--budget takes seconds > 0, got %s\n", argv[i]);
        return 2;
      }
    } else if (!a.empty() && a[0] == '-') {
      std::fputs(usage, stderr);
      return 2;
    } else {
      files.push_back(a);
    }
  }
  if (files.empty()) {
    std::fputs(usage, stderr);
    return 2;
  }
  for (const std::string& file : files) {
    const auto t0 = std::chrono::steady_clock::now();
    const uocr::Deadline deadline = uocr::Deadline::after(t0, budget);
    nlohmann::json line = {{"file", file}};
    try {
      const uocr::ImageU8 page = uocr::load_image(file, uocr::DecodeLimits{}, deadline);
      line["width"] = page.width;
      line["height"] = page.height;
    } catch (const uocr::Error& e) {
      line["error"] = e.what();
    }
    line["seconds"] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%s\n", line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    std::fflush(stdout);
  }
  return 0;
}
