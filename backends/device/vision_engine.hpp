// The VisionEngine of a device backend (Vulkan, CUDA): one vision encoder per device, shared by
// the device's sessions under a lock, and each session's scratch = the device activation
// buffers of the largest view it encoded (they are allocated per view).
//
// Device is the backend's per-device model: `std::mutex vision_mutex` and
// `vision_encoder(const Model&)` -> its encoder (with the lock held; CUDA makes it on first use),
// a vision::DeviceEncoder.
#pragma once
#include <algorithm>
#include <cstddef>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "uocr/engine/engine.hpp"
#include "uocr/model/model.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

template <class Device>
class DeviceVisionEngine final : public VisionEngine {
 public:
  // Makes the device's encoder unless a session already did (errors surface here, not at the
  // first page).
  DeviceVisionEngine(std::shared_ptr<const Model> model, std::shared_ptr<Device> dev)
      : model_(std::move(model)), dev_(std::move(dev)) {
    std::lock_guard<std::mutex> lock(dev_->vision_mutex);
    hidden_ = dev_->vision_encoder(*model_).hidden();
  }
  int hidden() const override { return hidden_; }
  std::vector<float> visual_tokens(const std::vector<float>& global_view, const std::vector<std::vector<float>>& tiles,
                                   int tiles_x, int tiles_y) override {
    std::lock_guard<std::mutex> lock(dev_->vision_mutex);
    auto& enc = dev_->vision_encoder(*model_);
    enc.reset_peak();
    std::vector<float> out = enc.visual_tokens(global_view, tiles, tiles_x, tiles_y, deadline_);
    peak_ = std::max(peak_, enc.peak_activation_bytes());
    return out;
  }
  void set_deadline(const Deadline& deadline) override { deadline_ = deadline; }
  size_t scratch_bytes() const override { return peak_; }

 private:
  std::shared_ptr<const Model> model_;  // the weights its encoder reads
  std::shared_ptr<Device> dev_;
  int hidden_ = 0;
  size_t peak_ = 0;
  Deadline deadline_;
};

UOCR_NAMESPACE_END
