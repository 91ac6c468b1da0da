// SAM-ViT image encoder of DeepEncoder (upstream ImageEncoderViT + net_2/net_3), float32 on CPU.
//
// view [3, S, S] -> patch_embed (16x16) -> + abs pos -> blocks -> neck -> net_2 -> net_3
// giving a channels-last [S/64, S/64, net3] map (16x16 for the 1024 global view, 10x10 for
// 640 tiles). Position tables are resampled when the grid G = S/16 differs from the trained 64:
// pos_embed by antialiased bicubic, global blocks' rel-pos tables (2*64-1 rows) linearly.
// The resampled tables stay float32 (a float32 reference keeps them so; bf16 inference would
// round them to bf16).
//
// Upstream details kept on purpose:
//  - windowed blocks zero-pad the *normed* map to a multiple of the window; padded tokens get
//    q/k/v = the qkv bias and take part as keys/values, with no mask;
//  - the decomposed rel-pos bias uses the unscaled q; scores = q·kᵀ/sqrt(hd) + bias;
//  - exact (erf) GELU; neck and compressor convs have no bias and no activation in between.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <Eigen/Core>
#include <unsupported/Eigen/SpecialFunctions>

#include "uocr/backends/cpu/elementwise.hpp"
#include "uocr/backends/cpu/linear.hpp"
#include "uocr/core/precision.hpp"
#include "uocr/image/interpolate.hpp"
#include "uocr/model/config.hpp"
#include "uocr/model/weights.hpp"
#include "uocr/version.hpp"
#include "uocr/vision/conv.hpp"

