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
#include "uocr/image/interpolate.hpp"
#include "uocr/model/config.hpp"
#include "uocr/model/weights.hpp"
#include "uocr/vision/conv.hpp"

namespace uocr::vision {

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
inline void clip_attention(const std::vector<float>& qkv, int64_t tokens, int heads, int64_t width, float* out) {
  const int64_t hd = width / heads;
  const float scale = 1.f / std::sqrt(float(hd));
#pragma omp parallel for schedule(dynamic)
  for (int h = 0; h < heads; ++h) {
    const Eigen::OuterStride<> ld(3 * width);
    const StridedMap q(qkv.data() + h * hd, tokens, hd, ld), k(qkv.data() + width + h * hd, tokens, hd, ld),
        v(qkv.data() + 2 * width + h * hd, tokens, hd, ld);
    cpu::RowMatrix s(tokens, tokens);
    s.noalias() = q * k.transpose();
    s *= scale;
    softmax_rows(s);
    MutStridedMap(out + h * hd, tokens, hd, Eigen::OuterStride<>(width)).noalias() = s * v;
  }
}

inline void clip_layer(const ClipConfig& cfg, const ClipLayerWeights& l, int64_t tokens, std::vector<float>& x) {
  const int64_t w = cfg.width;
  std::vector<float> t(x.size());
  layer_norm(x.data(), tokens, w, l.ln1, cfg.ln_eps, t.data());
  std::vector<float> buf = cpu::linear(t, tokens, l.qkv);
  clip_attention(buf, tokens, cfg.heads, w, t.data());
  cpu::linear(t.data(), tokens, l.out, buf.data());  // qkv is spent; reuse its storage
  add_inplace(x.data(), buf.data(), tokens * w);

  layer_norm(x.data(), tokens, w, l.ln2, cfg.ln_eps, t.data());
  buf = cpu::linear(t, tokens, l.fc1);
  quick_gelu(buf.data(), int64_t(buf.size()));
  cpu::linear(buf.data(), tokens, l.fc2, t.data());
  add_inplace(x.data(), t.data(), tokens * w);
}

}  // namespace detail

// CLIP over SAM's [g, g, width] map: [1 + g*g, width], row 0 the CLS token.
inline std::vector<float> clip_forward(const ClipConfig& cfg, const ClipWeights& w, const FeatureMap& sam) {
  require(sam.h == sam.w && sam.c == cfg.width, Status::internal, "clip_forward: SAM map must be square with CLIP width");
  const int64_t width = cfg.width, tokens = 1 + sam.tokens();
  std::vector<float> x(size_t(tokens * width));
  w.class_embedding->read_f32(0, width, x.data());
  std::copy(sam.data.begin(), sam.data.end(), x.begin() + width);
  detail::add_inplace(x.data(), detail::clip_positions(*w.position_embedding, sam.h).data(), tokens * width);
  layer_norm(x.data(), tokens, width, w.pre_norm, cfg.ln_eps, x.data());
  for (const ClipLayerWeights& l : w.layers) detail::clip_layer(cfg, l, tokens, x);
  return x;
}

}  // namespace uocr::vision
