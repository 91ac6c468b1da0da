// The machine ceilings the model benchmarks are judged against, measured in the same run, and
// the analytic work counts (FLOPs of the vision encoder, bytes a decode step must read) that
// turn a measured time into a fraction of those ceilings.
#pragma once
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <ctime>
#include <vector>

#include <Eigen/Core>
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "uocr/backends/cpu/linear.hpp"
#include "uocr/model/config.hpp"
#include "uocr/model/weights.hpp"

namespace uocr_bench {

// The OpenMP threads a parallel loop uses (1 without OpenMP).
inline int omp_threads() {
#ifdef _OPENMP
  return omp_get_max_threads();
#else
  return 1;
#endif
}

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// CPU seconds of the calling thread. That thread takes part in every parallel loop (dynamic
// hand-out: it stops claiming work only when none is left) and runs all serial code, so on an
// idle machine the wall time would be about this; on a shared, oversubscribed machine the wall
// time mostly measures the other tenants. (With OMP_WAIT_POLICY=passive a wait for a late
// partner is sleep, not CPU, so the estimate is a little optimistic; spinning counts.)
inline double thread_cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// A rate measured two ways: per wall second (what a user sees now) and per calling-thread CPU
// second (the idle-machine estimate above).
struct Rate {
  double wall = 0, cpu = 0;
};

// Best-of-`reps` GFLOP/s of a square float32 GEMM of side n, all OpenMP threads: the
// "measured GEMM peak". Two ways, the better counts: Eigen's own parallel GEMM (best on an idle
// machine) and the tiled GEMM cpu::linear uses (independent single-threaded Eigen tiles; best
// on a shared one).
inline Rate measure_gemm_gflops(int n = 2048, int reps = 4) {
  using M = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  M a = M::Random(n, n), b = M::Random(n, n), c(n, n);
  uocr::TensorView bw;
  bw.dtype = uocr::DType::f32;
  bw.shape = {n, n};
  bw.data = reinterpret_cast<const uint8_t*>(b.data());
  Rate best;
  const double flops = 2.0 * n * n * double(n);
  for (int r = 0; r <= reps; ++r) {
    for (int way = 0; way < 2; ++way) {
      const auto t0 = std::chrono::steady_clock::now();
      const double c0 = thread_cpu_seconds();
      if (way == 0) {
        c.noalias() = a * b.transpose();
      } else {
#ifdef UOCR_CPU_TILED_GEMM
        uocr::cpu::detail::gemm_tiles(a.data(), n, bw, c.data());
#else
        continue;  // a linear.hpp without the tiled GEMM (baseline builds)
#endif
      }
      if (r == 0) continue;  // warm-up
      best.wall = std::max(best.wall, flops / seconds_since(t0) / 1e9);
      best.cpu = std::max(best.cpu, flops / (thread_cpu_seconds() - c0) / 1e9);
    }
  }
  return best;
}

// Best-of-`reps` GB/s reading a buffer much larger than the caches (1 GiB; several times the L3
// of the machine in docs/PERFORMANCE.md), all OpenMP threads: AVX-512 loads into 4 accumulators
// with software prefetch 4 KB ahead (the fastest read loop tried, well ahead of a plain scalar
// sum: docs/PERFORMANCE.md), so the decode roofline is not flattered by a weak ceiling.
inline Rate measure_read_bandwidth_gbs(size_t bytes = size_t(1) << 30, int reps = 6) {
  const int64_t n = int64_t(bytes / sizeof(float)) / 64 * 64;
  std::vector<float> buf(size_t(n), 1.0f);
  Rate best;
  volatile float sink = 0;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = thread_cpu_seconds();
    float s = 0;
#pragma omp parallel for reduction(+ : s) schedule(static)
    for (int64_t blk = 0; blk < n / 4096; ++blk) {  // 16 KB blocks
      const float* p = buf.data() + blk * 4096;
#if defined(__AVX512F__)
      __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
      for (int64_t i = 0; i < 4096; i += 64) {
        const char* pf = reinterpret_cast<const char*>(p + i) + 4096;
        _mm_prefetch(pf, _MM_HINT_T0);
        _mm_prefetch(pf + 64, _MM_HINT_T0);
        _mm_prefetch(pf + 128, _MM_HINT_T0);
        _mm_prefetch(pf + 192, _MM_HINT_T0);
        a0 = _mm512_add_ps(a0, _mm512_loadu_ps(p + i));
        a1 = _mm512_add_ps(a1, _mm512_loadu_ps(p + i + 16));
        a2 = _mm512_add_ps(a2, _mm512_loadu_ps(p + i + 32));
        a3 = _mm512_add_ps(a3, _mm512_loadu_ps(p + i + 48));
      }
      s += _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
#else
      float acc[16] = {};
      for (int64_t i = 0; i < 4096; i += 16)
        for (int l = 0; l < 16; ++l) acc[l] += p[i + l];
      for (float v : acc) s += v;
#endif
    }
    sink = sink + s;
    if (r == 0) continue;  // the first pass also faults the pages in
    best.wall = std::max(best.wall, double(n) * 4 / seconds_since(t0) / 1e9);
    best.cpu = std::max(best.cpu, double(n) * 4 / (thread_cpu_seconds() - c0) / 1e9);
  }
  return best;
}

