// DeepEncoder (SAM-ViT -> CLIP-L -> projector) on a CUDA device, mirroring uocr::VisionEncoder
// (vision/encoder.hpp) op for op, as the Vulkan encoder does (backends/vulkan/vision.hpp):
// patch embedding and convolutions as im2col (conv.cu) + ops::linear (cuBLAS), LayerNorm and
// LayerNorm2d (channels-last, so the same per-token kernel, norm.cu), SAM windowed and global
// attention with decomposed relative positions (sam_attention.cu), erf GELU, CLIP blocks with
// quick_gelu over the decoder's attention kernel (attention.cu), and the linear projector.
// Weights are uploaded once in their stored type; the size-dependent tables (SAM pos_embed and
// rel-pos tables, CLIP positions) are resampled on the host exactly as the CPU path does, then
// cached on the device. A view's activations come from the Context's caching allocator and go
// back to it when the view is done; the view's result is read back once.
//
//   cuda::CudaVisionEncoder enc(ctx, config, weights);
//   std::vector<float> emb = enc.visual_tokens(global, tiles, tiles_x, tiles_y);  // as VisionEncoder
//
// Thread-safety: one thread at a time (the Context's rule); the engine shares one per device
// under a lock.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "uocr/backends/cuda/context.hpp"
#include "uocr/backends/cuda/ops.hpp"
#include "uocr/backends/cuda/weights.hpp"
#include "uocr/model/config.hpp"
#include "uocr/model/weights.hpp"
#include "uocr/vision/encoder.hpp"

namespace uocr::cuda {

class CudaVisionEncoder {
 public:
  CudaVisionEncoder(Context& ctx, const ModelConfig& config, const ModelWeights& weights)
      : ctx_(ctx), cfg_(config), w_(weights), host_(config, weights) {
    require(config.clip.width == config.sam.net3_chans, Status::invalid_model,
            "CUDA vision encoder: CLIP width must equal SAM's net_3 channels (CLIP embeds SAM's map)");
    const SamWeights& s = w_.sam;
    patch_ = upload_matrix(ctx_, *s.patch_weight);
    patch_bias_ = upload_f32(ctx_, *s.patch_bias);
    for (const SamBlockWeights& b : s.blocks)
      sam_.push_back(SamBlock{norm(b.norm1), norm(b.norm2), linear(b.qkv), linear(b.proj), linear(b.lin1), linear(b.lin2)});
    neck1_ = upload_matrix(ctx_, *s.neck_conv1);
    neck2_ = upload_matrix(ctx_, *s.neck_conv2);
    neck_norm1_ = norm(s.neck_norm1);
    neck_norm2_ = norm(s.neck_norm2);
    net2_ = upload_matrix(ctx_, *s.net2);
    net3_ = upload_matrix(ctx_, *s.net3);
    const ClipWeights& c = w_.clip;
    cls_ = upload_f32(ctx_, *c.class_embedding);
    pre_norm_ = norm(c.pre_norm);
    for (const ClipLayerWeights& l : c.layers)
      clip_.push_back(ClipLayer{norm(l.ln1), norm(l.ln2), linear(l.qkv), linear(l.out), linear(l.fc1), linear(l.fc2)});
    projector_ = linear(w_.glue.projector);
  }

  int hidden() const { return cfg_.decoder.hidden; }
  // Most bytes of activation buffers one encode_view() held since reset_peak().
  size_t peak_activation_bytes() const { return peak_activation_bytes_; }
  void reset_peak() { peak_activation_bytes_ = 0; }
  int64_t token_count(int global_size, int tile_size, int tiles_x, int tiles_y) const {
    return host_.token_count(global_size, tile_size, tiles_x, tiles_y);
  }

