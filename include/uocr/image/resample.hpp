// Geometry on 8-bit RGB images, bit-exact with Pillow:
//   resize_bicubic  = Image.resize((w, h), Image.BICUBIC)   (src/libImaging/Resample.c)
//   crop            = Image.crop((left, top, right, bottom)) inside the image
//   pad             = ImageOps.pad(img, (w, h), color=...)  (contain + centred paste)
//
// Resample.c in short: separable, horizontal pass first, only the passes whose size changes;
// the intermediate image is uint8 (clipped); per output sample a support of 2 * max(scale, 1)
// source pixels weighted by Keys' cubic (a = -0.5) stretched by max(scale, 1), normalised in
// double, then rounded to 22-bit fixed point and accumulated in int32 from 2^21 (round half up).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "uocr/core/error.hpp"
#include "uocr/image/fp_exact.hpp"
#include "uocr/image/image.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

struct Rgb8 {
  uint8_t r, g, b;
};

namespace detail {

constexpr int kResamplePrecisionBits = 32 - 8 - 2;  // Pillow's PRECISION_BITS

// Each product is rounded() before an add: Pillow's wheels are built without FMA.
inline double pillow_bicubic(double x) {
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return rounded((rounded((a + 2.0) * x) - (a + 3.0)) * x * x) + 1;
  if (x < 2.0) return (rounded((rounded((x - 5) * x) + 8) * x) - 4) * a;
  return 0.0;
}

// For each output index: the first source index, the number of taps, and `ksize` fixed-point
// weights (unused ones zero).
struct ResampleTaps {
  int ksize = 0;
  std::vector<int> first;
  std::vector<int> count;
  std::vector<int32_t> weights;
};

inline ResampleTaps bicubic_taps(int in_size, int out_size) {
  // Pillow passes the source box (0, in_size) as floats.
  const double scale = double(float(in_size)) / out_size;
  const double filterscale = std::max(scale, 1.0);
  const double support = 2.0 * filterscale;
  const double ss = 1.0 / filterscale;  // Pillow multiplies by the reciprocal
  ResampleTaps t;
  t.ksize = int(std::ceil(support)) * 2 + 1;
  t.first.resize(size_t(out_size));
  t.count.resize(size_t(out_size));
  t.weights.assign(size_t(out_size) * size_t(t.ksize), 0);
  std::vector<double> w(size_t(t.ksize));
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = rounded((xx + 0.5) * scale);
    const int xmin = std::max(int(center - support + 0.5), 0);
    const int xmax = std::min(int(center + support + 0.5), in_size) - xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      w[size_t(x)] = pillow_bicubic((x + xmin - center + 0.5) * ss);
      ww += w[size_t(x)];
    }
    int32_t* k = &t.weights[size_t(xx) * size_t(t.ksize)];
    for (int x = 0; x < xmax; ++x) {
      const double v = (ww != 0.0 ? w[size_t(x)] / ww : w[size_t(x)]) * (1 << kResamplePrecisionBits);
      k[x] = int32_t(v < 0 ? -0.5 + v : 0.5 + v);  // truncation: round half away from zero
    }
    t.first[size_t(xx)] = xmin;
    t.count[size_t(xx)] = xmax;
  }
  return t;
}

inline uint8_t clip8(int32_t acc) {
  const int32_t v = acc >> kResamplePrecisionBits;  // floor, like Pillow's lookup table
  return uint8_t(v < 0 ? 0 : v > 255 ? 255 : v);
}

inline ImageU8 resample_horizontal(const ImageU8& in, int out_w) {
  const ResampleTaps t = bicubic_taps(in.width, out_w);
  ImageU8 out = make_image(out_w, in.height);
  for (int y = 0; y < in.height; ++y) {
    const uint8_t* src = in.row(y);
    uint8_t* dst = out.row(y);
    for (int xx = 0; xx < out_w; ++xx) {
      const int32_t* k = &t.weights[size_t(xx) * size_t(t.ksize)];
      const uint8_t* s = src + size_t(t.first[size_t(xx)]) * 3;
      int32_t a0 = 1 << (kResamplePrecisionBits - 1), a1 = a0, a2 = a0;
      for (int x = 0; x < t.count[size_t(xx)]; ++x, s += 3) {
        a0 += s[0] * k[x];
        a1 += s[1] * k[x];
        a2 += s[2] * k[x];
      }
      dst[3 * xx] = clip8(a0);
      dst[3 * xx + 1] = clip8(a1);
      dst[3 * xx + 2] = clip8(a2);
    }
  }
  return out;
}

