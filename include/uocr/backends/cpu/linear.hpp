// CPU matrix kernels over checkpoint weights stored as bf16/f16/f32 or int8 with row scales.
// Weights stay in their mapped form and all arithmetic is float32 (bf16 -> f32 and int8 -> f32
// widening is exact; an int8 row's dot product is multiplied by its scale at the end, so its
// result is s · Σ q·x whichever kernel runs). linear() picks:
//  - m <= 4 rows (decode, memory-bound): each weight row streamed once for all m inputs; with
//    AVX-512, 4 weight rows widened in registers x m inputs, software prefetch one block ahead;
//  - 4 < m <= kSmallGemmRows, bf16 or int8 (MoE experts in a prefill): 4 weight rows widened into an
//    L1 buffer at a time, then a 4 x 4 dot kernel over the inputs; or, asked for
//    Precision::bf16 with bf16 dot products, gemm_bf16_small_m() (gemm_bf16.hpp);
//  - larger m (vision, prefill projections): the weight widened to float32 once, then
//    independent 512 x 256 output tiles, each a single-threaded Eigen GEMM; or, asked for
//    Precision::bf16 on a CPU with bf16 dot products, gemm_bf16() (gemm_bf16.hpp).
// Work goes to the OpenMP threads in blocks/tiles handed out dynamically (a descheduled thread's
// share goes to the running one); the bias is added inside each block. linear_batch() runs
// several small products in one parallel region. docs/PERFORMANCE.md has the measurements.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include <Eigen/Core>

#if defined(__AVX512F__) && defined(__AVX512BW__)
#include <immintrin.h>
#define UOCR_CPU_AVX512 1
#endif

#include "uocr/backends/cpu/gemm_bf16.hpp"
#include "uocr/core/dtype.hpp"
#include "uocr/core/precision.hpp"
#include "uocr/io/safetensors.hpp"
#include "uocr/model/weights.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN
namespace cpu {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixMap = Eigen::Map<RowMatrix>;
using ConstMatrixMap = Eigen::Map<const RowMatrix>;

namespace detail {

inline float widen_bf16(uint16_t h) {
  uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

#ifdef UOCR_CPU_AVX512
// 16 bf16 -> 16 float32 (exact: the bf16 bits are the float's high half).
inline __m512 load_bf16(const uint16_t* p) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16));
}
inline __m512 load_bf16(const uint16_t* p, __mmask16 mask) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, p)), 16));
}
inline __m512 load_f32(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 load_f32(const float* p, __mmask16 mask) { return _mm512_maskz_loadu_ps(mask, p); }
// 16 int8 -> 16 float32 (exact).
inline __m512 load_i8(const int8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))));
}
inline __m512 load_i8(const int8_t* p, __mmask16 mask) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(mask, p)));
}
// 16 weights of any stored type as float32.
inline __m512 load_weights(const uint16_t* p) { return load_bf16(p); }
inline __m512 load_weights(const uint16_t* p, __mmask16 mask) { return load_bf16(p, mask); }
inline __m512 load_weights(const float* p) { return load_f32(p); }
inline __m512 load_weights(const float* p, __mmask16 mask) { return load_f32(p, mask); }
inline __m512 load_weights(const int8_t* p) { return load_i8(p); }
inline __m512 load_weights(const int8_t* p, __mmask16 mask) { return load_i8(p, mask); }
#endif

inline float widen_weight(uint16_t w) { return widen_bf16(w); }
inline float widen_weight(float w) { return w; }
inline float widen_weight(int8_t w) { return float(w); }
// A row's dot product times its int8 scale (none for float weights).
inline float scaled(float dot, const float* scale, int64_t row) { return scale ? dot * scale[row] : dot; }

// n bf16 or int8 values -> float32 (int8 unscaled).
template <class T>
inline void widen_block(const T* src, float* dst, int64_t n) {
  int64_t i = 0;
#ifdef UOCR_CPU_AVX512
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(dst + i, load_weights(src + i));
#endif
  for (; i < n; ++i) dst[i] = widen_weight(src[i]);
}

// Element range [offset, offset + n) of a weight tensor as float32 (int8 times its rows' scales).
inline void weight_to_f32(const TensorView& w, int64_t offset, int64_t n, float* out) {
  if (w.dtype == DType::bf16)
    widen_block(reinterpret_cast<const uint16_t*>(w.data) + offset, out, n);
  else
    w.read_f32(offset, n, out);
}

