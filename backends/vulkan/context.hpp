// uocr::vulkan::Context: one Vulkan device and compute queue, with the backend's memory pools
// (memory.hpp), its compute pipelines and their disk cache (pipelines.hpp), and the command
// buffers a Recorder (recorder.hpp) records into. Every failing Vulkan call becomes a
// uocr::Error (device.hpp).
//
//   vulkan::Context ctx;                      // device 0; ContextOptions picks another index
//   vulkan::Buffer b = ctx.buffer(bytes, vulkan::MemoryUse::activations, "x");
//   ctx.upload(b, host, bytes);
//   vulkan::Recorder rec(ctx);                // records dispatches into one command buffer,
//   rec.dispatch(...); rec.submit();          // inserting barriers only where buffers conflict
//
// Adopting a host application's device: Context(ExternalDevice{...}) uses its VkInstance,
// VkPhysicalDevice, VkDevice and queue without owning them (the queue must support compute; the
// application must not use that queue concurrently with the context).
//
// Thread-safety: a Context may be shared by threads (sessions on one device share one). Its
// entry points (buffers, transfers, pipelines) take an internal recursive lock, and a Recorder
// holds it from construction to destruction, so concurrent users' work is serialised on the
// queue. Objects built on a Context (decoders, caches) are still one thread's at a time.
#pragma once
#include <vulkan/vulkan.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "backends/vulkan/device.hpp"
#include "backends/vulkan/memory.hpp"
#include "backends/vulkan/pipelines.hpp"
#include "uocr/core/error.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN
namespace vulkan {

struct ProfileEntry {
  int64_t dispatches = 0;
  double ms = 0;
};

class Recorder;

class Context {
 public:
  static constexpr uint32_t kPushConstantBytes = 128;  // the minimum every device supports

  explicit Context(const ContextOptions& options = {}) : options_(options) {
    init_flags();
    create_instance();
    pick_physical_device();
    create_device();
    finish_init();
  }

  Context(const ExternalDevice& ext, const ContextOptions& options = {}) : options_(options) {
    require(ext.instance && ext.physical_device && ext.device && ext.queue, Status::invalid_argument,
            "vulkan::ExternalDevice needs an instance, physical device, device and queue");
    init_flags();
    validation_ = false;  // the application's instance: its layers are its business
    owns_device_ = false;
    instance_ = ext.instance;
    physical_ = ext.physical_device;
    device_ = ext.device;
    queue_family_ = ext.queue_family;
    queue_ = ext.queue;
    uint32_t n = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(physical_, &n, nullptr);
    std::vector<VkQueueFamilyProperties> families(n);
    vkGetPhysicalDeviceQueueFamilyProperties(physical_, &n, families.data());
    require(queue_family_ < n && (families[queue_family_].queueFlags & VK_QUEUE_COMPUTE_BIT), Status::invalid_argument,
            "vulkan::ExternalDevice: the queue family does not support compute");
    timestamp_bits_ = families[queue_family_].timestampValidBits;
    finish_init();
  }

  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  ~Context() {
    if (device_) vkDeviceWaitIdle(device_);
    save_pipeline_cache();
    for (auto& kv : pipelines_) destroy_pipeline(*kv.second);
    pipelines_.clear();
    for (VkDescriptorPool p : desc_pools_) vkDestroyDescriptorPool(device_, p, nullptr);
    if (query_pool_) vkDestroyQueryPool(device_, query_pool_, nullptr);
    if (fence_) vkDestroyFence(device_, fence_, nullptr);
    if (cmd_pool_) vkDestroyCommandPool(device_, cmd_pool_, nullptr);
    pipeline_cache_.destroy();
    memory_.free_all();
    if (owns_device_ && device_) vkDestroyDevice(device_, nullptr);
    if (messenger_) {
      auto destroy = reinterpret_cast<PFN_vkDestroyDebugUtilsMessengerEXT>(
          vkGetInstanceProcAddr(instance_, "vkDestroyDebugUtilsMessengerEXT"));
      if (destroy) destroy(instance_, messenger_, nullptr);
    }
    if (owns_device_ && instance_) vkDestroyInstance(instance_, nullptr);
  }

