// bf16 compute for the large products (vision encoder, prefill): y[m, n] = x[m, k] · W[n, k]ᵀ
// with x rounded to bf16 (round to nearest even, as torch's autocast casts a linear's input),
// the weight in bf16 (as stored; f32/f16 weights are rounded too) and float32 accumulation.
// Where the CPU has AMX (Sapphire Rapids and later), by its tile unit (TDPBF16PS: a 16 x 16
// float32 tile += 16 x 32 bf16 by 32 x 16 bf16 per instruction); else by AVX-512 BF16 dot
// products (VDPBF16PS: two products per float32 lane per instruction). The kernels are compiled
// for those instruction sets by target attribute and called only when the CPU reports them
// (bf16_compute_available(), amx_bf16_available()), so a binary built for an older CPU still runs
// and falls back to float32. UOCR_CPU_AMX=0 in the environment keeps AMX off.
#pragma once
#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "uocr/core/dtype.hpp"
#include "uocr/core/error.hpp"
#include "uocr/io/safetensors.hpp"
#include "uocr/version.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define UOCR_CPU_BF16_KERNEL 1
#define UOCR_BF16_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#if defined(__linux__) && (defined(__clang__) || __GNUC__ >= 11)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#define UOCR_CPU_AMX_KERNEL 1
#define UOCR_AMX_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,amx-tile,amx-bf16")))
#endif
#endif

UOCR_NAMESPACE_BEGIN
namespace cpu {

// y[i*n + j] += bias[j] for rows i < m and columns [j0, j1) (bias may be null): every kernel
// adds the bias to its own block of the output (here and in linear.hpp).
inline void add_bias(float* y, int64_t m, int64_t n, int64_t j0, int64_t j1, const float* bias) {
  if (!bias) return;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = j0; j < j1; ++j) y[i * n + j] += bias[j];
}

// True when this CPU runs AVX-512 BF16 dot products (checked once).
inline bool bf16_compute_available() {
#ifdef UOCR_CPU_BF16_KERNEL
  static const bool available = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
  }();
  return available;
#else
  return false;
#endif
}

// True when this CPU has AMX tiles with bf16 and the kernel lets this process use them (Linux
// hands out the tile state on request, once per process); checked once. UOCR_CPU_AMX=0 says no.
inline bool amx_bf16_available() {
#ifdef UOCR_CPU_AMX_KERNEL
  static const bool available = [] {
    const char* env = std::getenv("UOCR_CPU_AMX");
    if (env && std::strcmp(env, "0") == 0) return false;
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;  // CPUID leaf 7: EDX bit 22 AMX-BF16, bit 24 AMX-TILE
    if (!bf16_compute_available() || !__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
    if (!(edx & (1u << 22)) || !(edx & (1u << 24))) return false;
    constexpr long kRequestPermission = 0x1023;  // ARCH_REQ_XCOMP_PERM
    constexpr long kTileData = 18;               // XFEATURE_XTILEDATA
    return syscall(SYS_arch_prctl, kRequestPermission, kTileData) == 0;
  }();
  return available;
#else
  return false;
#endif
}

// What runs a bf16 product: AVX-512 BF16 vector dot products, or AMX tiles.
enum class Bf16Unit { vector, amx };

#ifdef UOCR_CPU_BF16_KERNEL
#ifdef UOCR_CPU_AMX_KERNEL
// Palette 1 with the eight tiles the kernels here use, each 16 rows of 64 bytes.
struct alignas(64) AmxTileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t bytes_per_row[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16, 16};
};

// The calling thread's tiles, configured for its lifetime (tile state is per thread).
struct AmxTiles {
  UOCR_AMX_TARGET AmxTiles() {
    const AmxTileConfig config;
    _tile_loadconfig(&config);
  }
  UOCR_AMX_TARGET ~AmxTiles() { _tile_release(); }
  AmxTiles(const AmxTiles&) = delete;
  AmxTiles& operator=(const AmxTiles&) = delete;
};
#endif