#ifdef UOCR_CPU_AVX512
// y[i*ldy + j] = x_i · w_j (· scale[j] when given: int8 rows) for weight rows j in [j0, j1) and
// M input rows (M <= 4): four weight rows at a time, 16 columns per step, 4·M accumulators; the
// tail of k goes masked. Streamed: w is read from memory (prefetched ahead); otherwise it is a
// small buffer already in L1, with nothing after it worth fetching.
template <int M, bool Streamed, class T>
inline void rows_dot_avx512(const T* w, const float* x, int64_t k, int64_t j0, int64_t j1, float* y, int64_t ldy,
                            const float* scale) {
  const int64_t kv = k / 16 * 16;
  const __mmask16 tail = __mmask16((1u << (k - kv)) - 1u);
  // The weight stream is read once. Software prefetch keeps more lines in flight than the
  // hardware prefetcher alone (the gain: docs/PERFORMANCE.md): the same columns of the next
  // block of 4 rows into L1, and of the block after it into L2. (A distance inside the current
  // block only re-requests lines the neighbouring row's stream is already loading.)
  const int64_t near_bytes = 4 * k * int64_t(sizeof(T)), far_bytes = 2 * near_bytes;
  int64_t j = j0;
  for (; j + 4 <= j1; j += 4) {
    const T* w0 = w + j * k;
    __m512 acc[4][M];
    for (int r = 0; r < 4; ++r)
      for (int i = 0; i < M; ++i) acc[r][i] = _mm512_setzero_ps();
    int64_t c = 0;
    for (; c + 32 <= kv; c += 32) {  // 32 columns: one cache line of each bf16 row
      if (Streamed && (sizeof(T) != 1 || c % 64 == 0))  // int8: a line holds 64 columns
        for (int r = 0; r < 4; ++r) {
          const char* p = reinterpret_cast<const char*>(w0 + r * k + c);
          _mm_prefetch(p + near_bytes, _MM_HINT_T0);
          _mm_prefetch(p + far_bytes, _MM_HINT_T1);
          if constexpr (sizeof(T) == 4) {
            _mm_prefetch(p + near_bytes + 64, _MM_HINT_T0);
            _mm_prefetch(p + far_bytes + 64, _MM_HINT_T1);
          }
        }
      __m512 xa[M], xb[M];
      for (int i = 0; i < M; ++i) {
        xa[i] = _mm512_loadu_ps(x + i * k + c);
        xb[i] = _mm512_loadu_ps(x + i * k + c + 16);
      }
      for (int r = 0; r < 4; ++r) {
        const __m512 wa = load_weights(w0 + r * k + c), wb = load_weights(w0 + r * k + c + 16);
        for (int i = 0; i < M; ++i) acc[r][i] = _mm512_fmadd_ps(wb, xb[i], _mm512_fmadd_ps(wa, xa[i], acc[r][i]));
      }
    }
    for (; c < kv; c += 16) {
      __m512 xv[M];
      for (int i = 0; i < M; ++i) xv[i] = _mm512_loadu_ps(x + i * k + c);
      for (int r = 0; r < 4; ++r) {
        const __m512 wv = load_weights(w0 + r * k + c);
        for (int i = 0; i < M; ++i) acc[r][i] = _mm512_fmadd_ps(wv, xv[i], acc[r][i]);
      }
    }
    if (kv < k) {
      __m512 xv[M];
      for (int i = 0; i < M; ++i) xv[i] = _mm512_maskz_loadu_ps(tail, x + i * k + kv);
      for (int r = 0; r < 4; ++r) {
        const __m512 wv = load_weights(w0 + r * k + kv, tail);
        for (int i = 0; i < M; ++i) acc[r][i] = _mm512_fmadd_ps(wv, xv[i], acc[r][i]);
      }
    }
    for (int r = 0; r < 4; ++r)
      for (int i = 0; i < M; ++i) y[i * ldy + j + r] = scaled(_mm512_reduce_add_ps(acc[r][i]), scale, j + r);
  }
  for (; j < j1; ++j) {  // leftover rows, one at a time
    const T* wr = w + j * k;
    __m512 acc[M];
    for (int i = 0; i < M; ++i) acc[i] = _mm512_setzero_ps();
    for (int64_t c = 0; c < k; c += 16) {
      const __mmask16 mk = c + 16 <= k ? __mmask16(0xffff) : tail;
      const __m512 wv = load_weights(wr + c, mk);
      for (int i = 0; i < M; ++i) acc[i] = _mm512_fmadd_ps(wv, _mm512_maskz_loadu_ps(mk, x + i * k + c), acc[i]);
    }
    for (int i = 0; i < M; ++i) y[i * ldy + j] = scaled(_mm512_reduce_add_ps(acc[i]), scale, j);
  }
}
#endif

