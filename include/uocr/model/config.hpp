// config.json of a model folder -> typed dimensions. Both layouts load: Unlimited-OCR
// (model_type "unlimited-ocr", sliding_window 128) and DeepSeek-OCR (model_type "deepseek_vl_v2").
// Keys absent from the file take DeepseekV2Config's defaults, as upstream does; sizes the
// upstream Python hard-codes (SAM neck channels, window, CLIP FFN) default to the real values.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "uocr/core/error.hpp"
#include "uocr/io/json_file.hpp"
#include "uocr/model/quantization.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

struct DecoderConfig {
  int hidden = 1280;
  int intermediate = 6848;       // dense MLP of the first `first_k_dense` layers
  int moe_intermediate = 896;    // per routed expert
  int layers = 12;
  int heads = 10;
  int kv_heads = 10;
  int head_dim = 128;
  int first_k_dense = 1;
  int n_routed_experts = 64;
  int n_shared_experts = 2;
  int experts_per_token = 6;
  int vocab = 129280;
  int max_positions = 32768;
  int bos_id = 0;
  int eos_id = 1;
  float rope_theta = 10000.f;
  float rms_eps = 1e-6f;
  float routed_scaling = 1.f;
  bool norm_topk_prob = false;
  int sliding_window = 0;  // R-SWA window n; 0 when the config has none (DeepSeek-OCR)

  bool is_moe_layer(int layer) const { return n_routed_experts > 0 && layer >= first_k_dense; }
};

struct SamConfig {
  int image_size = 1024;
  int patch = 16;
  int width = 768;
  int layers = 12;
  int heads = 12;
  int window = 14;
  std::vector<int> global_layers = {2, 5, 8, 11};
  int out_chans = 256;
  int net2_chans = 512;
  int net3_chans = 1024;
  float ln_eps = 1e-6f;

  bool is_global(int layer) const {
    for (int g : global_layers)
      if (g == layer) return true;
    return false;
  }
};

struct ClipConfig {
  int width = 1024;
  int layers = 24;
  int heads = 16;
  int ffn = 4096;
  int image_size = 224;
  int patch = 14;
  float ln_eps = 1e-5f;
  int64_t positions() const { return int64_t(image_size / patch) * (image_size / patch) + 1; }
};

struct ProjectorConfig {
  int input_dim = 2048;
  int n_embed = 1280;
};

struct ModelConfig {
  std::string model_type;
  DecoderConfig decoder;
  SamConfig sam;
  ClipConfig clip;
  ProjectorConfig projector;
  int downsample = 4;  // SAM grid -> visual token grid (two stride-2 convs)
  bool int8_weights = false;  // quantization_config declares int8 weights (model/quantization.hpp)

  static ModelConfig load(const std::string& path) { return from_json(read_model_json(path), path); }