namespace bf16_detail {

// Rows of the micro-kernel (x rows per step) and its columns (two panels of 16 weight rows):
// 2 x 12 accumulators, 2 weight vectors and a broadcast use 27 of the 32 vector registers.
inline constexpr int kRows = 12;
inline constexpr int64_t kPanel = 16;
// A thread's output tile and the k-pairs of one pass over it: the tile's 32-column weight block
// of one pass (32 x 256 pairs x 4 bytes = 32 KiB) stays in L1, its x rows in L2.
inline constexpr int64_t kTileRows = 16 * kRows, kTileCols = 256, kPassPairs = 256;

// Rows [r0, r1) of x[., k] rounded to bf16 into out[., kpad] (kpad >= k, even; the pad zero).
UOCR_BF16_TARGET inline void round_rows(const float* x, int64_t k, int64_t kpad, int64_t r0, int64_t r1, uint16_t* out) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* src = x + r * k;
    uint16_t* dst = out + r * kpad;
    int64_t c = 0;
    for (; c + 32 <= k; c += 32) {
      const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + c + 16), _mm512_loadu_ps(src + c));
      _mm512_storeu_si512(dst + c, (__m512i)v);
    }
    for (; c < k; ++c) dst[c] = f32_to_bf16(src[c]);
    std::fill(dst + k, dst + kpad, uint16_t(0));
  }
}

// Weight rows of panel p (rows 16p .. 16p + 15) as pairs: out[kp * 16 + lane] holds row
// 16p + lane's columns 2kp and 2kp + 1 (the operand layout of VDPBF16PS); rows past n are zero.
UOCR_BF16_TARGET inline void pack_panel(const TensorView& w, int64_t p, int64_t kpairs, uint32_t* out, std::vector<float>& row) {
  const int64_t n = w.dim(0), k = w.dim(1);
  if (w.dtype == DType::bf16 && k % 2 == 0 && (k / 2) * (kPanel - 1) <= INT32_MAX) {
    // bf16 rows of even length are rows of k / 2 pairs, and the panel is their transpose: one
    // gather of the 16 rows' pair kp for each kp (the rows past n masked off, hence zero).
    const int64_t lanes = std::clamp<int64_t>(n - p * kPanel, 0, kPanel);
    const __mmask16 live = __mmask16((1u << lanes) - 1u);
    const __m512i index = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                             _mm512_set1_epi32(int32_t(k / 2)));
    const uint8_t* panel = w.data + p * kPanel * k * int64_t(sizeof(uint16_t));
    for (int64_t kp = 0; kp < k / 2; ++kp)
      _mm512_storeu_si512(out + kp * kPanel,
                          _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, index, panel + kp * int64_t(sizeof(uint32_t)), 4));
    std::memset(out + (k / 2) * kPanel, 0, size_t((kpairs - k / 2) * kPanel) * sizeof(uint32_t));
    return;
  }
  std::memset(out, 0, size_t(kpairs * kPanel) * sizeof(uint32_t));
  for (int64_t lane = 0; lane < kPanel && p * kPanel + lane < n; ++lane) {
    const int64_t j = p * kPanel + lane;
    const uint16_t* src = nullptr;
    if (w.dtype == DType::bf16) {
      src = reinterpret_cast<const uint16_t*>(w.data) + j * k;
    } else {
      row.resize(size_t(k));
      w.read_f32(j * k, k, row.data());
    }
    for (int64_t c = 0; c < k; ++c) {
      const uint32_t v = src ? src[c] : f32_to_bf16(row[size_t(c)]);
      out[(c / 2) * kPanel + lane] |= v << (16 * (c % 2));
    }
  }
}

