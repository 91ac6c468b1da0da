// JPEG decoding through libjpeg(-turbo) with the settings of Pillow's JPEG decoder (JpegDecode.c
// + JpegImagePlugin), so that pixels equal Image.open(f).convert("RGB") exactly:
//   * default decompression parameters: JDCT_ISLOW, fancy upsampling, no scaling;
//   * 1 component -> JCS_GRAYSCALE ("L"), 3 -> JCS_RGB, 4 -> JCS_CMYK read as "CMYK;I" (Pillow
//     inverts every four-component JPEG, Adobe convention), then Pillow's cmyk2rgb;
//   * libjpeg warnings (corrupt data it can skip) are ignored as in Pillow, except running out of
//     data before the last scanline, which Pillow reports as a truncated file; a missing EOI
//     after the last scanline is accepted, as Pillow does;
//   * unlike Pillow, a file of more scans than DecodeLimits::max_jpeg_scans fails (image.hpp).
// Pillow's wheels bundle libjpeg-turbo 3.x; 2.1.5 (Debian 12) gives the same pixels on every
// fixture, but cannot decode lossless JPEG (SOF3, new in 3.0), which then fails cleanly.
// Used by decode_image (image.hpp) when the build defines UOCR_HAVE_LIBJPEG (meson option
// `jpeg`, which also links libjpeg).
#pragma once
#include <csetjmp>
#include <cstddef>
#include <cstdint>
#include <cstdio>  // snprintf; jpeglib.h uses FILE and size_t without including their headers
#include <string>
#include <vector>

#include <jpeglib.h>
#include <jerror.h>  // JWRN_JPEG_EOF

#include "uocr/core/deadline.hpp"
#include "uocr/core/error.hpp"
#include "uocr/image/jpeg_markers.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN
namespace detail {

// Everything the libjpeg calls touch, as plain C data: libjpeg's errors longjmp back into the
// step functions below, which hold no C++ object with a destructor. `err` is first so that the
// error callbacks can get from cinfo->err to the job.
struct JpegJob {
  jpeg_error_mgr err;
  jpeg_progress_mgr progress;
  jpeg_decompress_struct cinfo;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  bool created;
  int max_scans;
  Deadline deadline;
  bool deadline_passed;
};

inline void jpeg_fail(j_common_ptr cinfo) {
  JpegJob* job = reinterpret_cast<JpegJob*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, job->message);
  std::longjmp(job->jump, 1);
}

// msg_level -1 is a warning. jpeg_mem_src warns JWRN_JPEG_EOF when the data ends early and then
// feeds a fake EOI; Pillow's suspending source fails there instead.
inline void jpeg_message(j_common_ptr cinfo, int msg_level) {
  if (msg_level == -1 && cinfo->err->msg_code == JWRN_JPEG_EOF) jpeg_fail(cinfo);
}

// libjpeg calls this while it reads the data (once a row of blocks in every scan); a scan past
// the limit fails the decode (libjpeg has no limit of its own: a progressive file can repeat a
// scan, each one a pass over the image), and so does the deadline passing.
inline void jpeg_progress(j_common_ptr cinfo) {
  JpegJob* job = reinterpret_cast<JpegJob*>(cinfo->err);
  if (job->deadline.passed()) {
    job->deadline_passed = true;
    std::longjmp(job->jump, 1);
  }
  if (job->cinfo.input_scan_number <= job->max_scans) return;
  std::snprintf(job->message, sizeof job->message,
                "JPEG has more than %d scans, the limit (raise it with DecodeLimits::max_jpeg_scans, the C ABI's "
                "max_jpeg_scans or uocr --max-jpeg-scans)",
                job->max_scans);
  std::longjmp(job->jump, 1);
}

inline bool jpeg_header_step(JpegJob* job, const uint8_t* data, size_t size) {
  if (setjmp(job->jump)) return false;
  job->cinfo.err = jpeg_std_error(&job->err);
  job->err.error_exit = jpeg_fail;
  job->err.emit_message = jpeg_message;
  jpeg_create_decompress(&job->cinfo);
  job->created = true;
  jpeg_mem_src(&job->cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&job->cinfo, TRUE);
  return true;
}

