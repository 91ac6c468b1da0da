// The Vulkan engine (uocr/engine/engine.hpp): VulkanVisionEncoder and page groups over
// VulkanDecoder + VulkanKvCache on one device.
//
// The engine owns the device (Context) and the model's weights on it, shared by every session
// opened on the engine; each session's decoder has its own KV cache and scratch buffers. The
// Context serialises concurrent users; the shared vision encoder (it caches size-dependent
// tables) is used under its own lock.
//
// SR-SWA, checkpoints / resume and position extrapolation work as on the CPU (a checkpoint
// resumes on either backend); SR-SWA selects on the device (VulkanSparseReference, sparse.hpp).
#pragma once
#include <memory>
#include <mutex>
#include <string>

#include "backends/device/vision_engine.hpp"
#include "backends/vulkan/context.hpp"
#include "backends/vulkan/decoder.hpp"
#include "backends/vulkan/vision.hpp"
#include "uocr/decoder/page_groups.hpp"
#include "uocr/engine/engine.hpp"
#include "uocr/model/model.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN
namespace vulkan {

// One model's weights on one device; what holds it keeps the model (whose weights its encoder
// and decoders read) alive too. Members are destroyed in reverse order: the Context after
// everything on it, the model last.
struct DeviceModel {
  DeviceModel(std::shared_ptr<const Model> m, int device_index)
      : model(std::move(m)),
        ctx(options(device_index)),
        decoder(DecoderDeviceWeights::upload(ctx, model->weights().decoder)),
        vision(ctx, model->config(), model->weights()) {}

  std::shared_ptr<const Model> model;
  Context ctx;
  std::shared_ptr<const DecoderDeviceWeights> decoder;
  std::mutex vision_mutex;
  VulkanVisionEncoder vision;

  // DeviceVisionEngine's access to the encoder (made with the device model).
  VulkanVisionEncoder& vision_encoder(const Model&) { return vision; }

  static ContextOptions options(int device_index) {
    ContextOptions o;
    o.device_index = device_index;
    return o;
  }
};

using VulkanPageGroups = BasicPageGroupDecoder<VulkanDecoder, VulkanKvCache>;

using VulkanVisionEngine = DeviceVisionEngine<DeviceModel>;

class VulkanEngine final : public Engine {
 public:
  // Opens device `options.device_index` (Context::list_devices() order) for `model` and uploads
  // the weights. Status::unsupported without a driver or with an index out of range (the message
  // lists the devices found).
  VulkanEngine(std::shared_ptr<const Model> m, const EngineOptions& options)
      : Engine(std::move(m), options), dev_(std::make_shared<DeviceModel>(model(), options.device_index)) {}

  EngineInfo info() const override {
    return {Backend::vulkan, dev_->ctx.device_index(), dev_->ctx.device_name(), dev_->ctx.driver_version()};
  }
  std::unique_ptr<VisionEngine> vision() override { return std::make_unique<VulkanVisionEngine>(model(), dev_); }
  std::unique_ptr<DecoderEngine> decoder(int window, const PageGroupParams& groups) override {
    const DecoderConfig& c = model()->config().decoder;
    // dev_ keeps the device, its weights and the model alive for the decoder.
    return std::make_unique<PageGroupEngine<VulkanPageGroups>>(
        dev_, VulkanDecoder(dev_->ctx, c, model()->weights().decoder, dev_->decoder), VulkanKvCache(dev_->ctx, c, window),
        groups);
  }
  Context& context() { return dev_->ctx; }

 private:
  std::shared_ptr<DeviceModel> dev_;
};

}  // namespace vulkan
UOCR_NAMESPACE_END
