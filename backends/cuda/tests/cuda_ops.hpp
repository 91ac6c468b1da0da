// The CUDA backend's implementation of the conformance ops (tests/support/op_backend.hpp): each
// op uploads its inputs, launches the kernels the decoder or the encoder launches (the vision ops
// through the encoder's own VisionOps), and reads the result back.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backends/cuda/decoder.hpp"
#include "backends/cuda/vision.hpp"
#include "support/gpu_test.hpp"
#include "support/op_backend.hpp"
#include "uocr/vision/token_layout.hpp"

namespace uocr_test {

namespace cu = uocr::cuda;

class CudaOps : public OpBackend {
 public:
  explicit CudaOps(CudaEnv& env) : env_(env), c_(*env.ctx) {}
  std::string name() const override { return "cuda"; }

  std::vector<float> linear(const std::vector<float>& x, int64_t m, const uocr::TensorView& w,
                            const uocr::TensorView* bias) override {
    const cu::DeviceMatrix dw = cu::upload_matrix(c_, w);
    cu::Buffer db;
    if (bias) db = cu::upload_f32(c_, *bias);
    const cu::Buffer dx = up(x), dy = zeros(size_t(m * w.dim(0)));
    cu::ops::linear(c_, dx.f32(), m, dw, bias ? db.f32() : nullptr, dy.f32());
    return down(dy, size_t(m * w.dim(0)));
  }
  std::vector<float> rms_norm(const std::vector<float>& x, int64_t rows, int64_t n, const std::vector<float>& w,
                              float eps) override {
    const cu::Buffer dx = up(x), dw = up(w), dy = zeros(x.size());
    cu::ops::rms_norm(c_, dx.f32(), rows, n, dw.f32(), eps, dy.f32());
    return down(dy, x.size());
  }
  std::vector<float> layer_norm(const std::vector<float>& x, int64_t rows, int64_t n, const uocr::TensorView& w,
                                const uocr::TensorView& b, float eps) override {
    const cu::Buffer dx = up(x), dw = cu::upload_f32(c_, w), dbias = cu::upload_f32(c_, b), dy = zeros(x.size());
    cu::ops::layer_norm(c_, dx.f32(), rows, n, dw.f32(), dbias.f32(), eps, dy.f32());
    return down(dy, x.size());
  }
  std::vector<float> rope(const std::vector<float>& x, int64_t rows, int heads, int head_dim, float theta,
                          int64_t pos0) override {
    const cu::Buffer dx = up(x), inv = up(cu::rope_inv_freq(head_dim, theta));
    cu::ops::rope(c_, dx.f32(), rows, heads, head_dim, int64_t(heads) * head_dim, inv.f32(), pos0, nullptr);
    return down(dx, x.size());
  }
  std::vector<float> silu_mul(const std::vector<float>& g, const std::vector<float>& u) override {
    const cu::Buffer dg = up(g), du = up(u);
    cu::ops::silu_mul(c_, dg.f32(), du.f32(), int64_t(g.size()));
    return down(dg, g.size());
  }
  // Every query row of a prompt in one launch, as the decoder's prefill runs them.
  std::vector<float> causal_attention(const AttnCase& c) override {
    const int64_t qr = c.shape.q_row();
    const cu::Buffer q = up(c.q), k = up(c.k), v = up(c.v), out = zeros(c.q.size());
    std::vector<cu::ops::AttentionRow> rows;
    for (int64_t i = 0; i < c.t; ++i) rows.push_back({q.f32() + i * qr, out.f32() + i * qr, {}, {k.f32(), v.f32(), i + 1}});
    attend(rows, c);
    return down(out, c.q.size());
  }
  // One query over the reference rows [0, split) and the ring rows [split, t).
  std::vector<float> decode_attention(const AttnCase& c) override {
    const int64_t kr = c.shape.kv_row();
    const cu::Buffer q = up(c.q), k = up(c.k), v = up(c.v), out = zeros(size_t(c.shape.q_row()));
    attend({{q.f32(), out.f32(), {k.f32(), v.f32(), c.split}, {k.f32() + c.split * kr, v.f32() + c.split * kr, c.t - c.split}}},
           c);
    return down(out, size_t(c.shape.q_row()));
  }
  std::vector<float> embed(const std::vector<int32_t>& ids) override {
    const cu::DecoderDeviceWeights& dw = *env_.device_weights();
    const size_t n = ids.size() * size_t(env_.cfg.decoder.hidden);
    cu::Buffer dids = c_.alloc(ids.size() * sizeof(int32_t), "ids");
    c_.upload(dids, 0, ids.data(), ids.size() * sizeof(int32_t));
    const cu::Buffer out = zeros(n);
    cu::ops::embed(c_, dids.as<int32_t>(), int64_t(ids.size()), dw.embed, out.f32());
    return down(out, n);
  }
  std::vector<float> feed_forward(int layer, const std::vector<float>& x) override {
    cu::CudaDecoder dec(c_, env_.cfg.decoder, env_.w.decoder, env_.device_weights());
    return dec.feed_forward(layer, x);
  }

