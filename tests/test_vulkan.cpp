// Backend conformance: the same op cases run on the CPU backend and on the Vulkan backend, each
// against a float64 reference with a per-op error budget (and Vulkan against CPU); then the golden
// vision checks and the image-to-logits run on Vulkan (the decoder goldens over every backend are
// tests/test_conformance.cpp). Runs on any Vulkan device;
// CI uses Mesa lavapipe (CPU, headless). With UOCR_VK_VALIDATION=1 (set by meson test) the
// Khronos validation layer is on and every case asserts zero validation errors. Also: the error
// paths (no such device, no driver, bad SPIR-V, out of memory), the on-disk pipeline cache,
// adopting an application's VkDevice, and per-op timestamps.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include <unistd.h>

#include "support/golden_decoder.hpp"
#include "support/op_reference.hpp"
#include "support/test_support.hpp"
#include "support/vision_stages.hpp"
#include "support/vulkan_env.hpp"
#include "uocr/backends/cpu/linear.hpp"
#include "uocr/backends/vulkan/decoder.hpp"
#include "uocr/backends/vulkan/vision.hpp"
#include "uocr/decoder/attention.hpp"
#include "uocr/decoder/decoder.hpp"
#include "uocr/decoder/rope.hpp"
#include "uocr/model/checkpoint.hpp"
#include "uocr/vision/conv.hpp"
#include "uocr/vision/encoder.hpp"
#include "uocr/vision/sam.hpp"

namespace vk = uocr::vulkan;
using uocr::Status;
using uocr_test::AttnCase;
using uocr_test::check_stage;
using uocr_test::HostTensor;
using uocr_test::randn;
using uocr_test::row_error;
using uocr_test::RowError;
using uocr_test::status_of;

namespace {

using Env = uocr_test::VulkanEnv;

void check_no_validation_errors(const std::string& where) { uocr_test::check_no_validation_errors(Env::get().vk(), where); }

// Worst error per op over all cases, printed at the end of the suite.
std::map<std::string, std::array<RowError, 3>>& op_report() {  // [cpu vs f64, vulkan vs f64, vulkan vs cpu]
  static std::map<std::string, std::array<RowError, 3>> r;
  return r;
}
void note(const std::string& op, int which, const RowError& e) {
  RowError& w = op_report()[op][size_t(which)];
  w.rel = std::max(w.rel, e.rel);
  w.max_abs = std::max(w.max_abs, e.max_abs);
}

// --- the two backends behind one interface -------------------------------------------------

class Backend {
 public:
  virtual ~Backend() = default;
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

class CpuBackend : public Backend {
 public:
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
    return uocr_test::cpu_rope(x, rows, heads, head_dim, theta, pos0);
  }
  std::vector<float> silu_mul(const std::vector<float>& g, const std::vector<float>& u) override {
    std::vector<float> y(g);
    for (size_t i = 0; i < y.size(); ++i) y[i] = y[i] / (1.0f + std::exp(-y[i])) * u[i];
    return y;
  }
  std::vector<float> causal_attention(const AttnCase& c) override { return uocr_test::cpu_attention(c); }
  std::vector<float> decode_attention(const AttnCase& c) override { return uocr_test::cpu_attention(c); }
  std::vector<float> embed(const std::vector<int32_t>& ids) override {
    Env& e = Env::get();
    return uocr::Decoder(e.cfg.decoder, e.w.decoder).embed(ids);
  }
  std::vector<float> feed_forward(int layer, const std::vector<float>& x) override {
    Env& e = Env::get();
    return uocr_test::cpu_feed_forward(e.cfg.decoder, e.w.decoder, layer, x);
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
};

class VulkanBackend : public Backend {
 public:
  explicit VulkanBackend(vk::Context& c) : c_(c) {}
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
  std::vector<float> causal_attention(const AttnCase& c) override {
    const vk::Buffer q = up(c.q), k = up(c.k), v = up(c.v);
    const vk::Buffer o = c_.buffer(c.q.size() * 4, vk::MemoryUse::activations, "attention out");
    const vk::ops::AttentionDims d{c.shape.heads, c.shape.kv_heads, c.shape.head_dim};
    run([&](vk::Recorder& r) {
      vk::ops::attention(r, q, 0, c.t, c.shape.q_row(), d, vk::ops::KvSet{&k, &v, c.t}, vk::ops::KvSet{}, true, 0, o, 0,
                         c.shape.q_row());
    });
    return c_.download_vector<float>(o, c.q.size());
  }
  std::vector<float> decode_attention(const AttnCase& c) override {
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
    Env& e = Env::get();
    const vk::DecoderDeviceWeights& dw = *e.device_weights();
    const int64_t h = dw.embed.cols;
    const vk::Buffer o = c_.buffer(ids.size() * size_t(h) * 4, vk::MemoryUse::activations, "embeddings");
    std::vector<uint32_t> u(ids.begin(), ids.end());
    run([&](vk::Recorder& r) { vk::ops::embed(r, r.temp(u.data(), u.size() * 4), int64_t(ids.size()), dw.embed, o, 0); });
    return c_.download_vector<float>(o, ids.size() * size_t(h));
  }
  std::vector<float> feed_forward(int layer, const std::vector<float>& x) override {
    Env& e = Env::get();
    vk::VulkanDecoder dec(c_, e.cfg.decoder, e.w.decoder, e.device_weights());
    return dec.feed_forward(layer, x);
  }

