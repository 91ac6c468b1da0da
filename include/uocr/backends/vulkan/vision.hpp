// DeepEncoder (SAM-ViT -> CLIP-L -> projector) on a Vulkan device, mirroring
// uocr::VisionEncoder (vision/encoder.hpp) op for op: patch embedding and convolutions as
// im2col + GEMM, LayerNorm / LayerNorm2d (channels-last, so the same per-token kernel), SAM
// windowed and global attention with decomposed relative positions, erf GELU, CLIP blocks with
// quick_gelu, and the linear projector. One view is recorded into one command buffer and
// submitted once. The size-dependent tables (SAM pos_embed and global rel-pos tables, CLIP
// positions) are resampled on the host exactly as the CPU path does, then cached on the device.
//
//   vulkan::VulkanVisionEncoder enc(ctx, config, weights);
//   std::vector<float> emb = enc.visual_tokens(global, tiles, tiles_x, tiles_y);  // as VisionEncoder
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "uocr/backends/vulkan/context.hpp"
#include "uocr/backends/vulkan/ops.hpp"
#include "uocr/model/config.hpp"
#include "uocr/model/weights.hpp"
#include "uocr/vision/encoder.hpp"

namespace uocr::vulkan {

class VulkanVisionEncoder {
 public:
  VulkanVisionEncoder(Context& ctx, const ModelConfig& config, const ModelWeights& weights)
      : ctx_(ctx), cfg_(config), w_(weights), host_(config, weights) {
    const SamWeights& s = w_.sam;
    patch_ = upload_matrix(ctx_, *s.patch_weight);
    patch_bias_ = upload_f32(ctx_, *s.patch_bias);
    for (const SamBlockWeights& b : s.blocks) {
      SamBlock d;
      d.n1w = upload_f32(ctx_, *b.norm1.weight);
      d.n1b = upload_f32(ctx_, *b.norm1.bias);
      d.n2w = upload_f32(ctx_, *b.norm2.weight);
      d.n2b = upload_f32(ctx_, *b.norm2.bias);
      d.qkv = linear(b.qkv);
      d.proj = linear(b.proj);
      d.lin1 = linear(b.lin1);
      d.lin2 = linear(b.lin2);
      sam_.push_back(std::move(d));
    }
    neck1_ = upload_matrix(ctx_, *s.neck_conv1);
    neck2_ = upload_matrix(ctx_, *s.neck_conv2);
    nn1w_ = upload_f32(ctx_, *s.neck_norm1.weight);
    nn1b_ = upload_f32(ctx_, *s.neck_norm1.bias);
    nn2w_ = upload_f32(ctx_, *s.neck_norm2.weight);
    nn2b_ = upload_f32(ctx_, *s.neck_norm2.bias);
    net2_ = upload_matrix(ctx_, *s.net2);
    net3_ = upload_matrix(ctx_, *s.net3);
    const ClipWeights& c = w_.clip;
    cls_ = upload_f32(ctx_, *c.class_embedding);
    pre_w_ = upload_f32(ctx_, *c.pre_norm.weight);
    pre_b_ = upload_f32(ctx_, *c.pre_norm.bias);
    for (const ClipLayerWeights& l : c.layers) {
      ClipLayer d;
      d.l1w = upload_f32(ctx_, *l.ln1.weight);
      d.l1b = upload_f32(ctx_, *l.ln1.bias);
      d.l2w = upload_f32(ctx_, *l.ln2.weight);
      d.l2b = upload_f32(ctx_, *l.ln2.bias);
      d.qkv = linear(l.qkv);
      d.out = linear(l.out);
      d.fc1 = linear(l.fc1);
      d.fc2 = linear(l.fc2);
      clip_.push_back(std::move(d));
    }
    projector_ = linear(w_.glue.projector);
  }

  int hidden() const { return cfg_.decoder.hidden; }
  // Most bytes of activation buffers one encode_view() held since reset_peak() (they are
  // allocated per view and released when it returns).
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
    const int64_t N = view.N, t = view.t, W = cc.width, c3 = sc.net3_chans, hid = hidden();
    require(int64_t(sc.patch) * sc.patch * 3 * N > 0, Status::invalid_argument, "empty view");

    size_t held = 0;  // this view's activation buffers (peak_activation_bytes())
    auto act = [&](int64_t floats, const char* what) {
      Buffer b = ctx_.buffer(size_t(std::max<int64_t>(1, floats)) * 4, MemoryUse::activations, what);
      held += b.size();
      peak_activation_bytes_ = std::max(peak_activation_bytes_, held);
      return b;
    };
    const int64_t mlp = std::max<int64_t>(int64_t(4) * C, cc.ffn);
    Buffer img = upload_f32(ctx_, chw, size_t(3) * size_t(size) * size_t(size), MemoryUse::activations, "vision view");
    held += img.size();
    // im2col columns: the patch embedding and the three 3x3 convolutions.
    const int64_t cols = view.im2col_floats(sc);
    Buffer col = act(cols, "im2col columns"), x = act(N * C, "SAM tokens"), tmp = act(N * C, "SAM normed tokens");
    Buffer qkv = act(N * 3 * C, "SAM qkv"), hbuf = act(N * mlp, "vision MLP hidden");
    Buffer neck = act(N * oc, "SAM neck"), neck2 = act(N * oc, "SAM neck conv2");
    Buffer f2 = act(int64_t(G2) * G2 * sc.net2_chans, "SAM net_2"), f3 = act(t * c3, "SAM net_3");
    const int64_t tokens = 1 + t;
    Buffer cx = act(tokens * W, "CLIP tokens"), ct = act(tokens * W, "CLIP normed tokens");
    Buffer cqkv = act(tokens * 3 * W, "CLIP qkv"), feat = act(t * (W + c3), "projector input"), out = act(t * hid, "visual features");