// Portable version of the same contract.
template <class T>
inline void rows_dot_portable(const T* w, const float* x, int64_t m, int64_t k, int64_t j0, int64_t j1, float* y,
                              int64_t ldy, const float* scale) {
  for (int64_t j = j0; j < j1; ++j) {
    const T* wr = w + j * k;
    for (int64_t i = 0; i < m; ++i) {
      const float* xi = x + i * k;
      float s = 0.f;
#pragma omp simd reduction(+ : s)
      for (int64_t c = 0; c < k; ++c) s += widen_weight(wr[c]) * xi[c];
      y[i * ldy + j] = scaled(s, scale, j);
    }
  }
}

template <class T>
inline void rows_dot(const T* w, const float* x, int64_t m, int64_t k, int64_t j0, int64_t j1, float* y, int64_t ldy,
                     const float* scale) {
#ifdef UOCR_CPU_AVX512
  switch (m) {
    case 1: return rows_dot_avx512<1, true>(w, x, k, j0, j1, y, ldy, scale);
    case 2: return rows_dot_avx512<2, true>(w, x, k, j0, j1, y, ldy, scale);
    case 3: return rows_dot_avx512<3, true>(w, x, k, j0, j1, y, ldy, scale);
    case 4: return rows_dot_avx512<4, true>(w, x, k, j0, j1, y, ldy, scale);
    default: break;
  }
#endif
  rows_dot_portable(w, x, m, k, j0, j1, y, ldy, scale);
}

// Decode path: y[m, n] = x[m, k] · W[n, k]ᵀ for m <= 4, rows of W handed to the threads in
// blocks of 64 (a multiple of the kernel's 4) when the matrix is big enough to pay for it.
// Guided hand-out: a thread claims a run of consecutive blocks (a share of what is left, the
// runs shrinking), so the kernel's prefetch of the next rows reads rows the same thread uses
// next; runs are claimed as threads arrive, so on a shared machine a descheduled thread's share
// still goes to the running one (the gain over blocks handed out one by one: docs/PERFORMANCE.md).
template <class T>
inline void matvec(const T* w, const float* x, int64_t m, int64_t n, int64_t k, float* y, const float* bias,
                   const float* scale) {
  constexpr int64_t block = 64;
  const int64_t blocks = (n + block - 1) / block;
#pragma omp parallel for schedule(guided) if (n * k >= (int64_t(1) << 17) && blocks > 1)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t j0 = b * block, j1 = std::min(n, j0 + block);
    rows_dot(w, x, m, k, j0, j1, y, n, scale);
    add_bias(y, m, n, j0, j1, bias);
  }
}

#ifdef UOCR_CPU_AVX512
// Small-m GEMM (MoE experts in a prefill see a few dozen rows each): blocks of 4 weight rows
// are widened once into an L1-resident float32 buffer, then every group of 4 input rows is
// multiplied against them with the 4x4 dot kernel. No packing of x and no O(N·K) f32 panel
// written to memory, which is why it beats widening panels for Eigen at small m
// (docs/PERFORMANCE.md).
// small_m_rows: weight rows [j0, j1) of that product (bf16 or int8 with row scales); wb is
// scratch of 4·k floats.
template <class T>
inline void small_m_rows(const T* w, const float* x, int64_t m, int64_t n, int64_t k, int64_t j0, int64_t j1, float* y,
                         float* wb, const float* scale) {
  for (int64_t jr = j0; jr < j1; jr += 4) {
    const int64_t rows = std::min<int64_t>(4, j1 - jr);
    widen_block(w + jr * k, wb, rows * k);
    float* yb = y + jr;
    const float* sb = scale ? scale + jr : nullptr;
    int64_t i = 0;
    for (; i + 4 <= m; i += 4) rows_dot_avx512<4, false>(wb, x + i * k, k, 0, rows, yb + i * n, n, sb);
    switch (m - i) {
      case 1: rows_dot_avx512<1, false>(wb, x + i * k, k, 0, rows, yb + i * n, n, sb); break;
      case 2: rows_dot_avx512<2, false>(wb, x + i * k, k, 0, rows, yb + i * n, n, sb); break;
      case 3: rows_dot_avx512<3, false>(wb, x + i * k, k, 0, rows, yb + i * n, n, sb); break;
      default: break;
    }
  }
}