  // Projected features of one view [g*g, hidden]; chw = [3, size, size]. Same contract and
  // captures as VisionEncoder::encode_view.
  std::vector<float> encode_view(const float* chw, int size, VisionCaptures* captures = nullptr) {
    const SamConfig& sc = cfg_.sam;
    const ClipConfig& cc = cfg_.clip;
    const ViewGeometry view(sc, chw, size);
    const int G = view.G, G2 = view.G2, g = view.g, C = sc.width, oc = sc.out_chans;
    const int64_t N = view.N, t = view.t, W = cc.width, c3 = sc.net3_chans, hid = hidden(), tokens = 1 + t;
    ctx_.make_current();

    size_t held = 0;  // this view's activation buffers (peak_activation_bytes())
    auto act = [&](int64_t floats, const char* what) {
      Buffer b = ctx_.alloc(size_t(std::max<int64_t>(1, floats)) * sizeof(float), what);
      held += b.bytes();
      peak_activation_bytes_ = std::max(peak_activation_bytes_, held);
      return b;
    };
    const int64_t mlp = std::max<int64_t>(int64_t(4) * C, cc.ffn);
    // im2col columns: the patch embedding and the three 3x3 convolutions.
    const int64_t cols = view.im2col_floats(sc);
    Buffer img = act(int64_t(3) * size * size, "vision view");
    Buffer col = act(cols, "im2col columns"), x = act(N * C, "SAM tokens"), tmp = act(N * C, "SAM normed tokens");
    Buffer qkv = act(N * 3 * C, "SAM qkv"), hbuf = act(N * mlp, "vision MLP hidden");
    Buffer neck = act(N * oc, "SAM neck"), neck2 = act(N * oc, "SAM neck conv2");
    Buffer f2 = act(int64_t(G2) * G2 * sc.net2_chans, "SAM net_2"), f3 = act(t * c3, "SAM net_3");
    Buffer cx = act(tokens * W, "CLIP tokens"), ct = act(tokens * W, "CLIP normed tokens");
    Buffer cqkv = act(tokens * 3 * W, "CLIP qkv"), ck = act(tokens * W, "CLIP keys"), cv = act(tokens * W, "CLIP values");
    Buffer feat = act(t * (W + c3), "projector input"), out = act(t * hid, "visual features");
    ctx_.upload(img, 0, chw, size_t(3) * size_t(size) * size_t(size) * sizeof(float));

    // SAM: patches -> tokens [N, C] + absolute positions.
    ops::patch_im2col(ctx_, img.f32(), 3, size, sc.patch, col.f32());
    ops::linear(ctx_, col.f32(), N, patch_, patch_bias_.f32(), x.f32());
    ops::add(ctx_, x.f32(), sam_pos(G).f32(), N * C);
    for (int b = 0; b < int(sam_.size()); ++b) {
      const SamBlock& B = sam_[size_t(b)];
      const int span = sc.is_global(b) ? G : sc.window;
      const std::pair<Buffer, Buffer>& rel = rel_tables(b, span);
      ops::layer_norm(ctx_, x.f32(), N, C, B.norm1.w.f32(), B.norm1.b.f32(), sc.ln_eps, tmp.f32());
      ops::linear(ctx_, tmp.f32(), N, B.qkv.w, B.qkv.b.f32(), qkv.f32());
      ops::sam_attention(ctx_, qkv.f32(), B.qkv.b.f32(), rel.first.f32(), rel.second.f32(), G, span, sc.heads, C, tmp.f32());
      ops::linear(ctx_, tmp.f32(), N, B.proj.w, B.proj.b.f32(), qkv.f32());  // qkv is spent: it takes proj
      ops::add(ctx_, x.f32(), qkv.f32(), N * C);
      ops::layer_norm(ctx_, x.f32(), N, C, B.norm2.w.f32(), B.norm2.b.f32(), sc.ln_eps, tmp.f32());
      ops::linear(ctx_, tmp.f32(), N, B.lin1.w, B.lin1.b.f32(), hbuf.f32());
      ops::gelu(ctx_, hbuf.f32(), N * B.lin1.w.view.rows, ops::Gelu::erf);
      ops::linear(ctx_, hbuf.f32(), N, B.lin2.w, B.lin2.b.f32(), tmp.f32());
      ops::add(ctx_, x.f32(), tmp.f32(), N * C);
    }
    // Neck: 1x1 conv, LayerNorm2d, 3x3 conv, LayerNorm2d; then net_2 and net_3 (3x3, stride 2).
    ops::linear(ctx_, x.f32(), N, neck1_, nullptr, neck.f32());
    ops::layer_norm(ctx_, neck.f32(), N, oc, neck_norm1_.w.f32(), neck_norm1_.b.f32(), sc.ln_eps, neck.f32());
    ops::im2col(ctx_, neck.f32(), G, G, oc, 3, 1, 1, col.f32());
    ops::linear(ctx_, col.f32(), N, neck2_, nullptr, neck2.f32());
    ops::layer_norm(ctx_, neck2.f32(), N, oc, neck_norm2_.w.f32(), neck_norm2_.b.f32(), sc.ln_eps, neck2.f32());
    ops::im2col(ctx_, neck2.f32(), G, G, oc, 3, 2, 1, col.f32());
    ops::linear(ctx_, col.f32(), int64_t(G2) * G2, net2_, nullptr, f2.f32());
    ops::im2col(ctx_, f2.f32(), G2, G2, sc.net2_chans, 3, 2, 1, col.f32());
    ops::linear(ctx_, col.f32(), t, net3_, nullptr, f3.f32());

    // CLIP over SAM's map: [CLS; rows] + positions, pre-LN, pre-LN blocks. The attention kernel
    // takes each query row where it lies in qkv; keys and values are copied out to rows of W.
    ctx_.copy(cx.f32(), cls_.f32(), size_t(W) * sizeof(float));
    ctx_.copy(cx.f32() + W, f3.f32(), size_t(t * W) * sizeof(float));
    ops::add(ctx_, cx.f32(), clip_pos(g).f32(), tokens * W);
    ops::layer_norm(ctx_, cx.f32(), tokens, W, pre_norm_.w.f32(), pre_norm_.b.f32(), cc.ln_eps, cx.f32());
    std::vector<ops::AttentionRow> rows(static_cast<size_t>(tokens));
    for (int64_t i = 0; i < tokens; ++i)
      rows[size_t(i)] = ops::AttentionRow{cqkv.f32() + i * 3 * W, ct.f32() + i * W, ops::KvSpan{ck.f32(), cv.f32(), tokens}, {}};
    Buffer table = ctx_.alloc(rows.size() * sizeof(ops::AttentionRow), "CLIP attention rows");
    ctx_.upload(table, 0, rows.data(), rows.size() * sizeof(ops::AttentionRow));
    const ops::AttentionDims dims{cc.heads, cc.heads, int(W / cc.heads)};
    for (const ClipLayer& L : clip_) {
      ops::layer_norm(ctx_, cx.f32(), tokens, W, L.ln1.w.f32(), L.ln1.b.f32(), cc.ln_eps, ct.f32());
      ops::linear(ctx_, ct.f32(), tokens, L.qkv.w, L.qkv.b.f32(), cqkv.f32());
      ops::copy_rows(ctx_, cqkv.f32() + W, 3 * W, tokens, W, ck.f32(), W);
      ops::copy_rows(ctx_, cqkv.f32() + 2 * W, 3 * W, tokens, W, cv.f32(), W);
      ops::attention(ctx_, table.as<ops::AttentionRow>(), tokens, dims, tokens);
      ops::linear(ctx_, ct.f32(), tokens, L.out.w, L.out.b.f32(), cqkv.f32());
      ops::add(ctx_, cx.f32(), cqkv.f32(), tokens * W);
      ops::layer_norm(ctx_, cx.f32(), tokens, W, L.ln2.w.f32(), L.ln2.b.f32(), cc.ln_eps, ct.f32());
      ops::linear(ctx_, ct.f32(), tokens, L.fc1.w, L.fc1.b.f32(), hbuf.f32());
      ops::gelu(ctx_, hbuf.f32(), tokens * L.fc1.w.view.rows, ops::Gelu::quick);
      ops::linear(ctx_, hbuf.f32(), tokens, L.fc2.w, L.fc2.b.f32(), ct.f32());
      ops::add(ctx_, cx.f32(), ct.f32(), tokens * W);
    }
    // Projector over [CLIP rows 1.. | SAM features].
    ops::copy_rows(ctx_, cx.f32() + W, W, t, W, feat.f32(), W + c3);
    ops::copy_rows(ctx_, f3.f32(), c3, t, c3, feat.f32() + W, W + c3);
    ops::linear(ctx_, feat.f32(), t, projector_.w, projector_.b.f32(), out.f32());

    std::vector<float> result(size_t(t * hid));
    ctx_.download(out, 0, result.data(), result.size() * sizeof(float));
    if (captures) {
      captures->sam_neck = vision::FeatureMap(G, G, oc);
      ctx_.download(neck2, 0, captures->sam_neck.data.data(), captures->sam_neck.data.size() * sizeof(float));
      captures->sam_out = vision::FeatureMap(g, g, int(c3));
      ctx_.download(f3, 0, captures->sam_out.data.data(), captures->sam_out.data.size() * sizeof(float));
      captures->clip_out.resize(size_t(tokens * W));
      ctx_.download(cx, 0, captures->clip_out.data(), captures->clip_out.size() * sizeof(float));
      captures->projector_out = result;
    }
    return result;
  }