UOCR_NAMESPACE_BEGIN
namespace vision {

namespace detail {

// pos_embed [1, G0, G0, C] at grid g, channels-last [g*g, C] (get_abs_pos_sam).
inline std::vector<float> sam_abs_pos(const TensorView& pos, int g) {
  const int g0 = int(pos.dim(1)), c = int(pos.dim(3));
  std::vector<float> p = pos.to_vector();
  if (g0 == g) return p;
  const std::vector<float> chw = transposed(p.data(), int64_t(g0) * g0, c);
  const std::vector<float> r = interpolate_bicubic_aa(chw.data(), c, g0, g0, g, g);
  return transposed(r.data(), c, int64_t(g) * g);
}

// Rel-pos table [L, hd] as the [2n-1, hd] table get_rel_pos uses for an n-long axis.
inline std::vector<float> rel_pos_table(const TensorView& t, int n) {
  const int len = int(t.dim(0)), hd = int(t.dim(1));
  std::vector<float> v = t.to_vector();
  if (len == 2 * n - 1) return v;
  const std::vector<float> cl = transposed(v.data(), len, hd);
  const std::vector<float> r = interpolate_linear(cl.data(), hd, len, 2 * n - 1);
  return transposed(r.data(), hd, 2 * n - 1);
}

// Floats of rel_pos_attention's scratch (RelPosScratch) for `rows` query rows of an n x n grid.
inline int64_t rel_pos_scratch_floats(int n, int64_t rows) {
  const int64_t keys = int64_t(n) * n, span = 2 * n - 1;
  return cpu::aligned_floats(rows * keys) + 2 * cpu::aligned_floats(rows * span) + cpu::aligned_floats(n) +
         cpu::aligned_floats(rows);
}

// The rel-pos bias and the softmax numerators of query rows [r0, r0+rows) of an n x n token grid,
// in place in their scores s (rows ld floats apart, n*n keys): s = exp(s·scale + rel_h[ky] +
// rel_w[kx] - the row's max), with ph/pw [rows, 2n-1] = q·table (rel_h/rel_w at q_pos - k_pos +
// n-1), and 1/(the row's sum) in inv_sum: the division goes onto the [rows, hd] output instead of
// the [rows, n*n] probabilities. One pass adds the bias and finds the max, one exponentiates and
// sums. `rw`: n floats of scratch (one query row's width bias).
inline void rel_pos_softmax(float* s, int64_t ld, int n, int64_t r0, int64_t rows, const float* ph, const float* pw,
                            float scale, float* rw, float* inv_sum) {
  const int64_t span = 2 * n - 1, keys = int64_t(n) * n;
  for (int64_t r = 0; r < rows; ++r) {
    const int qy = int((r0 + r) / n), qx = int((r0 + r) % n);
    const float* pwr = pw + r * span;
    const float* phr = ph + r * span;
    for (int kx = 0; kx < n; ++kx) rw[kx] = pwr[qx - kx + n - 1];
    float* srow = s + r * ld;
    float mx = -std::numeric_limits<float>::infinity();
    for (int ky = 0; ky < n; ++ky) {
      const float bh = phr[qy - ky + n - 1];
      float* seg = srow + int64_t(ky) * n;
      const float* rwp = rw;
#pragma omp simd reduction(max : mx)
      for (int kx = 0; kx < n; ++kx) {
        const float t = seg[kx] * scale + (bh + rwp[kx]);
        seg[kx] = t;
        mx = std::max(mx, t);
      }
    }
    Eigen::Map<Eigen::ArrayXf> a(srow, keys);
    a = (a - mx).exp();
    inv_sum[r] = 1.f / a.sum();
  }
}

// Scratch of rel_pos_attention: the scores, the two rel-pos products, one query row's width bias
// and the row sums, each part aligned.
struct RelPosScratch {
  float *scores, *ph, *pw, *rw, *inv_sum;
  RelPosScratch(float* scratch, int n, int64_t rows) {
    const int64_t keys = int64_t(n) * n, span = 2 * n - 1;
    scores = scratch;
    ph = scores + cpu::aligned_floats(rows * keys);
    pw = ph + cpu::aligned_floats(rows * span);
    rw = pw + cpu::aligned_floats(rows * span);
    inv_sum = rw + cpu::aligned_floats(n);
  }
};

// The two rel-pos products of query rows qb ([rows, hd]) into sc.ph / sc.pw: q·table_hᵀ and
// q·table_wᵀ, [rows, 2n-1] each, as rel_pos_softmax reads them.
template <class QueryRows>
inline void rel_pos_products(const QueryRows& qb, const float* table_h, const float* table_w, int n,
                             const RelPosScratch& sc) {
  const int64_t rows = qb.rows(), hd = qb.cols(), span = 2 * n - 1;
  cpu::MatrixMap ph(sc.ph, rows, span), pw(sc.pw, rows, span);
  ph.noalias() = qb * Eigen::Map<const cpu::RowMatrix>(table_h, span, hd).transpose();
  pw.noalias() = qb * Eigen::Map<const cpu::RowMatrix>(table_w, span, hd).transpose();
}

// Attention of query rows [r0, r0+rows) of an n x n token grid over all n*n keys of one head:
// softmax(q·kᵀ·scale + rel_h[ky] + rel_w[kx])·v, with rel_h/rel_w = q·table[q_pos - k_pos + n-1],
// in float32. Writes the rows to out (row stride ldo). Callers keep `rows` small (128) so the
// scores stay near L2. `scratch`: rel_pos_scratch_floats(n, rows) floats, aligned
// (cpu::thread_slice).
inline void rel_pos_attention(const StridedMap& q, const StridedMap& k, const StridedMap& v, int n, int64_t r0,
                              int64_t rows, const float* table_h, const float* table_w, float scale, float* out,
                              int64_t ldo, float* scratch) {
  const int64_t hd = q.cols(), keys = k.rows();
  const RelPosScratch sc(scratch, n, rows);
  const auto qb = q.middleRows(r0, rows);
  rel_pos_products(qb, table_h, table_w, n, sc);
  cpu::MatrixMap s(sc.scores, rows, keys);
  s.noalias() = qb * k.transpose();
  rel_pos_softmax(sc.scores, keys, n, r0, rows, sc.ph, sc.pw, scale, sc.rw, sc.inv_sum);
  MutStridedMap o(out + r0 * ldo, rows, hd, Eigen::OuterStride<>(ldo));
  o.noalias() = s * v;
  for (int64_t r = 0; r < rows; ++r) o.row(r) *= sc.inv_sum[r];
}

#ifdef UOCR_CPU_AMX_KERNEL
// uint16 scratch of rel_pos_attention_bf16 for `rows` query rows, hd wide, over `keys` keys.
inline int64_t rel_pos_bf16_scratch(int64_t rows, int64_t hd, int64_t keys) {
  return cpu::amx_rows(rows) * 2 * (cpu::amx_pairs(hd) + cpu::amx_pairs(keys));
}

// rel_pos_attention with its two big products, q·kᵀ and the probabilities·v, in bf16 with float32
// sums on AMX tiles (the calling thread's, cpu::AmxTiles), as upstream's attention computes under
// bf16 autocast; the rel-pos products and the softmax stay float32. q's rows are hd floats apart;
// k and v come packed (cpu::pack_bf16_rows(k), cpu::pack_bf16_columns(v)); `bf16_scratch`:
// rel_pos_bf16_scratch(rows, hd, n*n) elements.
inline void rel_pos_attention_bf16(const StridedMap& q, const uint32_t* k_packed, const uint32_t* v_packed, int n,
                                   int64_t r0, int64_t rows, const float* table_h, const float* table_w, float scale,
                                   float* out, int64_t ldo, float* scratch, uint16_t* bf16_scratch) {
  const int64_t hd = q.cols(), keys = int64_t(n) * n;
  const RelPosScratch sc(scratch, n, rows);
  rel_pos_products(q.middleRows(r0, rows), table_h, table_w, n, sc);
  uint16_t* const q_rows = bf16_scratch;
  uint16_t* const p_rows = q_rows + cpu::amx_rows(rows) * 2 * cpu::amx_pairs(hd);
  cpu::round_bf16_rows(q.data() + r0 * hd, rows, hd, q_rows);
  cpu::amx_product(q_rows, k_packed, rows, keys, hd, sc.scores, keys);
  rel_pos_softmax(sc.scores, keys, n, r0, rows, sc.ph, sc.pw, scale, sc.rw, sc.inv_sum);
  cpu::round_bf16_rows(sc.scores, rows, keys, p_rows);
  float* const o = out + r0 * ldo;
  cpu::amx_product(p_rows, v_packed, rows, hd, keys, o, ldo);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < hd; ++c) o[r * ldo + c] *= sc.inv_sum[r];
}
#endif

// Global attention over the g x g grid; qkv [g*g, 3C] rows ordered [q heads | k | v].
// q/k/v are first copied head-major ([part][head][token][hd], contiguous), so the GEMMs pack
// dense rows instead of rows 3C floats apart; then query rows go in blocks of 128 (scores
// 128 x 4096 floats = 2 MB at the 1024 view: the fastest of the block sizes tried,
// docs/PERFORMANCE.md). Precision::bf16 on a CPU with AMX: each head's k and v are packed once
// as bf16 tile operands and the blocks run rel_pos_attention_bf16.
inline void sam_global_attention(const float* qkv, int g, int heads, int64_t c, const std::vector<float>& th,
                                 const std::vector<float>& tw, float* out, Workspace& ws, Precision precision) {
  const int64_t n_tok = int64_t(g) * g, hd = c / heads, block = 128;
  const int64_t blocks = (n_tok + block - 1) / block;
  const float scale = 1.f / std::sqrt(float(hd));
  float* const hm = ws.get(Workspace::heads, n_tok * 3 * c);
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < n_tok; ++t)
    for (int64_t part = 0; part < 3; ++part)
      for (int h = 0; h < heads; ++h)
        std::copy_n(qkv + t * 3 * c + part * c + h * hd, hd, hm + ((part * heads + h) * n_tok + t) * hd);
  auto part = [&](int p, int h) { return hm + (int64_t(p) * heads + h) * n_tok * hd; };
  const int64_t per_thread = rel_pos_scratch_floats(g, std::min(block, n_tok));
  float* const slices = cpu::thread_slices(ws.buffer(Workspace::threads), per_thread);
  const Eigen::OuterStride<> ld(hd);
#ifdef UOCR_CPU_AMX_KERNEL
  if (precision == Precision::bf16 && cpu::amx_bf16_available()) {
    const int64_t k_words = cpu::amx_rows(n_tok) * cpu::amx_pairs(hd), v_words = cpu::amx_rows(hd) * cpu::amx_pairs(n_tok);
    uint32_t* const packed = ws.bf16_operands(heads * (k_words + v_words));
    auto k_of = [&](int h) { return packed + h * (k_words + v_words); };
#pragma omp parallel for schedule(dynamic)
    for (int task = 0; task < 2 * heads; ++task) {
      const int h = task / 2;
      if (task % 2 == 0)
        cpu::pack_bf16_rows(part(1, h), n_tok, hd, hd, k_of(h));
      else
        cpu::pack_bf16_columns(part(2, h), n_tok, hd, hd, k_of(h) + k_words);
    }
#pragma omp parallel
    {
      const cpu::AmxTiles tiles;
      thread_local std::vector<uint16_t> bf16_scratch;
      bf16_scratch.resize(size_t(rel_pos_bf16_scratch(std::min(block, n_tok), hd, n_tok)));
#pragma omp for collapse(2) schedule(dynamic)
      for (int h = 0; h < heads; ++h)
        for (int64_t b = 0; b < blocks; ++b)
          rel_pos_attention_bf16(StridedMap(part(0, h), n_tok, hd, ld), k_of(h), k_of(h) + k_words, g, b * block,
                                 std::min(block, n_tok - b * block), th.data(), tw.data(), scale, out + h * hd, c,
                                 cpu::thread_slice(slices, per_thread), bf16_scratch.data());
    }
    return;
  }
#else
  (void)precision;
#endif
#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int h = 0; h < heads; ++h)
    for (int64_t b = 0; b < blocks; ++b) {
      const StridedMap q(part(0, h), n_tok, hd, ld), k(part(1, h), n_tok, hd, ld), v(part(2, h), n_tok, hd, ld);
      rel_pos_attention(q, k, v, g, b * block, std::min(block, n_tok - b * block), th.data(), tw.data(), scale,
                        out + h * hd, c, cpu::thread_slice(slices, per_thread));
    }
}

