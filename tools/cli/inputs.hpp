// The inputs of a transcription (image files and PDFs, in order) as one page source.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "pdf.hpp"
#include "uocr/image/image.hpp"
#include "uocr/io/read_file.hpp"
#include "uocr/session/page_source.hpp"

namespace uocr_cli {

// Every input, as one document, pulled page by page.
inline std::unique_ptr<uocr::PageSource> open_inputs(const std::vector<std::string>& inputs, int dpi, const uocr::DecodeLimits& limits,
                                                     int page_timeout_s) {
  std::vector<std::unique_ptr<uocr::PageSource>> parts;
  std::vector<std::string> images;
  auto flush_images = [&] {
    if (!images.empty()) parts.push_back(std::make_unique<uocr::FilePages>(std::move(images), limits));
    images.clear();
  };
  for (const std::string& in : inputs) {
    if (is_pdf(in)) {
      flush_images();
      parts.push_back(std::make_unique<PdfPages>(in, dpi, limits, page_timeout_s));
    } else {
      uocr::require_regular_file(in, "image file");  // before the model loads
      images.push_back(in);
    }
  }
  flush_images();
  return std::make_unique<uocr::ChainedPages>(std::move(parts));
}

}  // namespace uocr_cli
