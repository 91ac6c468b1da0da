// The decoder's feed-forward half: RMSNorm, the dense SiLU MLP (layers < first_k_dense) and the
// DeepSeek-V2 MoE (softmax router, greedy top-k, routed experts + fused shared experts), in
// float32 over rows of tokens. Routed experts run only on the rows routed to them: rows are
// grouped by expert so a prefill does one GEMM per expert, and a decode step touches exactly
// top-k experts.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "uocr/backends/cpu/linear.hpp"
#include "uocr/core/precision.hpp"
#include "uocr/model/config.hpp"
#include "uocr/model/weights.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

// y[r] = w ⊙ x[r] · rsqrt(mean(x[r]²) + eps) for `rows` rows of n (DeepseekV2RMSNorm; fp32 stats).
inline void rms_norm(const float* x, int64_t rows, int64_t n, const float* w, float eps, float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    float ss = 0.f;
#pragma omp simd reduction(+ : ss)
    for (int64_t i = 0; i < n; ++i) ss += xr[i] * xr[i];
    const float inv = 1.0f / std::sqrt(ss / float(n) + eps);
    for (int64_t i = 0; i < n; ++i) yr[i] = w[i] * (xr[i] * inv);
  }
}

// Intermediate buffers of one MLP evaluation; reused across calls so decode allocates nothing.
struct MlpScratch {
  std::vector<float> gate, up;
  size_t bytes() const { return (gate.capacity() + up.capacity()) * sizeof(float); }
};

