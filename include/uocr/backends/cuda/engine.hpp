// The CUDA engine (uocr/engine/engine.hpp): page groups over CudaDecoder + CudaKvCache.
//
// The decoder's weights are uploaded once per model and device index (Model::backend_state
// "cuda:<index>") and shared by every session on that device. Each session's decoder gets its
// own Context (stream, cuBLAS handle, allocator, scratch), so sessions in different threads run
// concurrently on the GPU without locking; the shared weights are read-only.
//
// Not on CUDA yet (Status::unsupported when asked for): the vision encoder (vision()), SR-SWA.
#pragma once
#include <memory>
#include <string>

#include "uocr/backends/cuda/context.hpp"
#include "uocr/backends/cuda/decoder.hpp"
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

  static std::shared_ptr<DeviceModel> of(const Model& model, int device_index) {
    return model.backend_state<DeviceModel>("cuda:" + std::to_string(device_index),
                                            [&] { return std::make_shared<DeviceModel>(model, device_index); });
  }
};

using CudaPageGroups = BasicPageGroupDecoder<CudaDecoder, CudaKvCache>;

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
  std::unique_ptr<VisionEngine> vision() override {
    throw Error(Status::unsupported,
                "CUDA backend: the vision encoder does not run on CUDA yet (the decoder does); use the cpu or vulkan backend "
                "for pages");
  }
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