// ---- FLOPs of one encoder view (multiply-add = 2 FLOPs), counted from the config ----------

struct EncoderFlops {
  double sam_linear = 0, sam_attention = 0, sam_conv = 0, clip_linear = 0, clip_attention = 0, projector = 0;
  double sam() const { return sam_linear + sam_attention + sam_conv; }
  double clip() const { return clip_linear + clip_attention; }
  double total() const { return sam() + clip() + projector; }
};

inline EncoderFlops encoder_flops(const uocr::ModelConfig& cfg, int size) {
  const uocr::SamConfig& s = cfg.sam;
  EncoderFlops f;
  const double g = size / s.patch, n = g * g, c = s.width, hd = c / s.heads;
  f.sam_conv += 2 * n * c * (3.0 * s.patch * s.patch);  // patch embedding
  for (int b = 0; b < s.layers; ++b) {
    f.sam_linear += 2 * n * c * (3 * c + c + 4 * c + 4 * c);  // qkv, proj, lin1, lin2
    if (s.is_global(b)) {
      // q·kᵀ and p·v over all n keys per head, plus q·rel_pos tables (2g-1 rows) for h and w.
      f.sam_attention += s.heads * (4 * n * n * hd + 2 * 2 * n * hd * (2 * g - 1));
    } else {
      const double ws = s.window, windows = std::ceil(g / ws) * std::ceil(g / ws), wt = ws * ws;
      f.sam_attention += windows * s.heads * (4 * wt * wt * hd + 2 * 2 * wt * hd * (2 * ws - 1));
    }
  }
  f.sam_conv += 2 * n * c * s.out_chans;                        // neck 1x1
  f.sam_conv += 2 * n * s.out_chans * s.out_chans * 9.0;       // neck 3x3
  const double g2 = std::floor((g - 1) / 2) + 1, g3 = std::floor((g2 - 1) / 2) + 1;
  f.sam_conv += 2 * g2 * g2 * s.net2_chans * s.out_chans * 9.0;  // net_2
  f.sam_conv += 2 * g3 * g3 * s.net3_chans * s.net2_chans * 9.0;  // net_3
  const uocr::ClipConfig& cc = cfg.clip;
  const double t = 1 + g3 * g3, w = cc.width;
  f.clip_linear = cc.layers * 2 * t * (4 * w * w + 2 * w * cc.ffn);
  f.clip_attention = cc.layers * 4 * t * t * w;
  f.projector = 2 * g3 * g3 * cfg.projector.input_dim * cfg.projector.n_embed;
  return f;
}

// ---- Bytes one decode step must read -------------------------------------------------------

struct DecodeBytes {
  double attention = 0, dense_mlp = 0, router = 0, experts = 0, shared = 0, lm_head = 0, kv = 0;
  double weights() const { return attention + dense_mlp + router + experts + shared + lm_head; }
  double total() const { return weights() + kv; }
};

// Bytes per element of each group of decoder weights: 2 throughout for bf16, or as a loaded
// model stores them (an int8 folder keeps its routers in bf16; an int8 row's float32 scale counts).
struct ElementBytes {
  double attention = 2, dense_mlp = 2, router = 2, experts = 2, shared = 2, lm_head = 2;
  static ElementBytes uniform(double b) { return {b, b, b, b, b, b}; }
  static ElementBytes of(const uocr::DecoderWeights& w) {
    auto bytes = [](const uocr::TensorView* t) {
      return double(uocr::dtype_size(t->dtype)) + (t->row_scale ? double(sizeof(float)) / double(t->dim(1)) : 0.0);
    };
    ElementBytes e;
    for (const uocr::DecoderLayerWeights& l : w.layers) {
      e.attention = bytes(l.q.weight);
      if (l.moe) {
        e.router = bytes(l.router.weight);
        e.experts = bytes(l.experts.front().gate.weight);
        if (l.has_shared) e.shared = bytes(l.shared.gate.weight);
      } else {
        e.dense_mlp = bytes(l.dense.gate.weight);
      }
    }
    e.lm_head = bytes(w.lm_head);
    return e;
  }
};

// Active weights of one token, plus the float32 keys and values of `kv_rows` cached rows in every
// layer (reference + R-SWA window).
inline DecodeBytes decode_bytes(const uocr::DecoderConfig& d, const ElementBytes& e, int64_t kv_rows) {
  DecodeBytes b;
  const double h = d.hidden, qr = double(d.heads) * d.head_dim, kr = double(d.kv_heads) * d.head_dim;
  for (int l = 0; l < d.layers; ++l) {
    b.attention += e.attention * (h * qr + 2 * h * kr + qr * h);  // q, k, v, o
    if (d.is_moe_layer(l)) {
      b.router += e.router * d.n_routed_experts * h;
      b.experts += e.experts * d.experts_per_token * 3 * h * d.moe_intermediate;
      b.shared += e.shared * 3 * h * double(d.moe_intermediate) * d.n_shared_experts;
    } else {
      b.dense_mlp += e.dense_mlp * 3 * h * d.intermediate;
    }
  }
  b.lm_head = e.lm_head * double(d.vocab) * h;
  b.kv = double(kv_rows) * d.layers * 2 * kr * sizeof(float);
  return b;
}

}  // namespace uocr_bench
