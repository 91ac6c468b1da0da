// DeepEncoder (SAM-ViT -> 16x compressor -> CLIP-L -> projector) on a device, written once for
// every device backend (Vulkan: backends/vulkan/vision.hpp, CUDA: backends/cuda/vision.hpp) and
// mirroring uocr::VisionEncoder (encoder.hpp) op for op: patch embedding and convolutions as
// im2col + linear, LayerNorm / LayerNorm2d (channels-last, so the same per-token op), SAM
// windowed and global attention with decomposed relative positions, erf GELU, CLIP blocks with
// quick_gelu, and the linear projector. The size-dependent tables (SAM pos_embed and rel-pos
// tables, CLIP positions) are resampled on the host exactly as the CPU path does, then cached
// on the device; the visual-token layout is the host encoder's.
//
// A backend supplies `Ops`: its storage types, the weight uploads, and one view's ops.
//
//   Ops::Context, Ops::Buffer (float32 device memory), Ops::Matrix (a weight in its stored type)
//   Ops::Gelu::erf, Ops::Gelu::quick
//   Ops::matrix(ctx, const TensorView&) -> Matrix                [dim0, numel/dim0]
//   Ops::vector(ctx, const TensorView&) -> Buffer                widened to float32
//   Ops::table(ctx, const std::vector<float>&, const char* what) -> Buffer   a host-made table
//   Ops ops(ctx, ActivationCount&)   one view; every activations() buffer is counted
//   ops.activations(floats, what) -> Buffer, ops.upload(buf, host, floats)
//   ops.patch_im2col(img, channels, size, patch, cols), ops.im2col(x, h, w, c, k, stride, pad, cols)
//   ops.linear(x, m, w, const Buffer* bias, y)        y [m, w rows] = x [m, w cols] · wᵀ (+ bias)
//   ops.add(x, y, n), ops.gelu(x, n, kind), ops.layer_norm(x, rows, n, w, b, eps, y)
//   ops.copy_rows(x, x_off, ldx, rows, cols, o, o_off, ldo)
//   ops.sam_attention(qkv, qkv_bias, th, tw, grid, span, heads, channels, out)
//   Ops::SelfAttention a(ops, qkv, out, rows, width, heads); a();   CLIP's full attention over
//                                                   packed [q | k | v] rows, set up once per view
//   ops.finish() (runs what was enqueued and waits), ops.download(buf, host, floats)
//
//   vulkan::VulkanVisionEncoder enc(ctx, config, weights);   // = DeviceEncoder<vulkan::VisionOps>
//   std::vector<float> emb = enc.visual_tokens(global, tiles, tiles_x, tiles_y);  // as VisionEncoder
//
// Thread-safety: one thread at a time (the engines share one encoder per device under a lock).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "uocr/core/deadline.hpp"
#include "uocr/core/error.hpp"
#include "uocr/model/config.hpp"
#include "uocr/model/weights.hpp"
#include "uocr/version.hpp"
#include "uocr/vision/encoder.hpp"

UOCR_NAMESPACE_BEGIN
namespace vision {

// The activation bytes one view holds (its buffers live until the view is encoded), and the most
// any view held since the encoder's reset_peak().
struct ActivationCount {
  size_t& peak;
  size_t held = 0;
  void add(size_t bytes) {
    held += bytes;
    peak = std::max(peak, held);
  }
};

template <class Ops>
class DeviceEncoder {
 public:
  using Context = typename Ops::Context;
  using Buffer = typename Ops::Buffer;
  using Matrix = typename Ops::Matrix;