// g = silu(g) ⊙ u over n values.
inline void silu_mul(float* g, const float* u, int64_t n) {
  for (int64_t i = 0; i < n; ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

// y[m, hidden] = down(silu(gate·x) ⊙ up·x). Rows go in chunks so the intermediates stay
// O(chunk · intermediate) however long the prompt is. `precision`: its three linear layers.
inline void mlp_forward(const MlpWeights& w, const float* x, int64_t m, float* y, MlpScratch& s,
                        Precision precision = Precision::f32) {
  constexpr int64_t chunk = 256;
  const int64_t inter = w.gate.out(), in = w.gate.in(), out = w.down.out();
  const int64_t cap = std::min(chunk, m);
  s.gate.resize(size_t(cap * inter));
  s.up.resize(size_t(cap * inter));
  for (int64_t r0 = 0; r0 < m; r0 += chunk) {
    const int64_t rows = std::min(chunk, m - r0);
    cpu::linear(x + r0 * in, rows, w.gate, s.gate.data(), precision);
    cpu::linear(x + r0 * in, rows, w.up, s.up.data(), precision);
    silu_mul(s.gate.data(), s.up.data(), rows * inter);
    cpu::linear(s.gate.data(), rows, w.down, y + r0 * out, precision);
  }
}

// Routing and grouping buffers of one MoE evaluation; reused across calls.
struct MoeScratch {
  std::vector<float> probs;          // [m, experts] router softmax
  std::vector<int32_t> choice;       // [m, top_k] selected experts
  std::vector<float> weight;         // [m, top_k] their mixing weights
  std::vector<int32_t> rank;         // [experts] expert indices, best first after partial sort
  std::vector<int64_t> start;        // [experts + 1] first grouped assignment of each expert
  std::vector<int64_t> cursor;       // [experts] fill position while grouping
  std::vector<int64_t> order;        // [m·top_k] assignments (row·top_k + j) grouped by expert
  std::vector<float> rows_in, rows_out, shared_out;
  MlpScratch mlp, shared_mlp;
  std::vector<cpu::LinearJob> jobs;
  size_t bytes() const {
    return (probs.capacity() + weight.capacity() + rows_in.capacity() + rows_out.capacity() + shared_out.capacity()) *
               sizeof(float) +
           (choice.capacity() + rank.capacity()) * sizeof(int32_t) +
           (start.capacity() + cursor.capacity() + order.capacity()) * sizeof(int64_t) + mlp.bytes() +
           shared_mlp.bytes() + jobs.capacity() * sizeof(cpu::LinearJob);
  }
};

// The router's choice for `m` rows: probs [m, experts] holds the router logits and becomes their
// softmax in place; choice/weight [m, top_k] get the greedy top-k experts, best first (on equal
// scores the lower expert index wins: torch.topk leaves ties unspecified, real routing has no
// exact ties), and their mixing weights (renormalised only if norm_topk_prob, times
// routed_scaling_factor). The one statement of the rule: device routing (Vulkan) is tested
// against it. rank: scratch.
inline void moe_route(const DecoderConfig& c, float* probs, int64_t m, int32_t* choice, float* weight,
                      std::vector<int32_t>& rank) {
  const int64_t e_count = c.n_routed_experts, k = c.experts_per_token;
  rank.resize(size_t(e_count));
  for (int64_t r = 0; r < m; ++r) {
    float* p = probs + r * e_count;
    const float mx = *std::max_element(p, p + e_count);
    float sum = 0.f;
    for (int64_t e = 0; e < e_count; ++e) sum += (p[e] = std::exp(p[e] - mx));
    for (int64_t e = 0; e < e_count; ++e) p[e] /= sum;
    std::iota(rank.begin(), rank.end(), 0);
    std::partial_sort(rank.begin(), rank.begin() + k, rank.end(),
                      [p](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    int32_t* ch = choice + r * k;
    float* wt = weight + r * k;
    float picked = 0.f;
    for (int64_t j = 0; j < k; ++j) {
      ch[j] = rank[size_t(j)];
      wt[j] = p[ch[j]];
      picked += wt[j];
    }
    for (int64_t j = 0; j < k; ++j)
      wt[j] = (c.norm_topk_prob && k > 1 ? wt[j] / (picked + 1e-20f) : wt[j]) * c.routed_scaling;
  }
}

// The routed experts' outputs of m <= 4 rows, rows_out[a] for the grouped assignments a (their
// inputs in rows_in, grouped the same way), and the shared expert's, shared_out: the MLPs of
// mlp_forward with every expert's gate and up in one cpu::linear_batch, then every down in one.
// (A decode step's matrices stay float32 in any precision, as linear() keeps them for m <= 4.)
inline void experts_few_rows(const DecoderConfig& c, const DecoderLayerWeights& lw, const float* x, int64_t m,
                             MoeScratch& s) {
  const int64_t e_count = c.n_routed_experts, k = c.experts_per_token, hidden = c.hidden;
  const int64_t inter = c.moe_intermediate;
  s.mlp.gate.resize(size_t(m * k * inter));
  s.mlp.up.resize(size_t(m * k * inter));
  s.jobs.clear();
  for (int64_t e = 0; e < e_count; ++e) {
    const int64_t a0 = s.start[size_t(e)], n = s.start[size_t(e + 1)] - a0;
    if (n == 0) continue;
    const MlpWeights& w = lw.experts[size_t(e)];
    s.jobs.push_back({s.rows_in.data() + a0 * hidden, n, w.gate.weight, nullptr, s.mlp.gate.data() + a0 * inter});
    s.jobs.push_back({s.rows_in.data() + a0 * hidden, n, w.up.weight, nullptr, s.mlp.up.data() + a0 * inter});
  }
  const int64_t shared_inter = lw.has_shared ? lw.shared.gate.out() : 0;
  if (lw.has_shared) {
    s.shared_mlp.gate.resize(size_t(m * shared_inter));
    s.shared_mlp.up.resize(size_t(m * shared_inter));
    s.shared_out.resize(size_t(m * hidden));
    s.jobs.push_back({x, m, lw.shared.gate.weight, nullptr, s.shared_mlp.gate.data()});
    s.jobs.push_back({x, m, lw.shared.up.weight, nullptr, s.shared_mlp.up.data()});
  }
  cpu::linear_batch(s.jobs.data(), s.jobs.size());
  silu_mul(s.mlp.gate.data(), s.mlp.up.data(), m * k * inter);
  if (lw.has_shared) silu_mul(s.shared_mlp.gate.data(), s.shared_mlp.up.data(), m * shared_inter);
  s.jobs.clear();
  for (int64_t e = 0; e < e_count; ++e) {
    const int64_t a0 = s.start[size_t(e)], n = s.start[size_t(e + 1)] - a0;
    if (n == 0) continue;
    s.jobs.push_back({s.mlp.gate.data() + a0 * inter, n, lw.experts[size_t(e)].down.weight, nullptr,
                      s.rows_out.data() + a0 * hidden});
  }
  if (lw.has_shared) s.jobs.push_back({s.shared_mlp.gate.data(), m, lw.shared.down.weight, nullptr, s.shared_out.data()});
  cpu::linear_batch(s.jobs.data(), s.jobs.size());
}

// y[m, hidden] = Σ_j w_j · Expert_{e_j}(x) + Shared(x), with w = router softmax probabilities of
// the top-k experts (renormalised only if norm_topk_prob) × routed_scaling_factor. `precision`:
// the experts' linear layers; the router stays float32 (bf16 router logits flip top-k choices).
inline void moe_forward(const DecoderConfig& c, const DecoderLayerWeights& lw, const float* x, int64_t m, float* y,
                        MoeScratch& s, Precision precision = Precision::f32) {
  const int64_t e_count = c.n_routed_experts, k = c.experts_per_token, hidden = c.hidden;
  s.probs.resize(size_t(m * e_count));
  s.choice.resize(size_t(m * k));
  s.weight.resize(size_t(m * k));
  cpu::linear(x, m, lw.router, s.probs.data());
  moe_route(c, s.probs.data(), m, s.choice.data(), s.weight.data(), s.rank);

  // Counting sort of the m·k assignments (row·k + j) by expert: expert e owns
  // order[start[e] .. start[e+1]).
  s.start.assign(size_t(e_count + 1), 0);
  for (int64_t a = 0; a < m * k; ++a) ++s.start[size_t(s.choice[size_t(a)] + 1)];
  for (int64_t e = 0; e < e_count; ++e) s.start[size_t(e + 1)] += s.start[size_t(e)];
  s.cursor.assign(s.start.begin(), s.start.end() - 1);
  s.order.resize(size_t(m * k));
  for (int64_t a = 0; a < m * k; ++a) s.order[size_t(s.cursor[size_t(s.choice[size_t(a)])]++)] = a;

  // Expert e's grouped assignments [a0, a0 + n): their input rows copied out of x, and their
  // outputs added to y with their mixing weights.
  auto gather = [&](int64_t a0, int64_t n, float* rows) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t row = s.order[size_t(a0 + i)] / k;
      std::copy(x + row * hidden, x + (row + 1) * hidden, rows + i * hidden);
    }
  };
  auto combine = [&](int64_t a0, int64_t n, const float* rows) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t a = s.order[size_t(a0 + i)];
      const float w = s.weight[size_t(a)];
      float* yr = y + (a / k) * hidden;
      const float* o = rows + i * hidden;
      for (int64_t col = 0; col < hidden; ++col) yr[col] += w * o[col];
    }
  };
  std::fill(y, y + m * hidden, 0.0f);
  if (m <= 4) {
    // A decode step's few rows: every chosen expert's and the shared expert's products in two
    // parallel regions (gate and up, then down) instead of three per expert; the same bits.
    s.rows_in.resize(size_t(m * k * hidden));
    s.rows_out.resize(size_t(m * k * hidden));
    gather(0, m * k, s.rows_in.data());
    experts_few_rows(c, lw, x, m, s);
    for (int64_t e = 0; e < e_count; ++e) {
      const int64_t a0 = s.start[size_t(e)];
      combine(a0, s.start[size_t(e + 1)] - a0, s.rows_out.data() + a0 * hidden);
    }
  } else {
    for (int64_t e = 0; e < e_count; ++e) {
      const int64_t a0 = s.start[size_t(e)], n = s.start[size_t(e + 1)] - a0;
      if (n == 0) continue;
      s.rows_in.resize(size_t(n * hidden));
      s.rows_out.resize(size_t(n * hidden));
      gather(a0, n, s.rows_in.data());
      mlp_forward(lw.experts[size_t(e)], s.rows_in.data(), n, s.rows_out.data(), s.mlp, precision);
      combine(a0, n, s.rows_out.data());
    }
    if (lw.has_shared) {
      s.shared_out.resize(size_t(m * hidden));
      mlp_forward(lw.shared, x, m, s.shared_out.data(), s.mlp, precision);
    }
  }
  if (lw.has_shared)
    for (int64_t i = 0; i < m * hidden; ++i) y[i] += s.shared_out[size_t(i)];
}

UOCR_NAMESPACE_END