// c[R rows, cols <= 32] (+)= a[R rows, pairs) · the two panels b0, b1 over `pairs` k-pairs.
template <int R>
UOCR_BF16_TARGET inline void micro(const uint16_t* a, int64_t lda, const uint32_t* b0, const uint32_t* b1, int64_t pairs,
                                   float* c, int64_t ldc, int cols, bool accumulate) {
  __m512 acc0[R], acc1[R];
  for (int i = 0; i < R; ++i) acc0[i] = acc1[i] = _mm512_setzero_ps();
  for (int64_t kp = 0; kp < pairs; ++kp) {
    const __m512i w0 = _mm512_loadu_si512(b0 + kp * kPanel), w1 = _mm512_loadu_si512(b1 + kp * kPanel);
    for (int i = 0; i < R; ++i) {
      int32_t pair;
      std::memcpy(&pair, a + i * lda + 2 * kp, sizeof(pair));
      const __m512i xi = _mm512_set1_epi32(pair);
      acc0[i] = _mm512_dpbf16_ps(acc0[i], (__m512bh)xi, (__m512bh)w0);
      acc1[i] = _mm512_dpbf16_ps(acc1[i], (__m512bh)xi, (__m512bh)w1);
    }
  }
  const __mmask16 m0 = __mmask16(cols >= 16 ? 0xffffu : (1u << cols) - 1u);
  const __mmask16 m1 = __mmask16(cols >= 32 ? 0xffffu : cols <= 16 ? 0u : (1u << (cols - 16)) - 1u);
  for (int i = 0; i < R; ++i) {
    float* ci = c + i * ldc;
    if (accumulate) {
      acc0[i] = _mm512_add_ps(acc0[i], _mm512_maskz_loadu_ps(m0, ci));
      acc1[i] = _mm512_add_ps(acc1[i], _mm512_maskz_loadu_ps(m1, ci + 16));
    }
    _mm512_mask_storeu_ps(ci, m0, acc0[i]);
    _mm512_mask_storeu_ps(ci + 16, m1, acc1[i]);
  }
}

template <int R = kRows>
UOCR_BF16_TARGET inline void micro_rows(int rows, const uint16_t* a, int64_t lda, const uint32_t* b0, const uint32_t* b1,
                                        int64_t pairs, float* c, int64_t ldc, int cols, bool accumulate) {
  if constexpr (R > 1) {
    if (rows < R) return micro_rows<R - 1>(rows, a, lda, b0, b1, pairs, c, ldc, cols, accumulate);
  }
  micro<R>(a, lda, b0, b1, pairs, c, ldc, cols, accumulate);
}

// One output tile: rows [i0, i1), columns [j0, j1) (j0 a multiple of 32), every k-pair.
UOCR_BF16_TARGET inline void tile(const uint16_t* a, int64_t kpad, const uint32_t* packed, int64_t kpairs, int64_t n,
                                  int64_t i0, int64_t i1, int64_t j0, int64_t j1, float* y) {
  for (int64_t k0 = 0; k0 < kpairs; k0 += kPassPairs) {
    const int64_t pairs = std::min(kPassPairs, kpairs - k0);
    for (int64_t j = j0; j < j1; j += 2 * kPanel) {
      const uint32_t* b0 = packed + (j / kPanel * kpairs + k0) * kPanel;
      const int cols = int(std::min<int64_t>(2 * kPanel, j1 - j));
      // A second panel past the matrix's end is never stored: any readable one will do.
      const uint32_t* b1 = cols > kPanel ? b0 + kpairs * kPanel : b0;
      for (int64_t i = i0; i < i1; i += kRows)
        micro_rows(int(std::min<int64_t>(kRows, i1 - i)), a + i * kpad + 2 * k0, kpad, b0, b1, pairs, y + i * n + j, n,
                   cols, k0 > 0);
    }
  }
}

// The sum of v's 16 lanes (halves, then quarters, then within 128 bits). The zero-masked
// shuffle and extract, because GCC 12 warns about the undefined vector the plain ones start from.
UOCR_BF16_TARGET inline float lane_sum(__m512 v) {
  const __mmask16 all = 0xFFFF;
  v = _mm512_add_ps(v, _mm512_maskz_shuffle_f32x4(all, v, v, 0x4E));
  v = _mm512_add_ps(v, _mm512_maskz_shuffle_f32x4(all, v, v, 0xB1));
  __m128 q = _mm512_maskz_extractf32x4_ps(__mmask8(0xF), v, 0);
  q = _mm_add_ps(q, _mm_movehl_ps(q, q));
  q = _mm_add_ss(q, _mm_movehdup_ps(q));
  return _mm_cvtss_f32(q);
}