  std::vector<float> conv2d(const uocr::vision::FeatureMap& x, const uocr::TensorView& w, const uocr::TensorView* b,
                            int stride, int pad) override {
    const int k = int(w.dim(2)), cout = int(w.dim(0));
    const int ho = (x.h + 2 * pad - k) / stride + 1, wo = (x.w + 2 * pad - k) / stride + 1;
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
  vk::Context& c_;
};

std::vector<Backend*> backends() {
  static CpuBackend cpu;
  static std::unique_ptr<VulkanBackend> vulkan;
  if (!vulkan) vulkan = std::make_unique<VulkanBackend>(Env::get().vk());
  return {&cpu, vulkan.get()};
}

// Runs `compute` on each backend, checks it against the float64 reference within `budget`
// (relative L2), and Vulkan against CPU within the same budget.
template <class Compute>
void conform(const std::string& op, const std::vector<double>& ref, double budget, Compute&& compute) {
  std::vector<std::vector<float>> got;
  for (Backend* b : backends()) {
    got.push_back(compute(*b));
    const RowError e = row_error(got.back(), ref);
    note(op, b->name() == "cpu" ? 0 : 1, e);
    INFO(op << " on " << b->name() << ": rel " << e.rel << ", max abs " << e.max_abs << " (budget " << budget << ")");
    CHECK(e.rel <= budget);
  }
  const RowError e = row_error(got[1], got[0]);
  note(op, 2, e);
  INFO(op << ": vulkan vs cpu rel " << e.rel);
  CHECK(e.rel <= budget);
  check_no_validation_errors(op);
}

}  // namespace

// ================================================================================================

TEST_CASE("a Vulkan device is available and set up") {
  vk::Context& c = Env::get().vk();
  MESSAGE("device " << c.device_index() << ": " << c.device_name() << " ("
                    << std::string(vk::device_type_name(c.properties().deviceType)) << "), unified memory "
                    << std::string(c.unified_memory() ? "yes" : "no") << ", max binding " << c.max_binding_bytes() << " bytes, validation "
                    << (c.validation_enabled() ? "on" : ("off " + c.validation_note())) << ", pipeline cache "
                    << (c.pipeline_cache_path().empty() ? "(none)" : c.pipeline_cache_path()));
  CHECK(!vk::Context::list_devices().empty());
  if (uocr_test::env_or("UOCR_VK_VALIDATION", "") == "1" && !c.validation_enabled())
    MESSAGE("validation requested but unavailable: " << c.validation_note());
  check_no_validation_errors("context setup");
}

TEST_CASE("op conformance: linear (bf16, f16, f32 weights; decode mat-vec and GEMM paths)") {
  const uocr_test::LinearShape shapes[] = {{1, 37, 64, false}, {3, 130, 33, true},   {4, 64, 1280, false},
                                          {5, 65, 40, true},  {37, 129, 95, false}, {130, 200, 256, true}};
  uint32_t seed = 10;
  for (uocr::DType t : {uocr::DType::bf16, uocr::DType::f16, uocr::DType::f32})
    for (const uocr_test::LinearShape& s : shapes) {
      const uocr_test::LinearCase c(t, s, seed);
      INFO("linear " << uocr::dtype_name(t) << " m=" << s.m << " n=" << s.n << " k=" << s.k);
      conform(std::string("linear_") + uocr::dtype_name(t), c.ref, 2e-6,
              [&](Backend& be) { return be.linear(c.x, s.m, c.w.view, c.bias()); });
    }
}

TEST_CASE("op conformance: RMSNorm, LayerNorm, RoPE, SiLU*mul") {
  {
    const int64_t rows = 7, n = 300;
    const std::vector<float> x = randn(size_t(rows * n), 1, 2.0f), w = randn(size_t(n), 2);
    conform("rms_norm", uocr_test::ref_rms_norm(x, rows, n, w, 1e-6), 1e-6, [&](Backend& b) { return b.rms_norm(x, rows, n, w, 1e-6f); });
  }
  {
    const int64_t rows = 9, n = 260;
    std::vector<float> x = randn(size_t(rows * n), 3, 1.5f);
    for (float& v : x) v += 3.0f;  // a mean far from zero tests the two-pass variance
    HostTensor w(uocr::DType::bf16, {n}, randn(size_t(n), 4)), b(uocr::DType::bf16, {n}, randn(size_t(n), 5, 0.1f));
    const std::vector<double> wv = w.values(), bv = b.values();
    std::vector<double> ref(x.size());
    for (int64_t r = 0; r < rows; ++r) {
      double mean = 0, var = 0;
      for (int64_t i = 0; i < n; ++i) mean += x[size_t(r * n + i)];
      mean /= double(n);
      for (int64_t i = 0; i < n; ++i) var += (x[size_t(r * n + i)] - mean) * (x[size_t(r * n + i)] - mean);
      const double inv = 1.0 / std::sqrt(var / double(n) + 1e-6);
      for (int64_t i = 0; i < n; ++i) ref[size_t(r * n + i)] = (x[size_t(r * n + i)] - mean) * inv * wv[size_t(i)] + bv[size_t(i)];
    }
    conform("layer_norm", ref, 1e-6, [&](Backend& be) { return be.layer_norm(x, rows, n, w.view, b.view, 1e-6f); });
  }
  // Positions up to ~8k (large angles) and near 2^24 (position extrapolation); the reference
  // uses the same float32 angles.
  for (const int64_t pos0 : {int64_t(8180), (int64_t(1) << 24) - 10}) {
    CAPTURE(pos0);
    const int64_t rows = 5;
    const int heads = 3, d = 16;
    const std::vector<float> x = randn(size_t(rows * heads * d), 6);
    conform("rope", uocr_test::ref_rope(x, rows, heads, d, 10000.f, pos0), 1e-6, [&](Backend& b) { return b.rope(x, rows, heads, d, 10000.f, pos0); });
  }
  {
    const std::vector<float> g = randn(1000, 7, 3.0f), u = randn(1000, 8);
    conform("silu_mul", uocr_test::ref_silu_mul(g, u), 1e-6, [&](Backend& b) { return b.silu_mul(g, u); });
  }
}

TEST_CASE("op conformance: causal prefill attention and decode attention over reference + ring") {
  struct Case {
    int heads, kv_heads, head_dim;
    int64_t t, split;
  };
  // split 0: causal over t rows; split > 0: one query over split reference rows + t - split ring rows.
  const Case cases[] = {{4, 4, 8, 150, 0},  {4, 2, 16, 70, 0},  {2, 1, 128, 66, 0}, {4, 4, 8, 286, 278},
                        {4, 2, 16, 200, 192}, {3, 3, 256, 65, 64}, {2, 2, 8, 5, 5}};
  uint32_t seed = 100;
  for (const Case& cs : cases) {
    const AttnCase c = uocr_test::make_attention(cs.heads, cs.kv_heads, cs.head_dim, cs.t, cs.split, seed += 3);
    INFO("heads " << cs.heads << "/" << cs.kv_heads << " d " << cs.head_dim << " t " << cs.t << " split " << cs.split);
    if (c.causal())
      conform("causal_attention", uocr_test::ref_attention(c), 2e-6, [&](Backend& b) { return b.causal_attention(c); });
    else
      conform("decode_attention", uocr_test::ref_attention(c), 2e-6, [&](Backend& b) { return b.decode_attention(c); });
  }
}

TEST_CASE("op conformance: embedding rows, dense MLP and MoE layer (golden tiny-b weights)") {
  Env& e = Env::get();
  const uocr::DecoderConfig& d = e.cfg.decoder;
  {
    const std::vector<int32_t> ids = {0, 1, 5, 128815, d.vocab - 1, 4242};
    std::vector<double> ref;
    for (int32_t id : ids)
      for (int c = 0; c < d.hidden; ++c) ref.push_back(uocr::bf16_to_f32(reinterpret_cast<const uint16_t*>(e.w.decoder.embed->data)[size_t(id) * size_t(d.hidden) + size_t(c)]));
    conform("embed", ref, 0.0, [&](Backend& b) { return b.embed(ids); });
  }
  // Feed-forward halves: the dense MLP (layer 0) and the MoE (layer 1: softmax router, top-2 of 8,
  // shared expert) on 37 rows; the reference is the CPU backend itself (routing is discrete, so
  // a float64 re-implementation would only restate it), checked per row.
  for (int layer = 0; layer < d.layers; ++layer)
    for (int64_t m : {int64_t(1), int64_t(37)}) {
      const std::vector<float> x = randn(size_t(m * d.hidden), uint32_t(500 + layer * 10 + m));
      const std::vector<float> cpu = backends()[0]->feed_forward(layer, x);
      const std::vector<double> ref(cpu.begin(), cpu.end());
      INFO("layer " << layer << " rows " << m);
      conform(layer == 0 ? "dense_mlp" : "moe", ref, 2e-6, [&](Backend& b) { return b.feed_forward(layer, x); });
    }
}

TEST_CASE("op conformance: vision convolutions (im2col + GEMM), patch embedding, GELU") {
  uint32_t seed = 900;
  struct Conv {
    int h, w, cin, cout, k, stride, pad;
    bool bias;
  };
  for (const Conv& cv : {Conv{9, 9, 5, 7, 1, 1, 0, true}, Conv{8, 8, 6, 5, 3, 1, 1, false}, Conv{9, 7, 4, 6, 3, 2, 1, false},
                         Conv{16, 16, 32, 64, 3, 2, 1, false}}) {
    uocr::vision::FeatureMap x(cv.h, cv.w, cv.cin);
    x.data = randn(x.data.size(), seed++);
    HostTensor w(uocr::DType::bf16, {cv.cout, cv.cin, cv.k, cv.k}, randn(size_t(cv.cout * cv.cin * cv.k * cv.k), seed++, 0.2f));
    HostTensor b(uocr::DType::bf16, {cv.cout}, randn(size_t(cv.cout), seed++, 0.1f));
    const int ho = (cv.h + 2 * cv.pad - cv.k) / cv.stride + 1, wo = (cv.w + 2 * cv.pad - cv.k) / cv.stride + 1;
    const std::vector<double> wv = w.values(), bv = b.values();
    std::vector<double> ref(size_t(ho) * wo * cv.cout);
    for (int oy = 0; oy < ho; ++oy)
      for (int ox = 0; ox < wo; ++ox)
        for (int co = 0; co < cv.cout; ++co) {
          double acc = cv.bias ? bv[size_t(co)] : 0.0;
          for (int ci = 0; ci < cv.cin; ++ci)
            for (int ky = 0; ky < cv.k; ++ky)
              for (int kx = 0; kx < cv.k; ++kx) {
                const int iy = oy * cv.stride - cv.pad + ky, ix = ox * cv.stride - cv.pad + kx;
                if (iy < 0 || ix < 0 || iy >= cv.h || ix >= cv.w) continue;
                acc += wv[size_t(((co * cv.cin + ci) * cv.k + ky) * cv.k + kx)] * x.data[size_t((iy * cv.w + ix) * cv.cin + ci)];
              }
          ref[size_t((oy * wo + ox) * cv.cout + co)] = acc;
        }
    INFO("conv " << cv.h << "x" << cv.w << "x" << cv.cin << " -> " << cv.cout << " k" << cv.k << " s" << cv.stride);
    conform("conv2d", ref, 2e-6, [&](Backend& be) { return be.conv2d(x, w.view, cv.bias ? &b.view : nullptr, cv.stride, cv.pad); });
  }
  {
    const int size = 48, p = 16, g = size / p, cout = 8;
    const std::vector<float> img = randn(size_t(3 * size * size), seed++);
    HostTensor w(uocr::DType::bf16, {cout, 3, p, p}, randn(size_t(cout * 3 * p * p), seed++, 0.05f));
    HostTensor b(uocr::DType::bf16, {cout}, randn(size_t(cout), seed++, 0.1f));
    const std::vector<double> wv = w.values(), bv = b.values();
    std::vector<double> ref(size_t(g * g * cout));
    for (int gy = 0; gy < g; ++gy)
      for (int gx = 0; gx < g; ++gx)
        for (int co = 0; co < cout; ++co) {
          double acc = bv[size_t(co)];
          for (int ci = 0; ci < 3; ++ci)
            for (int py = 0; py < p; ++py)
              for (int px = 0; px < p; ++px)
                acc += wv[size_t(((co * 3 + ci) * p + py) * p + px)] * img[size_t((ci * size + gy * p + py) * size + gx * p + px)];
          ref[size_t((gy * g + gx) * cout + co)] = acc;
        }
    conform("patch_embed", ref, 2e-6, [&](Backend& be) { return be.patch_embed(img, size, w.view, b.view); });
  }
  {
    std::vector<float> x = randn(3000, seed++, 3.0f);
    x[0] = 0.f;
    x[1] = -12.f;
    x[2] = 12.f;
    std::vector<double> erf_ref(x.size()), quick_ref(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const double v = x[i];
      erf_ref[i] = 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0)));
      quick_ref[i] = v / (1.0 + std::exp(-1.702 * v));
    }
    conform("gelu_erf", erf_ref, 1e-6, [&](Backend& be) { return be.gelu(x, false); });
    conform("quick_gelu", quick_ref, 1e-6, [&](Backend& be) { return be.gelu(x, true); });
  }
}

