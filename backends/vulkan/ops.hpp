// Device tensors and the compute ops of the Vulkan backend: each op records one or more
// dispatches of an embedded SPIR-V shader (backends/vulkan/shaders/) into a Recorder. Offsets and
// strides are in elements (floats, or weight elements); all arithmetic is float32, weights stay
// in their checkpoint type (bf16/f16 read two per 32-bit word, f32).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "backends/vulkan/context.hpp"
#include "backends/vulkan/recorder.hpp"
#include "uocr/core/dtype.hpp"
#include "uocr/decoder/rope.hpp"
#include "uocr/io/safetensors.hpp"
#include "uocr/version.hpp"
#include "uocr/vision/token_layout.hpp"
#include "uocr_vulkan_spirv.hpp"  // generated at build time (backends/vulkan/meson.build)

UOCR_NAMESPACE_BEGIN
namespace vulkan {

// The pipeline of embedded shader `name` with `bindings` storage buffers.
inline Pipeline& kernel(Context& c, const char* name, uint32_t bindings) {
  const spirv::Shader* s = spirv::find(name);
  require(s != nullptr, Status::internal, [&] { return std::string("Vulkan: no embedded shader named ") + name; });
  return c.pipeline(name, s->code, s->words, bindings);
}

inline const char* dtype_suffix(DType t) {
  switch (t) {
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::f32: return "f32";
    case DType::i8: break;  // refused before upload (backends/device_weights.hpp)
  }
  return "f32";
}

// A matrix [rows, cols] in its stored type, split by rows into chunks that each fit one
// storage-buffer binding (the real model's 129280-row embedding and lm_head exceed 128 MiB, the
// binding limit of lavapipe and of many GPUs).
struct DeviceMatrix {
  struct Chunk {
    Buffer buf;
    int64_t row0 = 0, rows = 0;
  };
  DType dtype = DType::f32;
  int64_t rows = 0, cols = 0;
  std::vector<Chunk> chunks;

  size_t bytes() const { return size_t(rows * cols) * dtype_size(dtype); }
  bool empty() const { return chunks.empty(); }
};

inline DeviceMatrix upload_matrix(Context& c, DType dtype, const void* data, int64_t rows, int64_t cols,
                                  const std::string& what) {
  require(rows > 0 && cols > 0, Status::invalid_argument, [&] { return "Vulkan: empty matrix " + what; });
  const size_t row_bytes = size_t(cols) * dtype_size(dtype);
  const int64_t per_chunk = int64_t(c.max_binding_bytes() / row_bytes);
  require(per_chunk > 0, Status::unsupported, [&] {
    return "Vulkan: a row of " + what + " (" + std::to_string(row_bytes) + " bytes) exceeds the device's storage-buffer range";
  });
  DeviceMatrix m;
  m.dtype = dtype;
  m.rows = rows;
  m.cols = cols;
  for (int64_t r0 = 0; r0 < rows; r0 += per_chunk) {
    DeviceMatrix::Chunk ch;
    ch.row0 = r0;
    ch.rows = std::min(per_chunk, rows - r0);
    const size_t bytes = size_t(ch.rows) * row_bytes;
    ch.buf = c.buffer(bytes, MemoryUse::weights, what);
    c.upload(ch.buf, static_cast<const uint8_t*>(data) + size_t(r0) * row_bytes, bytes);
    m.chunks.push_back(std::move(ch));
  }
  return m;
}

// A checkpoint tensor as [dim0, numel/dim0], in its stored type.
inline DeviceMatrix upload_matrix(Context& c, const TensorView& t) {
  require(!t.shape.empty() && t.numel() > 0, Status::invalid_argument, [&] { return "Vulkan: empty tensor " + t.name; });
  return upload_matrix(c, t.dtype, t.data, t.dim(0), t.numel() / t.dim(0), t.name);
}

// A layer's routed-expert matrices of one projection (each [rows, cols], the same shape and type)
// stacked as [experts, rows, cols] in their stored type, split by whole experts into chunks that
// each fit one storage-buffer binding (the real model's 64 experts x 896 x 1280 bf16, 147 MB,
// exceed lavapipe's 128 MiB): the MoE shaders take an expert's weights from inside its chunk.
// max_chunk_bytes (0: the binding range) bounds the chunks further.
struct StackedMatrix {
  struct Chunk {
    Buffer buf;
    int64_t expert0 = 0, experts = 0;
  };
  DType dtype = DType::f32;
  int64_t experts = 0, rows = 0, cols = 0, per_chunk = 0;
  std::vector<Chunk> chunks;