inline bool jpeg_start_step(JpegJob* job, J_COLOR_SPACE out_space, int max_scans, Deadline deadline) {
  if (setjmp(job->jump)) return false;
  job->cinfo.out_color_space = out_space;
  job->max_scans = max_scans;
  job->deadline = deadline;
  job->progress.progress_monitor = jpeg_progress;
  job->cinfo.progress = &job->progress;
  jpeg_start_decompress(&job->cinfo);
  return true;
}

inline bool jpeg_scanline_step(JpegJob* job, uint8_t* line) {
  if (setjmp(job->jump)) return false;
  JSAMPROW row = line;
  jpeg_read_scanlines(&job->cinfo, &row, 1);  // always one line: jpeg_mem_src never suspends
  return true;
}

// One decoded scanline of `n` components to RGB as Pillow's unpacker + convert("RGB").
inline void jpeg_line_to_rgb(const uint8_t* s, int n, size_t width, uint8_t* out) {
  for (size_t x = 0; x < width; ++x, s += n, out += 3) {
    if (n == 1) {
      out[0] = out[1] = out[2] = s[0];
    } else if (n == 3) {
      out[0] = s[0];
      out[1] = s[1];
      out[2] = s[2];
    } else {
      // "CMYK;I" stores 255 - v, so cmyk2rgb's nk = 255 - K is the decoded K, and each channel is
      // nk - MULDIV255(255 - v, nk) (never negative: Pillow's CLIP8 does nothing).
      const int nk = s[3];
      for (int c = 0; c < 3; ++c) {
        const int t = (255 - s[c]) * nk + 128;
        out[c] = uint8_t(nk - (((t >> 8) + t) >> 8));
      }
    }
  }
}

// One JPEG's decoding, in two calls so that the caller can check the size from the header before
// allocating the pixels. Errors throw Error(invalid_image) with libjpeg's message.
class JpegDecoder {
 public:
  JpegDecoder() = default;
  ~JpegDecoder() {
    if (job_.created) jpeg_destroy_decompress(&job_.cinfo);
  }
  JpegDecoder(const JpegDecoder&) = delete;
  JpegDecoder& operator=(const JpegDecoder&) = delete;

  // `data` must outlive read_rgb.
  void read_header(const uint8_t* data, size_t size) {
    check(jpeg_header_step(&job_, data, size));
    const int n = job_.cinfo.num_components;
    require(n == 1 || n == 3 || n == 4, Status::invalid_image,
            [&] { return "cannot decode image: JPEG with " + std::to_string(n) + " components"; });
  }

  int width() const { return int(job_.cinfo.image_width); }
  int height() const { return int(job_.cinfo.image_height); }
  int components() const { return job_.cinfo.num_components; }

  // All pixels as RGB into `out` (width * height * 3 bytes); more than `max_scans` scans fail,
  // and the deadline passing throws DeadlinePassed.
  void read_rgb(uint8_t* out, int max_scans, Deadline deadline) {
    const int n = job_.cinfo.num_components;
    check(jpeg_start_step(&job_, n == 1 ? JCS_GRAYSCALE : n == 3 ? JCS_RGB : JCS_CMYK, max_scans, deadline));
    const size_t w = job_.cinfo.output_width;
    std::vector<uint8_t> line(w * size_t(job_.cinfo.output_components));
    for (size_t y = 0; y < job_.cinfo.output_height; ++y) {
      check(jpeg_scanline_step(&job_, line.data()));
      jpeg_line_to_rgb(line.data(), job_.cinfo.output_components, w, out + y * w * 3);
    }
  }

 private:
  void check(bool ok) const {
    if (!ok && job_.deadline_passed)
      throw DeadlinePassed("decoding scan " + std::to_string(job_.cinfo.input_scan_number) + " of a JPEG");
    require(ok, Status::invalid_image, [&] { return std::string("cannot decode image: ") + job_.message; });
  }

  JpegJob job_{};
};

}  // namespace detail
UOCR_NAMESPACE_END