  // Devices visible to the Vulkan loader, in the order ContextOptions::device_index counts.
  // Throws Status::unsupported when there is no loader driver at all.
  static std::vector<DeviceInfo> list_devices() {
    auto app = vulkan_info<VkApplicationInfo>(VK_STRUCTURE_TYPE_APPLICATION_INFO);
    app.pApplicationName = "uocr";
    app.apiVersion = VK_API_VERSION_1_1;
    auto ci = vulkan_info<VkInstanceCreateInfo>(VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO);
    ci.pApplicationInfo = &app;
    VkInstance inst = VK_NULL_HANDLE;
    const VkResult r = vkCreateInstance(&ci, nullptr, &inst);
    if (r == VK_ERROR_INCOMPATIBLE_DRIVER || r == VK_ERROR_INITIALIZATION_FAILED) return {};
    check(r, "vkCreateInstance");
    std::vector<DeviceInfo> out = describe(inst);
    vkDestroyInstance(inst, nullptr);
    return out;
  }

  // --- information -------------------------------------------------------------------------
  VkDevice device() const { return device_; }
  VkPhysicalDevice physical_device() const { return physical_; }
  const VkPhysicalDeviceProperties& properties() const { return props_; }
  const VkPhysicalDeviceLimits& limits() const { return props_.limits; }
  std::string device_name() const { return props_.deviceName; }
  // The driver's version as its vendor encodes it (NVIDIA: 10.8.8.6 bits; others, Mesa included:
  // Vulkan's major.minor.patch), then the Vulkan version the device supports.
  std::string driver_version() const {
    auto dotted = [](uint32_t major, uint32_t minor, uint32_t patch) {
      return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
    };
    const uint32_t d = props_.driverVersion, a = props_.apiVersion;
    const std::string driver = props_.vendorID == 0x10DE
                                   ? dotted(d >> 22, (d >> 14) & 0xff, (d >> 6) & 0xff)
                                   : dotted(VK_API_VERSION_MAJOR(d), VK_API_VERSION_MINOR(d), VK_API_VERSION_PATCH(d));
    return driver + " (Vulkan " + dotted(VK_API_VERSION_MAJOR(a), VK_API_VERSION_MINOR(a), VK_API_VERSION_PATCH(a)) + ")";
  }
  int device_index() const { return device_index_; }
  // Device-local memory is host-visible too: buffers are mapped, no staging copies.
  bool unified_memory() const { return memory_.unified(); }
  bool owns_device() const { return owns_device_; }
  // Largest range one storage-buffer binding may cover (bigger tensors are split into chunks).
  VkDeviceSize max_binding_bytes() const {
    return std::min<VkDeviceSize>(props_.limits.maxStorageBufferRange, VkDeviceSize(1) << 30);
  }

  bool validation_enabled() const { return validation_; }
  // Why validation is off although it was requested ("" otherwise).
  const std::string& validation_note() const { return validation_note_; }
  int validation_errors() const { return log_->errors.load(); }
  int validation_warnings() const { return log_->warnings.load(); }
  std::vector<std::string> validation_messages() const {
    std::lock_guard<std::mutex> lock(log_->mutex);
    return log_->messages;
  }

  bool profiling() const { return profiling_; }
  const std::map<std::string, ProfileEntry>& profile() const { return profile_; }
  void reset_profile() { profile_.clear(); }
  // One line per op: name, dispatches, total and mean milliseconds (device timestamps).
  std::string profile_report() const {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    std::string s;
    char line[160];
    for (const auto& kv : profile_) {
      std::snprintf(line, sizeof line, "%-16s %8lld dispatches %10.3f ms total %9.4f ms mean\n", kv.first.c_str(),
                    (long long)kv.second.dispatches, kv.second.ms, kv.second.ms / double(std::max<int64_t>(1, kv.second.dispatches)));
      s += line;
    }
    return s;
  }

  // --- pipeline cache ----------------------------------------------------------------------
  const std::string& pipeline_cache_path() const { return pipeline_cache_.path(); }
  bool pipeline_cache_loaded() const { return pipeline_cache_.loaded(); }
  // Writes the cache file now (also done by the destructor). Failure to write is not an error
  // (the cache only saves compile time); the reason is kept in pipeline_cache_note().
  void save_pipeline_cache() {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    pipeline_cache_.save();
  }
  const std::string& pipeline_cache_note() const { return pipeline_cache_.note(); }

