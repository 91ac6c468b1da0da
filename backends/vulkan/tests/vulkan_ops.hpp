// The Vulkan backend's implementation of the conformance ops (tests/support/op_backend.hpp):
// each op uploads its inputs, records its shaders into one command buffer, submits and reads the
// result back.
#pragma once
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "backends/vulkan/decoder.hpp"
#include "backends/vulkan/ops.hpp"
#include "support/op_backend.hpp"
#include "support/vulkan_env.hpp"
#include "uocr/vision/token_layout.hpp"

namespace uocr_test {

namespace vk = uocr::vulkan;

class VulkanOps : public uocr_test::OpBackend {
 public:
  explicit VulkanOps(VulkanEnv& env) : env_(env), c_(env.vk()) {}
  std::string name() const override { return "vulkan"; }

  std::vector<float> linear(const std::vector<float>& x, int64_t m, const uocr::TensorView& w,
                            const uocr::TensorView* bias) override {
    const vk::DeviceMatrix dw = vk::upload_matrix(c_, w);
    vk::Buffer db;
    if (bias) db = vk::upload_f32(c_, *bias);
    const vk::Buffer dx = up(x);
    const vk::Buffer dy = c_.buffer(size_t(m * w.dim(0)) * 4, vk::MemoryUse::activations, "y");
    run([&](vk::Recorder& r) { vk::ops::linear(r, dx, 0, m, w.dim(1), dw, bias ? &db : nullptr, dy, 0, w.dim(0)); });
    return c_.download_vector<float>(dy, size_t(m * w.dim(0)));
  }
  std::vector<float> rms_norm(const std::vector<float>& x, int64_t rows, int64_t n, const std::vector<float>& w,
                              float eps) override {
    const vk::Buffer dx = up(x), dw = up(w), dy = c_.buffer(x.size() * 4, vk::MemoryUse::activations, "y");
    run([&](vk::Recorder& r) { vk::ops::rms_norm(r, dx, 0, rows, n, dw, eps, dy, 0); });
    return c_.download_vector<float>(dy, x.size());
  }
  std::vector<float> layer_norm(const std::vector<float>& x, int64_t rows, int64_t n, const uocr::TensorView& w,
                                const uocr::TensorView& b, float eps) override {
    const vk::Buffer dx = up(x), dw = vk::upload_f32(c_, w), dbias = vk::upload_f32(c_, b);
    const vk::Buffer dy = c_.buffer(x.size() * 4, vk::MemoryUse::activations, "y");
    run([&](vk::Recorder& r) { vk::ops::layer_norm(r, dx, 0, rows, n, dw, dbias, eps, dy, 0); });
    return c_.download_vector<float>(dy, x.size());
  }
  std::vector<float> rope(const std::vector<float>& x, int64_t rows, int heads, int head_dim, float theta,
                          int64_t pos0) override {
    std::vector<int64_t> positions(static_cast<size_t>(rows));
    std::iota(positions.begin(), positions.end(), pos0);
    std::vector<float> cs(size_t(rows * head_dim));
    vk::rope_cos_sin(uocr::Rope(head_dim, theta), head_dim, positions.data(), rows, cs.data());
    const vk::Buffer table = up(cs), dx = up(x);
    run([&](vk::Recorder& r) { vk::ops::rope(r, dx, 0, rows, heads, head_dim, int64_t(heads) * head_dim, table); });
    return c_.download_vector<float>(dx, x.size());
  }
  std::vector<float> silu_mul(const std::vector<float>& g, const std::vector<float>& u) override {
    const vk::Buffer dg = up(g), du = up(u);
    run([&](vk::Recorder& r) { vk::ops::silu_mul(r, dg, 0, du, 0, int64_t(g.size())); });
    return c_.download_vector<float>(dg, g.size());
  }
  std::vector<float> causal_attention(const uocr_test::AttnCase& c) override {
    const vk::Buffer q = up(c.q), k = up(c.k), v = up(c.v);
    const vk::Buffer o = c_.buffer(c.q.size() * 4, vk::MemoryUse::activations, "attention out");
    const vk::ops::AttentionDims d{c.shape.heads, c.shape.kv_heads, c.shape.head_dim};
    run([&](vk::Recorder& r) {
      vk::ops::attention(r, q, 0, c.t, c.shape.q_row(), d, vk::ops::KvSet{&k, &v, c.t}, vk::ops::KvSet{}, true, 0, o, 0,
                         c.shape.q_row());
    });
    return c_.download_vector<float>(o, c.q.size());
  }
  std::vector<float> decode_attention(const uocr_test::AttnCase& c) override {
    const int64_t kr = c.shape.kv_row();
    const vk::Buffer q = up(c.q);
    const vk::Buffer ka = up(std::vector<float>(c.k.begin(), c.k.begin() + c.split * kr));
    const vk::Buffer va = up(std::vector<float>(c.v.begin(), c.v.begin() + c.split * kr));
    const vk::Buffer kb = up(std::vector<float>(c.k.begin() + c.split * kr, c.k.end()));
    const vk::Buffer vb = up(std::vector<float>(c.v.begin() + c.split * kr, c.v.end()));
    const vk::Buffer o = c_.buffer(size_t(c.shape.q_row()) * 4, vk::MemoryUse::activations, "attention out");
    const vk::ops::AttentionDims d{c.shape.heads, c.shape.kv_heads, c.shape.head_dim};
    run([&](vk::Recorder& r) {
      vk::ops::attention(r, q, 0, 1, c.shape.q_row(), d, vk::ops::KvSet{&ka, &va, c.split},
                         vk::ops::KvSet{&kb, &vb, c.t - c.split}, false, 0, o, 0, c.shape.q_row());
    });
    return c_.download_vector<float>(o, size_t(c.shape.q_row()));
  }
  std::vector<float> embed(const std::vector<int32_t>& ids) override {
    const vk::DecoderDeviceWeights& dw = *env_.device_weights();
    const int64_t h = dw.embed.cols;
    const vk::Buffer o = c_.buffer(ids.size() * size_t(h) * 4, vk::MemoryUse::activations, "embeddings");
    std::vector<uint32_t> u(ids.begin(), ids.end());
    run([&](vk::Recorder& r) { vk::ops::embed(r, r.temp(u.data(), u.size() * 4), int64_t(ids.size()), dw.embed, o, 0); });
    return c_.download_vector<float>(o, ids.size() * size_t(h));
  }
  std::vector<float> feed_forward(int layer, const std::vector<float>& x) override {
    vk::VulkanDecoder dec(c_, env_.cfg.decoder, env_.w.decoder, env_.device_weights());
    return dec.feed_forward(layer, x);
  }