TEST_CASE("op conformance: SAM windowed/global attention with decomposed rel-pos, CLIP attention") {
  uint32_t seed = 1200;
  struct Case {
    int g, ws, heads, c;  // ws 0: global
  };
  for (const Case& cs : {Case{9, 0, 2, 16}, Case{10, 4, 2, 16}, Case{14, 14, 1, 32}, Case{17, 7, 2, 64}}) {
    const int n = cs.ws ? cs.ws : cs.g, hd = cs.c / cs.heads, span = 2 * n - 1;
    const std::vector<float> qkv = randn(size_t(cs.g * cs.g * 3 * cs.c), seed++), bias = randn(size_t(3 * cs.c), seed++, 0.5f);
    const std::vector<float> th = randn(size_t(span * hd), seed++, 0.3f), tw = randn(size_t(span * hd), seed++, 0.3f);
    // float64: tokens of each n x n window (padded ones = bias), all keys of the window, no mask.
    std::vector<double> ref(size_t(cs.g * cs.g * cs.c));
    const double scale = 1.0 / std::sqrt(double(hd));
    for (int y = 0; y < cs.g; ++y)
      for (int x = 0; x < cs.g; ++x)
        for (int h = 0; h < cs.heads; ++h) {
          const int wy = y / n, wx = x / n, qy = y % n, qx = x % n;
          const float* q = &qkv[size_t((y * cs.g + x) * 3 * cs.c + h * hd)];
          auto kv = [&](int ky, int kx, int part) {
            const int yy = wy * n + ky, xx = wx * n + kx;
            return (yy < cs.g && xx < cs.g) ? &qkv[size_t((yy * cs.g + xx) * 3 * cs.c + part * cs.c + h * hd)]
                                             : &bias[size_t(part * cs.c + h * hd)];
          };
          std::vector<double> sc(static_cast<size_t>(n * n));
          double mx = -1e300, sum = 0;
          for (int ky = 0; ky < n; ++ky)
            for (int kx = 0; kx < n; ++kx) {
              const float* k = kv(ky, kx, 1);
              double dot = 0, rh = 0, rw = 0;
              for (int d = 0; d < hd; ++d) {
                dot += double(q[d]) * k[d];
                rh += double(q[d]) * th[size_t((qy - ky + n - 1) * hd + d)];
                rw += double(q[d]) * tw[size_t((qx - kx + n - 1) * hd + d)];
              }
              sc[size_t(ky * n + kx)] = dot * scale + rh + rw;
              mx = std::max(mx, sc[size_t(ky * n + kx)]);
            }
          for (double& v : sc) sum += (v = std::exp(v - mx));
          for (int d = 0; d < hd; ++d) {
            double o = 0;
            for (int j = 0; j < n * n; ++j) o += sc[size_t(j)] / sum * kv(j / n, j % n, 2)[d];
            ref[size_t((y * cs.g + x) * cs.c + h * hd + d)] = o;
          }
        }
    INFO("SAM attention g " << cs.g << " window " << cs.ws << " heads " << cs.heads << " c " << cs.c);
    conform(cs.ws ? "sam_window_attention" : "sam_global_attention", ref, 2e-6,
            [&](Backend& be) { return be.sam_attention(qkv, bias, cs.g, cs.ws, cs.heads, cs.c, th, tw); });
  }
  {
    const int64_t tokens = 101;
    const int heads = 4, width = 64, hd = width / heads;
    const std::vector<float> qkv = randn(size_t(tokens * 3 * width), seed++);
    std::vector<double> ref(size_t(tokens * width));
    for (int64_t i = 0; i < tokens; ++i)
      for (int h = 0; h < heads; ++h) {
        std::vector<double> sc(static_cast<size_t>(tokens));
        double mx = -1e300, sum = 0;
        for (int64_t j = 0; j < tokens; ++j) {
          double dot = 0;
          for (int d = 0; d < hd; ++d) dot += double(qkv[size_t(i * 3 * width + h * hd + d)]) * qkv[size_t(j * 3 * width + width + h * hd + d)];
          sc[size_t(j)] = dot / std::sqrt(double(hd));
          mx = std::max(mx, sc[size_t(j)]);
        }
        for (double& v : sc) sum += (v = std::exp(v - mx));
        for (int d = 0; d < hd; ++d) {
          double o = 0;
          for (int64_t j = 0; j < tokens; ++j) o += sc[size_t(j)] / sum * qkv[size_t(j * 3 * width + 2 * width + h * hd + d)];
          ref[size_t(i * width + h * hd + d)] = o;
        }
      }
    conform("clip_attention", ref, 2e-6, [&](Backend& be) { return be.clip_attention(qkv, tokens, heads, width); });
  }
}

