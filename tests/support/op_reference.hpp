// Inputs and references for the op conformance cases (tests/conformance/ops.cpp, and a backend's
// own op tests), so that every backend is measured against the same cases: random activations,
// weight tensors in a checkpoint type,
// linear and attention cases, the float64 references (linear, RMSNorm, RoPE, SiLU*mul, attention)
// and the CPU backend's results.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "uocr/core/dtype.hpp"
#include "uocr/decoder/attention.hpp"
#include "uocr/decoder/moe.hpp"
#include "uocr/decoder/rope.hpp"
#include "uocr/io/safetensors.hpp"

namespace uocr_test {

// n values drawn from N(0, scale²), the same for the same seed.
inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// A weight tensor held in memory in a checkpoint type, exposed as a TensorView like a checkpoint's.
struct HostTensor {
  std::vector<uint16_t> half;
  std::vector<float> full;
  uocr::TensorView view;
  HostTensor(uocr::DType t, std::vector<int64_t> shape, const std::vector<float>& values) {
    view.name = "test tensor";
    view.dtype = t;
    view.shape = std::move(shape);
    if (t == uocr::DType::f32) {
      full = values;
      view.data = reinterpret_cast<const uint8_t*>(full.data());
      return;
    }
    half.resize(values.size());
    for (size_t i = 0; i < values.size(); ++i) half[i] = t == uocr::DType::bf16 ? uocr::f32_to_bf16(values[i]) : to_f16(values[i]);
    view.data = reinterpret_cast<const uint8_t*>(half.data());
  }
  // The stored (rounded) values, widened.
  std::vector<double> values() const {
    std::vector<float> f(size_t(view.numel()));
    view.read_f32(0, view.numel(), f.data());
    return std::vector<double>(f.begin(), f.end());
  }
  static uint16_t to_f16(float f) {  // round to nearest even, normal range only (test data)
    uint32_t b;
    std::memcpy(&b, &f, 4);
    const uint32_t sign = (b >> 16) & 0x8000u, mant = b & 0x7fffffu, rest = mant & 0x1fffu;
    const int32_t exp = int32_t((b >> 23) & 0xff) - 127 + 15;
    if (exp <= 0) return uint16_t(sign);
    uint32_t h = sign | (uint32_t(exp) << 10) | (mant >> 13);
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
    return uint16_t(h);
  }
};

// y = x·wᵀ + b over m rows of x, in float64 from the stored weight values.
inline std::vector<double> ref_linear(const std::vector<float>& x, int64_t m, const HostTensor& w, const HostTensor* b) {
  const int64_t n = w.view.dim(0), k = w.view.dim(1);
  const std::vector<double> wv = w.values(), bv = b ? b->values() : std::vector<double>(size_t(n), 0.0);
  std::vector<double> y(size_t(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = bv[size_t(j)];
      for (int64_t c = 0; c < k; ++c) s += double(x[size_t(i * k + c)]) * wv[size_t(j * k + c)];
      y[size_t(i * n + j)] = s;
    }
  return y;
}

// One query row over keys [0, keys) of k/v (all visible), in float64.
inline std::vector<double> ref_attention_row(const float* q, const std::vector<float>& k, const std::vector<float>& v,
                                             int64_t keys, const uocr::AttentionShape& s) {
  const int64_t kr = s.kv_row(), d = s.head_dim;
  std::vector<double> out(size_t(s.q_row()));
  for (int h = 0; h < s.heads; ++h) {
    const int g = s.kv_head_of(h);
    std::vector<double> sc(static_cast<size_t>(keys));
    double mx = -1e300, sum = 0;
    for (int64_t j = 0; j < keys; ++j) {
      double dot = 0;
      for (int64_t e = 0; e < d; ++e) dot += double(q[h * d + e]) * k[size_t(j * kr + g * d + e)];
      mx = std::max(mx, sc[size_t(j)] = dot / std::sqrt(double(d)));
    }
    for (double& x : sc) sum += (x = std::exp(x - mx));
    for (int64_t e = 0; e < d; ++e) {
      double o = 0;
      for (int64_t j = 0; j < keys; ++j) o += sc[size_t(j)] / sum * v[size_t(j * kr + g * d + e)];
      out[size_t(h * d + e)] = o;
    }
  }
  return out;
}

// A linear-layer case: m input rows of k, an n x k weight in a checkpoint type, a bf16 bias (used
// when `bias`), and y = x·wᵀ (+ b) in float64. Draws three seeds from `seed`.
struct LinearShape {
  int64_t m, n, k;
  bool bias;
};
struct LinearCase {
  LinearShape s;
  std::vector<float> x;
  HostTensor w, b;
  std::vector<double> ref;
  LinearCase(uocr::DType t, const LinearShape& shape, uint32_t& seed)
      : s(shape),
        x(randn(size_t(s.m * s.k), seed++)),
        w(t, {s.n, s.k}, randn(size_t(s.n * s.k), seed++, 1.0f / std::sqrt(float(s.k)))),
        b(uocr::DType::bf16, {s.n}, randn(size_t(s.n), seed++, 0.1f)),
        ref(ref_linear(x, s.m, w, s.bias ? &b : nullptr)) {}
  const uocr::TensorView* bias() const { return s.bias ? &b.view : nullptr; }
};

// y = w · x / sqrt(mean(x²) + eps) over rows of n, in float64.
inline std::vector<double> ref_rms_norm(const std::vector<float>& x, int64_t rows, int64_t n, const std::vector<float>& w,
                                        double eps) {
  std::vector<double> ref(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += double(x[size_t(r * n + i)]) * x[size_t(r * n + i)];
    const double inv = 1.0 / std::sqrt(ss / double(n) + eps);
    for (int64_t i = 0; i < n; ++i) ref[size_t(r * n + i)] = w[size_t(i)] * x[size_t(r * n + i)] * inv;
  }
  return ref;
}

// Rotary embedding (rotate-half) of rows x heads x d values, row r at position pos0 + r, in
// float64 from the same float32 angles the backends use.
inline std::vector<double> ref_rope(const std::vector<float>& x, int64_t rows, int heads, int d, float theta, int64_t pos0) {
  std::vector<double> ref(x.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int i = 0; i < d / 2; ++i) {
      const float angle = float(pos0 + r) * (1.0f / std::pow(theta, float(2 * i) / float(d)));
      const double c = std::cos(double(angle)), s = std::sin(double(angle));
      for (int h = 0; h < heads; ++h) {
        const size_t base = size_t((r * heads + h) * d);
        const double x1 = x[base + size_t(i)], x2 = x[base + size_t(i + d / 2)];
        ref[base + size_t(i)] = x1 * c - x2 * s;
        ref[base + size_t(i + d / 2)] = x2 * c + x1 * s;
      }
    }
  return ref;
}

// silu(g) * u elementwise, in float64.
inline std::vector<double> ref_silu_mul(const std::vector<float>& g, const std::vector<float>& u) {
  std::vector<double> ref(g.size());
  for (size_t i = 0; i < g.size(); ++i) ref[i] = double(g[i]) / (1.0 + std::exp(-double(g[i]))) * u[i];
  return ref;
}

// An attention case. split 0: causal over t query rows (row i sees keys [0, i]); split > 0: one
// query over split reference rows followed by t - split ring rows.
struct AttnCase {
  uocr::AttentionShape shape;
  std::vector<float> q, k, v;
  int64_t t = 0, split = 0;
  bool causal() const { return split == 0; }
};

// Random q, k, v for an attention case from seeds seed, seed + 1, seed + 2.
inline AttnCase make_attention(int heads, int kv_heads, int head_dim, int64_t t, int64_t split, uint32_t seed) {
  AttnCase c;
  c.shape = uocr::AttentionShape{heads, kv_heads, head_dim};
  c.t = t;
  c.split = split;
  c.q = randn(size_t((split ? 1 : t) * c.shape.q_row()), seed);
  c.k = randn(size_t(t * c.shape.kv_row()), seed + 1);
  c.v = randn(size_t(t * c.shape.kv_row()), seed + 2);
  return c;
}

// Every query row of an attention case, in float64.
inline std::vector<double> ref_attention(const AttnCase& c) {
  const int64_t rows = c.causal() ? c.t : 1, qr = c.shape.q_row();
  std::vector<double> out;
  for (int64_t i = 0; i < rows; ++i) {
    const std::vector<double> row = ref_attention_row(c.q.data() + i * qr, c.k, c.v, c.causal() ? i + 1 : c.t, c.shape);
    out.insert(out.end(), row.begin(), row.end());
  }
  return out;
}

// --- the CPU backend's results, which the GPU backends are also compared against -------------

inline std::vector<float> cpu_rope(const std::vector<float>& x, int64_t rows, int heads, int head_dim, float theta,
                                   int64_t pos0) {
  std::vector<float> y(x);
  uocr::Rope r(head_dim, theta);
  for (int64_t i = 0; i < rows; ++i) r.apply(y.data() + i * heads * head_dim, heads, pos0 + i);
  return y;
}

inline std::vector<float> cpu_attention(const AttnCase& c) {
  std::vector<float> out(c.q.size());
  if (c.causal()) {
    uocr::causal_attention(c.q.data(), c.k.data(), c.v.data(), c.t, c.shape, out.data());
    return out;
  }
  const int64_t kr = c.shape.kv_row();
  std::vector<float> scores(size_t(c.shape.heads * c.t));
  uocr::decode_attention(c.q.data(), uocr::KvRows{c.k.data(), c.v.data(), c.split},
                         uocr::KvRows{c.k.data() + c.split * kr, c.v.data() + c.split * kr, c.t - c.split}, c.shape,
                         scores.data(), out.data());
  return out;
}

// The dense MLP or MoE half of decoder layer `layer` over the rows of x.
inline std::vector<float> cpu_feed_forward(const uocr::DecoderConfig& d, const uocr::DecoderWeights& w, int layer,
                                           const std::vector<float>& x) {
  const uocr::DecoderLayerWeights& lw = w.layers[size_t(layer)];
  const int64_t m = int64_t(x.size()) / d.hidden;
  std::vector<float> y(x.size());
  uocr::MoeScratch moe;
  if (lw.moe)
    uocr::moe_forward(d, lw, x.data(), m, y.data(), moe);
  else
    uocr::mlp_forward(lw.dense, x.data(), m, y.data(), moe.mlp);
  return y;
}

}  // namespace uocr_test
