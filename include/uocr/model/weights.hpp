// Every tensor of the checkpoint, by role, with its shape checked against config.json before
// anything runs. Names are exactly the published checkpoint's.
#pragma once
#include <algorithm>
#include <string>
#include <vector>

#include "uocr/model/checkpoint.hpp"
#include "uocr/model/config.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

struct LinearWeights {
  const TensorView* weight = nullptr;  // [out, in]
  const TensorView* bias = nullptr;    // [out] or null
  int64_t out() const { return weight->dim(0); }
  int64_t in() const { return weight->dim(1); }
};

struct NormWeights {
  const TensorView* weight = nullptr;
  const TensorView* bias = nullptr;  // null for RMSNorm
};

struct SamBlockWeights {
  NormWeights norm1, norm2;
  LinearWeights qkv, proj, lin1, lin2;
  const TensorView* rel_pos_h = nullptr;
  const TensorView* rel_pos_w = nullptr;
};

struct SamWeights {
  const TensorView* patch_weight = nullptr;  // [C, 3, 16, 16]
  const TensorView* patch_bias = nullptr;
  const TensorView* pos_embed = nullptr;  // [1, G, G, C] NHWC
  std::vector<SamBlockWeights> blocks;
  const TensorView* neck_conv1 = nullptr;  // [out, C, 1, 1]
  NormWeights neck_norm1;
  const TensorView* neck_conv2 = nullptr;  // [out, out, 3, 3]
  NormWeights neck_norm2;
  const TensorView* net2 = nullptr;  // [c2, out, 3, 3]
  const TensorView* net3 = nullptr;  // [c3, c2, 3, 3]
};

struct ClipLayerWeights {
  NormWeights ln1, ln2;
  LinearWeights qkv, out, fc1, fc2;
};

struct ClipWeights {
  const TensorView* class_embedding = nullptr;
  const TensorView* position_embedding = nullptr;  // [positions, width]
  NormWeights pre_norm;
  std::vector<ClipLayerWeights> layers;
};

struct MlpWeights {
  LinearWeights gate, up, down;
};

struct DecoderLayerWeights {
  NormWeights input_norm, post_attention_norm;
  LinearWeights q, k, v, o;
  MlpWeights dense;                // layers < first_k_dense
  LinearWeights router;            // MoE layers: [n_experts, hidden]
  std::vector<MlpWeights> experts;
  MlpWeights shared;               // MoE layers with shared experts (fused)
  bool moe = false;
  bool has_shared = false;
};

struct DecoderWeights {
  const TensorView* embed = nullptr;  // [vocab, hidden]
  std::vector<DecoderLayerWeights> layers;
  NormWeights final_norm;
  const TensorView* lm_head = nullptr;  // [vocab, hidden]
};

struct VisionGlueWeights {
  LinearWeights projector;
  const TensorView* image_newline = nullptr;
  const TensorView* view_separator = nullptr;
};

struct ModelWeights {
  SamWeights sam;
  ClipWeights clip;
  VisionGlueWeights glue;
  DecoderWeights decoder;