template <class T>
inline void gemm_small_m(const T* w, const float* x, int64_t m, int64_t n, int64_t k, float* y, const float* bias,
                         const float* scale) {
  const int64_t blocks = (n + 15) / 16;
#pragma omp parallel if (m * n * k >= (int64_t(1) << 20))
  {
    thread_local std::vector<float> wbuf;
    if (wbuf.size() < size_t(4 * k)) wbuf.resize(size_t(4 * k));
#pragma omp for schedule(dynamic)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t j0 = b * 16, j1 = std::min(n, j0 + 16);
      small_m_rows(w, x, m, n, k, j0, j1, y, wbuf.data(), scale);
      add_bias(y, m, n, j0, j1, bias);
    }
  }
}
#endif

#define UOCR_CPU_TILED_GEMM 1  // bench/roofline.hpp measures the GEMM peak with it too
using TileMap = Eigen::Map<RowMatrix, 0, Eigen::OuterStride<>>;

// y[m, n] = x[m, k] · W[n, k]ᵀ for large m (vision, prefill): W widened to float32 a panel
// at a time, then independent output tiles of 512 x 256, each one single-threaded Eigen GEMM
// (Eigen runs serially inside a parallel region), handed out dynamically. Tiles lose some
// single-thread efficiency against one big GEMM but need no inter-thread synchronisation:
// Eigen's own parallel GEMM busy-waits on its partner's packed blocks, which on a shared,
// oversubscribed machine costs whole scheduler slices.
inline void gemm_tiles(const float* x, int64_t m, const TensorView& w, float* y, const float* bias = nullptr) {
  constexpr int64_t tm = 512, tn = 256;
  const int64_t n = w.dim(0), k = w.dim(1);
  const bool widen = w.dtype != DType::f32;
  // Panel rows: the whole weight when it has <= 4M values (every vision weight), else a
  // multiple of the tile width (prefill lm_head with all logits).
  const int64_t panel = widen ? std::min(n, std::max<int64_t>(tn, (int64_t(1) << 22) / std::max<int64_t>(k, 1) / tn * tn)) : n;
  thread_local std::vector<float> buf;
  if (widen && buf.size() < size_t(panel * k)) buf.resize(size_t(panel * k));
  float* const wbuf = buf.data();  // thread_local: the team must use this thread's copy
  for (int64_t p0 = 0; p0 < n; p0 += panel) {
    const int64_t pn = std::min(panel, n - p0);
    const float* wf = widen ? wbuf : reinterpret_cast<const float*>(w.data) + p0 * k;
    const int64_t mt = (m + tm - 1) / tm, nt = (pn + tn - 1) / tn;
    constexpr int64_t chunk = int64_t(1) << 16;
    const int64_t chunks = widen ? (pn * k + chunk - 1) / chunk : 0;
#pragma omp parallel if (m * pn * k >= (int64_t(1) << 22))
    {
#pragma omp for schedule(dynamic, 4)
      for (int64_t c = 0; c < chunks; ++c)
        weight_to_f32(w, p0 * k + c * chunk, std::min(chunk, pn * k - c * chunk), wbuf + c * chunk);
#pragma omp for schedule(dynamic)
      for (int64_t t = 0; t < mt * nt; ++t) {
        const int64_t i0 = (t / nt) * tm, j0 = (t % nt) * tn;
        const int64_t a = std::min(tm, m - i0), b = std::min(tn, pn - j0);
        TileMap(y + i0 * n + p0 + j0, a, b, Eigen::OuterStride<>(n)).noalias() =
            ConstMatrixMap(x + i0 * k, a, k) * ConstMatrixMap(wf + j0 * k, b, k).transpose();
        add_bias(y + i0 * n, a, n, p0 + j0, p0 + j0 + b, bias);
      }
    }
  }
}

}  // namespace detail

