// The Vulkan backend's public face. The backend itself (device, memory, pipelines, shaders,
// decoder, encoder, engine: backends/vulkan/) is compiled into the static library uocr_vulkan,
// which the meson dependency 'uocr-vulkan' links; this header only registers it, so that
//
//   uocr::open_engine(model, uocr::Backend::vulkan, options)   // uocr/engine/open.hpp
//
// opens it. uocr/engine/open.hpp includes it in builds that define UOCR_HAVE_VULKAN.
#pragma once
#include "uocr/engine/registry.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN
namespace vulkan {

// Opens a VulkanEngine: device `options.device_index` in vkEnumeratePhysicalDevices order.
// Status::unsupported without a driver or with an index out of range (the message lists the
// devices found), and for continuous batching (max_batch > 1), which this backend does not do.
EngineFactory engine_factory();

inline const bool engine_registered = register_engine(Backend::vulkan, engine_factory());

}  // namespace vulkan
UOCR_NAMESPACE_END