  // Resolves and validates every tensor; rejects checkpoints with tensors the config does not
  // explain (a config/weights mismatch would otherwise run silently with the wrong graph).
  static ModelWeights bind(const Checkpoint& ck, const ModelConfig& c) {
    ModelWeights w;
    require(ck.has_int8() == c.int8_weights, Status::invalid_model, [&] {
      return ck.has_int8() ? ck.dir() + " has int8 tensors but its config.json declares no quantization_config"
                           : ck.dir() + "/config.json declares int8 weights but no tensor is int8";
    });
    // Int8 is read for the decoder's linear layers and lm_head (model/quantization.hpp); any
    // other int8 tensor is refused by name.
    enum Int8 { float_only, int8_allowed };
    auto t = [&](const std::string& name, std::vector<int64_t> shape, Int8 int8 = float_only) {
      const TensorView* v = &ck.get(name, shape);
      require(int8 == int8_allowed || v->dtype != DType::i8, Status::unsupported, [&] {
        return v->file + ": tensor " + name + " is int8; int8 is read for the decoder's linear layers and lm_head only";
      });
      return v;
    };
    auto lin = [&](const std::string& name, int64_t out, int64_t in, bool bias, Int8 int8 = float_only) {
      LinearWeights l;
      l.weight = t(name + ".weight", {out, in}, int8);
      if (bias) l.bias = t(name + ".bias", {out});
      return l;
    };
    auto ln = [&](const std::string& name, int64_t n) {
      return NormWeights{t(name + ".weight", {n}), t(name + ".bias", {n})};
    };

    const SamConfig& s = c.sam;
    const std::string sp = "model.sam_model.";
    const int64_t grid = s.image_size / s.patch;
    w.sam.patch_weight = t(sp + "patch_embed.proj.weight", {s.width, 3, s.patch, s.patch});
    w.sam.patch_bias = t(sp + "patch_embed.proj.bias", {s.width});
    w.sam.pos_embed = t(sp + "pos_embed", {1, grid, grid, s.width});
    for (int b = 0; b < s.layers; ++b) {
      const std::string p = sp + "blocks." + std::to_string(b) + ".";
      SamBlockWeights bw;
      bw.norm1 = ln(p + "norm1", s.width);
      bw.norm2 = ln(p + "norm2", s.width);
      bw.qkv = lin(p + "attn.qkv", 3 * s.width, s.width, true);
      bw.proj = lin(p + "attn.proj", s.width, s.width, true);
      const int64_t hd = s.width / s.heads;
      const int64_t span = s.is_global(b) ? grid : s.window;
      bw.rel_pos_h = t(p + "attn.rel_pos_h", {2 * span - 1, hd});
      bw.rel_pos_w = t(p + "attn.rel_pos_w", {2 * span - 1, hd});
      bw.lin1 = lin(p + "mlp.lin1", 4 * s.width, s.width, true);
      bw.lin2 = lin(p + "mlp.lin2", s.width, 4 * s.width, true);
      w.sam.blocks.push_back(bw);
    }
    w.sam.neck_conv1 = t(sp + "neck.0.weight", {s.out_chans, s.width, 1, 1});
    w.sam.neck_norm1 = ln(sp + "neck.1", s.out_chans);
    w.sam.neck_conv2 = t(sp + "neck.2.weight", {s.out_chans, s.out_chans, 3, 3});
    w.sam.neck_norm2 = ln(sp + "neck.3", s.out_chans);
    w.sam.net2 = t(sp + "net_2.weight", {s.net2_chans, s.out_chans, 3, 3});
    w.sam.net3 = t(sp + "net_3.weight", {s.net3_chans, s.net2_chans, 3, 3});

    const ClipConfig& cc = c.clip;
    const std::string cp = "model.vision_model.";
    w.clip.class_embedding = t(cp + "embeddings.class_embedding", {cc.width});
    w.clip.position_embedding = t(cp + "embeddings.position_embedding.weight", {cc.positions(), cc.width});
    // Present in the checkpoint but unused: SAM features replace CLIP's own patch embedding.
    t(cp + "embeddings.patch_embedding.weight", {cc.width, 3, cc.patch, cc.patch});
    w.clip.pre_norm = ln(cp + "pre_layrnorm", cc.width);
    for (int l = 0; l < cc.layers; ++l) {
      const std::string p = cp + "transformer.layers." + std::to_string(l) + ".";
      ClipLayerWeights lw;
      lw.ln1 = ln(p + "layer_norm1", cc.width);
      lw.ln2 = ln(p + "layer_norm2", cc.width);
      lw.qkv = lin(p + "self_attn.qkv_proj", 3 * cc.width, cc.width, true);
      lw.out = lin(p + "self_attn.out_proj", cc.width, cc.width, true);
      lw.fc1 = lin(p + "mlp.fc1", cc.ffn, cc.width, true);
      lw.fc2 = lin(p + "mlp.fc2", cc.width, cc.ffn, true);
      w.clip.layers.push_back(lw);
    }

    const DecoderConfig& d = c.decoder;
    w.glue.projector = lin("model.projector.layers", c.projector.n_embed, c.projector.input_dim, true);
    w.glue.image_newline = t("model.image_newline", {d.hidden});
    w.glue.view_separator = t("model.view_seperator", {d.hidden});

    auto mlp = [&](const std::string& p, int64_t inter) {
      return MlpWeights{lin(p + "gate_proj", inter, d.hidden, false, int8_allowed),
                        lin(p + "up_proj", inter, d.hidden, false, int8_allowed),
                        lin(p + "down_proj", d.hidden, inter, false, int8_allowed)};
    };
    w.decoder.embed = t("model.embed_tokens.weight", {d.vocab, d.hidden});
    for (int l = 0; l < d.layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      DecoderLayerWeights lw;
      lw.input_norm.weight = t(p + "input_layernorm.weight", {d.hidden});
      lw.post_attention_norm.weight = t(p + "post_attention_layernorm.weight", {d.hidden});
      lw.q = lin(p + "self_attn.q_proj", int64_t(d.heads) * d.head_dim, d.hidden, false, int8_allowed);
      lw.k = lin(p + "self_attn.k_proj", int64_t(d.kv_heads) * d.head_dim, d.hidden, false, int8_allowed);
      lw.v = lin(p + "self_attn.v_proj", int64_t(d.kv_heads) * d.head_dim, d.hidden, false, int8_allowed);
      lw.o = lin(p + "self_attn.o_proj", d.hidden, int64_t(d.heads) * d.head_dim, false, int8_allowed);
      lw.moe = d.is_moe_layer(l);
      if (lw.moe) {
        lw.router = lin(p + "mlp.gate", d.n_routed_experts, d.hidden, false);
        for (int e = 0; e < d.n_routed_experts; ++e)
          lw.experts.push_back(mlp(p + "mlp.experts." + std::to_string(e) + ".", d.moe_intermediate));
        lw.has_shared = d.n_shared_experts > 0;
        if (lw.has_shared) lw.shared = mlp(p + "mlp.shared_experts.", int64_t(d.moe_intermediate) * d.n_shared_experts);
      } else {
        lw.dense = mlp(p + "mlp.", d.intermediate);
      }
      w.decoder.layers.push_back(std::move(lw));
    }
    w.decoder.final_norm.weight = t("model.norm.weight", {d.hidden});
    w.decoder.lm_head = t("lm_head.weight", {d.vocab, d.hidden}, int8_allowed);

    std::vector<std::string> extra = ck.unused();
    // An arange buffer some exports include; it carries no information.
    extra.erase(std::remove(extra.begin(), extra.end(), "model.vision_model.embeddings.position_ids"), extra.end());
    require(extra.empty(), Status::invalid_model, [&] {
      std::string names;
      for (size_t i = 0; i < extra.size() && i < 5; ++i) names += (i ? ", " : "") + extra[i];
      return "checkpoint " + ck.dir() + " has " + std::to_string(extra.size()) +
             " tensor(s) that config.json does not describe (e.g. " + names + ")";
    });
    return w;
  }
};

UOCR_NAMESPACE_END
