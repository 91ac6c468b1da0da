// --max-image-pixels N, --max-image-bytes N, --max-jpeg-scans N: the decode budget of every page
// image (uocr::DecodeLimits, whose values they replace), for the commands that read images.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "args.hpp"
#include "uocr/core/error.hpp"
#include "uocr/image/image.hpp"

namespace uocr_cli {

inline std::vector<std::string> decode_limit_options() { return {"--max-image-pixels", "--max-image-bytes", "--max-jpeg-scans"}; }

// `limits` with the options given replacing its values.
inline uocr::DecodeLimits decode_limits(const Args& args, uocr::DecodeLimits limits = {}) {
  limits.max_pixels = args.number<uint64_t>("--max-image-pixels", limits.max_pixels);
  limits.max_bytes = args.number<uint64_t>("--max-image-bytes", limits.max_bytes);
  limits.max_jpeg_scans = args.integer("--max-jpeg-scans", limits.max_jpeg_scans);
  uocr::require(limits.max_pixels > 0 && limits.max_bytes > 0 && limits.max_jpeg_scans > 0, uocr::Status::invalid_argument,
                "--max-image-pixels, --max-image-bytes and --max-jpeg-scans must be positive");
  return limits;
}

}  // namespace uocr_cli