  static ModelConfig from_json(const nlohmann::json& j, const std::string& path) {
    require(j.is_object(), Status::invalid_model, [&] { return path + ": top level must be an object"; });
    ModelConfig c;
    const Reader r{path, ""};
    c.model_type = r.str(j, "model_type", "");
    require(c.model_type == "unlimited-ocr" || c.model_type == "deepseek_vl_v2", Status::unsupported,
            [&] { return path + ": model_type '" + c.model_type + "' is not unlimited-ocr or deepseek_vl_v2"; });
    require(!r.boolean(j, "use_mla", false), Status::unsupported,
            [&] { return path + ": use_mla=true (MLA attention) is not supported; the OCR checkpoints use MHA"; });
    const std::string topk = r.str(j, "topk_method", "greedy");
    require(topk == "greedy", Status::unsupported, [&] { return path + ": topk_method '" + topk + "' is not supported"; });
    const std::string scoring = r.str(j, "scoring_func", "softmax");
    require(scoring == "softmax", Status::unsupported, [&] { return path + ": scoring_func '" + scoring + "' is not supported"; });
    require(!j.contains("rope_scaling") || j["rope_scaling"].is_null(), Status::unsupported,
            [&] { return path + ": rope_scaling is not supported"; });
    require(r.str(j, "hidden_act", "silu") == "silu", Status::unsupported, [&] { return path + ": hidden_act must be silu"; });

    c.int8_weights = read_int8_quantization(j, path);

    DecoderConfig& d = c.decoder;
    d.hidden = r.positive(j, "hidden_size");
    d.intermediate = r.positive(j, "intermediate_size");
    d.layers = r.positive(j, "num_hidden_layers");
    d.heads = r.positive(j, "num_attention_heads");
    d.kv_heads = r.positive(j, "num_key_value_heads", d.heads);
    d.vocab = r.positive(j, "vocab_size");
    d.n_routed_experts = r.non_negative(j, "n_routed_experts", 0);
    d.moe_intermediate = d.n_routed_experts ? r.positive(j, "moe_intermediate_size") : 0;
    d.n_shared_experts = r.non_negative(j, "n_shared_experts", 0);
    d.experts_per_token = r.integer(j, "num_experts_per_tok", 0);
    d.first_k_dense = r.non_negative(j, "first_k_dense_replace", 0);
    d.max_positions = r.positive(j, "max_position_embeddings", 2048);
    // Ids the generation loop writes into the logits (EOS banned below min_new_tokens) or feeds
    // the decoder; pad_token_id is not used, but a model whose pad id is no token is broken.
    d.bos_id = r.token_id(j, "bos_token_id", 0, d.vocab);
    d.eos_id = r.token_id(j, "eos_token_id", 1, d.vocab);
    r.token_id(j, "pad_token_id", 0, d.vocab);
    d.rope_theta = r.positive_number(j, "rope_theta", 10000.0);
    d.rms_eps = r.positive_number(j, "rms_norm_eps", 1e-6);
    d.routed_scaling = r.number(j, "routed_scaling_factor", 1.0);
    d.norm_topk_prob = r.boolean(j, "norm_topk_prob", false);
    require(r.integer(j, "moe_layer_freq", 1) == 1, Status::unsupported, [&] { return path + ": moe_layer_freq must be 1"; });
    require(!r.boolean(j, "attention_bias", false), Status::unsupported, [&] { return path + ": attention_bias is not supported"; });
    // Unlimited-OCR reads sliding_window_size first, then sliding_window (modeling_unlimitedocr.py).
    d.sliding_window = r.non_negative(j, "sliding_window_size", r.non_negative(j, "sliding_window", 0));
    if (d.hidden % d.heads != 0) throw r.bad("num_attention_heads", "must divide hidden_size " + std::to_string(d.hidden));
    if (d.heads % d.kv_heads != 0) throw r.bad("num_key_value_heads", "must divide num_attention_heads " + std::to_string(d.heads));
    d.head_dim = d.hidden / d.heads;
    if (d.head_dim % 2 != 0) throw r.bad("num_attention_heads", "gives an odd head_dim (hidden_size / heads); RoPE needs it even");
    if (d.n_routed_experts != 0 && (d.experts_per_token <= 0 || d.experts_per_token > d.n_routed_experts))
      throw r.bad("num_experts_per_tok", "must be in 1..n_routed_experts");
    r.bounded("vocab_size", {d.vocab, d.hidden}, "the token embedding");
    r.bounded("hidden_size", {d.hidden, d.hidden}, "the attention projections");
    r.bounded("intermediate_size", {d.intermediate, d.hidden}, "the dense MLP");
    r.bounded("moe_intermediate_size", {d.moe_intermediate, std::max(d.n_shared_experts, 1), d.hidden}, "the shared experts");
    r.bounded("n_routed_experts", {d.n_routed_experts, d.hidden}, "the router");

    if (j.contains("projector_config")) {
      const auto& p = j["projector_config"];
      const std::string type = r.str(p, "projector_type", "linear");
      require(type == "linear", Status::unsupported, [&] { return path + ": projector_type '" + type + "' is not supported"; });
      c.projector.input_dim = r.integer(p, "input_dim", 2048);
      c.projector.n_embed = r.integer(p, "n_embed", d.hidden);
    }
    require(c.projector.n_embed == d.hidden, Status::invalid_model,
            [&] { return path + ": projector n_embed must equal hidden_size"; });

    const Reader v = r.in("vision_config"), sr = v.in("width").in("sam_vit_b"), cr = v.in("width").in("clip-l-14-224");
    if (j.contains("vision_config")) {
      // The page (global view) resolution; smaller models may declare a smaller one.
      c.sam.image_size = v.integer(j["vision_config"], "image_size", c.sam.image_size);
    }
    if (c.sam.image_size <= 0 || c.sam.image_size % (c.sam.patch * c.downsample) != 0)
      throw v.bad("image_size", "must be a positive multiple of " + std::to_string(c.sam.patch * c.downsample));
    if (j.contains("vision_config") && j["vision_config"].contains("width")) {
      const auto& w = j["vision_config"]["width"];
      if (w.contains("sam_vit_b")) {
        const auto& s = w["sam_vit_b"];
        c.sam.width = sr.positive(s, "width", c.sam.width);
        c.sam.layers = sr.positive(s, "layers", c.sam.layers);
        c.sam.heads = sr.positive(s, "heads", c.sam.heads);
        c.sam.window = sr.positive(s, "window_size", c.sam.window);
        c.sam.out_chans = sr.positive(s, "out_chans", c.sam.out_chans);
        if (s.contains("global_attn_indexes")) c.sam.global_layers = sr.int_list(s, "global_attn_indexes");
        if (s.contains("downsample_channels")) {
          const std::vector<int> ds = sr.int_list(s, "downsample_channels");
          if (ds.size() != 2 || ds[0] <= 0 || ds[1] <= 0) throw sr.bad("downsample_channels", "needs 2 positive entries");
          c.sam.net2_chans = ds[0];
          c.sam.net3_chans = ds[1];
        }
      }
      if (w.contains("clip-l-14-224")) {
        const auto& s = w["clip-l-14-224"];
        c.clip.width = cr.positive(s, "width", c.clip.width);
        c.clip.layers = cr.positive(s, "layers", c.clip.layers);
        c.clip.heads = cr.positive(s, "heads", c.clip.heads);
        c.clip.ffn = cr.positive(s, "ffn_hidden_size", c.clip.ffn);
        c.clip.image_size = cr.positive(s, "image_size", c.clip.image_size);
        c.clip.patch = cr.positive(s, "patch_size", c.clip.patch);
      }
    }
    const SamConfig& sc = c.sam;
    const ClipConfig& cc = c.clip;
    if (sc.width % sc.heads != 0) throw sr.bad("heads", "must divide width " + std::to_string(sc.width));
    if (cc.width % cc.heads != 0) throw cr.bad("heads", "must divide width " + std::to_string(cc.width));
    if (cc.image_size % cc.patch != 0) throw cr.bad("patch_size", "must divide image_size " + std::to_string(cc.image_size));
    require(c.clip.width == c.sam.net3_chans, Status::invalid_model,
            [&] { return path + ": CLIP width must equal SAM's last downsample channels (SAM features are CLIP's patches)"; });
    require(c.projector.input_dim == c.clip.width + c.sam.net3_chans, Status::invalid_model,
            [&] { return path + ": projector input_dim must be CLIP width + SAM channels"; });
    const int64_t grid = sc.image_size / sc.patch;  // a page's patches per side
    v.bounded("image_size", {grid, grid, 9, std::max(sc.width, sc.out_chans)}, "a page's SAM activations");
    sr.bounded("width", {4, sc.width, sc.width}, "the SAM MLP");
    sr.bounded("window_size", {sc.window, sc.window, sc.width}, "a SAM attention window");
    sr.bounded("out_chans", {9, sc.out_chans, std::max(sc.out_chans, sc.net2_chans)}, "the SAM neck");
    sr.bounded("downsample_channels", {9, sc.net2_chans, sc.net3_chans}, "the SAM compressor");
    cr.bounded("width", {3, cc.width, cc.width}, "the CLIP attention");
    cr.bounded("ffn_hidden_size", {cc.ffn, cc.width}, "the CLIP MLP");
    cr.bounded("image_size", {cc.image_size / cc.patch, cc.image_size / cc.patch, cc.width}, "the CLIP position table");
    return c;
  }

