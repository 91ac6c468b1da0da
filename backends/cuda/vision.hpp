// DeepEncoder (SAM-ViT -> CLIP-L -> projector) on a CUDA device: the shared device encoder
// (vision/device_encoder.hpp) over this backend's kernels (ops.hpp): convolutions as im2col
// (conv.cu) + ops::linear (cuBLAS), LayerNorm and LayerNorm2d (norm.cu), SAM attention
// (sam_attention.cu), GELU and row copies (elementwise.cu), and CLIP's attention over the
// decoder's attention kernel (attention.cu). Weights are uploaded once in their stored type. A
// view's activations come from the Context's caching allocator and go back to it when the view
// is done; the view's result is read back once.
//
//   cuda::CudaVisionEncoder enc(ctx, config, weights);
//   std::vector<float> emb = enc.visual_tokens(global, tiles, tiles_x, tiles_y);  // as VisionEncoder
//
// Thread-safety: one thread at a time (the Context's rule); the engine shares one per device
// under a lock.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "backends/cuda/context.hpp"
#include "backends/cuda/ops.hpp"
#include "backends/cuda/weights.hpp"
#include "backends/device/encoder.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN
namespace cuda {

// The ops of vision::DeviceEncoder on CUDA: one object enqueues one view on the Context's stream.
class VisionOps {
 public:
  using Context = cuda::Context;
  using Buffer = cuda::Buffer;
  using Matrix = DeviceMatrix;
  using Gelu = ops::Gelu;

  static Matrix matrix(Context& c, const TensorView& t) { return upload_matrix(c, t); }
  static Buffer vector(Context& c, const TensorView& t) { return upload_f32(c, t); }
  static Buffer table(Context& c, const std::vector<float>& v, const char* what) {
    return upload_f32(c, v.data(), v.size(), what);
  }

  VisionOps(Context& c, vision::ActivationCount& count) : c_(c), count_(count) { c_.make_current(); }

  Buffer activations(int64_t floats, const char* what) {
    Buffer b = c_.alloc(size_t(std::max<int64_t>(1, floats)) * sizeof(float), what);
    count_.add(b.bytes());
    return b;
  }
  void upload(const Buffer& b, const float* data, size_t floats) { c_.upload(b, 0, data, floats * sizeof(float)); }
  void download(const Buffer& b, float* data, size_t floats) { c_.download(b, 0, data, floats * sizeof(float)); }
  void finish() { c_.synchronize(); }  // launch errors of the view surface here

  void patch_im2col(const Buffer& img, int channels, int size, int patch, const Buffer& cols) {
    ops::patch_im2col(c_, img.f32(), channels, size, patch, cols.f32());
  }
  void im2col(const Buffer& x, int h, int w, int c, int k, int stride, int pad, const Buffer& cols) {
    ops::im2col(c_, x.f32(), h, w, c, k, stride, pad, cols.f32());
  }
  void linear(const Buffer& x, int64_t m, const Matrix& w, const Buffer* bias, const Buffer& y) {
    ops::linear(c_, x.f32(), m, w, bias ? bias->f32() : nullptr, y.f32());
  }
  void add(const Buffer& x, const Buffer& y, int64_t n) { ops::add(c_, x.f32(), y.f32(), n); }
  void gelu(const Buffer& x, int64_t n, Gelu kind) { ops::gelu(c_, x.f32(), n, kind); }
  void layer_norm(const Buffer& x, int64_t rows, int64_t n, const Buffer& w, const Buffer& b, float eps,
                  const Buffer& y) {
    ops::layer_norm(c_, x.f32(), rows, n, w.f32(), b.f32(), eps, y.f32());
  }
  void copy_rows(const Buffer& x, int64_t x_off, int64_t ldx, int64_t rows, int64_t cols, const Buffer& o,
                 int64_t o_off, int64_t ldo) {
    ops::copy_rows(c_, x.f32() + x_off, ldx, rows, cols, o.f32() + o_off, ldo);
  }
  void sam_attention(const Buffer& qkv, const Buffer& qkv_bias, const Buffer& th, const Buffer& tw, int g, int n,
                     int heads, int64_t channels, const Buffer& o) {
    ops::sam_attention(c_, qkv.f32(), qkv_bias.f32(), th.f32(), tw.f32(), g, n, heads, channels, o.f32());
  }

  // Full attention of `rows` packed [q | k | v] rows of 3 x width. The attention kernel takes
  // each query where it lies in qkv; keys and values are copied out to rows of `width` per call
  // into buffers made once, and the row table (one AttentionRow per query) is uploaded once.
  class SelfAttention {
   public:
    SelfAttention(VisionOps& o, const Buffer& qkv, const Buffer& out, int64_t rows, int64_t width, int heads)
        : o_(o),
          qkv_(qkv),
          rows_(rows),
          width_(width),
          dims_{heads, heads, int(width / heads)},
          k_(o.activations(rows * width, "CLIP keys")),
          v_(o.activations(rows * width, "CLIP values")) {
      std::vector<ops::AttentionRow> table(static_cast<size_t>(rows));
      for (int64_t i = 0; i < rows; ++i)
        table[size_t(i)] = ops::AttentionRow{
            qkv.f32() + i * 3 * width, out.f32() + i * width, ops::KvSpan{k_.f32(), v_.f32(), rows}, {}};
      table_ = o.c_.alloc(table.size() * sizeof(ops::AttentionRow), "CLIP attention rows");
      o.c_.upload(table_, 0, table.data(), table.size() * sizeof(ops::AttentionRow));
    }
    void operator()() {
      Context& c = o_.c_;
      ops::copy_rows(c, qkv_.f32() + width_, 3 * width_, rows_, width_, k_.f32(), width_);
      ops::copy_rows(c, qkv_.f32() + 2 * width_, 3 * width_, rows_, width_, v_.f32(), width_);
      ops::attention(c, table_.as<ops::AttentionRow>(), rows_, dims_, rows_);
    }

   private:
    VisionOps& o_;
    const Buffer& qkv_;
    int64_t rows_, width_;
    ops::AttentionDims dims_;
    Buffer k_, v_, table_;
  };

 private:
  Context& c_;
  vision::ActivationCount& count_;
};

using CudaVisionEncoder = vision::DeviceEncoder<VisionOps>;

}  // namespace cuda
UOCR_NAMESPACE_END