// y[i * n + r] = a_i · w_r for M rounded input rows (stride ka, zero past k) and R weight rows
// (bf16, stride k): a row's adjacent bf16 elements are already the pairs VDPBF16PS multiplies, so
// nothing is packed; 16-lane partial sums per (i, r), added up at the end.
template <int M, int R>
UOCR_BF16_TARGET inline void dot_block(const uint16_t* a, int64_t ka, const uint16_t* w, int64_t k, int64_t n, float* y) {
  __m512 acc[M][R];
  for (int i = 0; i < M; ++i)
    for (int r = 0; r < R; ++r) acc[i][r] = _mm512_setzero_ps();
  for (int64_t c = 0; c < k; c += 32) {
    const __mmask32 live = k - c >= 32 ? ~__mmask32(0) : __mmask32((uint64_t(1) << (k - c)) - 1);
    __m512bh wv[R];
    for (int r = 0; r < R; ++r) wv[r] = (__m512bh)_mm512_maskz_loadu_epi16(live, w + r * k + c);
    for (int i = 0; i < M; ++i) {
      const __m512bh av = (__m512bh)_mm512_loadu_si512(a + i * ka + c);
      for (int r = 0; r < R; ++r) acc[i][r] = _mm512_dpbf16_ps(acc[i][r], av, wv[r]);
    }
  }
  for (int i = 0; i < M; ++i)
    for (int r = 0; r < R; ++r) y[i * n + r] = lane_sum(acc[i][r]);
}

template <int M>
UOCR_BF16_TARGET inline void dot_rows(const uint16_t* a, int64_t ka, const uint16_t* w, int64_t k, int64_t n, float* y, int64_t rows) {
  switch (rows) {
    case 4: dot_block<M, 4>(a, ka, w, k, n, y); break;
    case 3: dot_block<M, 3>(a, ka, w, k, n, y); break;
    case 2: dot_block<M, 2>(a, ka, w, k, n, y); break;
    default: dot_block<M, 1>(a, ka, w, k, n, y); break;
  }
}

#ifdef UOCR_CPU_AMX_KERNEL
// AMX: each output block of 32 x 32 is four 16 x 16 float32 tiles, fed per 16 k-pairs by two
// tiles of x rows (16 rows x 32 bf16) and two of weight panels: a packed panel (pack_panel) is
// already the tile's pair layout, 16 k-pairs x 16 columns.
inline constexpr int64_t kAmxBlock = 32, kAmxPairs = 16;

// k-pairs of a product over k (whole tile loads; the pad zero) and the rows of its operands.
inline int64_t amx_pairs(int64_t k) { return (k + 2 * kAmxPairs - 1) / (2 * kAmxPairs) * kAmxPairs; }
inline int64_t amx_rows(int64_t m) { return (m + kAmxBlock - 1) / kAmxBlock * kAmxBlock; }

// The four 16 x 16 float32 tiles of (left rows l0 | l1, 16 rows each of bf16 pairs, `l_stride`
// bytes apart) · (right panels r0 | r1 in pack_panel's layout) over `kpairs` k-pairs (a multiple
// of kAmxPairs), stored with rows `ldc` bytes apart: out[0] = l0·r0, out[1] = l0·r1, out[2] =
// l1·r0, out[3] = l1·r1. Tiles: tmm0..3 the sums, tmm4, 5 the left, tmm6, 7 the right operands.
UOCR_AMX_TARGET inline void amx_2x2(const uint16_t* l0, const uint16_t* l1, int64_t l_stride, const uint32_t* r0,
                                    const uint32_t* r1, int64_t kpairs, float* const out[4], int64_t ldc) {
  const int64_t r_stride = kPanel * int64_t(sizeof(uint32_t));
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t kp = 0; kp < kpairs; kp += kAmxPairs) {
    _tile_loadd(4, l0 + 2 * kp, l_stride);
    _tile_loadd(5, l1 + 2 * kp, l_stride);
    _tile_loadd(6, r0 + kp * kPanel, r_stride);
    _tile_loadd(7, r1 + kp * kPanel, r_stride);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, out[0], ldc);
  _tile_stored(1, out[1], ldc);
  _tile_stored(2, out[2], ldc);
  _tile_stored(3, out[3], ldc);
}