// Below this many input rows the small-m kernel beats panel widening + Eigen on AVX-512 (the
// measured crossover lies above 128 rows: docs/PERFORMANCE.md).
inline constexpr int64_t kSmallGemmRows = 128;

// Input rows up to which linear() gives each row exactly the bits it gets alone (m = 1): the
// mat-vec (m <= 4) and, with AVX-512, the bf16 small-m kernel keep one accumulator chain per row
// whatever m is; the Eigen tiles (and f16 weights, which always take them) do not.
// Decoder::decode_batch groups its rows by this.
inline int64_t row_exact_rows(const TensorView& w) {
#ifdef UOCR_CPU_AVX512
  if (w.dtype == DType::bf16 || w.dtype == DType::i8) return kSmallGemmRows;
#endif
  return w.dtype == DType::f16 ? 1 : 4;
}

// y[M, N] = x[M, K] · W[N, K]ᵀ (+ bias[N]). `precision` applies from m = 5 (a decode step's
// mat-vec stays float32), to bf16 weights below kSmallGemmRows; bf16 runs in float32 where the
// CPU has no bf16 dot products. Int8 weights (with row scales) take the mat-vec and small-m
// kernels; above kSmallGemmRows they are dequantized like any other type.
inline void linear(const float* x, int64_t m, const TensorView& w, const TensorView* bias, float* y,
                   Precision precision = Precision::f32) {
  const int64_t n = w.dim(0), k = w.dim(1);
  const float* bv = nullptr;  // the bias goes in with each block/tile: no extra parallel region
  if (bias) {
    thread_local std::vector<float> b;
    if (b.size() < size_t(n)) b.resize(size_t(n));
    detail::weight_to_f32(*bias, 0, n, b.data());
    bv = b.data();  // thread_local: the team must read this thread's copy
  }
  if (m <= 4 && w.dtype == DType::bf16) {
    detail::matvec(reinterpret_cast<const uint16_t*>(w.data), x, m, n, k, y, bv, nullptr);
  } else if (m <= 4 && w.dtype == DType::f32) {
    detail::matvec(reinterpret_cast<const float*>(w.data), x, m, n, k, y, bv, nullptr);
  } else if (m <= 4 && w.dtype == DType::i8) {
    detail::matvec(reinterpret_cast<const int8_t*>(w.data), x, m, n, k, y, bv, w.row_scale);
#ifdef UOCR_CPU_BF16_KERNEL
  } else if (precision == Precision::bf16 && m <= kSmallGemmRows && w.dtype == DType::bf16 && bf16_compute_available()) {
    gemm_bf16_small_m(x, m, reinterpret_cast<const uint16_t*>(w.data), n, k, y, bv);
#endif
#ifdef UOCR_CPU_AVX512
  } else if (m <= kSmallGemmRows && w.dtype == DType::bf16) {
    detail::gemm_small_m(reinterpret_cast<const uint16_t*>(w.data), x, m, n, k, y, bv, nullptr);
  } else if (m <= kSmallGemmRows && w.dtype == DType::i8) {
    detail::gemm_small_m(reinterpret_cast<const int8_t*>(w.data), x, m, n, k, y, bv, w.row_scale);
#endif
#ifdef UOCR_CPU_BF16_KERNEL
  } else if (precision == Precision::bf16 && m > kSmallGemmRows && bf16_compute_available()) {
    gemm_bf16(x, m, w, y, bv);
#endif
  } else {
    detail::gemm_tiles(x, m, w, y, bv);
  }
}

// Several independent products y_j[m_j, N_j] = x_j[m_j, K_j] · W_jᵀ (+ bias_j) in ONE parallel
// region: blocks of 64 weight rows of every job with m_j <= 4 (any weight dtype but f16) or, in
// f32, 4 < m_j <= kSmallGemmRows (bf16, int8) are handed out across the threads as matvec's are; other
// jobs run afterwards, one by one, through linear(). Results are bit-identical to
// linear(..., precision) per job.
// Meant for the decoder: a decode step otherwise opens ~300 parallel regions (q, k, v, o,
// 6 experts x 3, shared x 3 per layer) and on a shared machine each fork/join can cost a
// scheduler slice; batching q/k/v, all gate+up, then all downs leaves ~5 per layer. A prefill
// can batch its per-expert GEMMs (a few dozen rows each) the same way.
#define UOCR_CPU_LINEAR_BATCH 1
struct LinearJob {
  const float* x = nullptr;
  int64_t m = 0;
  const TensorView* w = nullptr;
  const TensorView* bias = nullptr;
  float* y = nullptr;
};