  size_t matrix_bytes() const { return size_t(rows * cols) * dtype_size(dtype); }
  size_t bytes() const { return size_t(experts) * matrix_bytes(); }
  const Chunk& chunk_of(int64_t e) const { return chunks[size_t(e / per_chunk)]; }
};

inline StackedMatrix upload_stacked(Context& c, const std::vector<const TensorView*>& mats, const std::string& what,
                                    size_t max_chunk_bytes = 0) {
  require(!mats.empty(), Status::invalid_argument, [&] { return "Vulkan: no expert matrices for " + what; });
  StackedMatrix s;
  const TensorView& t0 = *mats[0];
  require(!t0.shape.empty() && t0.numel() > 0, Status::invalid_argument, [&] { return "Vulkan: empty tensor " + t0.name; });
  s.dtype = t0.dtype;
  s.experts = int64_t(mats.size());
  s.rows = t0.dim(0);
  s.cols = t0.numel() / t0.dim(0);
  for (const TensorView* t : mats)
    require(t->dtype == s.dtype && t->shape == t0.shape, Status::invalid_argument, [&] {
      return "Vulkan: expert matrix " + t->name + " differs in shape or type from " + t0.name + " (" + what + ")";
    });
  const size_t one = s.matrix_bytes(), limit = max_chunk_bytes ? std::min<size_t>(max_chunk_bytes, c.max_binding_bytes())
                                                                  : size_t(c.max_binding_bytes());
  s.per_chunk = int64_t(limit / one);
  require(s.per_chunk > 0, Status::unsupported, [&] {
    return "Vulkan: one expert matrix of " + what + " (" + std::to_string(one) + " bytes) exceeds the " +
           (max_chunk_bytes ? "chunk limit" : "device's storage-buffer range") + " (" + std::to_string(limit) + " bytes)";
  });
  for (int64_t e0 = 0; e0 < s.experts; e0 += s.per_chunk) {
    StackedMatrix::Chunk ch;
    ch.expert0 = e0;
    ch.experts = std::min(s.per_chunk, s.experts - e0);
    ch.buf = c.buffer(size_t(ch.experts) * one, MemoryUse::weights, what);
    for (int64_t e = 0; e < ch.experts; ++e) c.upload(ch.buf, mats[size_t(e0 + e)]->data, one, size_t(e) * one);
    s.chunks.push_back(std::move(ch));
  }
  return s;
}

inline Buffer upload_f32(Context& c, const float* data, size_t n, MemoryUse use, const std::string& what) {
  Buffer b = c.buffer(n * 4, use, what);
  c.upload(b, data, n * 4);
  return b;
}

// A checkpoint tensor widened to float32 (norm scales, biases).
inline Buffer upload_f32(Context& c, const TensorView& t) {
  const std::vector<float> v = t.to_vector();
  return upload_f32(c, v.data(), v.size(), MemoryUse::weights, t.name);
}

// RoPE cos/sin of the rows a rope() call rotates: out[r] = Rope::cos_sin(positions[r]), i.e.
// [rows][head_dim/2][2] computed on the host exactly as the CPU does. Per call rather than one
// table over every position: position extrapolation reaches 2^24 positions, and shader sin/cos
// carry no accuracy guarantee outside [-pi, pi] while these angles reach ~2^24 rad.
inline void rope_cos_sin(const Rope& rope, int head_dim, const int64_t* positions, int64_t rows, float* out) {
  for (int64_t r = 0; r < rows; ++r) rope.cos_sin(positions[r], out + r * head_dim);
}

namespace ops {

inline uint32_t u32(int64_t v) {
  require(v >= 0 && v <= int64_t(UINT32_MAX), Status::unsupported, "Vulkan: tensor offset or size exceeds 32 bits");
  return uint32_t(v);
}

inline void dispatch_groups(Recorder& r, const Pipeline& p, std::initializer_list<Binding> b, const void* push,
                            uint32_t push_bytes, uint64_t groups) {
  uint32_t gx, gy;
  r.context().grid(groups, gx, gy);
  r.dispatch(p, b, push, push_bytes, gx, gy, 1);
}

// y[y_off + i*ldy + j] = x[x_off + i*ldx + :] · W[j, :] (+ bias[j]) for i < m, j < W.rows.
// m <= 4 takes a mat-vec shader (decode: one thread per column for rows up to 512 long, else 16
// lanes per column and a reduction), larger m the tiled GEMM.
inline constexpr int64_t kShortRow = 512;

inline void linear(Recorder& r, const Buffer& x, int64_t x_off, int64_t m, int64_t ldx, const DeviceMatrix& w,
                   const Buffer* bias, const Buffer& y, int64_t y_off, int64_t ldy) {
  if (m == 0) return;
  Context& c = r.context();
  const bool small = m <= 4, cols = small && w.cols <= kShortRow;
  const std::string name = std::string(cols ? "matvec_cols_" : small ? "matvec_" : "matmul_") + dtype_suffix(w.dtype);
  Pipeline& p = kernel(c, name.c_str(), 4);
  for (const DeviceMatrix::Chunk& ch : w.chunks) {
    struct {
      uint32_t m, n, k, x_off, ldx, y_off, ldy, has_bias, bias_off, tiles_n;
    } pc{u32(m), u32(ch.rows), u32(w.cols), u32(x_off), u32(ldx), u32(y_off + ch.row0), u32(ldy), bias ? 1u : 0u,
         u32(ch.row0), 0};
    const Buffer& b = bias ? *bias : x;
    if (cols) {
      dispatch_groups(r, p, {in(x), in(ch.buf), in(b), out(y)}, &pc, 36, uint64_t((ch.rows + 63) / 64));
    } else if (small) {
      dispatch_groups(r, p, {in(x), in(ch.buf), in(b), out(y)}, &pc, 36, uint64_t((ch.rows + 3) / 4));
    } else {
      pc.tiles_n = u32((ch.rows + 63) / 64);
      dispatch_groups(r, p, {in(x), in(ch.buf), in(b), out(y)}, &pc, 40, uint64_t(pc.tiles_n) * uint64_t((m + 63) / 64));
    }
  }
}

// --- MoE routing on the device (moe_route.comp): no host read-back between the router and the
// expert GEMMs, which are issued with vkCmdDispatchIndirect.

// Word offsets of one routing of `rows` rows in its uint32 buffer (the layout moe_route.comp
// writes; A = rows * k assignments).
struct MoeRouteLayout {
  int64_t rows = 0, experts = 0, k = 0;
  int64_t assignments() const { return rows * k; }
  int64_t choice() const { return 0; }                        // [A] experts, best first per row
  int64_t weight() const { return assignments(); }            // [A] their weights (float bits)
  int64_t mix_pos() const { return 2 * assignments(); }       // [A] grouped slots, ascending expert
  int64_t mix_weight() const { return 3 * assignments(); }    // [A] their weights (float bits)
  int64_t order() const { return 4 * assignments(); }         // [A] grouped slot -> row
  int64_t slot_expert() const { return 5 * assignments(); }   // [A] grouped slot -> expert
  int64_t expert_rows(int64_t e) const { return 6 * assignments() + 2 * e; }  // (first, count)
  int64_t command(int64_t e, int shape) const { return 6 * assignments() + 2 * experts + (2 * e + shape) * 3; }
  int64_t words() const { return 6 * assignments() + 8 * experts; }
};

// How a routed expert GEMM y = x · Wᵀ (W [n, k], the tiled GEMM) is run: its shader and its
// workgroups for r rows, tiles * ceil(r / rows_per_tile).
struct RoutedGemm {
  std::string shader;
  uint32_t tiles = 0, rows_per_tile = 0;
};
inline RoutedGemm routed_gemm(const StackedMatrix& w) {
  return RoutedGemm{std::string("matmul_routed_") + dtype_suffix(w.dtype), u32((w.rows + 63) / 64), 64u};
}

// y[rows, n] = RMSNorm(x) with float32 scale w [n].
inline void rms_norm(Recorder& r, const Buffer& x, int64_t x_off, int64_t rows, int64_t n, const Buffer& w, float eps,
                     const Buffer& y, int64_t y_off) {
  struct {
    uint32_t rows, n, x_off, y_off;
    float eps;
  } pc{u32(rows), u32(n), u32(x_off), u32(y_off), eps};
  dispatch_groups(r, kernel(r.context(), "rmsnorm", 3), {in(x), in(w), out(y)}, &pc, sizeof pc, uint64_t(rows));
}

// y[rows, n] = LayerNorm(x) * w + b.
inline void layer_norm(Recorder& r, const Buffer& x, int64_t x_off, int64_t rows, int64_t n, const Buffer& w,
                       const Buffer& b, float eps, const Buffer& y, int64_t y_off) {
  struct {
    uint32_t rows, n, x_off, y_off;
    float eps;
  } pc{u32(rows), u32(n), u32(x_off), u32(y_off), eps};
  dispatch_groups(r, kernel(r.context(), "layernorm", 4), {in(x), in(w), in(b), out(y)}, &pc, sizeof pc, uint64_t(rows));
}

// In place: RoPE (half-split pairs) on `rows` rows of `heads` vectors of head_dim; row i's cos/sin
// at cos_sin[i * head_dim ..] (from rope_cos_sin()).
inline void rope(Recorder& r, const Buffer& x, int64_t x_off, int64_t rows, int64_t heads, int64_t head_dim,
                 int64_t row_stride, const Buffer& cos_sin) {
  struct {
    uint32_t rows, heads, half_dim, x_off, row_stride;
  } pc{u32(rows), u32(heads), u32(head_dim / 2), u32(x_off), u32(row_stride)};
  const uint64_t threads = uint64_t(rows) * uint64_t(heads) * uint64_t(head_dim / 2);
  dispatch_groups(r, kernel(r.context(), "rope", 2), {out(x), in(cos_sin)}, &pc, sizeof pc, (threads + 63) / 64);
}

// g = silu(g) * u over n elements.
inline void silu_mul(Recorder& r, const Buffer& g, int64_t g_off, const Buffer& u, int64_t u_off, int64_t n) {
  struct {
    uint32_t n, g_off, u_off;
  } pc{u32(n), u32(g_off), u32(u_off)};
  dispatch_groups(r, kernel(r.context(), "silu_mul", 2), {out(g), in(u)}, &pc, sizeof pc, (uint64_t(n) + 255) / 256);
}

// x += y over n elements.
inline void add(Recorder& r, const Buffer& x, int64_t x_off, const Buffer& y, int64_t y_off, int64_t n) {
  struct {
    uint32_t n, x_off, y_off;
  } pc{u32(n), u32(x_off), u32(y_off)};
  dispatch_groups(r, kernel(r.context(), "add", 2), {out(x), in(y)}, &pc, sizeof pc, (uint64_t(n) + 255) / 256);
}

// out[out_off + i*h ..] = x[x_off + idx[idx_off + i]*h ..] for i < count (uint32 indices).
inline void gather_rows(Recorder& r, const Buffer& idx, int64_t idx_off, int64_t count, int64_t h, const Buffer& x,
                        int64_t x_off, const Buffer& o, int64_t out_off) {
  struct {
    uint32_t count, h, idx_off, x_off, out_off;
  } pc{u32(count), u32(h), u32(idx_off), u32(x_off), u32(out_off)};
  dispatch_groups(r, kernel(r.context(), "gather_rows", 3), {in(idx), in(x), out(o)}, &pc, sizeof pc,
                  (uint64_t(count) * uint64_t(h) + 255) / 256);
}

// y[y_off + idx[idx_off + i]*h ..] += wt[idx_off + i] * o[o_off + i*h ..] for i < count (distinct
// indices within one call).
inline void scatter_add(Recorder& r, const Buffer& idx, const Buffer& wt, int64_t idx_off, int64_t count, int64_t h,
                        const Buffer& o, int64_t o_off, const Buffer& y, int64_t y_off) {
  struct {
    uint32_t count, h, idx_off, o_off, y_off;
  } pc{u32(count), u32(h), u32(idx_off), u32(o_off), u32(y_off)};
  dispatch_groups(r, kernel(r.context(), "scatter_add", 4), {in(idx), in(wt), in(o), out(y)}, &pc, sizeof pc,
                  (uint64_t(count) * uint64_t(h) + 255) / 256);
}

// out[out_off + i*cols ..] = table[ids[i], :] (widened to float32) for i < count.
inline void embed(Recorder& r, const Buffer& ids, int64_t count, const DeviceMatrix& table, const Buffer& o,
                  int64_t out_off) {
  const std::string name = std::string("embed_") + dtype_suffix(table.dtype);
  Pipeline& p = kernel(r.context(), name.c_str(), 3);
  for (const DeviceMatrix::Chunk& ch : table.chunks) {
    struct {
      uint32_t count, h, row0, rows, out_off;
    } pc{u32(count), u32(table.cols), u32(ch.row0), u32(ch.rows), u32(out_off)};
    dispatch_groups(r, p, {in(ids), in(ch.buf), out(o)}, &pc, sizeof pc, (uint64_t(count) * uint64_t(table.cols) + 255) / 256);
  }
}

// The routing of `rows` rows of router logits (probs [rows, experts], replaced by their
// softmax) into `route` (MoeRouteLayout): the CPU's rule (uocr::moe_route), the grouping by
// expert, and per expert the indirect dispatches of the two expert GEMM shapes (0: gate/up,
// 1: down).
inline void moe_route(Recorder& r, const Buffer& probs, const MoeRouteLayout& l, bool normalize, float scaling,
                      const RoutedGemm& gate_up, const RoutedGemm& down, const Buffer& route) {
  require(l.rows > 0 && l.experts > 0 && l.k > 0 && l.k <= l.experts, Status::internal, "Vulkan MoE routing: bad shape");
  struct {
    uint32_t rows, experts, k, normalize;
    float scaling;
    uint32_t tiles0, rows_per_tile0, tiles1, rows_per_tile1, max_x;
  } pc{u32(l.rows), u32(l.experts), u32(l.k), normalize ? 1u : 0u, scaling, gate_up.tiles, gate_up.rows_per_tile,
       down.tiles, down.rows_per_tile, r.context().max_workgroups_x()};
  r.dispatch(kernel(r.context(), "moe_route", 2), {out(probs), out(route)}, &pc, sizeof pc, 1);
}

// y rows [first_e, first_e + count_e) = x rows [first_e, ..) · W_eᵀ for expert e of `route`
// (grouped buffers), launched with the routing's indirect command for `shape` (0: gate/up,
// 1: down): no work when the expert got no rows.
inline void linear_routed(Recorder& r, const Buffer& x, int64_t ldx, const StackedMatrix& w, const RoutedGemm& g, int shape,
                          const Buffer& route, const MoeRouteLayout& l, int64_t e, const Buffer& y, int64_t ldy) {
  const StackedMatrix::Chunk& ch = w.chunk_of(e);
  // m, n, k, x_off, ldx, y_off, ldy, has_bias, bias_off, tiles_n, route_at, w_off
  const uint32_t pc[12] = {0, u32(w.rows), u32(w.cols), 0, u32(ldx), 0, u32(ldy), 0, 0, g.tiles, u32(l.expert_rows(e)),
                           u32((e - ch.expert0) * w.rows * w.cols)};
  r.dispatch_indirect(kernel(r.context(), g.shader.c_str(), 5), {in(x), in(ch.buf), in(x), out(y), in(route)}, pc,
                      sizeof pc, route, size_t(l.command(e, shape)) * 4);
}

// y row s = x row s · W_{e(s)}ᵀ for every grouped slot s of `route`, e(s) the slot's expert read
// from the routing: the k mat-vecs of each of the routing's rows in one dispatch per stack chunk
// (MoE decode steps; linear()'s mat-vec choice and per-row arithmetic). Chunks write disjoint
// slots.
inline void linear_stacked(Recorder& r, const Buffer& x, int64_t ldx, const StackedMatrix& w, const Buffer& route,
                           const MoeRouteLayout& l, const Buffer& y, int64_t ldy) {
  const bool cols = w.cols <= kShortRow;
  const std::string name = std::string(cols ? "matvec_cols_stacked_" : "matvec_stacked_") + dtype_suffix(w.dtype);
  Pipeline& p = kernel(r.context(), name.c_str(), 5);
  const int64_t tiles = cols ? (w.rows + 63) / 64 : (w.rows + 3) / 4;
  for (const StackedMatrix::Chunk& ch : w.chunks) {
    // m, n, k, x_off, ldx, y_off, ldy, has_bias, bias_off, tiles, slots, slot_expert, expert0,
    // stack_experts
    const uint32_t pc[14] = {1, u32(w.rows), u32(w.cols), 0, u32(ldx), 0, u32(ldy), 0, 0, u32(tiles),
                             u32(l.assignments()), u32(l.slot_expert()), u32(ch.expert0), u32(ch.experts)};
    dispatch_groups(r, p, {in(x), in(ch.buf), in(x), out(y), in(route)}, pc, sizeof pc, uint64_t(tiles) * uint64_t(l.assignments()));
  }
}

// f rows [f_row, f_row + l.rows) = each row's expert outputs (o, grouped) times their weights,
// added in ascending expert order from zero, as the CPU mixes them.
inline void moe_combine(Recorder& r, const Buffer& route, const MoeRouteLayout& l, const Buffer& o, int64_t h, const Buffer& f,
                        int64_t f_row) {
  struct {
    uint32_t rows, k, h, mix_pos, mix_weight, f_off;
  } pc{u32(l.rows), u32(l.k), u32(h), u32(l.mix_pos()), u32(l.mix_weight()), u32(f_row * h)};
  dispatch_groups(r, kernel(r.context(), "moe_combine", 3), {in(route), in(o), out(f)}, &pc, sizeof pc,
                  (uint64_t(l.rows) * uint64_t(h) + 255) / 256);
}

struct AttentionDims {
  int heads = 0, kv_heads = 0, head_dim = 0;
};

// Cached keys/values [rows, kv_heads*head_dim] (float32).
struct KvSet {
  const Buffer* k = nullptr;
  const Buffer* v = nullptr;
  int64_t rows = 0;
};

inline constexpr int kMaxAttentionHeadDim = 256;

namespace detail {
// attention.comp's push constants.
struct AttentionPush {
  uint32_t rows, heads, group, head_dim, q_off, q_stride, kv_stride, na, nb, causal, causal_base, o_off, o_stride;
  float scale;
  uint32_t k_base, v_base, sel_base, sel_stride;
};
inline AttentionPush attention_push(int64_t rows, int64_t q_off, int64_t q_stride, const AttentionDims& s, int64_t na,
                                    int64_t nb, int64_t o_off, int64_t o_stride) {
  require(s.head_dim > 0 && s.head_dim <= kMaxAttentionHeadDim && s.kv_heads > 0 && s.heads % s.kv_heads == 0,
          Status::unsupported, [&] { return "Vulkan attention: head_dim " + std::to_string(s.head_dim) + " unsupported (max 256)"; });
  return AttentionPush{u32(rows), u32(s.heads), u32(s.heads / s.kv_heads), u32(s.head_dim), u32(q_off), u32(q_stride),
                       u32(int64_t(s.kv_heads) * s.head_dim), u32(na), u32(nb), 0u, 0u, u32(o_off), u32(o_stride),
                       1.0f / std::sqrt(float(s.head_dim)), 0u, 0u, 0u, 0u};
}
}  // namespace detail

// out[out_off + i*o_stride + h*d ..] = softmax(q_i,h · K^T / sqrt(d)) · V over the keys of `a`
// then `b`. causal: query row i sees a's rows [0, causal_base + i] only (b must be empty).
// k_base/v_base: where keys/values start inside their rows (kv_stride = kv_heads*head_dim unless
// given), for packed [q | k | v] rows.
inline void attention(Recorder& r, const Buffer& q, int64_t q_off, int64_t rows, int64_t q_stride, const AttentionDims& s,
                      const KvSet& a, const KvSet& b, bool causal, int64_t causal_base, const Buffer& o, int64_t o_off,
                      int64_t o_stride, int64_t kv_stride = 0, int64_t k_base = 0, int64_t v_base = 0) {
  require(a.rows + b.rows > 0 && a.k && a.v && (!causal || b.rows == 0), Status::internal, "Vulkan attention: bad key sets");
  detail::AttentionPush pc = detail::attention_push(rows, q_off, q_stride, s, a.rows, b.rows, o_off, o_stride);
  if (kv_stride) pc.kv_stride = u32(kv_stride);
  pc.causal = causal ? 1u : 0u;
  pc.causal_base = u32(causal_base);
  pc.k_base = u32(k_base);
  pc.v_base = u32(v_base);
  const Buffer& kb = b.rows ? *b.k : *a.k;
  const Buffer& vb = b.rows ? *b.v : *a.v;
  dispatch_groups(r, kernel(r.context(), "attention", 6), {in(q), in(*a.k), in(*a.v), in(kb), in(vb), out(o)}, &pc,
                  sizeof pc, uint64_t(rows) * uint64_t(s.heads));
}

// SR-SWA decode attention of one query row q [heads*d] (at q_off): head h attends to the reference
// rows of its spans (`sel`, written by sparse_select: at sel_base + h*sel_stride) of `reference`,
// then to the window `b`; out [heads*d] at o_off.
inline void span_attention(Recorder& r, const Buffer& q, int64_t q_off, const AttentionDims& s, const KvSet& reference,
                           const KvSet& b, const Buffer& sel, int64_t sel_base, int64_t sel_stride, const Buffer& o,
                           int64_t o_off) {
  require(reference.k && reference.v, Status::internal, "Vulkan span attention: no reference");
  detail::AttentionPush pc = detail::attention_push(1, q_off, int64_t(s.heads) * s.head_dim, s, reference.rows, b.rows, o_off,
                                                    int64_t(s.heads) * s.head_dim);
  pc.sel_base = u32(sel_base);
  pc.sel_stride = u32(sel_stride);
  const Buffer& kb = b.rows ? *b.k : *reference.k;
  const Buffer& vb = b.rows ? *b.v : *reference.v;
  dispatch_groups(r, kernel(r.context(), "attention_spans", 7),
                  {in(q), in(*reference.k), in(*reference.v), in(kb), in(vb), out(o), in(sel)}, &pc, sizeof pc,
                  uint64_t(s.heads));
}

// cols [ho*wo, c*k*k] = im2col of the channels-last map x [h, w, c] (x_off floats in).
inline void im2col(Recorder& r, const Buffer& x, int64_t x_off, int h, int w, int c, int k, int stride, int pad,
                   const Buffer& cols) {
  const int ho = conv_output_size(h, k, stride, pad), wo = conv_output_size(w, k, stride, pad);
  struct {
    uint32_t h, w, c, k, stride, pad, ho, wo, x_off;
  } pc{u32(h), u32(w), u32(c), u32(k), u32(stride), u32(pad), u32(ho), u32(wo), u32(x_off)};
  const uint64_t n = uint64_t(ho) * uint64_t(wo) * uint64_t(c) * uint64_t(k) * uint64_t(k);
  dispatch_groups(r, kernel(r.context(), "im2col", 2), {in(x), out(cols)}, &pc, sizeof pc, (n + 255) / 256);
}

// cols [g*g, channels*p*p] = the p x p patches of a CHW image of side `size`, g = size / p.
inline void patch_im2col(Recorder& r, const Buffer& img, int channels, int size, int patch, const Buffer& cols) {
  const int g = size / patch;
  struct {
    uint32_t channels, size, patch, grid;
  } pc{u32(channels), u32(size), u32(patch), u32(g)};
  const uint64_t n = uint64_t(g) * uint64_t(g) * uint64_t(channels) * uint64_t(patch) * uint64_t(patch);
  dispatch_groups(r, kernel(r.context(), "patch_im2col", 2), {in(img), out(cols)}, &pc, sizeof pc, (n + 255) / 256);
}

enum class Gelu : uint32_t { erf = 0, quick = 1 };

// In place over n elements: exact (erf) GELU or quick_gelu.
inline void gelu(Recorder& r, const Buffer& x, int64_t x_off, int64_t n, Gelu mode) {
  struct {
    uint32_t n, x_off, mode;
  } pc{u32(n), u32(x_off), uint32_t(mode)};
  dispatch_groups(r, kernel(r.context(), "gelu", 1), {out(x)}, &pc, sizeof pc, (uint64_t(n) + 255) / 256);
}

// o[o_off + i*ldo + j] = x[x_off + i*ldx + j] for i < rows, j < cols.
inline void copy_rows(Recorder& r, const Buffer& x, int64_t x_off, int64_t ldx, int64_t rows, int64_t cols, const Buffer& o,
                      int64_t o_off, int64_t ldo) {
  struct {
    uint32_t rows, cols, x_off, ldx, o_off, ldo;
  } pc{u32(rows), u32(cols), u32(x_off), u32(ldx), u32(o_off), u32(ldo)};
  dispatch_groups(r, kernel(r.context(), "copy_rows", 2), {in(x), out(o)}, &pc, sizeof pc,
                  (uint64_t(rows) * uint64_t(cols) + 255) / 256);
}

// SAM attention with decomposed rel-pos over a g x g map: qkv [g*g, 3c] ([q | k | v], heads of
// c/heads), windows of n x n (n = g: global), padded tokens = qkv_bias; th/tw [2n-1, hd].
// out [g*g, c].
// Head dims 32/64/128 take the tiled one-query-per-thread kernel (rel-pos terms precomputed into a
// scratch buffer); others the generic one-workgroup-per-query kernel.
inline void sam_attention(Recorder& r, const Buffer& qkv, const Buffer& qkv_bias, const Buffer& th, const Buffer& tw, int g,
                          int n, int heads, int c, const Buffer& o) {
  const int hd = c / heads;
  if (hd == 32 || hd == 64 || hd == 128) {
    const uint64_t rel = uint64_t(g) * uint64_t(g) * uint64_t(heads) * 2u * uint64_t(n);
    const Buffer& rb = r.scratch(size_t(rel) * 4, "SAM rel-pos terms");
    struct {
      uint32_t g, n, heads, hd, c;
    } rp{u32(g), u32(n), u32(heads), u32(hd), u32(c)};
    dispatch_groups(r, kernel(r.context(), "sam_relpos", 4), {in(qkv), in(th), in(tw), out(rb)}, &rp, sizeof rp, (rel + 63) / 64);
    const int nw = (g + n - 1) / n, qblocks = (n * n + 63) / 64;
    struct {
      uint32_t g, n, heads, c, nw, qblocks;
      float scale;
    } pc{u32(g), u32(n), u32(heads), u32(c), u32(nw), u32(qblocks), 1.0f / std::sqrt(float(hd))};
    const std::string name = "sam_attention_hd" + std::to_string(hd);
    dispatch_groups(r, kernel(r.context(), name.c_str(), 4), {in(qkv), in(qkv_bias), in(rb), out(o)}, &pc, sizeof pc,
                    uint64_t(nw) * uint64_t(nw) * uint64_t(heads) * uint64_t(qblocks));
    return;
  }
  require(hd <= 256 && n <= 128, Status::unsupported, "Vulkan SAM attention: head dim > 256 or window/grid > 128");
  struct {
    uint32_t g, n, heads, hd, c;
    float scale;
  } pc{u32(g), u32(n), u32(heads), u32(hd), u32(c), 1.0f / std::sqrt(float(hd))};
  dispatch_groups(r, kernel(r.context(), "sam_attention", 5), {in(qkv), in(qkv_bias), in(th), in(tw), out(o)}, &pc,
                  sizeof pc, uint64_t(g) * uint64_t(g) * uint64_t(heads));
}

}  // namespace ops
}  // namespace vulkan
UOCR_NAMESPACE_END
