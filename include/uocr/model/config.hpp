// config.json of a model folder -> typed dimensions. Both layouts load: Unlimited-OCR
// (model_type "unlimited-ocr", sliding_window 128) and DeepSeek-OCR (model_type "deepseek_vl_v2").
// Keys absent from the file take DeepseekV2Config's defaults, as upstream does; sizes the
// upstream Python hard-codes (SAM neck channels, window, CLIP FFN) default to the real values.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "uocr/core/error.hpp"
#include "uocr/io/json_file.hpp"

namespace uocr {

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
  int positions() const { return (image_size / patch) * (image_size / patch) + 1; }
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

  static ModelConfig load(const std::string& path) { return from_json(read_model_json(path), path); }

  static ModelConfig from_json(const nlohmann::json& j, const std::string& path) {
    require(j.is_object(), Status::invalid_model, [&] { return path + ": top level must be an object"; });
    ModelConfig c;
    Reader r{path};
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

    DecoderConfig& d = c.decoder;
    d.hidden = r.positive(j, "hidden_size");
    d.intermediate = r.positive(j, "intermediate_size");
    d.layers = r.positive(j, "num_hidden_layers");
    d.heads = r.positive(j, "num_attention_heads");
    d.kv_heads = r.integer(j, "num_key_value_heads", d.heads);
    d.vocab = r.positive(j, "vocab_size");
    d.n_routed_experts = r.integer(j, "n_routed_experts", 0);
    d.moe_intermediate = d.n_routed_experts ? r.positive(j, "moe_intermediate_size") : 0;
    d.n_shared_experts = r.integer(j, "n_shared_experts", 0);
    d.experts_per_token = r.integer(j, "num_experts_per_tok", 0);
    d.first_k_dense = r.integer(j, "first_k_dense_replace", 0);
    d.max_positions = r.integer(j, "max_position_embeddings", 2048);
    d.bos_id = r.integer(j, "bos_token_id", 0);
    d.eos_id = r.integer(j, "eos_token_id", 1);
    d.rope_theta = r.number(j, "rope_theta", 10000.0);
    d.rms_eps = r.number(j, "rms_norm_eps", 1e-6);
    d.routed_scaling = r.number(j, "routed_scaling_factor", 1.0);
    d.norm_topk_prob = r.boolean(j, "norm_topk_prob", false);
    require(r.integer(j, "moe_layer_freq", 1) == 1, Status::unsupported, [&] { return path + ": moe_layer_freq must be 1"; });
    require(!r.boolean(j, "attention_bias", false), Status::unsupported, [&] { return path + ": attention_bias is not supported"; });
    // Unlimited-OCR reads sliding_window_size first, then sliding_window (modeling_unlimitedocr.py).
    d.sliding_window = r.integer(j, "sliding_window_size", r.integer(j, "sliding_window", 0));
    require(d.hidden % d.heads == 0, Status::invalid_model, [&] { return path + ": hidden_size not divisible by heads"; });
    require(d.kv_heads > 0 && d.heads % d.kv_heads == 0, Status::invalid_model,
            [&] { return path + ": num_attention_heads must be a multiple of num_key_value_heads"; });
    d.head_dim = d.hidden / d.heads;
    require(d.head_dim % 2 == 0, Status::invalid_model, [&] { return path + ": head_dim must be even for RoPE"; });
    require(d.n_routed_experts == 0 || (d.experts_per_token > 0 && d.experts_per_token <= d.n_routed_experts),
            Status::invalid_model, [&] { return path + ": num_experts_per_tok must be in 1..n_routed_experts"; });
    require(d.sliding_window >= 0, Status::invalid_model, [&] { return path + ": negative sliding window"; });

    if (j.contains("projector_config")) {
      const auto& p = j["projector_config"];
      const std::string type = r.str(p, "projector_type", "linear");
      require(type == "linear", Status::unsupported, [&] { return path + ": projector_type '" + type + "' is not supported"; });
      c.projector.input_dim = r.integer(p, "input_dim", 2048);
      c.projector.n_embed = r.integer(p, "n_embed", d.hidden);
    }
    require(c.projector.n_embed == d.hidden, Status::invalid_model,
            [&] { return path + ": projector n_embed must equal hidden_size"; });

    if (j.contains("vision_config")) {
      // The page (global view) resolution; smaller models may declare a smaller one.
      c.sam.image_size = r.integer(j["vision_config"], "image_size", c.sam.image_size);
    }
    require(c.sam.image_size > 0 && c.sam.image_size % (c.sam.patch * c.downsample) == 0, Status::invalid_model,
            [&] { return path + ": vision_config.image_size must be a positive multiple of 64"; });
    if (j.contains("vision_config") && j["vision_config"].contains("width")) {
      const auto& w = j["vision_config"]["width"];
      if (w.contains("sam_vit_b")) {
        const auto& s = w["sam_vit_b"];
        c.sam.width = r.integer(s, "width", c.sam.width);
        c.sam.layers = r.integer(s, "layers", c.sam.layers);
        c.sam.heads = r.integer(s, "heads", c.sam.heads);
        c.sam.window = r.integer(s, "window_size", c.sam.window);
        c.sam.out_chans = r.integer(s, "out_chans", c.sam.out_chans);
        if (s.contains("global_attn_indexes")) c.sam.global_layers = r.int_list(s, "global_attn_indexes");
        if (s.contains("downsample_channels")) {
          const std::vector<int> ds = r.int_list(s, "downsample_channels");
          require(ds.size() == 2, Status::invalid_model, [&] { return path + ": downsample_channels needs 2 entries"; });
          c.sam.net2_chans = ds[0];
          c.sam.net3_chans = ds[1];
        }
      }
      if (w.contains("clip-l-14-224")) {
        const auto& s = w["clip-l-14-224"];
        c.clip.width = r.integer(s, "width", c.clip.width);
        c.clip.layers = r.integer(s, "layers", c.clip.layers);
        c.clip.heads = r.integer(s, "heads", c.clip.heads);
        c.clip.ffn = r.integer(s, "ffn_hidden_size", c.clip.ffn);
        c.clip.image_size = r.integer(s, "image_size", c.clip.image_size);
        c.clip.patch = r.integer(s, "patch_size", c.clip.patch);
      }
    }
    require(c.sam.width % c.sam.heads == 0 && c.clip.width % c.clip.heads == 0, Status::invalid_model,
            [&] { return path + ": vision width not divisible by heads"; });
    require(c.clip.width == c.sam.net3_chans, Status::invalid_model,
            [&] { return path + ": CLIP width must equal SAM's last downsample channels (SAM features are CLIP's patches)"; });
    require(c.projector.input_dim == c.clip.width + c.sam.net3_chans, Status::invalid_model,
            [&] { return path + ": projector input_dim must be CLIP width + SAM channels"; });
    require(c.sam.window > 0, Status::invalid_model, [&] { return path + ": SAM window must be positive"; });
    return c;
  }

 private:
  struct Reader {
    std::string path;
    Error bad(const std::string& key, const char* what) const {
      return Error(Status::invalid_model, path + ": key '" + key + "' " + what);
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
      const int v = integer(j, key, 0);
      if (v <= 0) throw bad(key, "must be positive");
      return v;
    }
    float number(const nlohmann::json& j, const std::string& key, double fallback) const {
      if (!j.contains(key) || j[key].is_null()) return float(fallback);
      if (!j[key].is_number()) throw bad(key, "must be a number");
      return j[key].get<float>();
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

}  // namespace uocr
