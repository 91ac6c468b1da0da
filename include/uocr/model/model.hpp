// A loaded model folder: config, mapped weights, tokenizer. Immutable after load, so one
// instance is shared by every session and thread. What a device holds of it (the weights
// uploaded to a GPU) belongs to the engine opened on that device (uocr/engine/engine.hpp).
#pragma once
#include <memory>
#include <string>

#include "uocr/model/checkpoint.hpp"
#include "uocr/model/config.hpp"
#include "uocr/model/decode_defaults.hpp"
#include "uocr/model/weights.hpp"
#include "uocr/tokenizer/tokenizer.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

class Model {
 public:
  static std::shared_ptr<const Model> load(const std::string& dir) {
    // Not make_shared: the constructor is private and the object must never move (the bound
    // weights point into the checkpoint's mapped files).
    return std::shared_ptr<const Model>(new Model(dir));
  }

  const std::string& dir() const { return dir_; }
  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  const Checkpoint& checkpoint() const { return checkpoint_; }
  const Tokenizer& tokenizer() const { return tokenizer_; }
  const DecodeDefaults& decode_defaults() const { return decode_defaults_; }
  int32_t image_token_id() const { return image_token_id_; }

  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

 private:
  explicit Model(const std::string& dir)
      : dir_(dir),
        config_(ModelConfig::load(dir + "/config.json")),
        checkpoint_(Checkpoint::open(dir)),
        weights_(ModelWeights::bind(checkpoint_, config_)),
        tokenizer_(Tokenizer::load(dir + "/tokenizer.json")),
        decode_defaults_(DecodeDefaults::load_folder(dir)) {
    image_token_id_ = tokenizer_.token_id("<image>");
    require(image_token_id_ >= 0, Status::invalid_model, [&] { return dir + "/tokenizer.json has no <image> token"; });
    require(int64_t(tokenizer_.id_limit()) <= config_.decoder.vocab, Status::invalid_model, [&] {
      return dir + ": tokenizer has ids up to " + std::to_string(tokenizer_.id_limit() - 1) +
             " but the model's vocab_size is " + std::to_string(config_.decoder.vocab);
    });
  }

  std::string dir_;
  ModelConfig config_;
  Checkpoint checkpoint_;
  ModelWeights weights_;
  Tokenizer tokenizer_;
  DecodeDefaults decode_defaults_;
  int32_t image_token_id_ = -1;
};

UOCR_NAMESPACE_END