  DeviceEncoder(Context& ctx, const ModelConfig& config, const ModelWeights& weights)
      : ctx_(ctx), cfg_(config), w_(weights), host_(config, weights) {
    const SamWeights& s = w_.sam;
    patch_ = Ops::matrix(ctx_, *s.patch_weight);
    patch_bias_ = Ops::vector(ctx_, *s.patch_bias);
    for (const SamBlockWeights& b : s.blocks)
      sam_.push_back(
          SamBlock{norm(b.norm1), norm(b.norm2), linear(b.qkv), linear(b.proj), linear(b.lin1), linear(b.lin2)});
    neck1_ = Ops::matrix(ctx_, *s.neck_conv1);
    neck2_ = Ops::matrix(ctx_, *s.neck_conv2);
    neck_norm1_ = norm(s.neck_norm1);
    neck_norm2_ = norm(s.neck_norm2);
    net2_ = Ops::matrix(ctx_, *s.net2);
    net3_ = Ops::matrix(ctx_, *s.net3);
    const ClipWeights& c = w_.clip;
    cls_ = Ops::vector(ctx_, *c.class_embedding);
    pre_norm_ = norm(c.pre_norm);
    for (const ClipLayerWeights& l : c.layers)
      clip_.push_back(ClipLayer{norm(l.ln1), norm(l.ln2), linear(l.qkv), linear(l.out), linear(l.fc1), linear(l.fc2)});
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
    // CLIP embeds SAM's map: its width equals net_3's channels (ModelConfig checks it).
    const int64_t N = view.N, t = view.t, W = cc.width, c3 = sc.net3_chans, hid = hidden(), tokens = 1 + t;

    ActivationCount count{peak_activation_bytes_};
    Ops ops(ctx_, count);
    const int64_t pixels = int64_t(3) * size * size;
    Buffer img = ops.activations(pixels, "vision view");
    ops.upload(img, chw, size_t(pixels));
    // im2col columns: the patch embedding and the three 3x3 convolutions.
    Buffer col = ops.activations(view.im2col_floats(sc), "im2col columns");
    Buffer x = ops.activations(N * C, "SAM tokens"), tmp = ops.activations(N * C, "SAM normed tokens");
    Buffer qkv = ops.activations(N * 3 * C, "SAM qkv");
    Buffer hbuf = ops.activations(N * std::max<int64_t>(int64_t(4) * C, cc.ffn), "vision MLP hidden");
    Buffer neck = ops.activations(N * oc, "SAM neck"), neck2 = ops.activations(N * oc, "SAM neck conv2");
    Buffer f2 = ops.activations(int64_t(G2) * G2 * sc.net2_chans, "SAM net_2"),
           f3 = ops.activations(t * c3, "SAM net_3");
    Buffer cx = ops.activations(tokens * W, "CLIP tokens"), ct = ops.activations(tokens * W, "CLIP normed tokens");
    Buffer cqkv = ops.activations(tokens * 3 * W, "CLIP qkv"), feat = ops.activations(t * (W + c3), "projector input");
    Buffer out = ops.activations(t * hid, "visual features");

    // SAM: patches -> tokens [N, C] + absolute positions.
    ops.patch_im2col(img, 3, size, sc.patch, col);
    ops.linear(col, N, patch_, &patch_bias_, x);
    ops.add(x, sam_pos(G), N * C);
    for (int b = 0; b < int(sam_.size()); ++b) {
      const SamBlock& B = sam_[size_t(b)];
      const int span = sc.is_global(b) ? G : sc.window;
      const std::pair<Buffer, Buffer>& rel = rel_tables(b, span);
      ops.layer_norm(x, N, C, B.norm1.w, B.norm1.b, sc.ln_eps, tmp);
      ops.linear(tmp, N, B.qkv.w, &B.qkv.b, qkv);
      ops.sam_attention(qkv, B.qkv.b, rel.first, rel.second, G, span, sc.heads, C, tmp);
      ops.linear(tmp, N, B.proj.w, &B.proj.b, qkv);  // qkv is spent: it takes proj
      ops.add(x, qkv, N * C);
      ops.layer_norm(x, N, C, B.norm2.w, B.norm2.b, sc.ln_eps, tmp);
      ops.linear(tmp, N, B.lin1.w, &B.lin1.b, hbuf);
      ops.gelu(hbuf, N * 4 * C, Ops::Gelu::erf);
      ops.linear(hbuf, N, B.lin2.w, &B.lin2.b, tmp);
      ops.add(x, tmp, N * C);
    }
    // Neck: 1x1 conv, LayerNorm2d, 3x3 conv, LayerNorm2d; then net_2 and net_3 (3x3, stride 2).
    ops.linear(x, N, neck1_, nullptr, neck);
    ops.layer_norm(neck, N, oc, neck_norm1_.w, neck_norm1_.b, sc.ln_eps, neck);
    ops.im2col(neck, G, G, oc, 3, 1, 1, col);
    ops.linear(col, N, neck2_, nullptr, neck2);
    ops.layer_norm(neck2, N, oc, neck_norm2_.w, neck_norm2_.b, sc.ln_eps, neck2);
    ops.im2col(neck2, G, G, oc, 3, 2, 1, col);
    ops.linear(col, int64_t(G2) * G2, net2_, nullptr, f2);
    ops.im2col(f2, G2, G2, sc.net2_chans, 3, 2, 1, col);
    ops.linear(col, t, net3_, nullptr, f3);

    // CLIP over SAM's map: [CLS; rows] + positions, pre-LN, pre-LN blocks.
    ops.copy_rows(cls_, 0, W, 1, W, cx, 0, W);
    ops.copy_rows(f3, 0, c3, t, W, cx, W, W);
    ops.add(cx, clip_pos(g), tokens * W);
    ops.layer_norm(cx, tokens, W, pre_norm_.w, pre_norm_.b, cc.ln_eps, cx);
    typename Ops::SelfAttention attention(ops, cqkv, ct, tokens, W, cc.heads);
    for (const ClipLayer& L : clip_) {
      ops.layer_norm(cx, tokens, W, L.ln1.w, L.ln1.b, cc.ln_eps, ct);
      ops.linear(ct, tokens, L.qkv.w, &L.qkv.b, cqkv);
      attention();  // ct = attention over cqkv
      ops.linear(ct, tokens, L.out.w, &L.out.b, cqkv);
      ops.add(cx, cqkv, tokens * W);
      ops.layer_norm(cx, tokens, W, L.ln2.w, L.ln2.b, cc.ln_eps, ct);
      ops.linear(ct, tokens, L.fc1.w, &L.fc1.b, hbuf);
      ops.gelu(hbuf, tokens * cc.ffn, Ops::Gelu::quick);
      ops.linear(hbuf, tokens, L.fc2.w, &L.fc2.b, ct);
      ops.add(cx, ct, tokens * W);
    }
    // Projector over [CLIP rows 1.. | SAM features].
    ops.copy_rows(cx, W, W, t, W, feat, 0, W + c3);
    ops.copy_rows(f3, 0, c3, t, c3, feat, W, W + c3);
    ops.linear(feat, t, projector_.w, &projector_.b, out);
    ops.finish();

    std::vector<float> result(size_t(t * hid));
    ops.download(out, result.data(), result.size());
    if (captures) {
      captures->sam_neck = FeatureMap(G, G, oc);
      ops.download(neck2, captures->sam_neck.data.data(), captures->sam_neck.data.size());
      captures->sam_out = FeatureMap(g, g, int(c3));
      ops.download(f3, captures->sam_out.data.data(), captures->sam_out.data.size());
      captures->clip_out.resize(size_t(tokens * W));
      ops.download(cx, captures->clip_out.data(), captures->clip_out.size());
      captures->projector_out = result;
    }
    return result;
  }

