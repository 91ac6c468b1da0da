// DeepEncoder (SAM-ViT -> CLIP-L -> projector) on a Vulkan device: the shared device encoder
// (vision/device_encoder.hpp) over this backend's shaders (ops.hpp). One view is recorded into one
// command buffer and submitted once; SAM's rel-pos scratch is the Recorder's.
//
//   vulkan::VulkanVisionEncoder enc(ctx, config, weights);
//   std::vector<float> emb = enc.visual_tokens(global, tiles, tiles_x, tiles_y);  // as VisionEncoder
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "backends/device/encoder.hpp"
#include "backends/vulkan/context.hpp"
#include "backends/vulkan/ops.hpp"
#include "backends/vulkan/recorder.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN
namespace vulkan {

// The ops of vision::DeviceEncoder on Vulkan: one object records one view.
class VisionOps {
 public:
  using Context = vulkan::Context;
  using Buffer = vulkan::Buffer;
  using Matrix = DeviceMatrix;
  using Gelu = ops::Gelu;

  static Matrix matrix(Context& c, const TensorView& t) { return upload_matrix(c, t); }
  static Buffer vector(Context& c, const TensorView& t) { return upload_f32(c, t); }
  static Buffer table(Context& c, const std::vector<float>& v, const char* what) {
    return upload_f32(c, v.data(), v.size(), MemoryUse::weights, what);
  }

  VisionOps(Context& c, vision::ActivationCount& count) : c_(c), count_(count), r_(c) {}

  Buffer activations(int64_t floats, const char* what) {
    Buffer b = c_.buffer(size_t(std::max<int64_t>(1, floats)) * 4, MemoryUse::activations, what);
    count_.add(b.size());
    return b;
  }
  void upload(const Buffer& b, const float* data, size_t floats) { c_.upload(b, data, floats * 4); }
  void download(const Buffer& b, float* data, size_t floats) { c_.download(b, data, floats * 4); }
  void finish() { r_.submit(); }

  void patch_im2col(const Buffer& img, int channels, int size, int patch, const Buffer& cols) {
    ops::patch_im2col(r_, img, channels, size, patch, cols);
  }
  void im2col(const Buffer& x, int h, int w, int c, int k, int stride, int pad, const Buffer& cols) {
    ops::im2col(r_, x, 0, h, w, c, k, stride, pad, cols);
  }
  void linear(const Buffer& x, int64_t m, const Matrix& w, const Buffer* bias, const Buffer& y) {
    ops::linear(r_, x, 0, m, w.cols, w, bias, y, 0, w.rows);
  }
  void add(const Buffer& x, const Buffer& y, int64_t n) { ops::add(r_, x, 0, y, 0, n); }
  void gelu(const Buffer& x, int64_t n, Gelu kind) { ops::gelu(r_, x, 0, n, kind); }
  void layer_norm(const Buffer& x, int64_t rows, int64_t n, const Buffer& w, const Buffer& b, float eps,
                  const Buffer& y) {
    ops::layer_norm(r_, x, 0, rows, n, w, b, eps, y, 0);
  }
  void copy_rows(const Buffer& x, int64_t x_off, int64_t ldx, int64_t rows, int64_t cols, const Buffer& o,
                 int64_t o_off, int64_t ldo) {
    ops::copy_rows(r_, x, x_off, ldx, rows, cols, o, o_off, ldo);
  }
  void sam_attention(const Buffer& qkv, const Buffer& qkv_bias, const Buffer& th, const Buffer& tw, int g, int n,
                     int heads, int c, const Buffer& o) {
    ops::sam_attention(r_, qkv, qkv_bias, th, tw, g, n, heads, c, o);
  }

  // Full attention of `rows` packed [q | k | v] rows of 3 x width: the keys and values are read
  // where they lie.
  class SelfAttention {
   public:
    SelfAttention(VisionOps& o, const Buffer& qkv, const Buffer& out, int64_t rows, int64_t width, int heads)
        : o_(o), qkv_(qkv), out_(out), rows_(rows), width_(width), dims_{heads, heads, int(width / heads)} {}
    void operator()() {
      const int64_t W = width_;
      ops::attention(o_.r_, qkv_, 0, rows_, 3 * W, dims_, ops::KvSet{&qkv_, &qkv_, rows_}, ops::KvSet{}, false, 0, out_,
                     0, W, 3 * W, W, 2 * W);
    }

   private:
    VisionOps& o_;
    const Buffer& qkv_;
    const Buffer& out_;
    int64_t rows_, width_;
    ops::AttentionDims dims_;
  };

 private:
  Context& c_;
  vision::ActivationCount& count_;
  Recorder r_;
};

using VulkanVisionEncoder = vision::DeviceEncoder<VisionOps>;

}  // namespace vulkan
UOCR_NAMESPACE_END
