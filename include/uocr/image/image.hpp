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
// palettes are expanded (a pixel index past the palette is black: png_palette.hpp,
// bmp_palette.hpp), 16-bit samples keep their high byte, except 16-bit grayscale, which Pillow
// opens as mode "I;16"/"I" and clamps to 255 on convert("RGB").
// Known differences from Pillow (pixels, not geometry): without libjpeg, JPEG uses stb's
// IDCT/upsampling (typically off by a few levels) and stb's CMYK formula; transparent GIF pixels
// come out black instead of their palette colour; PNM with maxval other than 255/65535 is not
// rescaled; 16-bit PPM keeps the high byte where Pillow rescales.
//
// All functions are thread-safe (stb's failure reason is thread-local).
#pragma once
#include <stb/stb_image.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "uocr/core/deadline.hpp"
#include "uocr/core/error.hpp"
#include "uocr/image/bmp_palette.hpp"
#include "uocr/image/exif.hpp"
#include "uocr/image/jpeg_markers.hpp"
#include "uocr/image/png_palette.hpp"
#include "uocr/io/read_file.hpp"
#include "uocr/version.hpp"
#ifdef UOCR_HAVE_LIBJPEG
#include "uocr/image/jpeg.hpp"
#endif

UOCR_NAMESPACE_BEGIN

struct ImageU8 {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;  // row-major, interleaved R,G,B; no row padding

  uint8_t* row(int y) { return rgb.data() + size_t(y) * size_t(width) * 3; }
  const uint8_t* row(int y) const { return rgb.data() + size_t(y) * size_t(width) * 3; }
};

// The decode budget of one image, checked from its header before any pixel memory is allocated
// (a 35-byte GIF can declare 65535 x 65535 pixels). The defaults fit an A3 page scanned at 600 dpi
// (7016 x 9921 = 69.6 Mpixel) in every sample format, float HDR RGB (835 MB) included, and bound
// what one small file can cost; the model reads pages at about 1024 pixels a side, so larger
// images add nothing. Pillow (upstream) refuses only from 178956970 pixels: images between the
// two limits need max_pixels raised. The C ABI's max_image_pixels / max_image_bytes /
// max_jpeg_scans and `uocr --max-image-pixels / --max-image-bytes / --max-jpeg-scans` set these.
struct DecodeLimits {
  uint64_t max_pixels = 100000000;          // width x height
  uint64_t max_bytes = uint64_t(1) << 30;   // width x height x channels x bytes per sample, as the file
                                            // stores them (16-bit PNG: 2 bytes, HDR: 4); also the largest
                                            // image file load_image reads
  // Scans of one JPEG: a progressive scan passes over the whole image, and a file can repeat one
  // for a few bytes a copy. libjpeg's progressive script writes 10 scans; the
  // limit leaves ten times that.
  int max_jpeg_scans = 100;
};

// A width x height image, all pixels zero. Throws invalid_argument on a non-positive size and
// out_of_memory, naming the size, when its bytes cannot be allocated: past vector::max_size (where
// resize would throw std::length_error) or refused by the allocator.
inline ImageU8 make_image(int width, int height) {
  require(width > 0 && height > 0, Status::invalid_argument, [&] {
    return "image size must be positive, got " + std::to_string(width) + "x" + std::to_string(height);
  });
  const uint64_t bytes = uint64_t(width) * uint64_t(height) * 3;  // below 2^64: both are ints
  const auto no_memory = [&] {
    return Error(Status::out_of_memory, "out of memory for a " + std::to_string(width) + "x" + std::to_string(height) +
                                            " RGB image (" + std::to_string(bytes) + " bytes)");
  };
  ImageU8 im;
  if (bytes > im.rgb.max_size()) throw no_memory();
  im.width = width;
  im.height = height;
  try {
    im.rgb.resize(size_t(bytes));
  } catch (const std::bad_alloc&) {
    throw no_memory();
  }
  return im;
}

