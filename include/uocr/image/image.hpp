// 8-bit RGB images and decoding that reproduces the upstream loader
//   PIL.Image.open(path) -> ImageOps.exif_transpose -> .convert("RGB")
// with libjpeg(-turbo) for JPEG when the build has it (UOCR_HAVE_LIBJPEG, jpeg.hpp: the same
// decoder and settings as Pillow, bit-exact) and stb_image for the rest (PNG, BMP, GIF first
// frame, TGA, PNM, PSD, and JPEG in builds without libjpeg).
//
// Basic usage:
//   uocr::ImageU8 page = uocr::load_image("page.png");          // throws uocr::Error
//   uocr::ImageU8 view = uocr::image_from_rgb(ptr, w, h, stride);  // caller-owned pixels
//
// Conversion to RGB follows Pillow: gray is replicated, alpha is dropped without compositing,
// palettes are expanded (a PNG pixel index past the palette is black: png_palette.hpp), 16-bit
// samples keep their high byte, except 16-bit grayscale, which Pillow opens as mode "I;16"/"I"
// and clamps to 255 on convert("RGB").
// Known differences from Pillow (pixels, not geometry): without libjpeg, JPEG uses stb's
// IDCT/upsampling (typically off by a few levels) and stb's CMYK formula; transparent GIF pixels
// come out black instead of their palette colour; PNM with maxval other than 255/65535 is not
// rescaled; 16-bit PPM keeps the high byte where Pillow rescales.
//
// All functions are thread-safe (stb's failure reason is thread-local).
#pragma once
#include <stb/stb_image.h>

#include <climits>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "uocr/core/error.hpp"
#include "uocr/image/exif.hpp"
#include "uocr/image/png_palette.hpp"
#ifdef UOCR_HAVE_LIBJPEG
#include "uocr/image/jpeg.hpp"
#endif

namespace uocr {

struct ImageU8 {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;  // row-major, interleaved R,G,B; no row padding