  // The embeddings of one image, laid out as VisionEncoder::visual_tokens.
  std::vector<float> visual_tokens(const std::vector<float>& global_view, const std::vector<std::vector<float>>& tiles,
                                   int tiles_x, int tiles_y) {
    return host_.visual_tokens_by(global_view, tiles, tiles_x, tiles_y,
                                  [&](const std::vector<float>& view) { return encode(view); });
  }

 private:
  struct Norm {
    Buffer w, b;
  };
  struct Lin {
    DeviceMatrix w;
    Buffer b;  // zeros when the checkpoint has no bias (SAM's padded tokens read the qkv bias)
  };
  struct SamBlock {
    Norm norm1, norm2;
    Lin qkv, proj, lin1, lin2;
  };
  struct ClipLayer {
    Norm ln1, ln2;
    Lin qkv, out, fc1, fc2;
  };

  Norm norm(const NormWeights& n) { return Norm{upload_f32(ctx_, *n.weight), upload_f32(ctx_, *n.bias)}; }
  Lin linear(const LinearWeights& l) {
    Lin d{upload_matrix(ctx_, *l.weight), {}};
    if (l.bias) {
      d.b = upload_f32(ctx_, *l.bias);
    } else {
      const std::vector<float> zero(size_t(l.out()), 0.f);
      d.b = upload_f32(ctx_, zero.data(), zero.size(), "zero bias");
    }
    return d;
  }