  // --- memory ------------------------------------------------------------------------------
  // A buffer of `bytes` (rounded up to 4) usable as storage buffer and copy source/target.
  // Status::out_of_memory when the device (heap or allocation limit) cannot hold it.
  Buffer buffer(size_t bytes, MemoryUse use, const std::string& what) { return memory_.buffer(bytes, use, what); }

  // Host -> buffer, synchronous (the buffer must not be in use by a pending submission). Writes
  // the buffer's memory, not the handle: const like the ops' output buffers.
  void upload(const Buffer& dst, const void* src, size_t bytes, size_t offset = 0) {
    require(offset + bytes <= dst.size(), Status::internal, "Vulkan: upload past the end of a buffer");
    if (bytes == 0) return;
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    if (dst.mapped()) {
      std::memcpy(static_cast<uint8_t*>(dst.mapped()) + offset, src, bytes);
      return;
    }
    const size_t chunk = std::min<size_t>(bytes, size_t(64) << 20);
    Buffer staging = buffer(chunk, MemoryUse::staging, "upload staging");
    for (size_t done = 0; done < bytes; done += chunk) {
      const size_t n = std::min(chunk, bytes - done);
      std::memcpy(staging.mapped(), static_cast<const uint8_t*>(src) + done, n);
      copy_now(staging, 0, dst, offset + done, n);
    }
  }

  // Buffer -> host, synchronous.
  void download(const Buffer& src, void* dst, size_t bytes, size_t offset = 0) {
    require(offset + bytes <= src.size(), Status::internal, "Vulkan: download past the end of a buffer");
    if (bytes == 0) return;
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    if (src.mapped()) {
      std::memcpy(dst, static_cast<const uint8_t*>(src.mapped()) + offset, bytes);
      return;
    }
    const size_t chunk = std::min<size_t>(bytes, size_t(64) << 20);
    Buffer staging = buffer(chunk, MemoryUse::staging, "download staging");
    for (size_t done = 0; done < bytes; done += chunk) {
      const size_t n = std::min(chunk, bytes - done);
      copy_now(src, offset + done, staging, 0, n);
      std::memcpy(static_cast<uint8_t*>(dst) + done, staging.mapped(), n);
    }
  }

  template <class T>
  std::vector<T> download_vector(const Buffer& src, size_t count, size_t offset_elems = 0) {
    std::vector<T> v(count);
    download(src, v.data(), count * sizeof(T), offset_elems * sizeof(T));
    return v;
  }

  // Synchronous buffer-to-buffer copy.
  void copy_now(const Buffer& src, size_t src_off, const Buffer& dst, size_t dst_off, size_t bytes) {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    VkCommandBuffer cb = begin_command_buffer(immediate_cb_);
    order_after_previous_submissions(cb);
    VkBufferCopy region{src_off, dst_off, bytes};
    vkCmdCopyBuffer(cb, src.handle(), dst.handle(), 1, &region);
    auto mb = vulkan_info<VkMemoryBarrier>(VK_STRUCTURE_TYPE_MEMORY_BARRIER);
    mb.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT | VK_ACCESS_SHADER_READ_BIT;
    vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT | VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                         0, 1, &mb, 0, nullptr, 0, nullptr);
    submit_and_wait(cb);
  }

  // Bytes of device memory blocks held by a pool (sub-allocated or free).
  size_t pool_bytes(MemoryUse use) const { return memory_.pool_bytes(use); }

