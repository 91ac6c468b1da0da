// The ops of the model on every backend this build has (tests/conformance/runners.hpp), through
// one op interface (support/op_backend.hpp): each case runs on a backend and is checked against a
// float64 reference with a per-op error budget, and a device backend against the CPU backend
// within the same budget. At the end the worst error per op and backend is printed.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "conformance/runners.hpp"
#include "support/op_reference.hpp"
#include "support/test_support.hpp"
#include "uocr/vision/conv.hpp"

using uocr_test::AttnCase;
using uocr_test::Backends;
using uocr_test::CpuRunner;
using uocr_test::HostTensor;
using uocr_test::OpBackend;
using uocr_test::randn;
using uocr_test::row_error;
using uocr_test::RowError;
using uocr_test::runs_here;

namespace {

// Worst error per op and backend over all cases, against float64 and (a device) the CPU backend.
struct WorstError {
  RowError f64, cpu;
  bool against_cpu = false;
};
std::map<std::string, WorstError>& op_report() {
  static std::map<std::string, WorstError> r;
  return r;
}
void note(RowError& worst, const RowError& e) {
  worst.rel = std::max(worst.rel, e.rel);
  worst.max_abs = std::max(worst.max_abs, e.max_abs);
}

// Runs `compute` on Runner's backend and checks it against the float64 reference within `budget`
// (relative L2); a device backend also against the CPU backend's result.
template <class Runner, class Compute>
void conform(const std::string& op, const std::vector<double>& ref, double budget, Compute&& compute) {
  const std::vector<float> got = compute(Runner::ops());
  const std::string key = op + " on " + Runner::name;
  const RowError e = row_error(got, ref);
  WorstError& worst = op_report()[key];
  note(worst.f64, e);
  INFO(key << ": rel " << e.rel << ", max abs " << e.max_abs << " (budget " << budget << ")");
  CHECK(e.rel <= budget);
  if (std::string(Runner::name) != CpuRunner::name) {
    const std::vector<float> cpu = compute(CpuRunner::ops());
    const RowError c = row_error(got, cpu);
    note(worst.cpu, c);
    worst.against_cpu = true;
    INFO(key << " against the cpu backend: rel " << c.rel);
    CHECK(c.rel <= budget);
  }
  Runner::after_case(key);
}

}  // namespace

TEST_CASE_TEMPLATE_DEFINE("op conformance: linear (bf16, f16, f32 weights; decode mat-vec and GEMM paths)", Runner, linear) {
  if (!runs_here<Runner>()) return;
  // Decode mat-vecs and GEMMs on each side of the backends' switch points (CUDA: m <= 16 mat-vec,
  // k % 8 == 0 vector loads, more than 2^24 weights widened in two chunks).
  const uocr_test::LinearShape shapes[] = {{1, 37, 64, false},     {3, 130, 33, true},     {4, 64, 1280, false},
                                          {5, 65, 40, true},      {16, 65, 40, true},     {17, 129, 95, false},
                                          {37, 129, 95, false},   {130, 200, 256, true},  {300, 2051, 64, false},
                                          {17, 16500, 1024, false}};
  uint32_t seed = 10;
  for (uocr::DType t : {uocr::DType::bf16, uocr::DType::f16, uocr::DType::f32})
    for (const uocr_test::LinearShape& s : shapes) {
      const uocr_test::LinearCase c(t, s, seed);
      INFO("linear " << uocr::dtype_name(t) << " m=" << s.m << " n=" << s.n << " k=" << s.k);
      conform<Runner>(std::string("linear_") + uocr::dtype_name(t), c.ref, 2e-6,
              [&](OpBackend& be) { return be.linear(c.x, s.m, c.w.view, c.bias()); });
    }
}
TEST_CASE_TEMPLATE_APPLY(linear, Backends);

TEST_CASE_TEMPLATE_DEFINE("op conformance: RMSNorm, LayerNorm, RoPE, SiLU*mul", Runner, norms_rope_silu) {
  if (!runs_here<Runner>()) return;
  for (const int64_t n : {int64_t(300), int64_t(1300)}) {
    const int64_t rows = 7;
    const std::vector<float> x = randn(size_t(rows * n), 1, 2.0f), w = randn(size_t(n), 2);
    conform<Runner>("rms_norm", uocr_test::ref_rms_norm(x, rows, n, w, 1e-6), 1e-6, [&](OpBackend& b) { return b.rms_norm(x, rows, n, w, 1e-6f); });
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
    conform<Runner>("layer_norm", ref, 1e-6, [&](OpBackend& be) { return be.layer_norm(x, rows, n, w.view, b.view, 1e-6f); });
  }
  // Positions around 8k and 30k (large angles) and near 2^24 (position extrapolation); the
  // reference uses the same float32 angles.
  for (const int64_t pos0 : {int64_t(8180), int64_t(30000), (int64_t(1) << 24) - 10}) {
    CAPTURE(pos0);
    const int64_t rows = 5;
    const int heads = 3, d = 16;
    const std::vector<float> x = randn(size_t(rows * heads * d), 6);
    conform<Runner>("rope", uocr_test::ref_rope(x, rows, heads, d, 10000.f, pos0), 1e-6, [&](OpBackend& b) { return b.rope(x, rows, heads, d, 10000.f, pos0); });
  }
  {
    const std::vector<float> g = randn(1000, 7, 3.0f), u = randn(1000, 8);
    conform<Runner>("silu_mul", uocr_test::ref_silu_mul(g, u), 1e-6, [&](OpBackend& b) { return b.silu_mul(g, u); });
  }
}
TEST_CASE_TEMPLATE_APPLY(norms_rope_silu, Backends);