// Copies caller-owned interleaved RGB rows (stride = bytes from one row to the next, at least
// 3 * width). Throws invalid_argument on a null pointer, a non-positive size, a short stride, or
// rows that span more bytes than any buffer can hold (a stride no buffer can have).
inline ImageU8 image_from_rgb(const uint8_t* pixels, int width, int height, size_t stride) {
  require(pixels != nullptr, Status::invalid_argument, "image_from_rgb: null pixel pointer");
  ImageU8 im = make_image(width, height);
  const size_t row_bytes = size_t(width) * 3;
  require(stride >= row_bytes, Status::invalid_argument, [&] {
    return "image_from_rgb: stride " + std::to_string(stride) + " is smaller than 3 * width = " +
           std::to_string(row_bytes);
  });
  // The rows span (height - 1) * stride + row_bytes bytes from `pixels`: no buffer is larger than
  // PTRDIFF_MAX bytes, and none wraps around the end of the address space.
  const size_t most = std::min<size_t>(PTRDIFF_MAX, SIZE_MAX - reinterpret_cast<uintptr_t>(pixels));
  require(row_bytes <= most && (height == 1 || stride <= (most - row_bytes) / size_t(height - 1)), Status::invalid_argument, [&] {
    return "image_from_rgb: stride " + std::to_string(stride) + " x height " + std::to_string(height) +
           " is larger than any buffer can be";
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

// What an encoded image's header says, before any pixel is decoded.
struct ImageHeader {
  int64_t width = 0, height = 0;
  int channels = 0;      // samples per pixel as the file stores them (a palette: 3)
  int sample_bytes = 1;  // bytes per sample: 1, 2 (16-bit) or 4 (float HDR)
};

// Throws Error(invalid_image) when an image of this header is over `limits`, naming the limit and
// how to raise it. Decoding checks it before allocating pixels; callers holding raw pixels
// (the C ABI's RGB pages) check theirs too.
namespace detail {
inline const char* const kRaiseMaxBytes =
    " (raise it with DecodeLimits::max_bytes, the C ABI's max_image_bytes or uocr --max-image-bytes)";
}  // namespace detail

inline void check_decode_budget(const ImageHeader& h, const DecodeLimits& limits) {
  const std::string size = std::to_string(h.width) + "x" + std::to_string(h.height);
  require(h.width > 0 && h.height > 0 && h.channels > 0 && h.sample_bytes > 0, Status::invalid_image,
          [&] { return "image size " + size + " (" + std::to_string(h.channels) + " channels) is not positive"; });
  // Headers hold 32-bit sizes at most: the product does not overflow.
  const uint64_t pixels = uint64_t(h.width) * uint64_t(h.height);
  require(pixels <= limits.max_pixels, Status::invalid_image, [&] {
    return "image is " + size + " = " + std::to_string(pixels) + " pixels, above the limit of " + std::to_string(limits.max_pixels) +
           " pixels (raise it with DecodeLimits::max_pixels, the C ABI's max_image_pixels or uocr --max-image-pixels)";
  });
  const uint64_t sample = uint64_t(h.channels) * uint64_t(h.sample_bytes);
  require(pixels <= limits.max_bytes / sample, Status::invalid_image, [&] {
    return "image is " + size + " pixels of " + std::to_string(h.channels) + " channel(s) of " + std::to_string(h.sample_bytes) +
           " byte(s), above the limit of " + std::to_string(limits.max_bytes) + " bytes decoded" + detail::kRaiseMaxBytes;
  });
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

// The size of a PNG from its IHDR chunk; false when the data is not a PNG with a valid IHDR.
// stbi_info reports a PNG it refuses (more than 2^30 bytes of samples) as "unknown image type",
// after trying every other format; this gives the budget check the real size.
inline bool png_header(const uint8_t* d, size_t size, ImageHeader& out) {
  static const uint8_t start[16] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13, 'I', 'H', 'D', 'R'};
  if (size < 26 || std::memcmp(d, start, sizeof start) != 0) return false;
  auto be32 = [&](size_t at) { return uint32_t(d[at]) << 24 | uint32_t(d[at + 1]) << 16 | uint32_t(d[at + 2]) << 8 | d[at + 3]; };
  const int depth = d[24], colour = d[25];
  static const int channels[7] = {1, 0, 3, 3, 2, 0, 4};  // by colour type: gray, -, RGB, palette (RGB), gray+alpha, -, RGBA
  if (colour > 6 || channels[colour] == 0 || be32(16) == 0 || be32(20) == 0) return false;
  out = {be32(16), be32(20), channels[colour], depth == 16 ? 2 : 1};
  return true;
}

// Refuses a PNG with a chunk that claims more bytes than the file has left: stb_image grows its
// buffer for an IDAT chunk to the claimed length before reading it, so a few hundred bytes could
// claim a gigabyte. stb reads a chunk once its 8-byte header (length, type) is there, so a last
// header cut off before its CRC is checked as well. Chunks after IEND are not read by anyone and
// are not looked at.
inline void require_png_chunks_in_file(const uint8_t* d, size_t size) {
  for (size_t at = 8; size - at >= 8;) {
    const uint64_t length = uint64_t(d[at]) << 24 | uint64_t(d[at + 1]) << 16 | uint64_t(d[at + 2]) << 8 | d[at + 3];
    require(length + 12 <= uint64_t(size - at), Status::invalid_image, [&] {
      return "cannot decode image: PNG chunk '" + std::string(reinterpret_cast<const char*>(d + at + 4), 4) + "' at byte " +
             std::to_string(at) + " claims " + std::to_string(length) + " bytes but the file has " +
             std::to_string(size - at >= 12 ? size - at - 12 : 0) + " left (truncated or corrupt)";
    });
    if (std::memcmp(d + at + 4, "IEND", 4) == 0) return;
    at += 12 + size_t(length);
  }
}

// The size of any other format stb_image reads, from stbi_info.
inline ImageHeader stb_header(const uint8_t* data, int len) {
  int w = 0, h = 0, comp = 0;
  require(stbi_info_from_memory(data, len, &w, &h, &comp) != 0, Status::invalid_image,
          [] { return "cannot decode image: " + stb_reason(); });
  ImageHeader out;
  out.width = w;
  out.height = h < 0 ? -int64_t(h) : h;  // stbi_info gives a top-down BMP's height as stored: negative
  out.channels = comp;
  out.sample_bytes = stbi_is_hdr_from_memory(data, len) ? 4 : stbi_is_16_bit_from_memory(data, len) ? 2 : 1;
  return out;
}

}  // namespace detail

// Decodes an encoded image held in memory. Throws Error(invalid_image) for empty, truncated,
// corrupt or unsupported data and for images over `limits` (the size is checked from the header,
// before any pixel memory is allocated; JPEG scans as they are read). Past `deadline` (a session
// hands its time budget's end to its page source) it throws DeadlinePassed: libjpeg stops between
// two rows of a scan; other formats are checked before and after stb decodes them, which the byte
// and pixel budgets bound to seconds (docs/RELIABILITY.md).
inline ImageU8 decode_image(const uint8_t* data, size_t size, const DecodeLimits& limits = {}, const Deadline& deadline = {}) {
  require(data != nullptr && size > 0, Status::invalid_image, "cannot decode image: no data");
  deadline.check("decoding an image");
#ifdef UOCR_HAVE_LIBJPEG
  if (detail::is_jpeg(data, size)) {
    detail::JpegDecoder jpeg;
    jpeg.read_header(data, size);
    check_decode_budget({jpeg.width(), jpeg.height(), jpeg.components(), 1}, limits);
    ImageU8 im = make_image(jpeg.width(), jpeg.height());
    jpeg.read_rgb(im.rgb.data(), limits.max_jpeg_scans, deadline);
    return apply_exif_orientation(im, exif_orientation(data, size));
  }
#endif
  // stb_image skips 0xFF fill bytes before a JPEG's start marker, Pillow does not: such data is
  // no image Pillow opens, and stb's JPEG decoder (which reads past a Huffman table on some of
  // them) must not see it in a build that decodes JPEG with libjpeg.
  size_t fill = 0;
  while (fill < size && data[fill] == 0xFF) ++fill;
  const bool jpeg_after_fill = fill > 0 && fill < size && data[fill] == 0xD8;
#ifdef UOCR_HAVE_LIBJPEG
  require(!jpeg_after_fill, Status::invalid_image,
          "cannot decode image: 0xFF bytes before a JPEG start marker (not a JPEG file Pillow reads)");
#else
  // stb_image has no scan limit of its own: the scans are counted before it decodes any.
  if (jpeg_after_fill) {
    const int64_t scans = detail::jpeg_scan_count(data + fill - 1, size - (fill - 1));
    require(scans <= limits.max_jpeg_scans, Status::invalid_image, [&] {
      return "cannot decode image: JPEG has " + std::to_string(scans) + " scans, more than the limit of " +
             std::to_string(limits.max_jpeg_scans) +
             " (raise it with DecodeLimits::max_jpeg_scans, the C ABI's max_jpeg_scans or uocr --max-jpeg-scans)";
    });
  }
#endif
  std::vector<uint8_t> padded = detail::png_with_full_palettes(data, size);
  if (padded.empty()) padded = detail::bmp_with_pillow_palette(data, size);
  if (!padded.empty()) {
    data = padded.data();
    size = padded.size();
  }
  require(size <= size_t(INT_MAX), Status::invalid_image, [&] {
    return "cannot decode image: " + std::to_string(size) + " bytes is more than stb_image accepts";
  });
  const int len = int(size);
  ImageHeader header;
  const bool png = detail::png_header(data, size, header);
  if (!png) header = detail::stb_header(data, len);
  check_decode_budget(header, limits);
  if (png) detail::require_png_chunks_in_file(data, size);

  ImageU8 im;
  int w = 0, h = 0, n = 0;
  if (header.channels == 1 && header.sample_bytes == 2) {
    // 16-bit grayscale: Pillow clamps the 16-bit value to 255 instead of taking the high byte.
    std::unique_ptr<uint16_t, detail::StbFree> px(stbi_load_16_from_memory(data, len, &w, &h, &n, 1));
    require(px != nullptr, Status::invalid_image, [] { return "cannot decode image: " + detail::stb_reason(); });
    im = make_image(w, h);
    const uint16_t* s = px.get();
    for (size_t i = 0; i < size_t(w) * size_t(h); ++i) {
      im.rgb[3 * i] = im.rgb[3 * i + 1] = im.rgb[3 * i + 2] = uint8_t(s[i] > 255 ? 255 : s[i]);
    }
  } else {
    std::unique_ptr<uint8_t, detail::StbFree> px(stbi_load_from_memory(data, len, &w, &h, &n, 0));
    require(px != nullptr, Status::invalid_image, [] { return "cannot decode image: " + detail::stb_reason(); });
    require(n >= 1 && n <= 4, Status::invalid_image, "cannot decode image: unexpected channel count");
    im = make_image(w, h);
    detail::to_rgb(px.get(), n, im);
  }
  deadline.check("decoding an image");
  return apply_exif_orientation(im, exif_orientation(data, size));
}

// Reads and decodes an image file. Throws Error(io) when it cannot be read or is not a regular
// file (io/read_file.hpp: a directory, FIFO or device fails at once), Error(invalid_image) when
// it holds more than limits.max_bytes, otherwise as decode_image (DeadlinePassed as it is).
inline ImageU8 load_image(const std::string& path, const DecodeLimits& limits = {}, const Deadline& deadline = {}) {
  std::vector<uint8_t> bytes;
  try {
    bytes = read_file_capped(path, limits.max_bytes, "image file", Status::invalid_image);
  } catch (const Error& e) {
    if (e.status() != Status::invalid_image) throw;
    throw Error(e.status(), e.what() + std::string(detail::kRaiseMaxBytes));
  }
  try {
    return decode_image(bytes.data(), bytes.size(), limits, deadline);
  } catch (const DeadlinePassed&) {
    throw;
  } catch (const Error& e) {
    throw Error(e.status(), path + ": " + e.what());
  }
}

UOCR_NAMESPACE_END