  uint8_t* row(int y) { return rgb.data() + size_t(y) * size_t(width) * 3; }
  const uint8_t* row(int y) const { return rgb.data() + size_t(y) * size_t(width) * 3; }
};

// Pillow raises DecompressionBombError above 2 * Image.MAX_IMAGE_PIXELS = 2 * 89478485 =
// 178956970 pixels, after which upstream has no image at all; the same default limit here.
struct DecodeLimits {
  uint64_t max_pixels = 178956970;
};

// A width x height image, all pixels zero. Throws invalid_argument on a
// non-positive size.
inline ImageU8 make_image(int width, int height) {
  require(width > 0 && height > 0, Status::invalid_argument, [&] {
    return "image size must be positive, got " + std::to_string(width) + "x" + std::to_string(height);
  });
  ImageU8 im;
  im.width = width;
  im.height = height;
  im.rgb.resize(size_t(width) * size_t(height) * 3);
  return im;
}

// Copies caller-owned interleaved RGB rows (stride = bytes from one row to the next, at least
// 3 * width). Throws invalid_argument on a null pointer, a non-positive size or a short stride.
inline ImageU8 image_from_rgb(const uint8_t* pixels, int width, int height, size_t stride) {
  require(pixels != nullptr, Status::invalid_argument, "image_from_rgb: null pixel pointer");
  ImageU8 im = make_image(width, height);
  const size_t row_bytes = size_t(width) * 3;
  require(stride >= row_bytes, Status::invalid_argument, [&] {
    return "image_from_rgb: stride " + std::to_string(stride) + " is smaller than 3 * width = " +
           std::to_string(row_bytes);
  });
  for (int y = 0; y < height; ++y) std::memcpy(im.row(y), pixels + size_t(y) * stride, row_bytes);
  return im;
}

// The image transformed by an EXIF orientation, exactly as ImageOps.exif_transpose:
// 2 mirror, 3 rotate 180, 4 flip, 5 transpose, 6 rotate 90 cw, 7 transverse, 8 rotate 90 ccw.
inline ImageU8 apply_exif_orientation(const ImageU8& in, int orientation) {
  if (orientation < 2 || orientation > 8) return in;
  const int w = in.width, h = in.height;
  const bool swap = orientation >= 5;
  ImageU8 out = make_image(swap ? h : w, swap ? w : h);
  for (int y = 0; y < out.height; ++y) {
    uint8_t* dst = out.row(y);
    for (int x = 0; x < out.width; ++x, dst += 3) {
      int sx = 0, sy = 0;
      switch (orientation) {
        case 2: sx = w - 1 - x; sy = y; break;
        case 3: sx = w - 1 - x; sy = h - 1 - y; break;
        case 4: sx = x; sy = h - 1 - y; break;
        case 5: sx = y; sy = x; break;
        case 6: sx = y; sy = h - 1 - x; break;
        case 7: sx = w - 1 - y; sy = h - 1 - x; break;
        default: sx = w - 1 - y; sy = x; break;  // 8
      }
      std::memcpy(dst, in.row(sy) + size_t(sx) * 3, 3);
    }
  }
  return out;
}

namespace detail {

struct StbFree {
  void operator()(void* p) const { stbi_image_free(p); }
};

inline std::string stb_reason() {
  const char* r = stbi_failure_reason();
  return r ? r : "unknown error";
}

// Pixel data of `n` channels (1 gray, 2 gray+alpha, 3 RGB, 4 RGBA) to RGB, as convert("RGB").
inline void to_rgb(const uint8_t* src, int n, ImageU8& out) {
  const size_t count = size_t(out.width) * size_t(out.height);
  uint8_t* dst = out.rgb.data();
  for (size_t i = 0; i < count; ++i, src += n, dst += 3) {
    if (n <= 2) {
      dst[0] = dst[1] = dst[2] = src[0];
    } else {
      dst[0] = src[0];
      dst[1] = src[1];
      dst[2] = src[2];
    }
  }
}

// Pillow's DecompressionBombError check, from the header before pixel memory is allocated.
inline void check_pixel_limit(int w, int h, const DecodeLimits& limits) {
  const uint64_t pixels = uint64_t(w) * uint64_t(h);
  require(pixels <= limits.max_pixels, Status::invalid_image, [&] {
    return "image is " + std::to_string(w) + "x" + std::to_string(h) + " = " + std::to_string(pixels) +
           " pixels, above the limit of " + std::to_string(limits.max_pixels);
  });
}

}  // namespace detail

// Decodes an encoded image held in memory. Throws Error(invalid_image) for empty, truncated,
// corrupt or unsupported data and for images above limits.max_pixels (checked from the header,
// before any pixel memory is allocated).
inline ImageU8 decode_image(const uint8_t* data, size_t size, const DecodeLimits& limits = {}) {
  require(data != nullptr && size > 0, Status::invalid_image, "cannot decode image: no data");
#ifdef UOCR_HAVE_LIBJPEG
  if (detail::is_jpeg(data, size)) {
    detail::JpegDecoder jpeg;
    jpeg.read_header(data, size);
    detail::check_pixel_limit(jpeg.width(), jpeg.height(), limits);
    ImageU8 im = make_image(jpeg.width(), jpeg.height());
    jpeg.read_rgb(im.rgb.data());
    return apply_exif_orientation(im, exif_orientation(data, size));
  }
#endif
  const std::vector<uint8_t> padded = detail::png_with_full_palettes(data, size);
  if (!padded.empty()) {
    data = padded.data();
    size = padded.size();
  }
  require(size <= size_t(INT_MAX), Status::invalid_image, [&] {
    return "cannot decode image: " + std::to_string(size) + " bytes is more than stb_image accepts";
  });
  const int len = int(size);
  int w = 0, h = 0, comp = 0;
  require(stbi_info_from_memory(data, len, &w, &h, &comp) != 0, Status::invalid_image,
          [] { return "cannot decode image: " + detail::stb_reason(); });
  detail::check_pixel_limit(w, h, limits);

  ImageU8 im;
  if (comp == 1 && stbi_is_16_bit_from_memory(data, len)) {
    // 16-bit grayscale: Pillow clamps the 16-bit value to 255 instead of taking the high byte.
    int n = 0;
    std::unique_ptr<uint16_t, detail::StbFree> px(stbi_load_16_from_memory(data, len, &w, &h, &n, 1));
    require(px != nullptr, Status::invalid_image, [] { return "cannot decode image: " + detail::stb_reason(); });
    im = make_image(w, h);
    const uint16_t* s = px.get();
    for (size_t i = 0; i < size_t(w) * size_t(h); ++i) {
      im.rgb[3 * i] = im.rgb[3 * i + 1] = im.rgb[3 * i + 2] = uint8_t(s[i] > 255 ? 255 : s[i]);
    }
  } else {
    int n = 0;
    std::unique_ptr<uint8_t, detail::StbFree> px(stbi_load_from_memory(data, len, &w, &h, &n, 0));
    require(px != nullptr, Status::invalid_image, [] { return "cannot decode image: " + detail::stb_reason(); });
    require(n >= 1 && n <= 4, Status::invalid_image, "cannot decode image: unexpected channel count");
    im = make_image(w, h);
    detail::to_rgb(px.get(), n, im);
  }
  return apply_exif_orientation(im, exif_orientation(data, size));
}

// Reads and decodes an image file. Throws Error(io) when the file cannot be read, otherwise as
// decode_image.
inline ImageU8 load_image(const std::string& path, const DecodeLimits& limits = {}) {
  std::ifstream f(path, std::ios::binary);
  require(bool(f), Status::io, [&] { return "cannot open image file " + path; });
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  require(!f.bad(), Status::io, [&] { return "cannot read image file " + path; });
  try {
    return decode_image(bytes.data(), bytes.size(), limits);
  } catch (const Error& e) {
    throw Error(e.status(), path + ": " + e.what());
  }
}

}  // namespace uocr