// Windowed attention: the g x g grid zero-padded to whole ws x ws windows (row-major). qkv holds
// the g*g real tokens; a padded token's q/k/v is the qkv bias (a zero row through the Linear).
inline void sam_window_attention(const float* qkv, const float* qkv_bias, int g, int ws, int heads, int64_t c,
                                 const std::vector<float>& th, const std::vector<float>& tw, float* out,
                                 Workspace& work) {
  const int nw = (g + ws - 1) / ws;
  const int64_t hd = c / heads, wt = int64_t(ws) * ws;
  const float scale = 1.f / std::sqrt(float(hd));
  // Per thread: q | k | v | out, each [wt, hd], then rel_pos_attention's scratch.
  const int64_t window_floats = cpu::aligned_floats(4 * wt * hd);
  const int64_t per_thread = window_floats + rel_pos_scratch_floats(ws, wt);
  float* const slices = cpu::thread_slices(work.buffer(Workspace::threads), per_thread);
#pragma omp parallel for collapse(2) schedule(dynamic)
  for (int w = 0; w < nw * nw; ++w)
    for (int h = 0; h < heads; ++h) {
      const int wy = w / nw, wx = w % nw;
      float* const buf = cpu::thread_slice(slices, per_thread);
      for (int64_t t = 0; t < wt; ++t) {
        const int y = wy * ws + int(t / ws), x = wx * ws + int(t % ws);
        const float* src = (y < g && x < g) ? qkv + (int64_t(y) * g + x) * 3 * c : qkv_bias;
        for (int part = 0; part < 3; ++part)
          std::copy_n(src + part * c + h * hd, hd, buf + (part * wt + t) * hd);
      }
      const Eigen::OuterStride<> ld(hd);
      const StridedMap q(buf, wt, hd, ld), k(buf + wt * hd, wt, hd, ld), v(buf + 2 * wt * hd, wt, hd, ld);
      float* o = buf + 3 * wt * hd;
      rel_pos_attention(q, k, v, ws, 0, wt, th.data(), tw.data(), scale, o, hd, buf + window_floats);
      for (int64_t t = 0; t < wt; ++t) {
        const int y = wy * ws + int(t / ws), x = wx * ws + int(t % ws);
        if (y < g && x < g) std::copy_n(o + t * hd, hd, out + (int64_t(y) * g + x) * c + h * hd);
      }
    }
}

