// Compute pipelines of the Vulkan backend and the pipeline cache persisted on disk (one file per
// driver and device), which saves shader compilation at the next start. The Context builds the
// pipelines (Context::pipeline) through its PipelineCache.
#pragma once
#include <vulkan/vulkan.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

#include "backends/vulkan/device.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN
namespace vulkan {

// A compute pipeline: `bindings` storage buffers in set 0 (bindings 0..n-1) and up to 128 bytes
// of push constants.
struct Pipeline {
  std::string name;
  uint32_t bindings = 0;
  VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
  VkPipelineLayout layout = VK_NULL_HANDLE;
  VkPipeline pipeline = VK_NULL_HANDLE;
};

// The default folder of the pipeline cache: $UOCR_VK_CACHE_DIR, else $XDG_CACHE_HOME/uocr, else
// $HOME/.cache/uocr; "" when none of these is set.
inline std::string default_cache_dir() {
  if (const char* d = std::getenv("UOCR_VK_CACHE_DIR"); d && *d) return d;
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return std::string(d) + "/uocr";
  if (const char* d = std::getenv("HOME"); d && *d) return std::string(d) + "/.cache/uocr";
  return "";
}

class PipelineCache {
 public:
  // The cache of `device` (described by `props`): when `persist`, loaded from its file in
  // `cache_dir` ("": default_cache_dir()) if that file was written for this driver and device.
  void open(VkDevice device, const VkPhysicalDeviceProperties& props, bool persist, const std::string& cache_dir) {
    device_ = device;
    std::vector<char> data;
    if (persist) {
      const std::string dir = cache_dir.empty() ? default_cache_dir() : cache_dir;
      if (!dir.empty()) {
        char name[128];
        std::snprintf(name, sizeof name, "/vk-pipelines-%04x-%04x-", props.vendorID, props.deviceID);
        std::string uuid;
        for (uint8_t c : props.pipelineCacheUUID) {
          char h[3];
          std::snprintf(h, sizeof h, "%02x", c);
          uuid += h;
        }
        path_ = dir + name + uuid + ".bin";
        std::ifstream f(path_, std::ios::binary);
        if (f) data.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
        // Only hand the driver a cache whose header names this device (drivers should check too).
        if (data.size() >= 32) {
          uint32_t hdr[4];
          std::memcpy(hdr, data.data(), 16);
          const bool ok = hdr[0] >= 32 && hdr[1] == VK_PIPELINE_CACHE_HEADER_VERSION_ONE && hdr[2] == props.vendorID &&
                          hdr[3] == props.deviceID &&
                          std::memcmp(data.data() + 16, props.pipelineCacheUUID, VK_UUID_SIZE) == 0;
          if (!ok) {
            data.clear();
            note_ = "ignored " + path_ + ": written by another driver or device";
          }
        } else {
          data.clear();
        }
      }
    }
    auto ci = vulkan_info<VkPipelineCacheCreateInfo>(VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO);
    ci.initialDataSize = data.size();
    ci.pInitialData = data.empty() ? nullptr : data.data();
    VkResult r = vkCreatePipelineCache(device_, &ci, nullptr, &cache_);
    if (r != VK_SUCCESS && !data.empty()) {  // a corrupt file: start empty
      ci.initialDataSize = 0;
      ci.pInitialData = nullptr;
      r = vkCreatePipelineCache(device_, &ci, nullptr, &cache_);
      data.clear();
    }
    check(r, "vkCreatePipelineCache");
    loaded_ = !data.empty();
  }

  // Writes the cache file now. Failure to write is not an error (the cache only saves compile
  // time); the reason is kept in note().
  void save() {
    if (!cache_ || path_.empty()) return;
    size_t size = 0;
    if (vkGetPipelineCacheData(device_, cache_, &size, nullptr) != VK_SUCCESS || size == 0) return;
    std::vector<char> data(size);
    if (vkGetPipelineCacheData(device_, cache_, &size, data.data()) != VK_SUCCESS) return;
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(path_).parent_path(), ec);
    const std::string tmp = path_ + ".tmp" + std::to_string(uintptr_t(this) & 0xffffff);
    {
      std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
      f.write(data.data(), std::streamsize(size));
      if (!f) {
        note_ = "could not write " + tmp;
        std::filesystem::remove(tmp, ec);
        return;
      }
    }
    std::filesystem::rename(tmp, path_, ec);
    if (ec) {
      note_ = "could not rename " + tmp + ": " + ec.message();
      std::filesystem::remove(tmp, ec);
    }
  }

  void destroy() {
    if (cache_) vkDestroyPipelineCache(device_, cache_, nullptr);
    cache_ = VK_NULL_HANDLE;
  }

  VkPipelineCache handle() const { return cache_; }
  const std::string& path() const { return path_; }
  bool loaded() const { return loaded_; }
  const std::string& note() const { return note_; }

 private:
  VkDevice device_ = VK_NULL_HANDLE;
  VkPipelineCache cache_ = VK_NULL_HANDLE;
  std::string path_, note_;
  bool loaded_ = false;
};

}  // namespace vulkan
UOCR_NAMESPACE_END