inline ImageU8 resample_vertical(const ImageU8& in, int out_h) {
  const ResampleTaps t = bicubic_taps(in.height, out_h);
  ImageU8 out = make_image(in.width, out_h);
  const size_t row_len = size_t(in.width) * 3;
  std::vector<int32_t> acc(row_len);
  for (int yy = 0; yy < out_h; ++yy) {
    const int32_t* k = &t.weights[size_t(yy) * size_t(t.ksize)];
    std::fill(acc.begin(), acc.end(), 1 << (kResamplePrecisionBits - 1));
    // Row by row: integer sums are order-independent, so this equals Pillow's per-pixel loop.
    for (int y = 0; y < t.count[size_t(yy)]; ++y) {
      const uint8_t* s = in.row(t.first[size_t(yy)] + y);
      for (size_t i = 0; i < row_len; ++i) acc[i] += s[i] * k[y];
    }
    uint8_t* dst = out.row(yy);
    for (size_t i = 0; i < row_len; ++i) dst[i] = clip8(acc[i]);
  }
  return out;
}

// Python's round() on a float: nearest integer, ties to even.
inline int round_half_even(double v) {
  const double f = std::floor(v);
  const double d = v - f;
  if (d > 0.5) return int(f) + 1;
  if (d < 0.5) return int(f);
  return std::fmod(f, 2.0) == 0.0 ? int(f) : int(f) + 1;
}

}  // namespace detail

// Image.resize((out_w, out_h), BICUBIC). Same size returns a copy. Throws invalid_argument for a
// non-positive size.
inline ImageU8 resize_bicubic(const ImageU8& src, int out_w, int out_h) {
  require(out_w > 0 && out_h > 0, Status::invalid_argument, [&] {
    return "resize target must be positive, got " + std::to_string(out_w) + "x" + std::to_string(out_h);
  });
  if (out_w == src.width && out_h == src.height) return src;
  if (out_w == src.width) return detail::resample_vertical(src, out_h);
  ImageU8 h = detail::resample_horizontal(src, out_w);
  return out_h == src.height ? h : detail::resample_vertical(h, out_h);
}

// Image.crop((left, top, right, bottom)) for a non-empty box inside the image (exact copy).
// Throws invalid_argument otherwise.
inline ImageU8 crop(const ImageU8& src, int left, int top, int right, int bottom) {
  require(left >= 0 && top >= 0 && right <= src.width && bottom <= src.height && left < right && top < bottom,
          Status::invalid_argument, [&] {
            return "crop box (" + std::to_string(left) + "," + std::to_string(top) + "," + std::to_string(right) +
                   "," + std::to_string(bottom) + ") is empty or outside the " + std::to_string(src.width) + "x" +
                   std::to_string(src.height) + " image";
          });
  ImageU8 out = make_image(right - left, bottom - top);
  for (int y = 0; y < out.height; ++y) {
    std::memcpy(out.row(y), src.row(top + y) + size_t(left) * 3, size_t(out.width) * 3);
  }
  return out;
}

// The size ImageOps.contain resizes a w x h image to for a target_w x target_h box: the largest
// size of the same aspect ratio inside the box, one side rounded half-to-even as in Python.
// May be 0 on one side for extreme aspect ratios.
inline void contain_size(int w, int h, int target_w, int target_h, int& out_w, int& out_h) {
  out_w = target_w;
  out_h = target_h;
  const double im_ratio = double(w) / h;
  const double dest_ratio = double(target_w) / target_h;
  if (im_ratio > dest_ratio) {
    out_h = detail::round_half_even(detail::rounded(double(h) / w * target_w));
  } else if (im_ratio < dest_ratio) {
    out_w = detail::round_half_even(detail::rounded(double(w) / h * target_h));
  }
}

// ImageOps.pad(img, (target_w, target_h), BICUBIC, color, centering=(0.5, 0.5)): contain, then
// paste onto a `color` canvas, centred on the axis that fell short (offset rounded
// half-to-even). A contained side of 0 (aspect ratio beyond 2 * target) leaves a plain canvas,
// as Pillow 13 does; older Pillow raises there, aborting upstream's infer().
inline ImageU8 pad(const ImageU8& src, int target_w, int target_h, Rgb8 color = {127, 127, 127}) {
  require(target_w > 0 && target_h > 0, Status::invalid_argument, [&] {
    return "pad target must be positive, got " + std::to_string(target_w) + "x" + std::to_string(target_h);
  });
  int cw = 0, ch = 0;
  contain_size(src.width, src.height, target_w, target_h, cw, ch);
  if (cw == target_w && ch == target_h) return resize_bicubic(src, cw, ch);

  ImageU8 out = make_image(target_w, target_h);
  for (size_t i = 0; i < out.rgb.size(); i += 3) {
    out.rgb[i] = color.r;
    out.rgb[i + 1] = color.g;
    out.rgb[i + 2] = color.b;
  }
  if (cw == 0 || ch == 0) return out;
  const ImageU8 resized = resize_bicubic(src, cw, ch);
  int x = 0, y = 0;
  if (cw != target_w) {
    x = detail::round_half_even((target_w - cw) * 0.5);
  } else {
    y = detail::round_half_even((target_h - ch) * 0.5);
  }
  for (int r = 0; r < ch; ++r) std::memcpy(out.row(y + r) + size_t(x) * 3, resized.row(r), size_t(cw) * 3);
  return out;
}

UOCR_NAMESPACE_END
