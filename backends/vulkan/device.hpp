// What every part of the Vulkan backend shares about the device: Vulkan results as uocr errors
// (out-of-memory results -> Status::out_of_memory; no driver, no device, missing
// layer/extension/feature -> Status::unsupported; anything else -> Status::internal), the
// options a Context is opened with, descriptions of the devices, and the validation layer's log.
//
// Validation: VK_LAYER_KHRONOS_validation is enabled when ContextOptions::validation says so or
// the environment has UOCR_VK_VALIDATION=1 (and the layer is installed); a debug messenger counts
// the errors and warnings it reports (Context::validation_errors()), so tests can assert zero.
#pragma once
#include <vulkan/vulkan.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "uocr/core/error.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN
namespace vulkan {

inline const char* result_name(VkResult r) {
  switch (r) {
    case VK_SUCCESS: return "VK_SUCCESS";
    case VK_NOT_READY: return "VK_NOT_READY";
    case VK_TIMEOUT: return "VK_TIMEOUT";
    case VK_INCOMPLETE: return "VK_INCOMPLETE";
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_MEMORY_MAP_FAILED: return "VK_ERROR_MEMORY_MAP_FAILED";
    case VK_ERROR_LAYER_NOT_PRESENT: return "VK_ERROR_LAYER_NOT_PRESENT";
    case VK_ERROR_EXTENSION_NOT_PRESENT: return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT: return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_INCOMPATIBLE_DRIVER: return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_ERROR_TOO_MANY_OBJECTS: return "VK_ERROR_TOO_MANY_OBJECTS";
    case VK_ERROR_FORMAT_NOT_SUPPORTED: return "VK_ERROR_FORMAT_NOT_SUPPORTED";
    case VK_ERROR_FRAGMENTED_POOL: return "VK_ERROR_FRAGMENTED_POOL";
    case VK_ERROR_OUT_OF_POOL_MEMORY: return "VK_ERROR_OUT_OF_POOL_MEMORY";
    case VK_ERROR_INVALID_EXTERNAL_HANDLE: return "VK_ERROR_INVALID_EXTERNAL_HANDLE";
    case VK_ERROR_FRAGMENTATION: return "VK_ERROR_FRAGMENTATION";
    case VK_ERROR_INVALID_SHADER_NV: return "VK_ERROR_INVALID_SHADER_NV";
    case VK_ERROR_UNKNOWN: return "VK_ERROR_UNKNOWN";
    default: return "VkResult (unnamed)";
  }
}

inline Status status_of(VkResult r) {
  switch (r) {
    case VK_ERROR_OUT_OF_HOST_MEMORY:
    case VK_ERROR_OUT_OF_DEVICE_MEMORY:
    case VK_ERROR_OUT_OF_POOL_MEMORY:
    case VK_ERROR_FRAGMENTED_POOL:
    case VK_ERROR_FRAGMENTATION:
    case VK_ERROR_TOO_MANY_OBJECTS:
      return Status::out_of_memory;
    case VK_ERROR_INITIALIZATION_FAILED:
    case VK_ERROR_LAYER_NOT_PRESENT:
    case VK_ERROR_EXTENSION_NOT_PRESENT:
    case VK_ERROR_FEATURE_NOT_PRESENT:
    case VK_ERROR_INCOMPATIBLE_DRIVER:
      return Status::unsupported;
    default:
      return Status::internal;
  }
}

// Throws uocr::Error naming the call and the result unless r is VK_SUCCESS.
inline void check(VkResult r, const char* call) {
  if (r == VK_SUCCESS) return;
  throw Error(status_of(r), std::string("Vulkan: ") + call + " failed with " + result_name(r) + " (" +
                                std::to_string(int(r)) + ")");
}

// A zero-initialised Vulkan structure with its sType set.
template <class T>
inline T vulkan_info(VkStructureType type) {
  T t{};
  t.sType = type;
  return t;
}

namespace detail {

inline bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::strcmp(v, "0") != 0 && std::strcmp(v, "false") != 0 && std::strcmp(v, "off") != 0;
}

inline std::string mib(uint64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", double(bytes) / (1024.0 * 1024.0));
  return buf;
}

inline VkDeviceSize align_up(VkDeviceSize v, VkDeviceSize a) { return a ? (v + a - 1) / a * a : v; }

// Shared with the debug messenger callback; heap-allocated so its address is stable.
struct ValidationLog {
  std::atomic<int> errors{0};
  std::atomic<int> warnings{0};
  std::mutex mutex;                   // the layer may call back from driver threads
  std::vector<std::string> messages;  // the first few error/warning texts
};

inline VKAPI_ATTR VkBool32 VKAPI_CALL debug_callback(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                                    VkDebugUtilsMessageTypeFlagsEXT,
                                                    const VkDebugUtilsMessengerCallbackDataEXT* data, void* user) {
  auto* log = static_cast<ValidationLog*>(user);
  const bool error = severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
  const bool warning = severity & VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT;
  if (!error && !warning) return VK_FALSE;
  (error ? log->errors : log->warnings).fetch_add(1);
  const std::string text = std::string(error ? "error: " : "warning: ") + (data && data->pMessage ? data->pMessage : "");
  {
    std::lock_guard<std::mutex> lock(log->mutex);
    if (log->messages.size() < 32) log->messages.push_back(text);
  }
  if (env_flag("UOCR_VK_VALIDATION_PRINT")) std::fprintf(stderr, "[uocr vulkan validation] %s\n", text.c_str());
  return VK_FALSE;
}

}  // namespace detail

struct ContextOptions {
  int device_index = 0;   // index in vkEnumeratePhysicalDevices order (see list_devices())
  int validation = -1;    // 1: enable VK_LAYER_KHRONOS_validation if installed; 0: off; -1: $UOCR_VK_VALIDATION
  int profiling = -1;     // 1: per-dispatch timestamps (profile()); 0: off; -1: $UOCR_VK_PROFILE
  bool pipeline_cache = true;
  std::string cache_dir;  // pipeline cache folder; "": default_cache_dir() (pipelines.hpp)
};

// A VkDevice that the host application created; the Context uses it without destroying it.
struct ExternalDevice {
  VkInstance instance = VK_NULL_HANDLE;
  VkPhysicalDevice physical_device = VK_NULL_HANDLE;
  VkDevice device = VK_NULL_HANDLE;
  uint32_t queue_family = 0;  // must support VK_QUEUE_COMPUTE_BIT
  VkQueue queue = VK_NULL_HANDLE;
};

struct DeviceInfo {
  int index = 0;
  std::string name;
  VkPhysicalDeviceType type = VK_PHYSICAL_DEVICE_TYPE_OTHER;
  uint32_t api_version = 0;
  uint32_t vendor_id = 0, device_id = 0;
};

inline const char* device_type_name(VkPhysicalDeviceType t) {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated GPU";
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete GPU";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual GPU";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "CPU";
    default: return "other";
  }
}

}  // namespace vulkan
UOCR_NAMESPACE_END