// The 32 x 32 block at (i0, j0) of y[m, n] (rows ldy floats apart) = a[., kpad] · the packed
// panels (kpairs a multiple of kAmxPairs; a's rows up to i0 + 32 readable, panels past n zero):
// stored straight into y when the block lies inside it, else through a local block.
UOCR_AMX_TARGET inline void amx_block(const uint16_t* a, int64_t kpad, const uint32_t* packed, int64_t kpairs, int64_t m,
                                      int64_t n, int64_t i0, int64_t j0, float* y, int64_t ldy) {
  const uint16_t* a0 = a + i0 * kpad;
  const uint16_t* a1 = a0 + 16 * kpad;
  const uint32_t* b0 = packed + j0 / kPanel * kpairs * kPanel;
  const uint32_t* b1 = b0 + kpairs * kPanel;
  const int64_t l_stride = kpad * int64_t(sizeof(uint16_t));
  const int64_t rows = std::min(kAmxBlock, m - i0), cols = std::min(kAmxBlock, n - j0);
  float* const yb = y + i0 * ldy + j0;
  if (rows == kAmxBlock && cols == kAmxBlock) {
    float* const out[4] = {yb, yb + 16, yb + 16 * ldy, yb + 16 * ldy + 16};
    amx_2x2(a0, a1, l_stride, b0, b1, kpairs, out, ldy * int64_t(sizeof(float)));
    return;
  }
  alignas(64) float c[kAmxBlock * kAmxBlock];
  float* const out[4] = {c, c + 16, c + 16 * kAmxBlock, c + 16 * kAmxBlock + 16};
  amx_2x2(a0, a1, l_stride, b0, b1, kpairs, out, kAmxBlock * int64_t(sizeof(float)));
  for (int64_t r = 0; r < rows; ++r) std::copy(c + r * kAmxBlock, c + r * kAmxBlock + cols, yb + r * ldy);
}

// Output block `block` (row-major over blocks of 32 x 32) of y[m, n] from a[., kpad] (rows past
// m readable) and the packed panels (kpairs a multiple of kAmxPairs; panels past n zero).
UOCR_AMX_TARGET inline void amx_blocks(const uint16_t* a, int64_t kpad, const uint32_t* packed, int64_t kpairs, int64_t m,
                                       int64_t n, int64_t block, float* y, const float* bias) {
  const int64_t blocks_n = (n + kAmxBlock - 1) / kAmxBlock;
  const int64_t i0 = block / blocks_n * kAmxBlock, j0 = block % blocks_n * kAmxBlock;
  amx_block(a, kpad, packed, kpairs, m, n, i0, j0, y, n);
  add_bias(y + i0 * n, std::min(kAmxBlock, m - i0), n, j0, std::min(n, j0 + kAmxBlock), bias);
}

// gemm_bf16_small_m on AMX, computed transposed: yᵀ[n, m] = W · xᵀ, so that the weight rows
// are the tiles' left operand and load as they are stored (16 rows x 32 bf16 at the row stride),
// and the few x rows are the right one, packed as pairs (pack_panel's layout, 16 rows a panel).
// Needs k a multiple of 32 and n of 16 (the experts' widths); each task is 32 weight rows
// against every x panel, two at a time.
UOCR_AMX_TARGET inline void amx_small_m_block(const uint16_t* w, int64_t n, int64_t k, const uint32_t* xp, int64_t panels,
                                              int64_t m, int64_t block, float* y, const float* bias) {
  alignas(64) float c[4][16 * 16];
  const int64_t kpairs = k / 2, j0 = block * kAmxBlock;
  const uint16_t* w0 = w + j0 * k;
  const uint16_t* w1 = j0 + 16 < n ? w0 + 16 * k : w0;  // a lone last 16 rows: computed twice, kept once
  for (int64_t p = 0; p < panels; p += 2) {
    const uint32_t* x0 = xp + p * kpairs * kPanel;
    const uint32_t* x1 = p + 1 < panels ? x0 + kpairs * kPanel : x0;
    float* const out[4] = {c[0], c[1], c[2], c[3]};
    amx_2x2(w0, w1, k * int64_t(sizeof(uint16_t)), x0, x1, kpairs, out, 16 * int64_t(sizeof(float)));
    // c[2 * half + q][r * 16 + i]: weight row j0 + 16 * half + r against x row 16 * (p + q) + i.
    for (int half = 0; half < 2 && j0 + 16 * half < n; ++half)
      for (int q = 0; q < 2 && p + q < panels; ++q)
        for (int64_t i = 0; i < 16 && 16 * (p + q) + i < m; ++i) {
          float* yi = y + (16 * (p + q) + i) * n + j0 + 16 * half;
          for (int r = 0; r < 16; ++r) yi[r] = c[2 * half + q][r * 16 + i] + (bias ? bias[j0 + 16 * half + r] : 0.0f);
        }
  }
}