  std::vector<float> encode(const std::vector<float>& view) {
    const int size = int(std::lround(std::sqrt(double(view.size()) / 3.0)));
    require(size > 0 && size_t(3) * size_t(size) * size_t(size) == view.size(), Status::invalid_argument,
            [&] { return "vision view of " + std::to_string(view.size()) + " floats is not a 3 x S x S image"; });
    return encode_view(view.data(), size);
  }

  // A host-made table for grid size `key`, uploaded the first time.
  template <class Make>
  const Buffer& cached(std::map<int, Buffer>& m, int key, const char* what, Make&& make) {
    auto it = m.find(key);
    if (it == m.end()) {
      const std::vector<float> v = make();
      it = m.emplace(key, upload_f32(ctx_, v.data(), v.size(), what)).first;
    }
    return it->second;
  }
  const Buffer& sam_pos(int g) {
    return cached(sam_pos_, g, "SAM pos_embed", [&] { return vision::detail::sam_abs_pos(*w_.sam.pos_embed, g); });
  }
  const Buffer& clip_pos(int g) {
    return cached(clip_pos_, g, "CLIP positions", [&] { return vision::detail::clip_positions(*w_.clip.position_embedding, g); });
  }
  const std::pair<Buffer, Buffer>& rel_tables(int block, int span) {
    const auto key = std::make_pair(block, span);
    auto it = rel_.find(key);
    if (it == rel_.end()) {
      const SamBlockWeights& b = w_.sam.blocks[size_t(block)];
      const std::vector<float> th = vision::detail::rel_pos_table(*b.rel_pos_h, span);
      const std::vector<float> tw = vision::detail::rel_pos_table(*b.rel_pos_w, span);
      it = rel_.emplace(key, std::make_pair(upload_f32(ctx_, th.data(), th.size(), "SAM rel_pos_h"),
                                            upload_f32(ctx_, tw.data(), tw.size(), "SAM rel_pos_w")))
               .first;
    }
    return it->second;
  }

  Context& ctx_;
  const ModelConfig& cfg_;
  const ModelWeights& w_;
  VisionEncoder host_;  // token counts and the visual-token layout (host-side, as the CPU path)
  DeviceMatrix patch_, neck1_, neck2_, net2_, net3_;
  Buffer patch_bias_, cls_;
  Norm neck_norm1_, neck_norm2_, pre_norm_;
  std::vector<SamBlock> sam_;
  std::vector<ClipLayer> clip_;
  Lin projector_;
  size_t peak_activation_bytes_ = 0;
  std::map<int, Buffer> sam_pos_, clip_pos_;
  std::map<std::pair<int, int>, std::pair<Buffer, Buffer>> rel_;
};

}  // namespace uocr::cuda