TEST_CASE("golden (tiny-b) vision and end to end on Vulkan: SAM, CLIP, projector, visual tokens, prefill logits") {
  Env& e = Env::get();
  const std::vector<float> image = uocr_test::golden_view();
  vk::VulkanVisionEncoder venc(e.vk(), e.cfg, e.w);
  uocr::VisionEncoder cenc(e.cfg, e.w);
  const uocr_test::GoldenView view = uocr_test::check_golden_view("vulkan", venc, cenc, image);
  const std::vector<float>& vf = view.device;
  const std::vector<float>& cf = view.cpu;
  // visual_tokens() = encode_view() + the host layout; the layout of the features above:
  const std::vector<float> visual = cenc.layout_tokens(vf, {}, 0, 0);
  REQUIRE(int64_t(visual.size()) == venc.token_count(1024, 0, 0, 0) * e.cfg.decoder.hidden);
  check_stage("vulkan", "vision_tokens", visual, e.vision, cenc.layout_tokens(cf, {}, 0, 0));
  check_no_validation_errors("golden vision");

  // End to end on the device: these visual tokens -> Vulkan prefill -> the reference logits.
  {
    vk::VulkanDecoder dec(e.vk(), e.cfg.decoder, e.w.decoder, e.device_weights());
    vk::VulkanKvCache cache(e.vk(), e.cfg.decoder, 8);
    const std::vector<float> logits = dec.prefill(dec.embed_prompt(e.input_ids, visual), 0, cache);
    const RowError err = row_error(logits, uocr_test::golden_f32("prefill_logits.npy"));
    MESSAGE("vulkan image -> visual tokens -> prefill logits: rel err " << err.rel << " (max abs " << err.max_abs << ")");
    CHECK(err.rel <= 1e-4);
  }

  // A 640 tile (interpolated SAM/CLIP position tables, 10x10 tokens) through visual_tokens()
  // with a 1x1 tile grid agrees with the CPU path.
  const std::vector<float> tile = uocr_test::crop_640(image);
  const std::vector<float> vt = venc.encode_view(tile.data(), 640), ct = cenc.encode_view(tile.data(), 640);
  const RowError t = row_error(vt, ct);
  MESSAGE("vulkan 640 tile vs cpu: rel " << t.rel << ", max abs " << t.max_abs);
  CHECK(t.rel <= 1e-5);
  CHECK(status_of([&] { venc.encode_view(tile.data(), 630); }) == Status::invalid_argument);
  CHECK(status_of([&] { venc.visual_tokens(tile, {tile}, 2, 1); }) == Status::invalid_argument);
  check_no_validation_errors("640 tile");
}

