// Int8 weights: weight-only, one scale per output channel, in the layout of compressed-tensors'
// "int-quantized" format, which vLLM loads as W8A16 (and Hugging Face Transformers reads):
//
//   config.json  "quantization_config": {"quant_method": "compressed-tensors",
//                  "format": "int-quantized", "quantization_status": "compressed",
//                  "config_groups": {"group_0": {"targets": [...], "weights": {"num_bits": 8,
//                  "type": "int", "symmetric": true, "strategy": "channel", ...}}}, ...}
//   X.weight        I8 [out, in]   the integers q
//   X.weight_scale  F32/BF16/F16 [out, 1]   s; the weight is q · s, row by row
//
// We chose it over GGUF's blocks or AWQ/GPTQ packing because it keeps safetensors, the tensor names
// and the shapes of the published checkpoint (the same loader reads both folders), and a server
// that speaks vLLM's formats reads it too. Symmetric, no zero point: s = max|w| / 127 and q =
// round-half-even(w / s), so no row clips. `uocr quantize` writes it for the decoder's linear
// layers (attention projections, dense MLP, shared and routed experts) and lm_head; the router,
// the embeddings, the norms and the vision encoder stay as they were. The loader follows each
// tensor's dtype, so it reads a folder quantized by other tools when only those layers are int8.
#pragma once
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "uocr/core/error.hpp"
#include "uocr/io/safetensors.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

inline constexpr const char* kScaleSuffix = "_scale";

// Whether config.json (object `j`, read from `path`) declares int8 weights in the format above;
// another quantization scheme is refused by name (it would be read as plain integers).
inline bool read_int8_quantization(const nlohmann::json& j, const std::string& path) {
  if (!j.contains("quantization_config") || j["quantization_config"].is_null()) return false;
  const nlohmann::json& q = j["quantization_config"];
  auto refuse = [&](const std::string& what) {
    return Error(Status::unsupported, path + ": quantization_config " + what +
                                          " (uocr reads compressed-tensors int-quantized weights: 8-bit, symmetric, "
                                          "one scale per channel)");
  };
  auto text = [&](const nlohmann::json& o, const std::string& key) {
    return o.is_object() && o.contains(key) && o[key].is_string() ? o[key].get<std::string>() : std::string("(none)");
  };
  if (!q.is_object()) throw refuse("is not an object");
  if (text(q, "quant_method") != "compressed-tensors") throw refuse("has quant_method '" + text(q, "quant_method") + "'");
  if (text(q, "format") != "int-quantized") throw refuse("has format '" + text(q, "format") + "'");
  if (q.contains("quantization_status") && text(q, "quantization_status") != "compressed")
    throw refuse("has quantization_status '" + text(q, "quantization_status") + "', not 'compressed'");
  if (!q.contains("config_groups") || !q["config_groups"].is_object() || q["config_groups"].empty())
    throw refuse("has no config_groups");
  for (auto g = q["config_groups"].begin(); g != q["config_groups"].end(); ++g) {
    const std::string where = "group '" + g.key() + "'";
    if (!g->is_object()) throw refuse(where + " is not an object");
    for (const char* act : {"input_activations", "output_activations"})
      if (g->contains(act) && !(*g)[act].is_null()) throw refuse(where + " quantizes " + act + " (weight-only is read)");
    if (!g->contains("weights") || !(*g)["weights"].is_object()) throw refuse(where + " has no weights");
    const nlohmann::json& w = (*g)["weights"];
    auto is = [&](const char* key, const nlohmann::json& want) { return w.contains(key) && w[key] == want; };
    if (!is("num_bits", 8)) throw refuse(where + " has weights num_bits " + (w.contains("num_bits") ? w["num_bits"].dump() : "(none)"));
    if (!is("type", "int")) throw refuse(where + " has weights type " + (w.contains("type") ? w["type"].dump() : "(none)"));
    if (!is("symmetric", true)) throw refuse(where + " has asymmetric weights (a zero point)");
    if (!is("strategy", "channel")) throw refuse(where + " has weights strategy " + (w.contains("strategy") ? w["strategy"].dump() : "(none)"));
    if (w.contains("dynamic") && w["dynamic"] != false) throw refuse(where + " has dynamic weights");
  }
  return true;
}

// The config block `uocr quantize` writes (targets as compressed-tensors' "re:" patterns, so
// other readers quantize exactly the layers it did).
inline nlohmann::json int8_quantization_config() {
  nlohmann::json weights = {{"num_bits", 8},     {"type", "int"},      {"symmetric", true}, {"strategy", "channel"},
                            {"group_size", nullptr}, {"dynamic", false}, {"observer", "minmax"},
                            {"actorder", nullptr}, {"block_structure", nullptr}};
  nlohmann::json group = {
      {"targets",
       {"re:^model\\.layers\\.\\d+\\.self_attn\\.[qkvo]_proj$",
        "re:^model\\.layers\\.\\d+\\.mlp\\.(experts\\.\\d+\\.|shared_experts\\.)?(gate|up|down)_proj$", "lm_head"}},
      {"weights", weights},
      {"input_activations", nullptr},
      {"output_activations", nullptr}};
  return {{"quant_method", "compressed-tensors"},
          {"format", "int-quantized"},
          {"quantization_status", "compressed"},
          {"config_groups", {{"group_0", group}}},
          {"ignore", nlohmann::json::array()},
          {"kv_cache_scheme", nullptr}};
}

// The row scales of int8 tensor `weight` from its `scale` tensor ([out, 1] or [out], any float
// type): finite and not negative, or an error naming the tensor.
inline std::vector<float> read_row_scales(const TensorView& weight, const TensorView& scale) {
  require(weight.shape.size() == 2, Status::invalid_model, [&] {
    return weight.file + ": int8 tensor " + weight.name + " has shape " + shape_string(weight.shape) +
           "; only matrices [out, in] are read as int8";
  });
  const int64_t rows = weight.dim(0);
  const bool column = scale.shape == std::vector<int64_t>{rows, 1} || scale.shape == std::vector<int64_t>{rows};
  require(column && scale.dtype != DType::i8, Status::invalid_model, [&] {
    return scale.file + ": " + scale.name + " is " + dtype_name(scale.dtype) + " " + shape_string(scale.shape) +
           ", expected one float scale per row of " + weight.name + " [" + std::to_string(rows) + ", 1]";
  });
  std::vector<float> s(static_cast<size_t>(rows));
  scale.read_f32(0, rows, s.data());
  for (int64_t r = 0; r < rows; ++r)
    require(std::isfinite(s[size_t(r)]) && s[size_t(r)] >= 0.f, Status::invalid_model, [&] {
      return scale.file + ": " + scale.name + " row " + std::to_string(r) + " is " + std::to_string(s[size_t(r)]) +
             " (scales must be finite and not negative)";
    });
  return s;
}

// One row of n weights as int8 with its scale, as `uocr quantize` writes them.
inline float quantize_row(const float* w, int64_t n, int8_t* q) {
  float max_abs = 0.f;
  for (int64_t i = 0; i < n; ++i) max_abs = std::max(max_abs, std::fabs(w[i]));
  const float scale = max_abs / 127.f;
  for (int64_t i = 0; i < n; ++i)
    q[i] = scale > 0.f ? int8_t(std::max(-127.f, std::min(127.f, std::nearbyint(w[i] / scale)))) : int8_t(0);
  return scale;
}

UOCR_NAMESPACE_END
