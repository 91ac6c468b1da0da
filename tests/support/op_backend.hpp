// The ops every backend is checked on (tests/conformance/ops.cpp), behind one interface with host
// vectors in and out, and the CPU backend's implementation of it, the reference the devices are
// compared with. A device backend's implementation lives with its tests
// (backends/<name>/tests/<name>_ops.hpp). Embedding rows and the feed-forward halves run on the
// golden model's (tiny-b) weights.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "golden_decoder.hpp"
#include "op_reference.hpp"
#include "uocr/backends/cpu/linear.hpp"
#include "uocr/decoder/decoder.hpp"
#include "uocr/vision/conv.hpp"
#include "uocr/vision/encoder.hpp"
#include "uocr/vision/sam.hpp"

namespace uocr_test {

class OpBackend {
 public:
  virtual ~OpBackend() = default;
  virtual std::string name() const = 0;
  virtual std::vector<float> linear(const std::vector<float>& x, int64_t m, const uocr::TensorView& w,
                                    const uocr::TensorView* bias) = 0;
  virtual std::vector<float> rms_norm(const std::vector<float>& x, int64_t rows, int64_t n, const std::vector<float>& w,
                                      float eps) = 0;
  virtual std::vector<float> layer_norm(const std::vector<float>& x, int64_t rows, int64_t n, const uocr::TensorView& w,
                                        const uocr::TensorView& b, float eps) = 0;
  virtual std::vector<float> rope(const std::vector<float>& x, int64_t rows, int heads, int head_dim, float theta,
                                  int64_t pos0) = 0;
  virtual std::vector<float> silu_mul(const std::vector<float>& g, const std::vector<float>& u) = 0;
  virtual std::vector<float> causal_attention(const AttnCase& c) = 0;
  virtual std::vector<float> decode_attention(const AttnCase& c) = 0;
  virtual std::vector<float> embed(const std::vector<int32_t>& ids) = 0;
  virtual std::vector<float> feed_forward(int layer, const std::vector<float>& x) = 0;
  // Vision: conv2d over a channels-last map (im2col + GEMM), patch embedding of a CHW image,
  // GELU (erf / quick), SAM rel-pos attention (global: ws = 0), CLIP attention over packed qkv.
  virtual std::vector<float> conv2d(const uocr::vision::FeatureMap& x, const uocr::TensorView& w, const uocr::TensorView* b,
                                    int stride, int pad) = 0;
  virtual std::vector<float> patch_embed(const std::vector<float>& chw, int size, const uocr::TensorView& w,
                                         const uocr::TensorView& b) = 0;
  virtual std::vector<float> gelu(const std::vector<float>& x, bool quick) = 0;
  virtual std::vector<float> sam_attention(const std::vector<float>& qkv, const std::vector<float>& bias, int g, int ws,
                                           int heads, int c, const std::vector<float>& th, const std::vector<float>& tw) = 0;
  virtual std::vector<float> clip_attention(const std::vector<float>& qkv, int64_t tokens, int heads, int width) = 0;
};

class CpuOps : public OpBackend {
 public:
  explicit CpuOps(const GoldenCase& golden) : golden_(golden) {}
  std::string name() const override { return "cpu"; }
  std::vector<float> linear(const std::vector<float>& x, int64_t m, const uocr::TensorView& w,
                            const uocr::TensorView* bias) override {
    std::vector<float> y(size_t(m * w.dim(0)));
    uocr::cpu::linear(x.data(), m, w, bias, y.data());
    return y;
  }
  std::vector<float> rms_norm(const std::vector<float>& x, int64_t rows, int64_t n, const std::vector<float>& w,
                              float eps) override {
    std::vector<float> y(x.size());
    uocr::rms_norm(x.data(), rows, n, w.data(), eps, y.data());
    return y;
  }
  std::vector<float> layer_norm(const std::vector<float>& x, int64_t rows, int64_t n, const uocr::TensorView& w,
                                const uocr::TensorView& b, float eps) override {
    std::vector<float> y(x.size());
    uocr::vision::layer_norm(x.data(), rows, n, uocr::NormWeights{&w, &b}, eps, y.data());
    return y;
  }
  std::vector<float> rope(const std::vector<float>& x, int64_t rows, int heads, int head_dim, float theta,
                          int64_t pos0) override {
    return cpu_rope(x, rows, heads, head_dim, theta, pos0);
  }
  std::vector<float> silu_mul(const std::vector<float>& g, const std::vector<float>& u) override {
    std::vector<float> y(g);
    for (size_t i = 0; i < y.size(); ++i) y[i] = y[i] / (1.0f + std::exp(-y[i])) * u[i];
    return y;
  }
  std::vector<float> causal_attention(const AttnCase& c) override { return cpu_attention(c); }
  std::vector<float> decode_attention(const AttnCase& c) override { return cpu_attention(c); }
  std::vector<float> embed(const std::vector<int32_t>& ids) override {
    return uocr::Decoder(golden_.cfg.decoder, golden_.w.decoder).embed(ids);
  }
  std::vector<float> feed_forward(int layer, const std::vector<float>& x) override {
    return cpu_feed_forward(golden_.cfg.decoder, golden_.w.decoder, layer, x);
  }
  std::vector<float> conv2d(const uocr::vision::FeatureMap& x, const uocr::TensorView& w, const uocr::TensorView* b,
                            int stride, int pad) override {
    return uocr::vision::conv2d(x, w, b, stride, pad).data;
  }
  std::vector<float> patch_embed(const std::vector<float>& chw, int size, const uocr::TensorView& w,
                                 const uocr::TensorView& b) override {
    return uocr::vision::patch_embed(chw.data(), 3, size, w, &b).data;
  }
  std::vector<float> gelu(const std::vector<float>& x, bool quick) override {
    std::vector<float> y(x);
    if (quick)
      uocr::vision::detail::quick_gelu(y.data(), int64_t(y.size()));
    else
      uocr::vision::detail::gelu_erf(y.data(), int64_t(y.size()));
    return y;
  }
  std::vector<float> sam_attention(const std::vector<float>& qkv, const std::vector<float>& bias, int g, int ws, int heads,
                                   int c, const std::vector<float>& th, const std::vector<float>& tw) override {
    std::vector<float> out(size_t(g) * size_t(g) * size_t(c));
    uocr::vision::Workspace work;
    if (ws == 0)
      uocr::vision::detail::sam_global_attention(qkv.data(), g, heads, c, th, tw, out.data(), work, uocr::Precision::f32);
    else
      uocr::vision::detail::sam_window_attention(qkv.data(), bias.data(), g, ws, heads, c, th, tw, out.data(), work);
    return out;
  }
  std::vector<float> clip_attention(const std::vector<float>& qkv, int64_t tokens, int heads, int width) override {
    std::vector<float> out(size_t(tokens * width));
    uocr::vision::Workspace work;
    uocr::vision::detail::clip_attention(qkv.data(), tokens, heads, width, out.data(), work);
    return out;
  }
 private:
  const GoldenCase& golden_;
};

}  // namespace uocr_test