// Exact GELU 0.5·x·(1 + erf(x/√2)), in place (Eigen's vectorised float erf, a few ulp).
inline void gelu_erf(float* x, int64_t n) {
  const int64_t chunk = 1 << 14;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i += chunk) {
    cpu::apply_packets(x + i, std::min(chunk, n - i),
                       [](auto& a) { a = 0.5f * a * (1.f + (a * 0.70710678118654752f).erf()); });
  }
}

// Block `index` over the token stream x, in place.
inline void sam_block(const SamConfig& cfg, const SamBlockWeights& b, int index, bool global, FeatureMap& x,
                      Workspace& ws, Precision precision) {
  const int g = x.h;
  const int64_t n_tok = x.tokens(), c = x.c;
  float* const t = ws.get(Workspace::normed, n_tok * c);
  layer_norm(x.data.data(), n_tok, c, b.norm1, cfg.ln_eps, t);
  float* const qkv = ws.get(Workspace::qkv, n_tok * b.qkv.out());
  cpu::linear(t, n_tok, b.qkv, qkv, precision);
  const int span = global ? g : cfg.window;
  const std::string key = "sam." + std::to_string(index) + "." + std::to_string(span);
  const std::vector<float>& th = ws.table(key + ".rel_h", [&] { return rel_pos_table(*b.rel_pos_h, span); });
  const std::vector<float>& tw = ws.table(key + ".rel_w", [&] { return rel_pos_table(*b.rel_pos_w, span); });
  if (global) {
    sam_global_attention(qkv, g, cfg.heads, c, th, tw, t, ws, precision);
  } else {
    const std::vector<float>& bias = ws.table(key + ".qkv_bias", [&] { return b.qkv.bias->to_vector(); });
    sam_window_attention(qkv, bias.data(), g, cfg.window, cfg.heads, c, th, tw, t, ws);
  }
  cpu::linear(t, n_tok, b.proj, qkv, precision);  // qkv is spent; its first n_tok*c floats take proj
  add_inplace(x.data.data(), qkv, n_tok * c);

  layer_norm(x.data.data(), n_tok, c, b.norm2, cfg.ln_eps, t);
  const int64_t hidden_floats = n_tok * b.lin1.out();
  float* const hidden = ws.get(Workspace::mlp, hidden_floats);
  cpu::linear(t, n_tok, b.lin1, hidden, precision);
  gelu_erf(hidden, hidden_floats);
  cpu::linear(hidden, n_tok, b.lin2, t, precision);
  add_inplace(x.data.data(), t, n_tok * c);
}

}  // namespace detail