  // --- pipelines -----------------------------------------------------------------------------
  // The pipeline `name` built from SPIR-V `code` (created on first use, then cached by name).
  // Status::internal with the shader's name when the code is not SPIR-V or the driver rejects it.
  Pipeline& pipeline(const std::string& name, const uint32_t* code, size_t words, uint32_t bindings) {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    auto it = pipelines_.find(name);
    if (it != pipelines_.end()) {
      require(it->second->bindings == bindings, Status::internal,
              [&] { return "Vulkan: pipeline " + name + " requested with a different binding count"; });
      return *it->second;
    }
    require(code != nullptr && words >= 5 && code[0] == 0x07230203u, Status::internal, [&] {
      return "Vulkan: shader '" + name + "' is not SPIR-V (missing magic number or too short); rebuild the shaders with glslc";
    });
    auto p = std::make_unique<Pipeline>();
    p->name = name;
    p->bindings = bindings;
    try {
      std::vector<VkDescriptorSetLayoutBinding> lb(bindings);
      for (uint32_t i = 0; i < bindings; ++i)
        lb[i] = VkDescriptorSetLayoutBinding{i, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1, VK_SHADER_STAGE_COMPUTE_BIT, nullptr};
      auto dl = vulkan_info<VkDescriptorSetLayoutCreateInfo>(VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO);
      dl.bindingCount = bindings;
      dl.pBindings = lb.data();
      check(vkCreateDescriptorSetLayout(device_, &dl, nullptr, &p->set_layout), "vkCreateDescriptorSetLayout");
      VkPushConstantRange pc{VK_SHADER_STAGE_COMPUTE_BIT, 0, kPushConstantBytes};
      auto pl = vulkan_info<VkPipelineLayoutCreateInfo>(VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO);
      pl.setLayoutCount = 1;
      pl.pSetLayouts = &p->set_layout;
      pl.pushConstantRangeCount = 1;
      pl.pPushConstantRanges = &pc;
      check(vkCreatePipelineLayout(device_, &pl, nullptr, &p->layout), "vkCreatePipelineLayout");
      auto sm = vulkan_info<VkShaderModuleCreateInfo>(VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO);
      sm.codeSize = words * 4;
      sm.pCode = code;
      VkShaderModule module = VK_NULL_HANDLE;
      const VkResult rm = vkCreateShaderModule(device_, &sm, nullptr, &module);
      if (rm != VK_SUCCESS)
        throw Error(status_of(rm) == Status::out_of_memory ? Status::out_of_memory : Status::internal,
                    "Vulkan: shader '" + name + "': vkCreateShaderModule failed with " + result_name(rm));
      auto ci = vulkan_info<VkComputePipelineCreateInfo>(VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO);
      ci.stage = vulkan_info<VkPipelineShaderStageCreateInfo>(VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO);
      ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
      ci.stage.module = module;
      ci.stage.pName = "main";
      ci.layout = p->layout;
      const VkResult rp = vkCreateComputePipelines(device_, pipeline_cache_.handle(), 1, &ci, nullptr, &p->pipeline);
      vkDestroyShaderModule(device_, module, nullptr);
      if (rp != VK_SUCCESS)
        throw Error(status_of(rp) == Status::out_of_memory ? Status::out_of_memory : Status::internal,
                    "Vulkan: shader '" + name + "': vkCreateComputePipelines failed with " + result_name(rp));
    } catch (...) {
      destroy_pipeline(*p);
      throw;
    }
    Pipeline& ref = *p;
    pipelines_.emplace(name, std::move(p));
    return ref;
  }

  size_t pipeline_count() const { return pipelines_.size(); }

  // Queue submissions so far, each waited for by the host (Recorder::submit, synchronous copies
  // through staging): what a decode step costs in host round trips.
  uint64_t submissions() const {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    return submissions_;
  }

  // Dispatches recorded so far (direct and indirect): what a decode step costs in launches.
  uint64_t dispatches() const {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    return dispatches_;
  }

  uint32_t max_workgroups_x() const { return props_.limits.maxComputeWorkGroupCount[0]; }

  // Splits `groups` workgroups into an x*y grid within maxComputeWorkGroupCount (shaders use
  // group_index() and bound-check, since x*y may exceed `groups`).
  void grid(uint64_t groups, uint32_t& x, uint32_t& y) const {
    const uint64_t max_x = props_.limits.maxComputeWorkGroupCount[0], max_y = props_.limits.maxComputeWorkGroupCount[1];
    groups = std::max<uint64_t>(1, groups);
    const uint64_t ny = (groups + max_x - 1) / max_x;
    require(ny <= max_y, Status::unsupported, "Vulkan: dispatch larger than the device's workgroup grid");
    y = uint32_t(ny);
    x = uint32_t((groups + ny - 1) / ny);
  }

 private:
  friend class Recorder;

  void init_flags() {
    validation_ = options_.validation < 0 ? detail::env_flag("UOCR_VK_VALIDATION") : options_.validation > 0;
    profiling_ = options_.profiling < 0 ? detail::env_flag("UOCR_VK_PROFILE") : options_.profiling > 0;
    log_ = std::make_unique<detail::ValidationLog>();
  }

