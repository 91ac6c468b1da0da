// What the Vulkan test executables share (backends/vulkan/tests/test_vulkan.cpp,
// backends/vulkan/tests/test_vulkan_session.cpp): the check that the validation layer reported no
// errors, and the golden fixture with one Context and the decoder's device weights, built once.
#pragma once
#include <doctest/doctest.h>

#include <memory>
#include <string>

#include "backends/vulkan/decoder.hpp"
#include "golden_decoder.hpp"

namespace uocr_test {

// With validation on (UOCR_VK_VALIDATION=1), no validation errors so far; the messages are shown.
inline void check_no_validation_errors(uocr::vulkan::Context& c, const std::string& where) {
  if (!c.validation_enabled()) return;
  INFO(where);
  for (const std::string& m : c.validation_messages()) INFO(m);
  CHECK(c.validation_errors() == 0);
}

// The golden model (tiny-b), a Context and the decoder's device weights, uploaded on first use.
struct VulkanEnv : DeviceGolden<uocr::vulkan::Context, uocr::vulkan::DecoderDeviceWeights> {
  static VulkanEnv& get() {
    static VulkanEnv e;
    return e;
  }
  // The Context; fails the case when there is no usable device.
  uocr::vulkan::Context& vk() {
    if (!ctx)
      FAIL("no usable Vulkan device (" << no_device
                                        << "). Install Mesa's lavapipe (apt install mesa-vulkan-drivers) or build with "
                                           "-Dvulkan=disabled");
    return *ctx;
  }
  const std::shared_ptr<uocr::vulkan::DecoderDeviceWeights>& device_weights() {
    if (!dev_weights) dev_weights = uocr::vulkan::DecoderDeviceWeights::upload(vk(), w.decoder);
    return dev_weights;
  }
};

}  // namespace uocr_test
