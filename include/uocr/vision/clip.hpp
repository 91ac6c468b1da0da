// CLIP-L of DeepEncoder (upstream VitModel) run over SAM's features, float32 on CPU.
//
// CLIP never sees pixels here: its patch embeddings are SAM's g x g output map, flattened
// row-major. tokens = [class_embedding; sam rows] + positions, then pre_layrnorm, then pre-LN
// blocks (bidirectional MHA without mask, quick_gelu MLP); there is no post LayerNorm. The
// trained position table covers a 16x16 grid + CLS; for another grid (10x10 on 640 tiles) its
// patch rows are resampled by antialiased bicubic and the CLS row kept (get_abs_pos).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include <Eigen/Core>

#include "uocr/backends/cpu/elementwise.hpp"
#include "uocr/backends/cpu/linear.hpp"
#include "uocr/core/precision.hpp"
#include "uocr/backends/cpu/scratch.hpp"
#include "uocr/image/interpolate.hpp"
#include "uocr/model/config.hpp"
#include "uocr/model/weights.hpp"
#include "uocr/version.hpp"
#include "uocr/vision/conv.hpp"

UOCR_NAMESPACE_BEGIN
namespace vision {

namespace detail {

// Position rows for 1 + g*g tokens, [1 + g*g, width].
inline std::vector<float> clip_positions(const TensorView& table, int g) {
  const int64_t width = table.dim(1);
  const int src = int(std::sqrt(double(table.dim(0) - 1)));
  std::vector<float> p = table.to_vector();
  if (src == g) return p;
  const std::vector<float> chw = transposed(p.data() + width, int64_t(src) * src, width);
  const std::vector<float> r = interpolate_bicubic_aa(chw.data(), int(width), src, src, g, g);
  const std::vector<float> rows = transposed(r.data(), width, int64_t(g) * g);
  p.resize(size_t(width));  // keep the CLS row
  p.insert(p.end(), rows.begin(), rows.end());
  return p;
}

// x·sigmoid(1.702·x), in place.
inline void quick_gelu(float* x, int64_t n) {
  const int64_t chunk = 1 << 14;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; i += chunk) {
    cpu::apply_packets(x + i, std::min(chunk, n - i), [](auto& a) { a = a / (1.f + (-1.702f * a).exp()); });
  }
}

// softmax(q·kᵀ/sqrt(hd))·v per head over all tokens; qkv [tokens, 3W] as [q heads | k | v].
inline void clip_attention(const float* qkv, int64_t tokens, int heads, int64_t width, float* out, Workspace& ws) {
  const int64_t hd = width / heads;
  const float scale = 1.f / std::sqrt(float(hd));
  float* const slices = cpu::thread_slices(ws.buffer(Workspace::threads), tokens * tokens);
#pragma omp parallel for schedule(dynamic)
  for (int h = 0; h < heads; ++h) {
    const Eigen::OuterStride<> ld(3 * width);
    const StridedMap q(qkv + h * hd, tokens, hd, ld), k(qkv + width + h * hd, tokens, hd, ld),
        v(qkv + 2 * width + h * hd, tokens, hd, ld);
    cpu::MatrixMap s(cpu::thread_slice(slices, tokens * tokens), tokens, tokens);
    s.noalias() = q * k.transpose();
    s *= scale;
    softmax_rows(s);
    MutStridedMap(out + h * hd, tokens, hd, Eigen::OuterStride<>(width)).noalias() = s * v;
  }
}

inline void clip_layer(const ClipConfig& cfg, const ClipLayerWeights& l, int64_t tokens, float* x, Workspace& ws,
                       Precision precision) {
  const int64_t w = cfg.width;
  float* const t = ws.get(Workspace::clip_t, tokens * w);
  layer_norm(x, tokens, w, l.ln1, cfg.ln_eps, t);
  float* buf = ws.get(Workspace::clip_buf, tokens * l.qkv.out());
  cpu::linear(t, tokens, l.qkv, buf, precision);
  clip_attention(buf, tokens, cfg.heads, w, t, ws);
  cpu::linear(t, tokens, l.out, buf, precision);  // qkv is spent; reuse its storage
  add_inplace(x, buf, tokens * w);

  layer_norm(x, tokens, w, l.ln2, cfg.ln_eps, t);
  buf = ws.get(Workspace::clip_buf, tokens * l.fc1.out());
  cpu::linear(t, tokens, l.fc1, buf, precision);
  quick_gelu(buf, tokens * l.fc1.out());
  cpu::linear(buf, tokens, l.fc2, t, precision);
  add_inplace(x, t, tokens * w);
}

}  // namespace detail

// CLIP over SAM's [g, g, width] map: [1 + g*g, width] in `ws` (clip_x, reused by the next view),
// row 0 the CLS token; returns its first float. `precision`: the layers' linear layers.
inline const float* clip_forward(const ClipConfig& cfg, const ClipWeights& w, const FeatureMap& sam, Workspace& ws,
                                 Precision precision = Precision::f32) {
  require(sam.h == sam.w && sam.c == cfg.width, Status::internal, "clip_forward: SAM map must be square with CLIP width");
  const int64_t width = cfg.width, tokens = 1 + sam.tokens();
  float* const x = ws.get(Workspace::clip_x, tokens * width);
  w.class_embedding->read_f32(0, width, x);
  std::copy(sam.data.begin(), sam.data.end(), x + width);
  const std::vector<float>& pos =
      ws.table("clip.pos." + std::to_string(sam.h), [&] { return detail::clip_positions(*w.position_embedding, sam.h); });
  detail::add_inplace(x, pos.data(), tokens * width);
  layer_norm(x, tokens, width, w.pre_norm, cfg.ln_eps, x);
  for (const ClipLayerWeights& l : w.layers) {
    ws.deadline.check("encoding a page (CLIP)");
    detail::clip_layer(cfg, l, tokens, x, ws, precision);
  }
  return x;
}

}  // namespace vision
UOCR_NAMESPACE_END
