// The CPU engine: uocr::VisionEncoder and uocr::PageGroupDecoder over the model's mapped weights.
#pragma once
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "uocr/decoder/page_groups.hpp"
#include "uocr/engine/engine.hpp"
#include "uocr/engine/registry.hpp"
#include "uocr/model/model.hpp"
#include "uocr/version.hpp"
#include "uocr/vision/encoder.hpp"

UOCR_NAMESPACE_BEGIN

class CpuVisionEngine final : public VisionEngine {
 public:
  explicit CpuVisionEngine(std::shared_ptr<const Model> model, Precision precision = Precision::f32)
      : model_(std::move(model)), enc_(model_->config(), model_->weights(), precision) {}
  int hidden() const override { return enc_.hidden(); }
  std::vector<float> visual_tokens(const std::vector<float>& global_view, const std::vector<std::vector<float>>& tiles,
                                   int tiles_x, int tiles_y) override {
    return enc_.visual_tokens(global_view, tiles, tiles_x, tiles_y, ws_, deadline_);
  }
  void set_deadline(const Deadline& deadline) override { deadline_ = deadline; }
  size_t scratch_bytes() const override { return ws_.bytes(); }

 private:
  std::shared_ptr<const Model> model_;  // the encoder reads its weights
  VisionEncoder enc_;
  vision::Workspace ws_;  // activations, reused page after page
  Deadline deadline_;
};

// The processor's model name as the OS reports it (Linux: /proc/cpuinfo), else "cpu".
inline const std::string& cpu_model_name() {
  static const std::string name = [] {
    std::ifstream f("/proc/cpuinfo");
    for (std::string line; std::getline(f, line);) {
      const size_t colon = line.find(':');
      if (line.rfind("model name", 0) == 0 && colon != std::string::npos) {
        const size_t start = line.find_first_not_of(" \t", colon + 1);
        if (start != std::string::npos) return line.substr(start);
      }
    }
    return std::string("cpu");
  }();
  return name;
}

// With batching.max_batch > 1 the decode steps of every document on this engine go through its
// one StepBatcher.
class CpuEngine final : public Engine {
 public:
  using PageGroups = PageGroupEngine<PageGroupDecoder>;

  // precision: the vision encoder's and the prefills' large products; decode steps (and so the
  // shared batcher) are float32 whatever it is.
  explicit CpuEngine(std::shared_ptr<const Model> m, const EngineOptions& options = {})
      : Engine(std::move(m), options),
        precision_(options.precision == Precision::bf16 && cpu::bf16_compute_available() ? Precision::bf16 : Precision::f32) {
    require(model() != nullptr, Status::invalid_argument, "engine needs a model");
    validate(options.batching);
    if (options.batching.max_batch > 1)
      batcher_ = std::make_shared<PageGroups::Batcher>(Decoder(model()->config().decoder, model()->weights().decoder),
                                                       options.batching, kMaxExtrapolatedPosition);
  }
  EngineInfo info() const override { return {Backend::cpu, 0, cpu_model_name(), "", precision_}; }
  std::unique_ptr<VisionEngine> vision() override { return std::make_unique<CpuVisionEngine>(model(), precision_); }
  std::unique_ptr<DecoderEngine> decoder(int window, const PageGroupParams& groups) override {
    const Model& m = *model();
    auto e = std::make_unique<PageGroups>(model(), m.config().decoder, m.weights().decoder, window, groups, precision_);
    if (batcher_) e->batch_steps(batcher_);
    return e;
  }
  BatchStats batch_stats() const override { return batcher_ ? batcher_->stats() : BatchStats{}; }

 private:
  Precision precision_;  // as it runs on this CPU
  std::shared_ptr<PageGroups::Batcher> batcher_;  // null: batching off
};

inline const bool cpu_engine_registered = register_engine(
    Backend::cpu, [](const std::shared_ptr<const Model>& model, const EngineOptions& options) -> std::shared_ptr<Engine> {
      return std::make_shared<CpuEngine>(model, options);
    });

UOCR_NAMESPACE_END