  static bool has_layer(const char* name) {
    uint32_t n = 0;
    if (vkEnumerateInstanceLayerProperties(&n, nullptr) != VK_SUCCESS) return false;
    std::vector<VkLayerProperties> layers(n);
    if (vkEnumerateInstanceLayerProperties(&n, layers.data()) != VK_SUCCESS) return false;
    for (const auto& l : layers)
      if (std::strcmp(l.layerName, name) == 0) return true;
    return false;
  }

  static bool has_instance_extension(const char* name, const char* layer = nullptr) {
    uint32_t n = 0;
    if (vkEnumerateInstanceExtensionProperties(layer, &n, nullptr) != VK_SUCCESS) return false;
    std::vector<VkExtensionProperties> ext(n);
    if (vkEnumerateInstanceExtensionProperties(layer, &n, ext.data()) != VK_SUCCESS) return false;
    for (const auto& e : ext)
      if (std::strcmp(e.extensionName, name) == 0) return true;
    return false;
  }

  static std::string no_device_message() {
    return "no Vulkan device found: no Vulkan driver (ICD) is installed or none exposes a device. "
           "Use the CPU backend, or install a driver (on Debian: apt install mesa-vulkan-drivers, which "
           "includes lavapipe, a CPU Vulkan device)";
  }

  void create_instance() {
    const char* kLayer = "VK_LAYER_KHRONOS_validation";
    std::vector<const char*> layers, extensions;
    if (validation_) {
      if (!has_layer(kLayer)) {
        validation_ = false;
        validation_note_ = std::string(kLayer) + " is not installed (Debian: vulkan-validationlayers)";
      } else if (!has_instance_extension(VK_EXT_DEBUG_UTILS_EXTENSION_NAME) &&
                 !has_instance_extension(VK_EXT_DEBUG_UTILS_EXTENSION_NAME, kLayer)) {
        validation_ = false;
        validation_note_ = "VK_EXT_debug_utils is not available";
      } else {
        layers.push_back(kLayer);
        extensions.push_back(VK_EXT_DEBUG_UTILS_EXTENSION_NAME);
      }
    }
    VkInstanceCreateFlags flags = 0;
#ifdef VK_KHR_portability_enumeration
    if (has_instance_extension(VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME)) {
      extensions.push_back(VK_KHR_PORTABILITY_ENUMERATION_EXTENSION_NAME);
      flags |= VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR;
    }
#endif
    auto app = vulkan_info<VkApplicationInfo>(VK_STRUCTURE_TYPE_APPLICATION_INFO);
    app.pApplicationName = "uocr";
    app.pEngineName = "uocr";
    app.apiVersion = VK_API_VERSION_1_1;
    auto ci = vulkan_info<VkInstanceCreateInfo>(VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO);
    ci.flags = flags;
    ci.pApplicationInfo = &app;
    ci.enabledLayerCount = uint32_t(layers.size());
    ci.ppEnabledLayerNames = layers.data();
    ci.enabledExtensionCount = uint32_t(extensions.size());
    ci.ppEnabledExtensionNames = extensions.data();
    auto mi = vulkan_info<VkDebugUtilsMessengerCreateInfoEXT>(VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT);
    mi.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
    mi.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT | VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                     VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
    mi.pfnUserCallback = &detail::debug_callback;
    mi.pUserData = log_.get();
    if (validation_) ci.pNext = &mi;  // also reports problems in vkCreateInstance/vkDestroyInstance
    const VkResult r = vkCreateInstance(&ci, nullptr, &instance_);
    if (r == VK_ERROR_INCOMPATIBLE_DRIVER || r == VK_ERROR_INITIALIZATION_FAILED)
      throw Error(Status::unsupported, "Vulkan: " + no_device_message() + " (vkCreateInstance: " + result_name(r) + ")");
    check(r, "vkCreateInstance");
    if (validation_) {
      auto create = reinterpret_cast<PFN_vkCreateDebugUtilsMessengerEXT>(
          vkGetInstanceProcAddr(instance_, "vkCreateDebugUtilsMessengerEXT"));
      require(create != nullptr, Status::unsupported, "Vulkan: vkCreateDebugUtilsMessengerEXT is unavailable");
      check(create(instance_, &mi, nullptr, &messenger_), "vkCreateDebugUtilsMessengerEXT");
    }
  }