 private:
  // Elements allowed in anything sized by config values: far above any real model, low enough
  // that no size computed from them overflows.
  static constexpr int64_t kMaxElements = int64_t(1) << 40;

  struct Reader {
    std::string path;
    std::string section;  // prefix naming where the keys are: "" (top level), "vision_config.", ...

    // The reader of the object under `key` (for the key names in messages).
    Reader in(const std::string& key) const { return {path, section + key + "."}; }
    Error bad(const std::string& key, const std::string& what) const {
      return Error(Status::invalid_model, path + ": key '" + section + key + "' " + what);
    }
    int integer(const nlohmann::json& j, const std::string& key, int fallback) const {
      if (!j.contains(key) || j[key].is_null()) return fallback;
      if (!j[key].is_number_integer()) throw bad(key, "must be an integer");
      const int64_t v = j[key].get<int64_t>();
      if (v < -(int64_t(1) << 30) || v > (int64_t(1) << 30)) throw bad(key, "is out of range");
      return int(v);
    }
    int positive(const nlohmann::json& j, const std::string& key) const {
      if (!j.contains(key)) throw bad(key, "is missing");
      return positive(j, key, 0);
    }
    int positive(const nlohmann::json& j, const std::string& key, int fallback) const {
      const int v = integer(j, key, fallback);
      if (v <= 0) throw bad(key, "must be positive, got " + std::to_string(v));
      return v;
    }
    int non_negative(const nlohmann::json& j, const std::string& key, int fallback) const {
      const int v = integer(j, key, fallback);
      if (v < 0) throw bad(key, "must be >= 0, got " + std::to_string(v));
      return v;
    }
    int token_id(const nlohmann::json& j, const std::string& key, int fallback, int vocab) const {
      const int v = integer(j, key, fallback);
      if (v < 0 || v >= vocab)
        throw bad(key, "is " + std::to_string(v) + ", not a token id of the vocabulary (vocab_size " + std::to_string(vocab) + ")");
      return v;
    }
    float number(const nlohmann::json& j, const std::string& key, double fallback) const {
      if (!j.contains(key) || j[key].is_null()) return float(fallback);
      if (!j[key].is_number()) throw bad(key, "must be a number");
      const double v = j[key].get<double>();
      if (!(std::fabs(v) <= double(std::numeric_limits<float>::max()))) throw bad(key, "must be a finite float32 number");
      return float(v);
    }
    float positive_number(const nlohmann::json& j, const std::string& key, double fallback) const {
      const float v = number(j, key, fallback);
      if (!(v > 0)) throw bad(key, "must be positive");
      return v;
    }
    // Throws unless the product of `factors` (all positive) stays below kMaxElements.
    void bounded(const std::string& key, std::initializer_list<int64_t> factors, const char* what) const {
      int64_t n = 1;
      for (const int64_t f : factors) {
        if (n > kMaxElements / std::max<int64_t>(f, 1))
          throw bad(key, std::string("makes ") + what + " too large (over 2^40 elements)");
        n *= f;
      }
    }
    bool boolean(const nlohmann::json& j, const std::string& key, bool fallback) const {
      if (!j.contains(key) || j[key].is_null()) return fallback;
      if (!j[key].is_boolean()) throw bad(key, "must be true or false");
      return j[key].get<bool>();
    }
    std::string str(const nlohmann::json& j, const std::string& key, const std::string& fallback) const {
      if (!j.contains(key) || j[key].is_null()) return fallback;
      if (!j[key].is_string()) throw bad(key, "must be a string");
      return j[key].get<std::string>();
    }
    std::vector<int> int_list(const nlohmann::json& j, const std::string& key) const {
      if (!j[key].is_array()) throw bad(key, "must be a list of integers");
      std::vector<int> out;
      for (const auto& v : j[key]) {
        if (!v.is_number_integer()) throw bad(key, "must be a list of integers");
        out.push_back(v.get<int>());
      }
      return out;
    }
  };
};

UOCR_NAMESPACE_END