    Recorder r(ctx_);
    // SAM: patches -> tokens [N, C] + absolute positions.
    ops::patch_im2col(r, img, 3, size, sc.patch, col);
    ops::linear(r, col, 0, N, 3 * sc.patch * sc.patch, patch_, &patch_bias_, x, 0, C);
    ops::add(r, x, 0, sam_pos(G), 0, N * C);
    for (int b = 0; b < int(sam_.size()); ++b) {
      const SamBlock& B = sam_[size_t(b)];
      const bool global = sc.is_global(b);
      const int span = global ? G : sc.window;
      const std::pair<Buffer*, Buffer*> tab = rel_tables(b, span);
      ops::layer_norm(r, x, 0, N, C, B.n1w, B.n1b, sc.ln_eps, tmp, 0);
      ops::linear(r, tmp, 0, N, C, B.qkv.w, &B.qkv.b, qkv, 0, 3 * C);
      ops::sam_attention(r, qkv, B.qkv.b, *tab.first, *tab.second, G, span, sc.heads, C, tmp);
      ops::linear(r, tmp, 0, N, C, B.proj.w, &B.proj.b, qkv, 0, C);
      ops::add(r, x, 0, qkv, 0, N * C);
      ops::layer_norm(r, x, 0, N, C, B.n2w, B.n2b, sc.ln_eps, tmp, 0);
      ops::linear(r, tmp, 0, N, C, B.lin1.w, &B.lin1.b, hbuf, 0, 4 * C);
      ops::gelu(r, hbuf, 0, N * 4 * C, ops::Gelu::erf);
      ops::linear(r, hbuf, 0, N, 4 * C, B.lin2.w, &B.lin2.b, tmp, 0, C);
      ops::add(r, x, 0, tmp, 0, N * C);
    }
    // Neck: 1x1 conv, LayerNorm2d, 3x3 conv, LayerNorm2d; then net_2 and net_3 (3x3, stride 2).
    ops::linear(r, x, 0, N, C, neck1_, nullptr, neck, 0, oc);
    ops::layer_norm(r, neck, 0, N, oc, nn1w_, nn1b_, sc.ln_eps, neck, 0);
    ops::im2col(r, neck, 0, G, G, oc, 3, 1, 1, col);
    ops::linear(r, col, 0, N, int64_t(oc) * 9, neck2_, nullptr, neck2, 0, oc);
    ops::layer_norm(r, neck2, 0, N, oc, nn2w_, nn2b_, sc.ln_eps, neck2, 0);
    ops::im2col(r, neck2, 0, G, G, oc, 3, 2, 1, col);
    ops::linear(r, col, 0, int64_t(G2) * G2, int64_t(oc) * 9, net2_, nullptr, f2, 0, sc.net2_chans);
    ops::im2col(r, f2, 0, G2, G2, sc.net2_chans, 3, 2, 1, col);
    ops::linear(r, col, 0, t, int64_t(sc.net2_chans) * 9, net3_, nullptr, f3, 0, c3);

    // CLIP over SAM's map: [CLS; rows] + positions, pre-LN, pre-LN blocks.
    ops::copy_rows(r, cls_, 0, W, 1, W, cx, 0, W);
    ops::copy_rows(r, f3, 0, c3, t, W, cx, W, W);
    ops::add(r, cx, 0, clip_pos(g), 0, tokens * W);
    ops::layer_norm(r, cx, 0, tokens, W, pre_w_, pre_b_, cc.ln_eps, cx, 0);
    const ops::AttentionDims dims{cc.heads, cc.heads, int(W / cc.heads)};
    for (const ClipLayer& L : clip_) {
      ops::layer_norm(r, cx, 0, tokens, W, L.l1w, L.l1b, cc.ln_eps, ct, 0);
      ops::linear(r, ct, 0, tokens, W, L.qkv.w, &L.qkv.b, cqkv, 0, 3 * W);
      ops::attention(r, cqkv, 0, tokens, 3 * W, dims, ops::KvSet{&cqkv, &cqkv, tokens}, ops::KvSet{}, false, 0, ct, 0, W,
                     3 * W, W, 2 * W);
      ops::linear(r, ct, 0, tokens, W, L.out.w, &L.out.b, cqkv, 0, W);
      ops::add(r, cx, 0, cqkv, 0, tokens * W);
      ops::layer_norm(r, cx, 0, tokens, W, L.l2w, L.l2b, cc.ln_eps, ct, 0);
      ops::linear(r, ct, 0, tokens, W, L.fc1.w, &L.fc1.b, hbuf, 0, cc.ffn);
      ops::gelu(r, hbuf, 0, tokens * cc.ffn, ops::Gelu::quick);
      ops::linear(r, hbuf, 0, tokens, cc.ffn, L.fc2.w, &L.fc2.b, ct, 0, W);
      ops::add(r, cx, 0, ct, 0, tokens * W);
    }
    // Projector over [CLIP rows 1.. | SAM features].
    ops::copy_rows(r, cx, W, W, t, W, feat, 0, W + c3);
    ops::copy_rows(r, f3, 0, c3, t, c3, feat, W, W + c3);
    ops::linear(r, feat, 0, t, W + c3, projector_.w, &projector_.b, out, 0, hid);
    r.submit();

