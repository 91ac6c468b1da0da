// The CUDA engine (uocr/engine/engine.hpp): CudaVisionEncoder and page groups over CudaDecoder +
// CudaKvCache.
//
// The decoder's weights are uploaded once per model and device index (Model::backend_state
// "cuda:<index>") and shared by every session on that device. Each session's decoder gets its
// own Context (stream, cuBLAS handle, allocator, scratch), so sessions in different threads run
// concurrently on the GPU without locking; the shared weights are read-only. The vision encoder
// (its weights uploaded on the first vision() call) runs on the device model's Context, one view
// at a time under its lock.
//
// SR-SWA works as on Vulkan (host selection, device attention: decoder.hpp); checkpoints copy
// the KV rows through the host (ReservedKvRing::visit_rows) in the CPU's layout, so a
// checkpoint written on any backend resumes here and the other way round.
#pragma once
#include <algorithm>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "uocr/backends/cuda/context.hpp"
#include "uocr/backends/cuda/decoder.hpp"
#include "uocr/backends/cuda/vision.hpp"
#include "uocr/backends/cuda/weights.hpp"
#include "uocr/decoder/page_groups.hpp"
#include "uocr/engine/engine.hpp"
#include "uocr/model/model.hpp"

namespace uocr::cuda {

// One model's decoder weights on one device. Members are destroyed in reverse order: the
// Context (which owns the weights' memory) last.
struct DeviceModel {
  DeviceModel(const Model& model, int device_index)
      : ctx(device_index), decoder(DecoderDeviceWeights::upload(ctx, model.config().decoder, model.weights().decoder)) {
    ctx.synchronize();  // other Contexts (other streams) read these weights
  }

  Context ctx;
  std::shared_ptr<const DecoderDeviceWeights> decoder;
  std::mutex vision_mutex;                    // guards `vision` and ctx's use by it
  std::unique_ptr<CudaVisionEncoder> vision;  // made by the first vision() call

  // The vision encoder, made (weights uploaded) the first time; call with vision_mutex held.
  CudaVisionEncoder& vision_encoder(const Model& model) {
    if (!vision) vision = std::make_unique<CudaVisionEncoder>(ctx, model.config(), model.weights());
    return *vision;
  }

  static std::shared_ptr<DeviceModel> of(const Model& model, int device_index) {
    return model.backend_state<DeviceModel>("cuda:" + std::to_string(device_index),
                                            [&] { return std::make_shared<DeviceModel>(model, device_index); });
  }
};

using CudaPageGroups = BasicPageGroupDecoder<CudaDecoder, CudaKvCache>;

class CudaVisionEngine final : public VisionEngine {
 public:
  CudaVisionEngine(std::shared_ptr<const Model> model, std::shared_ptr<DeviceModel> dev)
      : model_(std::move(model)), dev_(std::move(dev)) {
    std::lock_guard<std::mutex> lock(dev_->vision_mutex);
    hidden_ = dev_->vision_encoder(*model_).hidden();
  }
  int hidden() const override { return hidden_; }
  std::vector<float> visual_tokens(const std::vector<float>& global_view, const std::vector<std::vector<float>>& tiles,
                                   int tiles_x, int tiles_y) override {
    std::lock_guard<std::mutex> lock(dev_->vision_mutex);
    CudaVisionEncoder& enc = dev_->vision_encoder(*model_);
    enc.reset_peak();
    std::vector<float> out = enc.visual_tokens(global_view, tiles, tiles_x, tiles_y);
    peak_ = std::max(peak_, enc.peak_activation_bytes());
    return out;
  }
  // The device activation buffers of the largest view encoded (allocated per view).
  size_t scratch_bytes() const override { return peak_; }

 private:
  std::shared_ptr<const Model> model_;  // owns dev_ (backend_state) and the weights its encoder reads
  std::shared_ptr<DeviceModel> dev_;
  int hidden_ = 0;
  size_t peak_ = 0;
};

class CudaEngine final : public Engine {
 public:
  // Opens device `device_index` for `model`, uploading the decoder weights unless another session
  // already did. Status::unsupported without a driver or device; invalid_argument for an index
  // out of range.
  CudaEngine(std::shared_ptr<const Model> model, int device_index)
      : model_(std::move(model)), dev_(DeviceModel::of(*model_, device_index)) {}

  Backend backend() const override { return Backend::cuda; }
  std::string device() const override {
    const DeviceInfo& d = dev_->ctx.info();
    return "CUDA device " + std::to_string(d.index) + ": " + d.name;
  }
  std::unique_ptr<VisionEngine> vision() override { return std::make_unique<CudaVisionEngine>(model_, dev_); }
  std::unique_ptr<DecoderEngine> decoder(int window, const PageGroupParams& groups) override {
    // The session's own Context, kept alive (with the model and the shared weights) by the owner.
    struct Owner {
      Owner(std::shared_ptr<const Model> m, std::shared_ptr<DeviceModel> d)
          : model(std::move(m)), dev(std::move(d)), ctx(dev->ctx.info().index) {}
      std::shared_ptr<const Model> model;
      std::shared_ptr<DeviceModel> dev;
      Context ctx;
    };
    auto owner = std::make_shared<Owner>(model_, dev_);
    const DecoderConfig& c = model_->config().decoder;
    return std::make_unique<PageGroupEngine<CudaPageGroups>>(
        owner, CudaDecoder(owner->ctx, c, model_->weights().decoder, dev_->decoder), CudaKvCache(owner->ctx, c, window),
        groups);
  }

 private:
  std::shared_ptr<const Model> model_;
  std::shared_ptr<DeviceModel> dev_;
};

}  // namespace uocr::cuda