TEST_CASE("errors: missing device, no driver, bad SPIR-V, out of device memory") {
  Env::get().vk();
  std::string msg;
  SUBCASE("a device index that does not exist") {
    vk::ContextOptions o;
    o.device_index = 99;
    CHECK(status_of([&] { vk::Context c(o); }, &msg) == Status::unsupported);
    MESSAGE(msg);
    CHECK(msg.find("device index 99") != std::string::npos);
  }
  SUBCASE("no Vulkan driver at all") {
    // Point the loader at a driver manifest that does not exist.
    const std::string saved_icd = uocr_test::env_or("VK_ICD_FILENAMES", ""), saved_drv = uocr_test::env_or("VK_DRIVER_FILES", "");
    setenv("VK_ICD_FILENAMES", "/nonexistent/uocr_no_icd.json", 1);
    setenv("VK_DRIVER_FILES", "/nonexistent/uocr_no_icd.json", 1);
    vk::ContextOptions o;
    o.validation = 0;
    const Status s = status_of([&] { vk::Context c(o); }, &msg);
    const size_t listed = vk::Context::list_devices().size();
    auto restore = [](const char* name, const std::string& value) {
      if (value.empty())
        unsetenv(name);
      else
        setenv(name, value.c_str(), 1);
    };
    restore("VK_ICD_FILENAMES", saved_icd);
    restore("VK_DRIVER_FILES", saved_drv);
    MESSAGE(msg);
    CHECK(s == Status::unsupported);
    CHECK(msg.find("no Vulkan device") != std::string::npos);
    CHECK(listed == 0);
  }
  SUBCASE("a shader blob that is not SPIR-V") {
    const uint32_t junk[8] = {0xdeadbeef, 1, 2, 3, 4, 5, 6, 7};
    CHECK(status_of([&] { Env::get().vk().pipeline("junk", junk, 8, 1); }, &msg) == Status::internal);
    MESSAGE(msg);
    CHECK(msg.find("junk") != std::string::npos);
  }
  SUBCASE("an allocation larger than the device memory") {
    CHECK(status_of([&] { Env::get().vk().buffer(size_t(1) << 50, vk::MemoryUse::weights, "a petabyte"); }, &msg) ==
          Status::out_of_memory);
    MESSAGE(msg);
    CHECK(msg.find("a petabyte") != std::string::npos);
  }
  check_no_validation_errors("error paths");
}