  static std::vector<DeviceInfo> describe(VkInstance inst) {
    uint32_t n = 0;
    check(vkEnumeratePhysicalDevices(inst, &n, nullptr), "vkEnumeratePhysicalDevices");
    std::vector<VkPhysicalDevice> devs(n);
    if (n) check(vkEnumeratePhysicalDevices(inst, &n, devs.data()), "vkEnumeratePhysicalDevices");
    std::vector<DeviceInfo> out;
    for (uint32_t i = 0; i < n; ++i) {
      VkPhysicalDeviceProperties p;
      vkGetPhysicalDeviceProperties(devs[i], &p);
      out.push_back(DeviceInfo{int(i), p.deviceName, p.deviceType, p.apiVersion, p.vendorID, p.deviceID});
    }
    return out;
  }

  void pick_physical_device() {
    uint32_t n = 0;
    check(vkEnumeratePhysicalDevices(instance_, &n, nullptr), "vkEnumeratePhysicalDevices");
    require(n > 0, Status::unsupported, [] { return "Vulkan: " + no_device_message(); });
    std::vector<VkPhysicalDevice> devs(n);
    check(vkEnumeratePhysicalDevices(instance_, &n, devs.data()), "vkEnumeratePhysicalDevices");
    const int idx = options_.device_index;
    if (idx < 0 || uint32_t(idx) >= n) {
      std::string list;
      for (const DeviceInfo& d : describe(instance_))
        list += (list.empty() ? "" : "; ") + std::to_string(d.index) + ": " + d.name + " (" + device_type_name(d.type) + ")";
      throw Error(Status::unsupported, "Vulkan: device index " + std::to_string(idx) + " does not exist; " +
                                           std::to_string(n) + " device(s) available: " + list);
    }
    physical_ = devs[size_t(idx)];
    device_index_ = idx;
  }