// Rows [16p, 16p + 16) of x[m, k] (rows ld floats apart) rounded to bf16 as pairs:
// out[kp * 16 + lane] holds row 16p + lane's columns 2kp and 2kp + 1, for kp < kpairs (rows past
// m and columns past k zero).
UOCR_BF16_TARGET inline void pack_rows_panel(const float* x, int64_t m, int64_t k, int64_t ld, int64_t p, int64_t kpairs,
                                             uint32_t* out) {
  std::memset(out, 0, size_t(kpairs * kPanel) * sizeof(uint32_t));
  for (int64_t lane = 0; lane < kPanel && p * kPanel + lane < m; ++lane) {
    const float* row = x + (p * kPanel + lane) * ld;
    for (int64_t c = 0; c < k; ++c) out[(c / 2) * kPanel + lane] |= uint32_t(f32_to_bf16(row[c])) << (16 * (c % 2));
  }
}

// Columns [16p, 16p + 16) of v[k, n] (rows ld floats apart) rounded to bf16 as the pairs of vᵀ's
// rows: out[kp * 16 + lane] holds column 16p + lane's rows 2kp and 2kp + 1, for kp < kpairs
// (columns past n and rows past k zero).
UOCR_BF16_TARGET inline void pack_columns_panel(const float* v, int64_t k, int64_t n, int64_t ld, int64_t p,
                                                int64_t kpairs, uint32_t* out) {
  std::memset(out, 0, size_t(kpairs * kPanel) * sizeof(uint32_t));
  const int64_t lanes = std::min(kPanel, n - p * kPanel);
  for (int64_t r = 0; r < k; ++r) {
    const float* row = v + r * ld + p * kPanel;
    uint32_t* pairs = out + (r / 2) * kPanel;
    for (int64_t lane = 0; lane < lanes; ++lane) pairs[lane] |= uint32_t(f32_to_bf16(row[lane])) << (16 * (r % 2));
  }
}

UOCR_AMX_TARGET inline void gemm_amx_small_m(const float* x, int64_t m, const uint16_t* w, int64_t n, int64_t k, float* y,
                                             const float* bias) {
  const int64_t panels = (m + kPanel - 1) / kPanel, kpairs = k / 2;
  thread_local std::vector<uint32_t> xs;
  if (xs.size() < size_t(panels * kpairs * kPanel)) xs.resize(size_t(panels * kpairs * kPanel));
  uint32_t* const xp = xs.data();  // thread_local: the team must use this thread's buffer
  for (int64_t p = 0; p < panels; ++p) pack_rows_panel(x, m, k, k, p, kpairs, xp + p * kpairs * kPanel);
  const int64_t blocks = (n + kAmxBlock - 1) / kAmxBlock;
#pragma omp parallel if (m * n * k >= (int64_t(1) << 20))
  {
    const AmxTiles tiles;
#pragma omp for schedule(dynamic)
    for (int64_t b = 0; b < blocks; ++b) amx_small_m_block(w, n, k, xp, panels, m, b, y, bias);
  }
}

// gemm_bf16 on AMX: x rounded (rows padded to whole blocks), W packed, then blocks handed out
// dynamically.
UOCR_AMX_TARGET inline void gemm_amx(const float* x, int64_t m, const TensorView& w, float* y, const float* bias) {
  const int64_t n = w.dim(0), k = w.dim(1);
  const int64_t kpairs = amx_pairs(k), kpad = 2 * kpairs;
  const int64_t mpad = amx_rows(m), panels = amx_rows(n) / kPanel;
  thread_local std::vector<uint16_t> xs;
  thread_local std::vector<uint32_t> ws;
  if (xs.size() < size_t(mpad * kpad)) xs.resize(size_t(mpad * kpad));
  if (ws.size() < size_t(panels * kpairs * kPanel)) ws.resize(size_t(panels * kpairs * kPanel));
  uint16_t* const a = xs.data();  // thread_local: the team must use this thread's buffers
  uint32_t* const packed = ws.data();
  const int64_t row_blocks = (m + 63) / 64, blocks = mpad / kAmxBlock * (panels / 2);
#pragma omp parallel
  {
    std::vector<float> row;
#pragma omp for schedule(dynamic) nowait
    for (int64_t b = 0; b < row_blocks; ++b) round_rows(x, k, kpad, b * 64, std::min(m, b * 64 + 64), a);
#pragma omp for schedule(dynamic)
    for (int64_t p = 0; p < panels; ++p) pack_panel(w, p, kpairs, packed + p * kpairs * kPanel, row);
    const AmxTiles tiles;
#pragma omp for schedule(dynamic)
    for (int64_t b = 0; b < blocks; ++b) amx_blocks(a, kpad, packed, kpairs, m, n, b, y, bias);
  }
}
#endif

}  // namespace bf16_detail