TEST_CASE("the pipeline cache is written to disk and reloaded") {
  Env::get().vk();
  const std::string dir = (std::filesystem::temp_directory_path() / ("uocr-vk-cache-test-" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(dir);
  vk::ContextOptions o;
  o.cache_dir = dir;
  o.validation = 0;
  std::string path;
  {
    vk::Context c(o);
    path = c.pipeline_cache_path();
    CHECK(!c.pipeline_cache_loaded());
    vk::kernel(c, "matmul_bf16", 4);
    vk::kernel(c, "attention", 6);
  }
  CHECK(std::filesystem::exists(path));
  CHECK(std::filesystem::file_size(path) >= 32);  // lavapipe stores only the header
  {
    vk::Context c(o);
    CHECK(c.pipeline_cache_path() == path);
    CHECK(c.pipeline_cache_loaded());
    vk::kernel(c, "matmul_bf16", 4);
  }
  {  // a corrupt file is ignored, not an error
    std::ofstream(path, std::ios::binary | std::ios::trunc) << "not a pipeline cache, but long enough to have a header";
    vk::Context c(o);
    CHECK(!c.pipeline_cache_loaded());
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("adopting a VkDevice and queue created by the application") {
  Env::get().vk();
  auto app = vk::vulkan_info<VkApplicationInfo>(VK_STRUCTURE_TYPE_APPLICATION_INFO);
  app.apiVersion = VK_API_VERSION_1_1;
  auto ici = vk::vulkan_info<VkInstanceCreateInfo>(VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO);
  ici.pApplicationInfo = &app;
  VkInstance inst = VK_NULL_HANDLE;
  REQUIRE(vkCreateInstance(&ici, nullptr, &inst) == VK_SUCCESS);
  uint32_t n = 1;
  VkPhysicalDevice pd = VK_NULL_HANDLE;
  const VkResult er = vkEnumeratePhysicalDevices(inst, &n, &pd);
  REQUIRE((er == VK_SUCCESS || er == VK_INCOMPLETE));
  REQUIRE(n >= 1);
  uint32_t nf = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(pd, &nf, nullptr);
  std::vector<VkQueueFamilyProperties> fam(nf);
  vkGetPhysicalDeviceQueueFamilyProperties(pd, &nf, fam.data());
  uint32_t qf = 0;
  while (qf < nf && !(fam[qf].queueFlags & VK_QUEUE_COMPUTE_BIT)) ++qf;
  REQUIRE(qf < nf);
  const float prio = 1.0f;
  auto qi = vk::vulkan_info<VkDeviceQueueCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO);
  qi.queueFamilyIndex = qf;
  qi.queueCount = 1;
  qi.pQueuePriorities = &prio;
  auto dci = vk::vulkan_info<VkDeviceCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO);
  dci.queueCreateInfoCount = 1;
  dci.pQueueCreateInfos = &qi;
  VkDevice dev = VK_NULL_HANDLE;
  REQUIRE(vkCreateDevice(pd, &dci, nullptr, &dev) == VK_SUCCESS);
  VkQueue queue = VK_NULL_HANDLE;
  vkGetDeviceQueue(dev, qf, 0, &queue);
  {
    vk::ContextOptions o;
    o.pipeline_cache = false;
    vk::Context c(vk::ExternalDevice{inst, pd, dev, qf, queue}, o);
    CHECK(!c.owns_device());
    const std::vector<float> x = randn(300, 1), y = randn(300, 2);
    vk::Buffer bx = vk::upload_f32(c, x.data(), x.size(), vk::MemoryUse::activations, "x");
    vk::Buffer by = vk::upload_f32(c, y.data(), y.size(), vk::MemoryUse::activations, "y");
    {
      vk::Recorder r(c);
      vk::ops::add(r, bx, 0, by, 0, 300);
      r.submit();
    }
    const std::vector<float> got = c.download_vector<float>(bx, 300);
    for (size_t i = 0; i < 300; ++i) REQUIRE(got[i] == x[i] + y[i]);
  }
  // The application's device is still alive and ours to destroy.
  CHECK(vkDeviceWaitIdle(dev) == VK_SUCCESS);
  vkDestroyDevice(dev, nullptr);
  vkDestroyInstance(inst, nullptr);
}

TEST_CASE("per-op device timestamps") {
  Env& e = Env::get();
  e.vk();
  vk::ContextOptions o;
  o.profiling = 1;
  o.validation = 0;
  vk::Context c(o);
  if (!c.profiling()) {
    MESSAGE("device '" << c.device_name() << "' has no compute timestamps; profiling skipped");
    return;
  }
  vk::VulkanDecoder dec(c, e.cfg.decoder, e.w.decoder);
  vk::VulkanKvCache cache(c, e.cfg.decoder, 8);
  const int64_t p = int64_t(e.input_ids.size());
  dec.prefill(dec.embed_prompt(e.input_ids, e.vision), 0, cache);
  c.reset_profile();
  for (int s = 0; s < 20; ++s) dec.decode_step(e.gen_ids[size_t(s)], p + s, cache);
  MESSAGE("20 decode steps on " << c.device_name()
                                << std::string(c.properties().deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU ? " (a CPU device: these are CPU times)" : "")
                                << ":\n"
                                << c.profile_report());
  CHECK(c.profile().count("attention") == 1);
  CHECK(c.profile().at("attention").dispatches == 20 * e.cfg.decoder.layers);
}

TEST_CASE("zz: op error report and zero validation errors over the whole run") {
  vk::Context& c = Env::get().vk();
  std::string report = "worst relative L2 error per op (cpu vs f64 | vulkan vs f64 | vulkan vs cpu):\n";
  for (const auto& kv : op_report()) {
    char line[200];
    std::snprintf(line, sizeof line, "  %-18s %.2e | %.2e | %.2e\n", kv.first.c_str(), kv.second[0].rel, kv.second[1].rel,
                  kv.second[2].rel);
    report += line;
  }
  MESSAGE(report);
  MESSAGE("validation " << std::string(c.validation_enabled() ? "on" : "off") << ": " << c.validation_errors() << " errors, "
                        << c.validation_warnings() << " warnings");
  for (const std::string& m : c.validation_messages()) MESSAGE(m);
  check_no_validation_errors("whole run");
}