  void create_device() {
    uint32_t n = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(physical_, &n, nullptr);
    std::vector<VkQueueFamilyProperties> families(n);
    vkGetPhysicalDeviceQueueFamilyProperties(physical_, &n, families.data());
    // Prefer a compute family without graphics (often an async compute queue), then any.
    int chosen = -1;
    for (uint32_t i = 0; i < n && chosen < 0; ++i)
      if ((families[i].queueFlags & VK_QUEUE_COMPUTE_BIT) && !(families[i].queueFlags & VK_QUEUE_GRAPHICS_BIT)) chosen = int(i);
    for (uint32_t i = 0; i < n && chosen < 0; ++i)
      if (families[i].queueFlags & VK_QUEUE_COMPUTE_BIT) chosen = int(i);
    VkPhysicalDeviceProperties p;
    vkGetPhysicalDeviceProperties(physical_, &p);
    require(chosen >= 0, Status::unsupported,
            [&] { return std::string("Vulkan: device '") + p.deviceName + "' has no compute queue"; });
    queue_family_ = uint32_t(chosen);
    timestamp_bits_ = families[queue_family_].timestampValidBits;

    std::vector<const char*> extensions;
    uint32_t ne = 0;
    check(vkEnumerateDeviceExtensionProperties(physical_, nullptr, &ne, nullptr), "vkEnumerateDeviceExtensionProperties");
    std::vector<VkExtensionProperties> ext(ne);
    check(vkEnumerateDeviceExtensionProperties(physical_, nullptr, &ne, ext.data()), "vkEnumerateDeviceExtensionProperties");
    for (const auto& e : ext)  // required by the spec where present (MoltenVK)
      if (std::strcmp(e.extensionName, "VK_KHR_portability_subset") == 0) extensions.push_back("VK_KHR_portability_subset");

    const float priority = 1.0f;
    auto qi = vulkan_info<VkDeviceQueueCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO);
    qi.queueFamilyIndex = queue_family_;
    qi.queueCount = 1;
    qi.pQueuePriorities = &priority;
    auto di = vulkan_info<VkDeviceCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO);
    di.queueCreateInfoCount = 1;
    di.pQueueCreateInfos = &qi;
    di.enabledExtensionCount = uint32_t(extensions.size());
    di.ppEnabledExtensionNames = extensions.data();
    check(vkCreateDevice(physical_, &di, nullptr, &device_), "vkCreateDevice");
    vkGetDeviceQueue(device_, queue_family_, 0, &queue_);
  }

  void finish_init() {
    vkGetPhysicalDeviceProperties(physical_, &props_);
    auto m3 = vulkan_info<VkPhysicalDeviceMaintenance3Properties>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES);
    auto p2 = vulkan_info<VkPhysicalDeviceProperties2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2);
    p2.pNext = &m3;
    VkDeviceSize max_allocation = VkDeviceSize(1) << 62;
    if (props_.apiVersion >= VK_API_VERSION_1_1) {
      vkGetPhysicalDeviceProperties2(physical_, &p2);
      if (m3.maxMemoryAllocationSize) max_allocation = m3.maxMemoryAllocationSize;
    }
    if (timestamp_bits_ == 0 || props_.limits.timestampPeriod <= 0) profiling_ = false;
    VkPhysicalDeviceMemoryProperties memory_properties;
    vkGetPhysicalDeviceMemoryProperties(physical_, &memory_properties);
    memory_.open(device_, memory_properties, max_allocation, device_name());

    auto cp = vulkan_info<VkCommandPoolCreateInfo>(VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO);
    cp.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
    cp.queueFamilyIndex = queue_family_;
    check(vkCreateCommandPool(device_, &cp, nullptr, &cmd_pool_), "vkCreateCommandPool");
    auto ai = vulkan_info<VkCommandBufferAllocateInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO);
    ai.commandPool = cmd_pool_;
    ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = 1;
    check(vkAllocateCommandBuffers(device_, &ai, &record_cb_), "vkAllocateCommandBuffers");
    check(vkAllocateCommandBuffers(device_, &ai, &immediate_cb_), "vkAllocateCommandBuffers");
    auto fi = vulkan_info<VkFenceCreateInfo>(VK_STRUCTURE_TYPE_FENCE_CREATE_INFO);
    check(vkCreateFence(device_, &fi, nullptr, &fence_), "vkCreateFence");
    if (profiling_) {
      auto qp = vulkan_info<VkQueryPoolCreateInfo>(VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO);
      qp.queryType = VK_QUERY_TYPE_TIMESTAMP;
      qp.queryCount = kMaxTimestamps;
      check(vkCreateQueryPool(device_, &qp, nullptr, &query_pool_), "vkCreateQueryPool");
    }
    pipeline_cache_.open(device_, props_, options_.pipeline_cache, options_.cache_dir);
  }

  void destroy_pipeline(Pipeline& p) {
    if (p.pipeline) vkDestroyPipeline(device_, p.pipeline, nullptr);
    if (p.layout) vkDestroyPipelineLayout(device_, p.layout, nullptr);
    if (p.set_layout) vkDestroyDescriptorSetLayout(device_, p.set_layout, nullptr);
    p = Pipeline{};
  }

  // What a barrier between recorded commands makes visible to what: shader and transfer writes to
  // shader, transfer and indirect-command reads (vkCmdDispatchIndirect reads its sizes in the
  // DRAW_INDIRECT stage).
  static constexpr VkPipelineStageFlags kBarrierSrcStages = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
  static constexpr VkPipelineStageFlags kBarrierDstStages = kBarrierSrcStages | VK_PIPELINE_STAGE_DRAW_INDIRECT_BIT;
  static constexpr VkAccessFlags kBarrierDstAccess = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                                                     VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT |
                                                     VK_ACCESS_INDIRECT_COMMAND_READ_BIT;

  // Device writes of earlier submissions on this queue -> the commands recorded next (a barrier
  // orders against everything earlier in submission order).
  static void order_after_previous_submissions(VkCommandBuffer cb) {
    auto mb = vulkan_info<VkMemoryBarrier>(VK_STRUCTURE_TYPE_MEMORY_BARRIER);
    mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
    mb.dstAccessMask = kBarrierDstAccess;
    vkCmdPipelineBarrier(cb, kBarrierSrcStages, kBarrierDstStages, 0, 1, &mb, 0, nullptr, 0, nullptr);
  }

  VkCommandBuffer begin_command_buffer(VkCommandBuffer cb) {
    check(vkResetCommandBuffer(cb, 0), "vkResetCommandBuffer");
    auto bi = vulkan_info<VkCommandBufferBeginInfo>(VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO);
    bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
    check(vkBeginCommandBuffer(cb, &bi), "vkBeginCommandBuffer");
    return cb;
  }

  void submit_and_wait(VkCommandBuffer cb) {
    check(vkEndCommandBuffer(cb), "vkEndCommandBuffer");
    auto si = vulkan_info<VkSubmitInfo>(VK_STRUCTURE_TYPE_SUBMIT_INFO);
    si.commandBufferCount = 1;
    si.pCommandBuffers = &cb;
    check(vkResetFences(device_, 1, &fence_), "vkResetFences");
    check(vkQueueSubmit(queue_, 1, &si, fence_), "vkQueueSubmit");
    check(vkWaitForFences(device_, 1, &fence_, VK_TRUE, UINT64_MAX), "vkWaitForFences");
    ++submissions_;
  }

  // A descriptor set for `p` from the context's pools (reset after each submission).
  VkDescriptorSet descriptor_set(const Pipeline& p) {
    for (;;) {
      if (desc_pool_at_ == desc_pools_.size()) {
        VkDescriptorPoolSize size{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, kSetsPerPool * 8};
        auto ci = vulkan_info<VkDescriptorPoolCreateInfo>(VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO);
        ci.maxSets = kSetsPerPool;
        ci.poolSizeCount = 1;
        ci.pPoolSizes = &size;
        VkDescriptorPool pool = VK_NULL_HANDLE;
        check(vkCreateDescriptorPool(device_, &ci, nullptr, &pool), "vkCreateDescriptorPool");
        desc_pools_.push_back(pool);
      }
      auto ai = vulkan_info<VkDescriptorSetAllocateInfo>(VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO);
      ai.descriptorPool = desc_pools_[desc_pool_at_];
      ai.descriptorSetCount = 1;
      ai.pSetLayouts = &p.set_layout;
      VkDescriptorSet set = VK_NULL_HANDLE;
      const VkResult r = vkAllocateDescriptorSets(device_, &ai, &set);
      if (r == VK_SUCCESS) return set;
      if (r != VK_ERROR_OUT_OF_POOL_MEMORY && r != VK_ERROR_FRAGMENTED_POOL) check(r, "vkAllocateDescriptorSets");
      ++desc_pool_at_;
    }
  }

  void reset_descriptor_pools() {
    for (size_t i = 0; i < desc_pools_.size() && i <= desc_pool_at_; ++i) vkResetDescriptorPool(device_, desc_pools_[i], 0);
    desc_pool_at_ = 0;
  }

  static constexpr uint32_t kSetsPerPool = 512;
  static constexpr uint32_t kMaxTimestamps = 4096;

  ContextOptions options_;
  std::unique_ptr<detail::ValidationLog> log_;
  bool validation_ = false, profiling_ = false, owns_device_ = true;
  std::string validation_note_;
  VkInstance instance_ = VK_NULL_HANDLE;
  VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;
  VkPhysicalDevice physical_ = VK_NULL_HANDLE;
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  uint32_t queue_family_ = 0, timestamp_bits_ = 0;
  int device_index_ = -1;
  VkPhysicalDeviceProperties props_{};
  VkCommandPool cmd_pool_ = VK_NULL_HANDLE;
  VkCommandBuffer record_cb_ = VK_NULL_HANDLE, immediate_cb_ = VK_NULL_HANDLE;
  VkFence fence_ = VK_NULL_HANDLE;
  VkQueryPool query_pool_ = VK_NULL_HANDLE;
  std::vector<VkDescriptorPool> desc_pools_;
  size_t desc_pool_at_ = 0;
  PipelineCache pipeline_cache_;
  std::unordered_map<std::string, std::unique_ptr<Pipeline>> pipelines_;
  std::map<std::string, ProfileEntry> profile_;
  bool recording_ = false;
  uint64_t submissions_ = 0, dispatches_ = 0;
  mutable std::recursive_mutex mutex_;  // see "Thread-safety" above
  MemoryPools memory_{mutex_};
};

}  // namespace vulkan
UOCR_NAMESPACE_END
