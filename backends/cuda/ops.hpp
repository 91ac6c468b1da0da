// The compute ops of the CUDA backend, as plain C++ declarations (the kernels are compiled into
// libuocr_cuda, one op family per backends/cuda/*.cu file, each with a prose header on its
// algorithm, layout and numerics). Every op is enqueued on the Context's stream and returns at
// once; pointers are device addresses, sizes are in elements, activations are float32 row-major
// and weights stay in their checkpoint type (bf16 / f16 / f32). Shapes are validated on the host
// (Status::invalid_argument); launch failures become uocr::Error (context.hpp).
#pragma once
#include <cstdint>

#include "backends/cuda/context.hpp"
#include "uocr/core/dtype.hpp"
#include "uocr/decoder/sparse_tables.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN
namespace cuda {

// A weight matrix [rows, cols] in its stored type, or `groups` of them stacked back to back
// ([groups, rows, cols]: the routed experts of one MoE projection); not owning.
struct MatrixView {
  const void* data = nullptr;
  DType dtype = DType::f32;
  int64_t groups = 1, rows = 0, cols = 0;

  size_t bytes() const { return size_t(groups * rows * cols) * dtype_size(dtype); }
  // Matrix g of a stack, as a single matrix.
  MatrixView group(int64_t g) const {
    require(g >= 0 && g < groups, Status::invalid_argument, "CUDA: matrix group out of range");
    return {static_cast<const uint8_t*>(data) + size_t(g * rows * cols) * dtype_size(dtype), dtype, 1, rows, cols};
  }
};

// The owning counterpart: device memory holding a MatrixView's elements.
struct DeviceMatrix {
  Buffer buf;
  MatrixView view;
  operator const MatrixView&() const { return view; }
};

namespace ops {

// Rows taken by the mat-vec kernel; larger m goes to cuBLAS (Context::gemm_precision decides how).
inline constexpr int64_t kMatvecMaxRows = 16;

// y[m, w.rows] = x[m, w.cols] · wᵀ (+ bias[w.rows]); y may not alias x.
void linear(Context& c, const float* x, int64_t m, const MatrixView& w, const float* bias, float* y);

// The mat-vec kernel over groups (matvec.cu): for group g (matrix g of `w`) and each assignment
// a in [start[g], start[g+1]): y[a] = w_g · x[x_rows ? x_rows[a] : a] (+ bias). `start` null
// means one group with assignments [0, m). x rows are `x_stride` floats apart, y rows w.rows.
void grouped_matvec(Context& c, const MatrixView& w, const float* x, int64_t x_stride, const int32_t* x_rows,
                    const int32_t* start, int64_t m, const float* bias, float* y);

// y[r] = w ⊙ x[r] · rsqrt(mean(x[r]²) + eps), rows of n floats (norm.cu).
void rms_norm(Context& c, const float* x, int64_t rows, int64_t n, const float* w, float eps, float* y);

// Half-rotation RoPE in place on `rows` rows of `heads` vectors of head_dim floats (row i starts
// at x + i·row_stride), row i at position positions[i], or first_position + i when positions is
// null; inv_freq [head_dim/2] as uocr::Rope computes it (rope.cu).
void rope(Context& c, float* x, int64_t rows, int heads, int head_dim, int64_t row_stride, const float* inv_freq,
          int64_t first_position, const int64_t* positions);

void silu_mul(Context& c, float* g, const float* u, int64_t n);  // g = silu(g)·u (elementwise.cu)
void add(Context& c, float* x, const float* y, int64_t n);       // x += y
void add_bias(Context& c, float* y, int64_t rows, int64_t n, const float* bias);
// out[i] = table[ids[i]] widened to float32 (ids are checked on the host before).
void embed(Context& c, const int32_t* ids, int64_t n, const MatrixView& table, float* out);
// dst[i, 0..n) = float32(src[i, 0..n)) for `rows` rows of a weight matrix (GEMM widening).
void widen(Context& c, DType t, const void* src, int64_t count, float* dst);
void round_to_bf16(Context& c, const float* src, int64_t count, uint16_t* dst);
// dst[i][0..width) = src[i·width ..) for rows i, dst being a device array of row pointers.
void scatter_rows(Context& c, const float* src, int64_t rows, int64_t width, float* const* dst);
// dst[i] = src[rows[i]] for rows of width floats.
void gather_rows(Context& c, const float* src, const int32_t* rows, int64_t count, int64_t width, float* dst);

// Keys/values rows [rows, kv_heads·head_dim].
struct KvSpan {
  const float* k = nullptr;
  const float* v = nullptr;
  int64_t rows = 0;
};
// One query row of attention: q [heads·d] attends to every row of `a` and to the first
// `b.rows` rows of `b`; out [heads·d]. Decode: a = reference, b = ring; prefill row i: a empty,
// b = prompt rows 0..i (attention.cu).
struct AttentionRow {
  const float* q = nullptr;
  float* out = nullptr;
  KvSpan a, b;
};
struct AttentionDims {
  int heads = 0, kv_heads = 0, head_dim = 0;
};
inline constexpr int kMaxHeadDim = 256;
// `rows` is a device array of n AttentionRow; max_keys ≥ a.rows + b.rows of every row; head_dim
// a multiple of 4 (float4 key loads), else Status::unsupported (split_attention.cuh).
void attention(Context& c, const AttentionRow* rows, int64_t n, const AttentionDims& d, int64_t max_keys);

// SR-SWA decode step on the device (sparse_select.cu; tables, bounds, scratch and selection laid
// out as uocr/decoder/sparse_tables.hpp says). sparse_select: layer p.layer's selection for q
// [heads·d] (after RoPE), the CPU's rule bit for bit, one block per head: the head's merged spans
// go to `selection`, its rows attended and bounds evaluated are added to counts[0] / counts[1].
void sparse_select(Context& c, const SparseSelectParams& p, const float* q, const float* block_bounds,
                   const float* node_bounds, const uint32_t* tables, uint32_t* scratch, uint32_t* selection,
                   uint64_t* counts);
// out [heads·d] = each head's attention over its selected rows of `reference` (selection: the
// layer's heads, sel_stride words each), in span order, then every row of `window`.
void span_attention(Context& c, const float* q, const AttentionDims& d, const KvSpan& reference, const KvSpan& window,
                    const uint32_t* selection, int64_t sel_stride, float* out);

// MoE routing on the device (moe.cu). logits [m, experts] → softmax probabilities in place,
// choice [m, k] and weight [m, k] (greedy top-k, the lower expert index winning ties, weights
// renormalised only when `normalize`, then × scaling), as uocr::moe_forward.
void moe_route(Context& c, float* logits, int64_t m, int experts, int k, bool normalize, float scaling, int32_t* choice,
               float* weight);
// Counting sort of the m·k assignments by expert: start [experts + 1], order [m·k] (assignment
// a = row·k + j, grouped by expert, ascending within one), rows [m·k] = order / k, slot [m·k]:
// slot[a] = position of assignment a in the grouped order.
void moe_group(Context& c, const int32_t* choice, int64_t m, int experts, int k, int32_t* start, int32_t* order,
               int32_t* rows, int32_t* slot);
// y[r] = Σ_j weight[r, j] · expert_out[slot[r·k + j]] over the row's experts in ascending expert
// order (the CPU's summation order), + shared[r] when shared is not null.
void moe_combine(Context& c, const float* expert_out, const int32_t* choice, const float* weight, const int32_t* slot,
                 const float* shared, int64_t m, int k, int64_t hidden, float* y);

// out[r] = the index of the largest of x[r, 0..n) (the first one on ties), sample.cu.
void argmax(Context& c, const float* x, int64_t rows, int64_t n, int32_t* out);

// ---- Vision encoder (vision.hpp) ----

// y[r] = (x[r] − mean) / sqrt(var + eps) · w + b over rows of n floats (biased variance, two
// passes: LayerNorm, and LayerNorm2d on a channels-last map); y may alias x (norm.cu).
void layer_norm(Context& c, const float* x, int64_t rows, int64_t n, const float* w, const float* b, float eps, float* y);

enum class Gelu { erf, quick };  // 0.5·x·(1 + erf(x/√2)) (SAM), x·sigmoid(1.702·x) (CLIP)
void gelu(Context& c, float* x, int64_t n, Gelu kind);  // in place (elementwise.cu)
// dst[i·dst_stride + 0..width) = src[i·src_stride + 0..width) for `rows` rows (elementwise.cu).
void copy_rows(Context& c, const float* src, int64_t src_stride, int64_t rows, int64_t width, float* dst,
               int64_t dst_stride);

// im2col of a CHW image [channels, size, size] into non-overlapping p x p patches: row
// gy·(size/p) + gx holds the patch in (channel, py, px) order, the patch-embedding weight's
// [out, channels·p·p] order (conv.cu).
void patch_im2col(Context& c, const float* chw, int channels, int size, int p, float* cols);
// im2col of a channels-last map [h, w, channels] for a k x k convolution (stride, zero padding):
// row oy·wo + ox holds (channel, ky, kx), the weight's [out, channels·k·k] order (conv.cu).
void im2col(Context& c, const float* x, int h, int w, int channels, int k, int stride, int pad, float* cols);

// SAM attention with decomposed relative positions (sam_attention.cu): qkv [g·g, 3C] rows of
// [q heads | k | v]; every real token attends within its n x n window of the grid zero-padded
// to whole windows (n = g: global), a padded token's q/k/v being qkv_bias [3C]:
// softmax(q·kᵀ/√hd + q·Th[qy−ky+n−1] + q·Tw[qx−kx+n−1])·v with Th, Tw [2n−1, hd]; out [g·g, C].
inline constexpr int kMaxSamSpan = 128;
void sam_attention(Context& c, const float* qkv, const float* qkv_bias, const float* th, const float* tw, int g, int n,
                   int heads, int64_t channels, float* out);

}  // namespace ops
}  // namespace cuda
UOCR_NAMESPACE_END