    std::vector<float> result = ctx_.download_vector<float>(out, size_t(t * hid));
    if (captures) {
      captures->sam_neck = vision::FeatureMap(G, G, oc);
      ctx_.download(neck2, captures->sam_neck.data.data(), captures->sam_neck.data.size() * 4);
      captures->sam_out = vision::FeatureMap(g, g, int(c3));
      ctx_.download(f3, captures->sam_out.data.data(), captures->sam_out.data.size() * 4);
      captures->clip_out = ctx_.download_vector<float>(cx, size_t(tokens * W));
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
  struct Lin {
    DeviceMatrix w;
    Buffer b;
  };
  struct SamBlock {
    Buffer n1w, n1b, n2w, n2b;
    Lin qkv, proj, lin1, lin2;
  };
  struct ClipLayer {
    Buffer l1w, l1b, l2w, l2b;
    Lin qkv, out, fc1, fc2;
  };

  Lin linear(const LinearWeights& l) {
    Lin d;
    d.w = upload_matrix(ctx_, *l.weight);
    if (l.bias) {
      d.b = upload_f32(ctx_, *l.bias);
    } else {
      const std::vector<float> zero(size_t(l.out()), 0.f);
      d.b = upload_f32(ctx_, zero.data(), zero.size(), MemoryUse::weights, "zero bias");
    }
    return d;
  }

  std::vector<float> encode(const std::vector<float>& view) {
    const int size = int(std::lround(std::sqrt(double(view.size()) / 3.0)));
    require(size > 0 && size_t(3) * size_t(size) * size_t(size) == view.size(), Status::invalid_argument,
            [&] { return "vision view of " + std::to_string(view.size()) + " floats is not a 3 x S x S image"; });
    return encode_view(view.data(), size);
  }

  const Buffer& sam_pos(int g) {
    auto it = sam_pos_.find(g);
    if (it != sam_pos_.end()) return it->second;
    const std::vector<float> p = vision::detail::sam_abs_pos(*w_.sam.pos_embed, g);
    return sam_pos_.emplace(g, upload_f32(ctx_, p.data(), p.size(), MemoryUse::weights, "SAM pos_embed")).first->second;
  }

  const Buffer& clip_pos(int g) {
    auto it = clip_pos_.find(g);
    if (it != clip_pos_.end()) return it->second;
    const std::vector<float> p = vision::detail::clip_positions(*w_.clip.position_embedding, g);
    return clip_pos_.emplace(g, upload_f32(ctx_, p.data(), p.size(), MemoryUse::weights, "CLIP positions")).first->second;
  }

  std::pair<Buffer*, Buffer*> rel_tables(int block, int span) {
    const auto key = std::make_pair(block, span);
    auto it = rel_.find(key);
    if (it == rel_.end()) {
      const SamBlockWeights& b = w_.sam.blocks[size_t(block)];
      const std::vector<float> th = vision::detail::rel_pos_table(*b.rel_pos_h, span);
      const std::vector<float> tw = vision::detail::rel_pos_table(*b.rel_pos_w, span);
      it = rel_.emplace(key, std::make_pair(upload_f32(ctx_, th.data(), th.size(), MemoryUse::weights, "SAM rel_pos_h"),
                                            upload_f32(ctx_, tw.data(), tw.size(), MemoryUse::weights, "SAM rel_pos_w")))
               .first;
    }
    return {&it->second.first, &it->second.second};
  }

  Context& ctx_;
  const ModelConfig& cfg_;
  const ModelWeights& w_;
  VisionEncoder host_;  // token counts and the visual-token layout (host-side, as the CPU path)
  DeviceMatrix patch_, neck1_, neck2_, net2_, net3_;
  Buffer patch_bias_, nn1w_, nn1b_, nn2w_, nn2b_, cls_, pre_w_, pre_b_;
  std::vector<SamBlock> sam_;
  std::vector<ClipLayer> clip_;
  Lin projector_;
  size_t peak_activation_bytes_ = 0;
  std::map<int, Buffer> sam_pos_, clip_pos_;
  std::map<std::pair<int, int>, std::pair<Buffer, Buffer>> rel_;
};

}  // namespace uocr::vulkan
