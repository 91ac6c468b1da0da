// Float32 building blocks of the vision encoder that SAM and CLIP share: channels-last feature
// maps, convolutions lowered to one GEMM (im2col + cpu::linear), LayerNorm, row softmax and a
// few layout helpers (strided head views, transpose, residual add).
//
// Layout: every activation is token-major, [tokens, channels] row-major. A spatial map of h x w
// pixels is stored channels-last (NHWC without the batch), row index y*w + x. This is the layout
// the transformer blocks and GEMMs want, and in it PyTorch's LayerNorm2d (normalise each pixel
// over its channels, biased variance) is exactly a per-token LayerNorm, so one kernel serves both.
// Convolution weights stay in checkpoint order [out, in, kh, kw]; im2col writes its columns in
// that same (in, ky, kx) order, so the weight tensor is used as an [out, in*kh*kw] matrix as is.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "uocr/backends/cpu/linear.hpp"
#include "uocr/backends/cpu/scratch.hpp"
#include "uocr/core/deadline.hpp"
#include "uocr/core/error.hpp"
#include "uocr/io/safetensors.hpp"
#include "uocr/model/weights.hpp"
#include "uocr/vision/token_layout.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN
namespace vision {

// An h x w map with c channels, channels-last: data[(y*w + x)*c + ch].
struct FeatureMap {
  int h = 0, w = 0, c = 0;
  std::vector<float> data;

  FeatureMap() = default;
  FeatureMap(int h_, int w_, int c_) : h(h_), w(w_), c(c_), data(size_t(h_) * size_t(w_) * size_t(c_)) {}
  int64_t tokens() const { return int64_t(h) * w; }
  // Takes the shape h x w x c, keeping the storage when it is large enough (contents unspecified).
  void reshape(int h_, int w_, int c_) {
    h = h_;
    w = w_;
    c = c_;
    data.resize(size_t(h_) * size_t(w_) * size_t(c_));
  }
};

// The vision encoder's working memory, kept and reused view after view (page after page): every
// buffer grows to the largest size a view needs and is never shrunk, so a page like one already
// encoded allocates nothing, and bytes() is what its buffers hold (their capacities). Position
// and rel-pos tables are computed once per grid size. The activation buffers are aligned as
// Eigen's own matrices (uocr/backends/cpu/scratch.hpp), so results are those of the temporaries
// they replace, bit for bit.
class Workspace {
 public:
  enum Slot { normed, qkv, heads, mlp, columns, threads, clip_x, clip_t, clip_buf, features, slots };

  // At least n floats of buffer `s` (contents unspecified).
  float* get(Slot s, int64_t n) {
    cpu::AlignedFloats& b = buffers_[s];
    if (b.size() < size_t(n)) b.resize(size_t(n));
    return b.data();
  }
  cpu::AlignedFloats& buffer(Slot s) { return buffers_[s]; }
  // At least n words for bf16 operands packed as pairs (the attention's keys and values).
  uint32_t* bf16_operands(int64_t n) {
    if (bf16_operands_.size() < size_t(n)) bf16_operands_.resize(size_t(n));
    return bf16_operands_.data();
  }

  // Channels-last maps: the SAM token stream and the neck / compressor convolutions' outputs.
  FeatureMap sam_x, conv_tmp, neck, sam_out;
  // Projected features of a page's views before their layout (VisionEncoder::visual_tokens).
  std::vector<float> global_features;
  std::vector<std::vector<float>> tile_features;
  // When the page being encoded must stop (VisionEncoder::visual_tokens sets it for its call):
  // SAM and CLIP check it between two blocks.
  Deadline deadline;

  // Table `key` (weights resampled or widened for one grid size), made by make() the first time.
  template <class Make>
  const std::vector<float>& table(const std::string& key, Make make) {
    auto it = tables_.find(key);
    if (it == tables_.end()) it = tables_.emplace(key, make()).first;
    return it->second;
  }