  // The embeddings of one image, laid out as VisionEncoder::visual_tokens (which see for the
  // deadline: checked before each view).
  std::vector<float> visual_tokens(const std::vector<float>& global_view, const std::vector<std::vector<float>>& tiles,
                                   int tiles_x, int tiles_y, const Deadline& deadline = {}) {
    return host_.visual_tokens_by(
        global_view, tiles, tiles_x, tiles_y, [&](const std::vector<float>& view) { return encode(view); }, deadline);
  }

 private:
  struct Norm {
    Buffer w, b;
  };
  struct Lin {
    Matrix w;
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

  Norm norm(const NormWeights& n) { return Norm{Ops::vector(ctx_, *n.weight), Ops::vector(ctx_, *n.bias)}; }
  Lin linear(const LinearWeights& l) {
    Lin d{Ops::matrix(ctx_, *l.weight), {}};
    d.b = l.bias ? Ops::vector(ctx_, *l.bias) : Ops::table(ctx_, std::vector<float>(size_t(l.out()), 0.f), "zero bias");
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
    if (it == m.end()) it = m.emplace(key, Ops::table(ctx_, make(), what)).first;
    return it->second;
  }
  const Buffer& sam_pos(int g) {
    return cached(sam_pos_, g, "SAM pos_embed", [&] { return detail::sam_abs_pos(*w_.sam.pos_embed, g); });
  }
  const Buffer& clip_pos(int g) {
    return cached(clip_pos_, g, "CLIP positions",
                  [&] { return detail::clip_positions(*w_.clip.position_embedding, g); });
  }
  const std::pair<Buffer, Buffer>& rel_tables(int block, int span) {
    const auto key = std::make_pair(block, span);
    auto it = rel_.find(key);
    if (it == rel_.end()) {
      const SamBlockWeights& b = w_.sam.blocks[size_t(block)];
      Buffer th = Ops::table(ctx_, detail::rel_pos_table(*b.rel_pos_h, span), "SAM rel_pos_h");
      Buffer tw = Ops::table(ctx_, detail::rel_pos_table(*b.rel_pos_w, span), "SAM rel_pos_w");
      it = rel_.emplace(key, std::make_pair(std::move(th), std::move(tw))).first;
    }
    return it->second;
  }

  Context& ctx_;
  const ModelConfig& cfg_;
  const ModelWeights& w_;
  VisionEncoder host_;  // token counts and the visual-token layout (host-side, as the CPU path)
  Matrix patch_, neck1_, neck2_, net2_, net3_;
  Buffer patch_bias_, cls_;
  Norm neck_norm1_, neck_norm2_, pre_norm_;
  std::vector<SamBlock> sam_;
  std::vector<ClipLayer> clip_;
  Lin projector_;
  size_t peak_activation_bytes_ = 0;
  std::map<int, Buffer> sam_pos_, clip_pos_;
  std::map<std::pair<int, int>, std::pair<Buffer, Buffer>> rel_;
};

}  // namespace vision
UOCR_NAMESPACE_END