#ifdef UOCR_CPU_AMX_KERNEL
// bf16 products that one thread computes inside its caller's parallel loop (the vision encoder's
// attention: one head's block of query rows at a time), on the AMX tiles the thread configured
// (AmxTiles; needs amx_bf16_available()). y[m, n] = a[m, k] · bᵀ with a's rows rounded by
// round_bf16_rows and b packed once by pack_bf16_rows (b[n, k]) or pack_bf16_columns (b is the
// transpose of v[k, n]); sums in float32.

using bf16_detail::amx_pairs;
using bf16_detail::amx_rows;

// x[m, k] (rows k floats apart) rounded into out[amx_rows(m), 2 * amx_pairs(k)], pad zero.
UOCR_BF16_TARGET inline void round_bf16_rows(const float* x, int64_t m, int64_t k, uint16_t* out) {
  const int64_t kpad = 2 * amx_pairs(k);
  bf16_detail::round_rows(x, k, kpad, 0, m, out);
  std::fill(out + m * kpad, out + amx_rows(m) * kpad, uint16_t(0));
}

// b[n, k] (rows ld floats apart) into out[amx_rows(n) * amx_pairs(k)].
UOCR_BF16_TARGET inline void pack_bf16_rows(const float* b, int64_t n, int64_t k, int64_t ld, uint32_t* out) {
  const int64_t kpairs = amx_pairs(k);
  for (int64_t p = 0; p < amx_rows(n) / bf16_detail::kPanel; ++p)
    bf16_detail::pack_rows_panel(b, n, k, ld, p, kpairs, out + p * kpairs * bf16_detail::kPanel);
}

// The transpose of v[k, n] (rows ld floats apart) into out[amx_rows(n) * amx_pairs(k)].
UOCR_BF16_TARGET inline void pack_bf16_columns(const float* v, int64_t k, int64_t n, int64_t ld, uint32_t* out) {
  const int64_t kpairs = amx_pairs(k);
  for (int64_t p = 0; p < amx_rows(n) / bf16_detail::kPanel; ++p)
    bf16_detail::pack_columns_panel(v, k, n, ld, p, kpairs, out + p * kpairs * bf16_detail::kPanel);
}

// y[m, n] (rows ldy floats apart) = a · bᵀ over k: a from round_bf16_rows, b packed.
UOCR_AMX_TARGET inline void amx_product(const uint16_t* a, const uint32_t* b, int64_t m, int64_t n, int64_t k, float* y,
                                        int64_t ldy) {
  const int64_t kpairs = amx_pairs(k);
  for (int64_t i0 = 0; i0 < m; i0 += bf16_detail::kAmxBlock)
    for (int64_t j0 = 0; j0 < n; j0 += bf16_detail::kAmxBlock)
      bf16_detail::amx_block(a, 2 * kpairs, b, kpairs, m, n, i0, j0, y, ldy);
}
#endif