  size_t bytes() const {
    size_t floats = 0;
    for (const cpu::AlignedFloats& b : buffers_) floats += b.capacity();
    for (const FeatureMap* m : {&sam_x, &conv_tmp, &neck, &sam_out}) floats += m->data.capacity();
    floats += global_features.capacity();
    for (const std::vector<float>& t : tile_features) floats += t.capacity();
    for (const auto& t : tables_) floats += t.second.capacity();
    return floats * sizeof(float) + bf16_operands_.capacity() * sizeof(uint32_t) +
           tile_features.capacity() * sizeof(std::vector<float>);
  }

 private:
  cpu::AlignedFloats buffers_[slots];
  std::vector<uint32_t> bf16_operands_;
  std::map<std::string, std::vector<float>> tables_;
};

// A conv weight [out, in, kh, kw] seen as the [out, in*kh*kw] matrix cpu::linear multiplies by.
inline TensorView conv_as_matrix(const TensorView& w) {
  TensorView m = w;
  m.shape = {w.dim(0), w.numel() / w.dim(0)};
  return m;
}

// Conv2d over a channels-last map into y (not x), square kernel from the weight, no
// dilation/groups; `cols` holds the im2col columns.
inline void conv2d(const FeatureMap& x, const TensorView& weight, const TensorView* bias, int stride, int pad, FeatureMap& y,
                   cpu::AlignedFloats& cols) {
  const int cout = int(weight.dim(0)), k = int(weight.dim(2));
  require(weight.shape.size() == 4 && weight.dim(1) == x.c && weight.dim(3) == k, Status::internal,
          [&] { return "conv2d: weight " + weight.name + " does not fit a " + std::to_string(x.c) + "-channel input"; });
  const int ho = conv_output_size(x.h, k, stride, pad), wo = conv_output_size(x.w, k, stride, pad);
  y.reshape(ho, wo, cout);
  const TensorView wm = conv_as_matrix(weight);
  if (k == 1 && stride == 1 && pad == 0) {  // pointwise: the map already is the GEMM operand
    cpu::linear(x.data.data(), x.tokens(), wm, bias, y.data.data());
    return;
  }
  const int64_t kk = int64_t(k) * k, cols_per_row = int64_t(x.c) * kk;
  if (cols.size() < size_t(y.tokens() * cols_per_row)) cols.resize(size_t(y.tokens() * cols_per_row));
#pragma omp parallel for schedule(static)
  for (int oy = 0; oy < ho; ++oy) {
    for (int ox = 0; ox < wo; ++ox) {
      float* row = cols.data() + (int64_t(oy) * wo + ox) * cols_per_row;
      for (int ky = 0; ky < k; ++ky) {
        const int iy = oy * stride - pad + ky;
        for (int kx = 0; kx < k; ++kx) {
          const int ix = ox * stride - pad + kx;
          float* dst = row + ky * k + kx;
          if (iy < 0 || iy >= x.h || ix < 0 || ix >= x.w) {
            for (int c = 0; c < x.c; ++c) dst[c * kk] = 0.f;
          } else {
            const float* src = x.data.data() + (int64_t(iy) * x.w + ix) * x.c;
            for (int c = 0; c < x.c; ++c) dst[c * kk] = src[c];
          }
        }
      }
    }
  }
  cpu::linear(cols.data(), y.tokens(), wm, bias, y.data.data());
}

inline FeatureMap conv2d(const FeatureMap& x, const TensorView& weight, const TensorView* bias, int stride, int pad) {
  FeatureMap y;
  cpu::AlignedFloats cols;
  conv2d(x, weight, bias, stride, pad, y, cols);
  return y;
}

// Non-overlapping patch embedding (Conv2d with kernel = stride = p) of a CHW image, as the ViT
// patch_embed, into y: the channels-last grid of size/p x size/p; `cols` holds the patches.
inline void patch_embed(const float* chw, int channels, int size, const TensorView& weight, const TensorView* bias,
                        FeatureMap& y, cpu::AlignedFloats& cols) {
  const int p = int(weight.dim(2)), g = size / p;
  require(weight.dim(1) == channels && weight.dim(3) == p && size % p == 0, Status::invalid_argument, [&] {
    return "patch_embed: a " + std::to_string(size) + " px view does not split into " + std::to_string(p) + " px patches";
  });
  const int64_t patch_len = int64_t(channels) * p * p;
  if (cols.size() < size_t(int64_t(g) * g * patch_len)) cols.resize(size_t(int64_t(g) * g * patch_len));
#pragma omp parallel for schedule(static)
  for (int gy = 0; gy < g; ++gy)
    for (int gx = 0; gx < g; ++gx) {
      float* row = cols.data() + (int64_t(gy) * g + gx) * patch_len;
      for (int c = 0; c < channels; ++c)
        for (int py = 0; py < p; ++py)
          std::memcpy(row + (int64_t(c) * p + py) * p,
                      chw + (int64_t(c) * size + int64_t(gy) * p + py) * size + int64_t(gx) * p, sizeof(float) * size_t(p));
    }
  y.reshape(g, g, int(weight.dim(0)));
  cpu::linear(cols.data(), y.tokens(), conv_as_matrix(weight), bias, y.data.data());
}

inline FeatureMap patch_embed(const float* chw, int channels, int size, const TensorView& weight, const TensorView* bias) {
  FeatureMap y;
  cpu::AlignedFloats cols;
  patch_embed(chw, channels, size, weight, bias, y, cols);
  return y;
}

// y = (x - mean) / sqrt(var + eps) * weight + bias per row of `dim` values (biased variance,
// two passes as torch's LayerNorm2d spells it). y may alias x.
inline void layer_norm(const float* x, int64_t rows, int64_t dim, const NormWeights& nw, float eps, float* y) {
  const std::vector<float> wv = nw.weight->to_vector(), bv = nw.bias->to_vector();
#pragma omp parallel for schedule(static) if (rows * dim > (1 << 15))
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    float mean = 0.f;
    for (int64_t i = 0; i < dim; ++i) mean += xr[i];
    mean /= float(dim);
    float var = 0.f;
    for (int64_t i = 0; i < dim; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    const float inv = 1.f / std::sqrt(var / float(dim) + eps);
    for (int64_t i = 0; i < dim; ++i) yr[i] = (xr[i] - mean) * inv * wv[size_t(i)] + bv[size_t(i)];
  }
}

inline void layer_norm(FeatureMap& x, const NormWeights& nw, float eps) {
  layer_norm(x.data.data(), x.tokens(), x.c, nw, eps, x.data.data());
}

namespace detail {

using StridedMap = Eigen::Map<const cpu::RowMatrix, 0, Eigen::OuterStride<>>;
using MutStridedMap = Eigen::Map<cpu::RowMatrix, 0, Eigen::OuterStride<>>;

// [rows, cols] -> [cols, rows]
inline std::vector<float> transposed(const float* x, int64_t rows, int64_t cols) {
  std::vector<float> t(size_t(rows * cols));
  Eigen::Map<cpu::RowMatrix>(t.data(), cols, rows) = Eigen::Map<const cpu::RowMatrix>(x, rows, cols).transpose();
  return t;
}

inline void add_inplace(float* x, const float* y, int64_t n) {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

}  // namespace detail

// In-place softmax of each row of a row-major block (attention scores).
template <class Block>
inline void softmax_rows(Block&& s) {
  for (Eigen::Index r = 0; r < s.rows(); ++r) {
    auto row = s.row(r).array();
    row = (row - row.maxCoeff()).exp();
    row /= row.sum();
  }
}

}  // namespace vision
UOCR_NAMESPACE_END