  std::vector<float> conv2d(const uocr::vision::FeatureMap& x, const uocr::TensorView& w, const uocr::TensorView* b,
                            int stride, int pad) override {
    const int k = int(w.dim(2)), cout = int(w.dim(0));
    const int ho = uocr::conv_output_size(x.h, k, stride, pad), wo = uocr::conv_output_size(x.w, k, stride, pad);
    const vk::DeviceMatrix dw = vk::upload_matrix(c_, w);
    vk::Buffer db;
    if (b) db = vk::upload_f32(c_, *b);
    const vk::Buffer dx = up(x.data);
    const vk::Buffer cols = c_.buffer(size_t(ho) * wo * x.c * k * k * 4, vk::MemoryUse::activations, "cols");
    const vk::Buffer dy = c_.buffer(size_t(ho) * wo * cout * 4, vk::MemoryUse::activations, "y");
    run([&](vk::Recorder& r) {
      vk::ops::im2col(r, dx, 0, x.h, x.w, x.c, k, stride, pad, cols);
      vk::ops::linear(r, cols, 0, int64_t(ho) * wo, int64_t(x.c) * k * k, dw, b ? &db : nullptr, dy, 0, cout);
    });
    return c_.download_vector<float>(dy, size_t(ho) * wo * cout);
  }
  std::vector<float> patch_embed(const std::vector<float>& chw, int size, const uocr::TensorView& w,
                                 const uocr::TensorView& b) override {
    const int p = int(w.dim(2)), g = size / p, cout = int(w.dim(0));
    const vk::DeviceMatrix dw = vk::upload_matrix(c_, w);
    const vk::Buffer db = vk::upload_f32(c_, b), dx = up(chw);
    const vk::Buffer cols = c_.buffer(size_t(g) * g * 3 * p * p * 4, vk::MemoryUse::activations, "cols");
    const vk::Buffer dy = c_.buffer(size_t(g) * g * cout * 4, vk::MemoryUse::activations, "y");
    run([&](vk::Recorder& r) {
      vk::ops::patch_im2col(r, dx, 3, size, p, cols);
      vk::ops::linear(r, cols, 0, int64_t(g) * g, 3 * p * p, dw, &db, dy, 0, cout);
    });
    return c_.download_vector<float>(dy, size_t(g) * g * cout);
  }
  std::vector<float> gelu(const std::vector<float>& x, bool quick) override {
    const vk::Buffer dx = up(x);
    run([&](vk::Recorder& r) { vk::ops::gelu(r, dx, 0, int64_t(x.size()), quick ? vk::ops::Gelu::quick : vk::ops::Gelu::erf); });
    return c_.download_vector<float>(dx, x.size());
  }
  std::vector<float> sam_attention(const std::vector<float>& qkv, const std::vector<float>& bias, int g, int ws, int heads,
                                   int c, const std::vector<float>& th, const std::vector<float>& tw) override {
    const vk::Buffer dq = up(qkv), db = up(bias), dh = up(th), dw = up(tw);
    const vk::Buffer o = c_.buffer(size_t(g) * g * c * 4, vk::MemoryUse::activations, "out");
    run([&](vk::Recorder& r) { vk::ops::sam_attention(r, dq, db, dh, dw, g, ws ? ws : g, heads, c, o); });
    return c_.download_vector<float>(o, size_t(g) * g * c);
  }
  std::vector<float> clip_attention(const std::vector<float>& qkv, int64_t tokens, int heads, int width) override {
    const vk::Buffer dq = up(qkv);
    const vk::Buffer o = c_.buffer(size_t(tokens * width) * 4, vk::MemoryUse::activations, "out");
    const vk::ops::AttentionDims d{heads, heads, width / heads};
    run([&](vk::Recorder& r) {
      vk::ops::attention(r, dq, 0, tokens, 3 * width, d, vk::ops::KvSet{&dq, &dq, tokens}, vk::ops::KvSet{}, false, 0, o, 0,
                         width, 3 * width, width, 2 * width);
    });
    return c_.download_vector<float>(o, size_t(tokens * width));
  }

 private:
  vk::Buffer up(const std::vector<float>& v) {
    return vk::upload_f32(c_, v.data(), v.size(), vk::MemoryUse::activations, "test input");
  }
  template <class Fn>
  void run(Fn&& fn) {
    vk::Recorder r(c_);
    fn(r);
    r.submit();
  }
  VulkanEnv& env_;
  vk::Context& c_;
};

}  // namespace uocr_test