// y[m, n] = x[m, k] · W[n, k]ᵀ (+ bias[n]) in bf16 compute with float32 accumulation. Needs
// bf16_compute_available(); `unit`: AMX tiles (when amx_bf16_available(), the default then) or
// AVX-512 vectors. Uses the OpenMP threads: x rounded and W packed in parallel, then output tiles
// handed out dynamically.
UOCR_BF16_TARGET inline void gemm_bf16(const float* x, int64_t m, const TensorView& w, float* y, const float* bias,
                                       Bf16Unit unit = amx_bf16_available() ? Bf16Unit::amx : Bf16Unit::vector) {
  using namespace bf16_detail;
#ifdef UOCR_CPU_AMX_KERNEL
  if (unit == Bf16Unit::amx) {
    require(amx_bf16_available(), Status::unsupported, "gemm_bf16: this CPU (or process) cannot use AMX");
    return gemm_amx(x, m, w, y, bias);
  }
#endif
  const int64_t n = w.dim(0), k = w.dim(1);
  const int64_t kpairs = (k + 1) / 2, kpad = 2 * kpairs, panels = (n + kPanel - 1) / kPanel;
  thread_local std::vector<uint16_t> xs;
  thread_local std::vector<uint32_t> ws;
  if (xs.size() < size_t(m * kpad)) xs.resize(size_t(m * kpad));
  if (ws.size() < size_t(panels * kpairs * kPanel)) ws.resize(size_t(panels * kpairs * kPanel));
  uint16_t* const a = xs.data();  // thread_local: the team must use this thread's buffers
  uint32_t* const packed = ws.data();
  const int64_t row_blocks = (m + 63) / 64;
  const int64_t mt = (m + kTileRows - 1) / kTileRows, nt = (n + kTileCols - 1) / kTileCols;
#pragma omp parallel if (m * n * k >= (int64_t(1) << 22))
  {
    std::vector<float> row;
#pragma omp for schedule(dynamic) nowait
    for (int64_t b = 0; b < row_blocks; ++b) round_rows(x, k, kpad, b * 64, std::min(m, b * 64 + 64), a);
#pragma omp for schedule(dynamic)
    for (int64_t p = 0; p < panels; ++p) pack_panel(w, p, kpairs, packed + p * kpairs * kPanel, row);
#pragma omp for schedule(dynamic)
    for (int64_t t = 0; t < mt * nt; ++t) {
      const int64_t i0 = (t / nt) * kTileRows, j0 = (t % nt) * kTileCols;
      const int64_t i1 = std::min(m, i0 + kTileRows), j1 = std::min(n, j0 + kTileCols);
      tile(a, kpad, packed, kpairs, n, i0, i1, j0, j1, y);
      add_bias(y + i0 * n, i1 - i0, n, j0, j1, bias);
    }
  }
}

// The same product for the few dozen rows each MoE expert sees in a prefill, bf16 weights. On AMX
// (`unit`, as gemm_bf16's; widths the tiles take: k a multiple of 32, n of 16) the weights are the
// tiles' left operand as stored; else x is rounded once, then blocks of 16 weight rows handed
// out dynamically, 4 x 4 dot blocks in each.
UOCR_BF16_TARGET inline void gemm_bf16_small_m(const float* x, int64_t m, const uint16_t* w, int64_t n, int64_t k, float* y,
                                               const float* bias,
                                               Bf16Unit unit = amx_bf16_available() ? Bf16Unit::amx : Bf16Unit::vector) {
  using namespace bf16_detail;
#ifdef UOCR_CPU_AMX_KERNEL
  if (unit == Bf16Unit::amx && k % (2 * kAmxPairs) == 0 && n % kPanel == 0) {
    require(amx_bf16_available(), Status::unsupported, "gemm_bf16_small_m: this CPU (or process) cannot use AMX");
    return gemm_amx_small_m(x, m, w, n, k, y, bias);
  }
#endif
  const int64_t ka = (k + 31) / 32 * 32;  // whole 32-element loads; the pad is zero
  thread_local std::vector<uint16_t> xs;
  if (xs.size() < size_t(m * ka)) xs.resize(size_t(m * ka));
  uint16_t* const a = xs.data();  // thread_local: the team must use this thread's buffer
  round_rows(x, k, ka, 0, m, a);
  const int64_t blocks = (n + 15) / 16;
#pragma omp parallel for schedule(dynamic) if (m * n * k >= (int64_t(1) << 20))
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t j1 = std::min(n, b * 16 + 16);
    for (int64_t j = b * 16; j < j1; j += 4) {
      const int64_t rows = std::min<int64_t>(4, j1 - j);
      int64_t i = 0;
      for (; i + 4 <= m; i += 4) dot_rows<4>(a + i * ka, ka, w + j * k, k, n, y + i * n + j, rows);
      switch (m - i) {
        case 3: dot_rows<3>(a + i * ka, ka, w + j * k, k, n, y + i * n + j, rows); break;
        case 2: dot_rows<2>(a + i * ka, ka, w + j * k, k, n, y + i * n + j, rows); break;
        case 1: dot_rows<1>(a + i * ka, ka, w + j * k, k, n, y + i * n + j, rows); break;
        default: break;
      }
    }
    add_bias(y, m, n, b * 16, j1, bias);
  }
}
#endif

}  // namespace cpu
UOCR_NAMESPACE_END