// SAM on one normalised view: chw = [3, size, size] float32; size a multiple of the patch size.
// Results in `ws` (reused by the next view): ws.neck [G, G, out_chans] after the neck's second
// LayerNorm2d, ws.sam_out [G/4, G/4, net3_chans] = net_3(net_2(neck)). `precision`: the blocks'
// linear layers (uocr/core/precision.hpp).
inline void sam_forward(const SamConfig& cfg, const SamWeights& w, const float* chw, int size, Workspace& ws,
                        Precision precision = Precision::f32) {
  FeatureMap& x = ws.sam_x;
  patch_embed(chw, 3, size, *w.patch_weight, w.patch_bias, x, ws.buffer(Workspace::columns));
  const std::vector<float>& pos = ws.table("sam.pos." + std::to_string(x.h), [&] { return detail::sam_abs_pos(*w.pos_embed, x.h); });
  detail::add_inplace(x.data.data(), pos.data(), int64_t(x.data.size()));
  for (int b = 0; b < int(w.blocks.size()); ++b) {
    ws.deadline.check("encoding a page (SAM)");
    detail::sam_block(cfg, w.blocks[size_t(b)], b, cfg.is_global(b), x, ws, precision);
  }

  conv2d(x, *w.neck_conv1, nullptr, 1, 0, ws.conv_tmp, ws.buffer(Workspace::columns));
  layer_norm(ws.conv_tmp, w.neck_norm1, cfg.ln_eps);
  conv2d(ws.conv_tmp, *w.neck_conv2, nullptr, 1, 1, ws.neck, ws.buffer(Workspace::columns));
  layer_norm(ws.neck, w.neck_norm2, cfg.ln_eps);
  conv2d(ws.neck, *w.net2, nullptr, 2, 1, ws.conv_tmp, ws.buffer(Workspace::columns));
  conv2d(ws.conv_tmp, *w.net3, nullptr, 2, 1, ws.sam_out, ws.buffer(Workspace::columns));
}

}  // namespace vision
UOCR_NAMESPACE_END