TEST_CASE_TEMPLATE_DEFINE("op conformance: causal prefill attention and decode attention over reference + ring", Runner, attention) {
  if (!runs_here<Runner>()) return;
  struct Case {
    int heads, kv_heads, head_dim;
    int64_t t, split;
  };
  // split 0: causal over t rows; split > 0: one query over split reference rows + t - split ring
  // rows.
  const Case cases[] = {{4, 4, 8, 150, 0},     {4, 2, 16, 70, 0},    {2, 1, 128, 66, 0},  {10, 10, 128, 300, 0},
                        {4, 4, 8, 286, 278},   {4, 2, 16, 200, 192}, {3, 3, 256, 65, 64}, {2, 2, 8, 5, 5},
                        {10, 10, 128, 401, 273}};
  uint32_t seed = 100;
  for (const Case& cs : cases) {
    const AttnCase c = uocr_test::make_attention(cs.heads, cs.kv_heads, cs.head_dim, cs.t, cs.split, seed += 3);
    INFO("heads " << cs.heads << "/" << cs.kv_heads << " d " << cs.head_dim << " t " << cs.t << " split " << cs.split);
    if (c.causal())
      conform<Runner>("causal_attention", uocr_test::ref_attention(c), 2e-6, [&](OpBackend& b) { return b.causal_attention(c); });
    else
      conform<Runner>("decode_attention", uocr_test::ref_attention(c), 2e-6, [&](OpBackend& b) { return b.decode_attention(c); });
  }
}
TEST_CASE_TEMPLATE_APPLY(attention, Backends);

TEST_CASE_TEMPLATE_DEFINE("op conformance: embedding rows, dense MLP and MoE layer (golden tiny-b weights)", Runner, embedding_feed_forward) {
  if (!runs_here<Runner>()) return;
  const uocr_test::GoldenCase& e = CpuRunner::env();
  const uocr::DecoderConfig& d = e.cfg.decoder;
  {
    const std::vector<int32_t> ids = {0, 1, 5, 128815, d.vocab - 1, 4242};
    std::vector<double> ref;
    for (int32_t id : ids)
      for (int c = 0; c < d.hidden; ++c) ref.push_back(uocr::bf16_to_f32(reinterpret_cast<const uint16_t*>(e.w.decoder.embed->data)[size_t(id) * size_t(d.hidden) + size_t(c)]));
    conform<Runner>("embed", ref, 0.0, [&](OpBackend& b) { return b.embed(ids); });
  }
  // Feed-forward halves: the dense MLP (layer 0) and the MoE (layer 1: softmax router, top-2 of 8,
  // shared expert) on 1, 37 and 600 rows (CUDA: grouped mat-vecs routed on the device, and one
  // GEMM per expert after reading the counts back); the reference is the CPU backend itself
  // (routing is discrete, so a float64 re-implementation would only restate it).
  for (int layer = 0; layer < d.layers; ++layer)
    for (int64_t m : {int64_t(1), int64_t(37), int64_t(600)}) {
      const std::vector<float> x = randn(size_t(m * d.hidden), uint32_t(500 + layer * 10 + m));
      const std::vector<float> cpu = CpuRunner::ops().feed_forward(layer, x);
      const std::vector<double> ref(cpu.begin(), cpu.end());
      INFO("layer " << layer << " rows " << m);
      conform<Runner>(layer == 0 ? "dense_mlp" : "moe", ref, 2e-6, [&](OpBackend& b) { return b.feed_forward(layer, x); });
    }
}
TEST_CASE_TEMPLATE_APPLY(embedding_feed_forward, Backends);

TEST_CASE_TEMPLATE_DEFINE("op conformance: vision convolutions (im2col + GEMM), patch embedding, GELU", Runner, convolutions_gelu) {
  if (!runs_here<Runner>()) return;
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
    conform<Runner>("conv2d", ref, 2e-6, [&](OpBackend& be) { return be.conv2d(x, w.view, cv.bias ? &b.view : nullptr, cv.stride, cv.pad); });
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
    conform<Runner>("patch_embed", ref, 2e-6, [&](OpBackend& be) { return be.patch_embed(img, size, w.view, b.view); });
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
    conform<Runner>("gelu_erf", erf_ref, 1e-6, [&](OpBackend& be) { return be.gelu(x, false); });
    conform<Runner>("quick_gelu", quick_ref, 1e-6, [&](OpBackend& be) { return be.gelu(x, true); });
  }
}
TEST_CASE_TEMPLATE_APPLY(convolutions_gelu, Backends);

TEST_CASE_TEMPLATE_DEFINE("op conformance: SAM windowed/global attention with decomposed rel-pos, CLIP attention", Runner, vision_attention) {
  if (!runs_here<Runner>()) return;
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
    conform<Runner>(cs.ws ? "sam_window_attention" : "sam_global_attention", ref, 2e-6,
            [&](OpBackend& be) { return be.sam_attention(qkv, bias, cs.g, cs.ws, cs.heads, cs.c, th, tw); });
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
    conform<Runner>("clip_attention", ref, 2e-6, [&](OpBackend& be) { return be.clip_attention(qkv, tokens, heads, width); });
  }
}
TEST_CASE_TEMPLATE_APPLY(vision_attention, Backends);


TEST_CASE("zz: the worst error per op and backend") {
  for (const auto& [key, e] : op_report())
    MESSAGE(key << ": rel " << e.f64.rel << " (max abs " << e.f64.max_abs << ") against float64"
                << (e.against_cpu ? ", rel " + std::to_string(e.cpu.rel) + " against the cpu backend" : std::string()));
}