  std::vector<float> conv2d(const uocr::vision::FeatureMap& x, const uocr::TensorView& w, const uocr::TensorView* b,
                            int stride, int pad) override {
    const int k = int(w.dim(2)), cout = int(w.dim(0));
    const int ho = uocr::conv_output_size(x.h, k, stride, pad), wo = uocr::conv_output_size(x.w, k, stride, pad);
    Vision v(c_);
    const cu::DeviceMatrix dw = cu::VisionOps::matrix(c_, w);
    cu::Buffer db;
    if (b) db = cu::VisionOps::vector(c_, *b);
    const cu::Buffer dx = up(x.data), cols = zeros(size_t(ho) * wo * x.c * k * k), dy = zeros(size_t(ho) * wo * cout);
    v.ops.im2col(dx, x.h, x.w, x.c, k, stride, pad, cols);
    v.ops.linear(cols, int64_t(ho) * wo, dw, b ? &db : nullptr, dy);
    return down(dy, size_t(ho) * wo * cout);
  }
  std::vector<float> patch_embed(const std::vector<float>& chw, int size, const uocr::TensorView& w,
                                 const uocr::TensorView& b) override {
    const int p = int(w.dim(2)), g = size / p, cout = int(w.dim(0));
    Vision v(c_);
    const cu::DeviceMatrix dw = cu::VisionOps::matrix(c_, w);
    const cu::Buffer db = cu::VisionOps::vector(c_, b), dx = up(chw);
    const cu::Buffer cols = zeros(size_t(g) * g * 3 * p * p), dy = zeros(size_t(g) * g * cout);
    v.ops.patch_im2col(dx, 3, size, p, cols);
    v.ops.linear(cols, int64_t(g) * g, dw, &db, dy);
    return down(dy, size_t(g) * g * cout);
  }
  std::vector<float> gelu(const std::vector<float>& x, bool quick) override {
    Vision v(c_);
    const cu::Buffer dx = up(x);
    v.ops.gelu(dx, int64_t(x.size()), quick ? cu::ops::Gelu::quick : cu::ops::Gelu::erf);
    return down(dx, x.size());
  }
  std::vector<float> sam_attention(const std::vector<float>& qkv, const std::vector<float>& bias, int g, int ws, int heads,
                                   int c, const std::vector<float>& th, const std::vector<float>& tw) override {
    Vision v(c_);
    const cu::Buffer dq = up(qkv), db = up(bias), dh = up(th), dw = up(tw), out = zeros(size_t(g) * g * c);
    v.ops.sam_attention(dq, db, dh, dw, g, ws ? ws : g, heads, c, out);
    return down(out, size_t(g) * g * c);
  }
  std::vector<float> clip_attention(const std::vector<float>& qkv, int64_t tokens, int heads, int width) override {
    Vision v(c_);
    const cu::Buffer dq = up(qkv), out = zeros(size_t(tokens * width));
    cu::VisionOps::SelfAttention attention(v.ops, dq, out, tokens, width, heads);
    attention();
    return down(out, size_t(tokens * width));
  }

 private:
  // The encoder's ops (cuda::VisionOps), with the activation counter they report to.
  struct Vision {
    size_t peak = 0;
    uocr::vision::ActivationCount count{peak};
    cu::VisionOps ops;
    explicit Vision(cu::Context& c) : ops(c, count) {}
  };

  void attend(const std::vector<cu::ops::AttentionRow>& rows, const AttnCase& c) {
    cu::Buffer table = c_.alloc(rows.size() * sizeof(rows[0]), "attention rows");
    c_.upload(table, 0, rows.data(), rows.size() * sizeof(rows[0]));
    cu::ops::attention(c_, table.as<cu::ops::AttentionRow>(), int64_t(rows.size()),
                       {c.shape.heads, c.shape.kv_heads, c.shape.head_dim}, c.t);
  }
  cu::Buffer up(const std::vector<float>& v) { return cu::upload_f32(c_, v.data(), v.size(), "test input"); }
  cu::Buffer zeros(size_t floats) { return c_.alloc(floats * sizeof(float), "test output"); }
  std::vector<float> down(const cu::Buffer& b, size_t n) {
    std::vector<float> v(n);
    c_.download(b, 0, v.data(), n * sizeof(float));
    return v;
  }

  CudaEnv& env_;
  cu::Context& c_;
};

}  // namespace uocr_test