inline void linear_batch(const LinearJob* jobs, size_t count, Precision precision = Precision::f32) {
  constexpr int64_t block = 64;
  auto batched = [&](const LinearJob& jb) {
#ifdef UOCR_CPU_AVX512
    if (jb.m > 4 && jb.m <= kSmallGemmRows)
      return precision == Precision::f32 && (jb.w->dtype == DType::bf16 || jb.w->dtype == DType::i8);
#endif
    return jb.m > 0 && jb.m <= 4 && jb.w->dtype != DType::f16;
  };
  std::vector<int64_t> first(count + 1, 0);  // first block of each job (batched ones only)
  for (size_t j = 0; j < count; ++j)
    first[j + 1] = first[j] + (batched(jobs[j]) ? (jobs[j].w->dim(0) + block - 1) / block : 0);
  const int64_t total = first[count];
#pragma omp parallel if (total > 1)
  {
#ifdef UOCR_CPU_AVX512
    thread_local std::vector<float> wbuf;
#endif
#pragma omp for schedule(guided)  // as in matvec
    for (int64_t b = 0; b < total; ++b) {
      const size_t j = size_t(std::upper_bound(first.begin(), first.end(), b) - first.begin() - 1);
      const LinearJob& jb = jobs[j];
      const int64_t n = jb.w->dim(0), k = jb.w->dim(1);
      const int64_t j0 = (b - first[j]) * block, j1 = std::min(n, j0 + block);
      const float* scale = jb.w->row_scale;
      if (jb.m <= 4) {
        if (jb.w->dtype == DType::bf16)
          detail::rows_dot(reinterpret_cast<const uint16_t*>(jb.w->data), jb.x, jb.m, k, j0, j1, jb.y, n, scale);
        else if (jb.w->dtype == DType::i8)
          detail::rows_dot(reinterpret_cast<const int8_t*>(jb.w->data), jb.x, jb.m, k, j0, j1, jb.y, n, scale);
        else
          detail::rows_dot(reinterpret_cast<const float*>(jb.w->data), jb.x, jb.m, k, j0, j1, jb.y, n, scale);
      } else {
#ifdef UOCR_CPU_AVX512
        if (wbuf.size() < size_t(4 * k)) wbuf.resize(size_t(4 * k));
        if (jb.w->dtype == DType::i8)
          detail::small_m_rows(reinterpret_cast<const int8_t*>(jb.w->data), jb.x, jb.m, n, k, j0, j1, jb.y, wbuf.data(),
                               scale);
        else
          detail::small_m_rows(reinterpret_cast<const uint16_t*>(jb.w->data), jb.x, jb.m, n, k, j0, j1, jb.y,
                               wbuf.data(), scale);
#endif
      }
      if (jb.bias) {
        float bv[block];
        detail::weight_to_f32(*jb.bias, j0, j1 - j0, bv);
        for (int64_t i = 0; i < jb.m; ++i)
          for (int64_t r = j0; r < j1; ++r) jb.y[i * n + r] += bv[r - j0];
      }
    }
  }
  for (size_t j = 0; j < count; ++j)
    if (!batched(jobs[j]) && jobs[j].m > 0) linear(jobs[j].x, jobs[j].m, *jobs[j].w, jobs[j].bias, jobs[j].y, precision);
}

inline void linear(const float* x, int64_t m, const LinearWeights& l, float* y, Precision precision = Precision::f32) {
  linear(x, m, *l.weight, l.bias, y, precision);
}

inline std::vector<float> linear(const std::vector<float>& x, int64_t m, const LinearWeights& l,
                                 Precision precision = Precision::f32) {
  std::vector<float> y(size_t(m * l.out()));
  linear(x.data(), m, l, y.data(), precision);
  return y;
}

}  // namespace cpu
UOCR_NAMESPACE_END
