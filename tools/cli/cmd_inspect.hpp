// `uocr inspect model|vision|logits`: the engine's intermediate results as .npy, so parity with
// the upstream PyTorch code can be checked from outside the library. They run the CPU reference
// code (no --backend); the model folder is chosen as for `uocr run` (model_dir.hpp).
#pragma once
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "args.hpp"
#include "decode_limits.hpp"
#include "model_dir.hpp"
#include "same_file.hpp"
#include "verify_model.hpp"
#include "uocr/decoder/decoder.hpp"
#include "uocr/decoder/kv_cache.hpp"
#include "uocr/image/image.hpp"
#include "uocr/image/preprocess.hpp"
#include "uocr/io/npy.hpp"
#include "uocr/model/model.hpp"
#include "uocr/vision/encoder.hpp"

namespace uocr_cli {

inline CommandOptions inspect_model_options() { return {"inspect model", {"--model", "--checksums"}, {"--verify"}, false, {}}; }

// Options users may carry over from `uocr run`, refused with the reason.
inline std::map<std::string, std::string> cpu_only() {
  const std::string why = "inspection runs on the CPU reference code; it takes no backend or device";
  return {{"--backend", why}, {"--device", why}};
}
inline CommandOptions inspect_vision_options() {
  CommandOptions o{"inspect vision", {"--model", "--image", "--mode", "-o"}, {}, false, cpu_only()};
  for (const std::string& limit : decode_limit_options()) o.values.push_back(limit);
  return o;
}
inline CommandOptions inspect_logits_options() {
  CommandOptions o{"inspect logits",
                   {"--model", "--image", "--mode", "--input-ids", "--generated", "--attention", "--window", "-o"},
                   {},
                   false,
                   cpu_only()};
  for (const std::string& limit : decode_limit_options()) o.values.push_back(limit);
  return o;
}

// Visual embeddings of one or more pages (--image per page), in prompt order.
inline std::vector<float> visual_embeddings(const uocr::Model& model, const Args& args) {
  const std::vector<std::string> images = args.all("--image");
  uocr::require(!images.empty(), uocr::Status::invalid_argument, "missing required option --image");
  const std::string mode = args.choice("--mode", {"base", "gundam"}, "base");
  uocr::require(mode == "base" || images.size() == 1, uocr::Status::invalid_argument,
                "gundam mode takes one image (several pages use base views, as upstream)");
  const int size = model.config().sam.image_size;
  const uocr::PreprocessConfig views = mode == "gundam" ? uocr::preset_gundam() : uocr::PreprocessConfig{size, size, false};
  const uocr::DecodeLimits limits = decode_limits(args);
  uocr::VisionEncoder encoder(model.config(), model.weights());
  std::vector<float> out;
  for (const std::string& path : images) {
    const uocr::PreparedImage p = uocr::prepare_image(uocr::load_image(path, limits), views);
    const std::vector<float> v = encoder.visual_tokens(p.global_chw, p.tiles_chw, p.tiles_x, p.tiles_y);
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

inline int cmd_inspect_model(const Args& args) {
  uocr::require(args.has("--verify") || !args.has("--checksums"), uocr::Status::invalid_argument,
                "--checksums needs --verify");
  if (args.has("--verify")) return verify_model(model_dir(args), args.get("--checksums", ""));
  const auto model = uocr::Model::load(model_dir(args));
  const uocr::ModelConfig& c = model->config();
  std::printf("model_type %s\ntensors %zu\nparameters %lld\nhidden %d\nlayers %d\nheads %d\nexperts %d (top %d, shared %d)\n"
              "vocab %d\nsliding_window %d\nimage_size %d\nsam %d x %d\nclip %d x %d\ntokenizer_vocab %zu\n",
              c.model_type.c_str(), model->checkpoint().size(), (long long)model->checkpoint().parameter_count(),
              c.decoder.hidden, c.decoder.layers, c.decoder.heads, c.decoder.n_routed_experts, c.decoder.experts_per_token,
              c.decoder.n_shared_experts, c.decoder.vocab, c.decoder.sliding_window, c.sam.image_size, c.sam.layers,
              c.sam.width, c.clip.layers, c.clip.width, model->tokenizer().vocab_size());
  int64_t int8 = 0;
  for (const auto& kv : model->checkpoint().tensors()) int8 += kv.second->dtype == uocr::DType::i8;
  std::printf("int8_matrices %lld\n", static_cast<long long>(int8));
  const uocr::DecodeDefaults& d = model->decode_defaults();
  std::printf("decode_defaults pages_per_group=%s overlap_pages=%s positions=%s slide_kv=%s\n",
              d.pages_per_group ? std::to_string(d.pages_per_group).c_str() : "-",
              d.overlap_pages ? std::to_string(d.overlap_pages).c_str() : "-",
              d.positions ? uocr::position_policy_name(*d.positions) : "-", d.slide_kv ? uocr::slide_kv_name(*d.slide_kv) : "-");
  return 0;
}

inline int cmd_inspect_vision(const Args& args) {
  const std::string model_path = model_dir(args), out = args.required("-o");
  refuse_outputs_over_inputs({{"-o", out}}, args.all("--image"), model_path);
  const auto model = uocr::Model::load(model_path);
  const std::vector<float> v = visual_embeddings(*model, args);
  const int64_t hidden = model->config().decoder.hidden;
  uocr::write_npy_f32(out, {int64_t(v.size()) / hidden, hidden}, v.data());
  return 0;
}

// One logits row for the last prompt position, then one per teacher-forced generated token
// (fed at positions P, P+1, ... through the KV cache: R-SWA ring or full attention).
inline int cmd_inspect_logits(const Args& args) {
  const std::string model_path = model_dir(args), out = args.required("-o");
  std::vector<std::string> inputs = args.all("--image");
  for (const char* ids : {"--input-ids", "--generated"})
    if (args.has(ids)) inputs.push_back(args.get(ids, ""));
  refuse_outputs_over_inputs({{"-o", out}}, inputs, model_path);
  const auto model = uocr::Model::load(model_path);
  const uocr::DecoderConfig& dc = model->config().decoder;
  auto to_ids = [&](const std::string& path) {
    std::vector<int32_t> ids;
    for (int64_t v : uocr::read_npy(path).to_i64()) {
      uocr::require(v >= 0 && v < dc.vocab, uocr::Status::invalid_argument,
                    [&] { return path + ": token id " + std::to_string(v) + " is outside the vocabulary"; });
      ids.push_back(int32_t(v));
    }
    return ids;
  };
  const std::vector<int32_t> ids = to_ids(args.required("--input-ids"));
  const std::vector<int32_t> generated = args.has("--generated") ? to_ids(args.get("--generated", "")) : std::vector<int32_t>{};
  const std::string attention = args.choice("--attention", {"rswa", "full"}, "rswa");
  const int window = attention == "full" ? 0 : args.integer("--window", dc.sliding_window > 0 ? dc.sliding_window : 128);
  uocr::require(window >= 0 && (attention == "full" || window > 0), uocr::Status::invalid_argument, "--window must be positive");

  const std::vector<float> visual = visual_embeddings(*model, args);
  uocr::Decoder decoder(dc, model->weights().decoder);
  uocr::KvCache cache(dc, window);
  std::vector<float> rows = decoder.prefill(decoder.embed_prompt(ids, visual, model->image_token_id()), 0, cache);
  int64_t position = int64_t(ids.size());
  for (int32_t token : generated) {
    const std::vector<float>& logits = decoder.decode_step(token, position++, cache);
    rows.insert(rows.end(), logits.begin(), logits.end());
  }
  uocr::write_npy_f32(out, {int64_t(1 + generated.size()), int64_t(dc.vocab)}, rows.data());
  return 0;
}

}  // namespace uocr_cli
