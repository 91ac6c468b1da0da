// uocr::vulkan::Context: one Vulkan device and compute queue, the memory the backend allocates
// on it, the compute pipelines and a pipeline cache persisted on disk. Every failing Vulkan call
// becomes a uocr::Error (out-of-memory results -> Status::out_of_memory; no driver, no device,
// missing layer/extension/feature -> Status::unsupported; anything else -> Status::internal).
//
//   vulkan::Context ctx;                      // device 0; ContextOptions picks another index
//   vulkan::Buffer b = ctx.buffer(bytes, vulkan::MemoryUse::activations, "x");
//   ctx.upload(b, host, bytes);
//   vulkan::Recorder rec(ctx);                // records dispatches into one command buffer,
//   rec.dispatch(...); rec.submit();          // inserting barriers only where buffers conflict
//
// Memory: three pools of large VkDeviceMemory blocks sub-allocated first-fit, one per use:
// weights (device-local, uploaded once), activations and KV cache (device-local), staging and
// per-submission temporaries (host-visible, coherent, persistently mapped). Where the device-local
// type is also host-visible (integrated GPUs, Mesa lavapipe), buffers are mapped directly and no
// staging copies happen.
//
// Validation: VK_LAYER_KHRONOS_validation is enabled when ContextOptions::validation says so or
// the environment has UOCR_VK_VALIDATION=1 (and the layer is installed); a debug messenger counts
// the errors and warnings it reports (validation_errors()), so tests can assert zero.
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
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
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

// The default folder of the pipeline cache: $UOCR_VK_CACHE_DIR, else $XDG_CACHE_HOME/uocr, else
// $HOME/.cache/uocr; "" when none of these is set.
inline std::string default_cache_dir() {
  if (const char* d = std::getenv("UOCR_VK_CACHE_DIR"); d && *d) return d;
  if (const char* d = std::getenv("XDG_CACHE_HOME"); d && *d) return std::string(d) + "/uocr";
  if (const char* d = std::getenv("HOME"); d && *d) return std::string(d) + "/.cache/uocr";
  return "";
}

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
  std::string cache_dir;  // pipeline cache folder; "": detail::default_cache_dir()
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

enum class MemoryUse { weights, activations, staging };

class Context;

// A VkBuffer bound to a sub-allocation of one of the context's pools. Move-only; returns its
// memory to the pool when destroyed. Must not outlive its Context.
class Buffer {
 public:
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept;
  ~Buffer() { reset(); }

  void reset();
  bool valid() const { return buf_ != VK_NULL_HANDLE; }
  VkBuffer handle() const { return buf_; }
  size_t size() const { return size_; }
  void* mapped() const { return map_; }  // non-null when host-visible
  MemoryUse use() const { return use_; }

 private:
  friend class Context;
  Context* ctx_ = nullptr;
  VkBuffer buf_ = VK_NULL_HANDLE;
  size_t size_ = 0;
  MemoryUse use_ = MemoryUse::activations;
  size_t block_ = 0;
  VkDeviceSize offset_ = 0, alloc_size_ = 0;
  uint8_t* map_ = nullptr;
};

// A compute pipeline: `bindings` storage buffers in set 0 (bindings 0..n-1) and up to 128 bytes
// of push constants.
struct Pipeline {
  std::string name;
  uint32_t bindings = 0;
  VkDescriptorSetLayout set_layout = VK_NULL_HANDLE;
  VkPipelineLayout layout = VK_NULL_HANDLE;
  VkPipeline pipeline = VK_NULL_HANDLE;
};

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
    if (pipeline_cache_) vkDestroyPipelineCache(device_, pipeline_cache_, nullptr);
    for (Pool& pool : pools_)
      for (auto& b : pool.blocks)
        if (b) free_block(*b);
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
  bool unified_memory() const { return unified_; }
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
  const std::string& pipeline_cache_path() const { return cache_path_; }
  bool pipeline_cache_loaded() const { return cache_loaded_; }
  // Writes the cache file now (also done by the destructor). Failure to write is not an error
  // (the cache only saves compile time); the reason is kept in pipeline_cache_note().
  void save_pipeline_cache() {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    if (!pipeline_cache_ || cache_path_.empty()) return;
    size_t size = 0;
    if (vkGetPipelineCacheData(device_, pipeline_cache_, &size, nullptr) != VK_SUCCESS || size == 0) return;
    std::vector<char> data(size);
    if (vkGetPipelineCacheData(device_, pipeline_cache_, &size, data.data()) != VK_SUCCESS) return;
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(cache_path_).parent_path(), ec);
    const std::string tmp = cache_path_ + ".tmp" + std::to_string(uintptr_t(this) & 0xffffff);
    {
      std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
      f.write(data.data(), std::streamsize(size));
      if (!f) {
        cache_note_ = "could not write " + tmp;
        std::filesystem::remove(tmp, ec);
        return;
      }
    }
    std::filesystem::rename(tmp, cache_path_, ec);
    if (ec) {
      cache_note_ = "could not rename " + tmp + ": " + ec.message();
      std::filesystem::remove(tmp, ec);
    }
  }
  const std::string& pipeline_cache_note() const { return cache_note_; }

  // --- memory ------------------------------------------------------------------------------
  // A buffer of `bytes` (rounded up to 4) usable as storage buffer and copy source/target.
  // Status::out_of_memory when the device (heap or allocation limit) cannot hold it.
  Buffer buffer(size_t bytes, MemoryUse use, const std::string& what) {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    bytes = std::max<size_t>(4, (bytes + 3) / 4 * 4);
    auto bi = vulkan_info<VkBufferCreateInfo>(VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO);
    bi.size = bytes;
    // Indirect: dispatch sizes a shader computed (MoE routing) are read from activation buffers.
    bi.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT |
               VK_BUFFER_USAGE_INDIRECT_BUFFER_BIT;
    bi.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
    Pool& pool = pools_[size_t(use)];
    const VkMemoryHeap& heap = mem_props_.memoryHeaps[mem_props_.memoryTypes[pool.type].heapIndex];
    require(bytes <= heap.size && bytes <= max_allocation_, Status::out_of_memory, [&] {
      return "Vulkan: " + what + " needs " + detail::mib(bytes) + " but device '" + device_name() + "' allows at most " +
             detail::mib(std::min<VkDeviceSize>(heap.size, max_allocation_)) + " in one allocation";
    });
    Buffer b;
    b.ctx_ = this;
    b.size_ = bytes;
    b.use_ = use;
    check(vkCreateBuffer(device_, &bi, nullptr, &b.buf_), "vkCreateBuffer");
    VkMemoryRequirements req;
    vkGetBufferMemoryRequirements(device_, b.buf_, &req);
    require(req.memoryTypeBits & (1u << pool.type), Status::internal,
            "Vulkan: the buffer cannot live in the memory type chosen for its pool");
    try {
      allocate(pool, req.size, req.alignment, what, b);
    } catch (...) {
      vkDestroyBuffer(device_, b.buf_, nullptr);
      b.buf_ = VK_NULL_HANDLE;
      b.ctx_ = nullptr;
      throw;
    }
    check(vkBindBufferMemory(device_, b.buf_, pool.blocks[b.block_]->memory, b.offset_), "vkBindBufferMemory");
    if (pool.blocks[b.block_]->map) b.map_ = pool.blocks[b.block_]->map + b.offset_;
    return b;
  }

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
  size_t pool_bytes(MemoryUse use) const {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    size_t n = 0;
    for (const auto& b : pools_[size_t(use)].blocks)
      if (b) n += size_t(b->size);
    return n;
  }

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
      const VkResult rp = vkCreateComputePipelines(device_, pipeline_cache_, 1, &ci, nullptr, &p->pipeline);
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
  friend class Buffer;
  friend class Recorder;

  struct Block {
    VkDeviceMemory memory = VK_NULL_HANDLE;
    VkDeviceSize size = 0;
    uint8_t* map = nullptr;
    std::map<VkDeviceSize, VkDeviceSize> free;  // offset -> size, coalesced
    bool dedicated = false;                     // one oversized allocation: released when empty
  };
  struct Pool {
    uint32_t type = 0;
    bool host_visible = false;
    VkDeviceSize block_size = 0;
    std::vector<std::unique_ptr<Block>> blocks;
    const char* name = "";
  };

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
    vkGetPhysicalDeviceMemoryProperties(physical_, &mem_props_);
    auto m3 = vulkan_info<VkPhysicalDeviceMaintenance3Properties>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES);
    auto p2 = vulkan_info<VkPhysicalDeviceProperties2>(VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2);
    p2.pNext = &m3;
    if (props_.apiVersion >= VK_API_VERSION_1_1) {
      vkGetPhysicalDeviceProperties2(physical_, &p2);
      max_allocation_ = m3.maxMemoryAllocationSize ? m3.maxMemoryAllocationSize : max_allocation_;
    }
    if (timestamp_bits_ == 0 || props_.limits.timestampPeriod <= 0) profiling_ = false;
    setup_pools();

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
    setup_pipeline_cache();
  }

  void setup_pools() {
    auto find_type = [&](VkMemoryPropertyFlags required, VkMemoryPropertyFlags preferred) -> int {
      int best = -1;
      for (uint32_t i = 0; i < mem_props_.memoryTypeCount; ++i) {
        const VkMemoryPropertyFlags f = mem_props_.memoryTypes[i].propertyFlags;
        if ((f & required) != required) continue;
        if (best < 0) best = int(i);
        if ((f & preferred) == preferred &&
            (mem_props_.memoryTypes[best].propertyFlags & preferred) != preferred)
          best = int(i);
      }
      return best;
    };
    // Device-local for weights and activations; host-visible coherent (cached if possible) for
    // staging. Buffers are created with the same usage everywhere, so any type their
    // requirements allow is fine: checked per buffer.
    int local = find_type(VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0);
    const int host = find_type(VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT,
                               VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
    require(host >= 0, Status::unsupported, "Vulkan: the device has no host-visible coherent memory type");
    if (local < 0) local = host;
    // A device-local type that is also host-visible and coherent: map it directly.
    const int unified = find_type(VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT | VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT |
                                      VK_MEMORY_PROPERTY_HOST_COHERENT_BIT, VK_MEMORY_PROPERTY_HOST_CACHED_BIT);
    const VkMemoryHeap& local_heap = mem_props_.memoryHeaps[mem_props_.memoryTypes[local].heapIndex];
    // Small BAR windows (256 MiB device-local host-visible heaps on discrete GPUs) are not unified memory.
    if (unified >= 0 && mem_props_.memoryHeaps[mem_props_.memoryTypes[unified].heapIndex].size >= local_heap.size) {
      local = unified;
      unified_ = true;
    }
    const VkMemoryPropertyFlags host_flags = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    auto set = [&](MemoryUse u, int type, VkDeviceSize block, const char* name) {
      Pool& p = pools_[size_t(u)];
      p.type = uint32_t(type);
      p.host_visible = (mem_props_.memoryTypes[type].propertyFlags & host_flags) == host_flags;
      p.block_size = block;
      p.name = name;
    };
    set(MemoryUse::weights, local, VkDeviceSize(256) << 20, "weights");
    set(MemoryUse::activations, local, VkDeviceSize(64) << 20, "activations");
    set(MemoryUse::staging, host, VkDeviceSize(32) << 20, "staging");
  }

  void allocate(Pool& pool, VkDeviceSize size, VkDeviceSize alignment, const std::string& what, Buffer& b) {
    alignment = std::max<VkDeviceSize>(alignment, 16);
    for (size_t bi = 0; bi < pool.blocks.size(); ++bi) {
      Block* blk = pool.blocks[bi].get();
      if (!blk) continue;
      for (auto it = blk->free.begin(); it != blk->free.end(); ++it) {
        const VkDeviceSize off = it->first, len = it->second, at = detail::align_up(off, alignment);
        if (at + size > off + len) continue;
        blk->free.erase(it);
        if (at > off) blk->free.emplace(off, at - off);
        if (at + size < off + len) blk->free.emplace(at + size, off + len - at - size);
        b.block_ = bi;
        b.offset_ = at;
        b.alloc_size_ = size;
        return;
      }
    }
    auto blk = std::make_unique<Block>();
    blk->dedicated = size > pool.block_size;
    blk->size = std::max(pool.block_size, detail::align_up(size, 4096));
    // Never ask for a standard block the heap could not hold: fall back to the exact size.
    const VkMemoryHeap& heap = mem_props_.memoryHeaps[mem_props_.memoryTypes[pool.type].heapIndex];
    if (blk->size > heap.size / 2 || blk->size > max_allocation_) blk->size = detail::align_up(size, 4096);
    auto ai = vulkan_info<VkMemoryAllocateInfo>(VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO);
    ai.allocationSize = blk->size;
    ai.memoryTypeIndex = pool.type;
    const VkResult r = vkAllocateMemory(device_, &ai, nullptr, &blk->memory);
    if (r != VK_SUCCESS)
      throw Error(status_of(r) == Status::out_of_memory ? Status::out_of_memory : Status::internal,
                  "Vulkan: out of device memory allocating " + detail::mib(blk->size) + " for " + what + " (" +
                      pool.name + " pool, " + detail::mib(pool_total(pool)) + " already held on '" + device_name() +
                      "'): vkAllocateMemory returned " + result_name(r));
    if (pool.host_visible) {
      void* p = nullptr;
      const VkResult rm = vkMapMemory(device_, blk->memory, 0, VK_WHOLE_SIZE, 0, &p);
      if (rm != VK_SUCCESS) {
        vkFreeMemory(device_, blk->memory, nullptr);
        check(rm, "vkMapMemory");
      }
      blk->map = static_cast<uint8_t*>(p);
    }
    if (blk->size > size) blk->free.emplace(size, blk->size - size);
    b.block_ = pool.blocks.size();
    b.offset_ = 0;
    b.alloc_size_ = size;
    // Reuse an empty slot so block indices stay small.
    for (size_t bi = 0; bi < pool.blocks.size(); ++bi)
      if (!pool.blocks[bi]) {
        pool.blocks[bi] = std::move(blk);
        b.block_ = bi;
        return;
      }
    pool.blocks.push_back(std::move(blk));
  }

  static VkDeviceSize pool_total(const Pool& p) {
    VkDeviceSize n = 0;
    for (const auto& b : p.blocks)
      if (b) n += b->size;
    return n;
  }

  void release(Buffer& b) {
    std::lock_guard<std::recursive_mutex> lock(mutex_);
    vkDestroyBuffer(device_, b.buf_, nullptr);
    Pool& pool = pools_[size_t(b.use_)];
    Block& blk = *pool.blocks[b.block_];
    VkDeviceSize off = b.offset_, len = b.alloc_size_;
    auto next = blk.free.lower_bound(off);
    if (next != blk.free.end() && off + len == next->first) {
      len += next->second;
      next = blk.free.erase(next);
    }
    if (next != blk.free.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second == off) {
        off = prev->first;
        len += prev->second;
        blk.free.erase(prev);
      }
    }
    blk.free.emplace(off, len);
    if (off == 0 && len == blk.size && blk.dedicated) {
      free_block(blk);
      pool.blocks[b.block_].reset();
    }
  }

  void free_block(Block& b) {
    if (b.map) vkUnmapMemory(device_, b.memory);
    vkFreeMemory(device_, b.memory, nullptr);
    b.memory = VK_NULL_HANDLE;
    b.map = nullptr;
  }

  void setup_pipeline_cache() {
    std::vector<char> data;
    if (options_.pipeline_cache) {
      const std::string dir = options_.cache_dir.empty() ? detail::default_cache_dir() : options_.cache_dir;
      if (!dir.empty()) {
        char name[128];
        std::snprintf(name, sizeof name, "/vk-pipelines-%04x-%04x-", props_.vendorID, props_.deviceID);
        std::string uuid;
        for (uint8_t c : props_.pipelineCacheUUID) {
          char h[3];
          std::snprintf(h, sizeof h, "%02x", c);
          uuid += h;
        }
        cache_path_ = dir + name + uuid + ".bin";
        std::ifstream f(cache_path_, std::ios::binary);
        if (f) data.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
        // Only hand the driver a cache whose header names this device (drivers should check too).
        if (data.size() >= 32) {
          uint32_t hdr[4];
          std::memcpy(hdr, data.data(), 16);
          const bool ok = hdr[0] >= 32 && hdr[1] == VK_PIPELINE_CACHE_HEADER_VERSION_ONE && hdr[2] == props_.vendorID &&
                          hdr[3] == props_.deviceID &&
                          std::memcmp(data.data() + 16, props_.pipelineCacheUUID, VK_UUID_SIZE) == 0;
          if (!ok) {
            data.clear();
            cache_note_ = "ignored " + cache_path_ + ": written by another driver or device";
          }
        } else {
          data.clear();
        }
      }
    }
    auto ci = vulkan_info<VkPipelineCacheCreateInfo>(VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO);
    ci.initialDataSize = data.size();
    ci.pInitialData = data.empty() ? nullptr : data.data();
    VkResult r = vkCreatePipelineCache(device_, &ci, nullptr, &pipeline_cache_);
    if (r != VK_SUCCESS && !data.empty()) {  // a corrupt file: start empty
      ci.initialDataSize = 0;
      ci.pInitialData = nullptr;
      r = vkCreatePipelineCache(device_, &ci, nullptr, &pipeline_cache_);
      data.clear();
    }
    check(r, "vkCreatePipelineCache");
    cache_loaded_ = !data.empty();
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
  bool validation_ = false, profiling_ = false, owns_device_ = true, unified_ = false;
  std::string validation_note_;
  VkInstance instance_ = VK_NULL_HANDLE;
  VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;
  VkPhysicalDevice physical_ = VK_NULL_HANDLE;
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  uint32_t queue_family_ = 0, timestamp_bits_ = 0;
  int device_index_ = -1;
  VkPhysicalDeviceProperties props_{};
  VkPhysicalDeviceMemoryProperties mem_props_{};
  VkDeviceSize max_allocation_ = VkDeviceSize(1) << 62;
  Pool pools_[3];
  VkCommandPool cmd_pool_ = VK_NULL_HANDLE;
  VkCommandBuffer record_cb_ = VK_NULL_HANDLE, immediate_cb_ = VK_NULL_HANDLE;
  VkFence fence_ = VK_NULL_HANDLE;
  VkQueryPool query_pool_ = VK_NULL_HANDLE;
  std::vector<VkDescriptorPool> desc_pools_;
  size_t desc_pool_at_ = 0;
  VkPipelineCache pipeline_cache_ = VK_NULL_HANDLE;
  std::string cache_path_, cache_note_;
  bool cache_loaded_ = false;
  std::unordered_map<std::string, std::unique_ptr<Pipeline>> pipelines_;
  std::map<std::string, ProfileEntry> profile_;
  bool recording_ = false;
  uint64_t submissions_ = 0, dispatches_ = 0;
  mutable std::recursive_mutex mutex_;  // see "Thread-safety" above
};

inline Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    reset();
    ctx_ = o.ctx_;
    buf_ = o.buf_;
    size_ = o.size_;
    use_ = o.use_;
    block_ = o.block_;
    offset_ = o.offset_;
    alloc_size_ = o.alloc_size_;
    map_ = o.map_;
    o.ctx_ = nullptr;
    o.buf_ = VK_NULL_HANDLE;
    o.map_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

inline void Buffer::reset() {
  if (ctx_ && buf_) ctx_->release(*this);
  ctx_ = nullptr;
  buf_ = VK_NULL_HANDLE;
  map_ = nullptr;
  size_ = 0;
}

// A storage-buffer binding of a dispatch; `write` marks buffers the shader writes (for the
// hazard tracking that places barriers).
struct Binding {
  const Buffer* buffer = nullptr;
  bool write = false;
};
inline Binding in(const Buffer& b) { return Binding{&b, false}; }
inline Binding out(const Buffer& b) { return Binding{&b, true}; }

// Records compute dispatches and copies into the context's command buffer. A barrier is placed
// before a command only when it reads or writes a buffer written since the last barrier, or
// writes one read since then. submit() runs everything recorded and waits; the recorder can
// then record the next batch. One Recorder per Context at a time: it holds the Context's lock for
// its lifetime, so another thread's Recorder waits.
class Recorder {
 public:
  explicit Recorder(Context& c) : lock_(c.mutex_), c_(c) {
    require(!c_.recording_, Status::internal, "Vulkan: only one Recorder per Context may be active");
    c_.recording_ = true;
    begin();
  }
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;
  ~Recorder() {
    if (open_) {  // abandoned (e.g. an exception): discard what was recorded
      vkEndCommandBuffer(c_.record_cb_);
      vkResetCommandBuffer(c_.record_cb_, 0);
      c_.reset_descriptor_pools();
    }
    c_.recording_ = false;
  }

  Context& context() { return c_; }

  void dispatch(const Pipeline& p, std::initializer_list<Binding> bindings, const void* push, uint32_t push_bytes,
                uint32_t gx, uint32_t gy = 1, uint32_t gz = 1) {
    bind(p, bindings, push, push_bytes);  // checks the bindings first
    hazard(bindings);
    vkCmdDispatch(c_.record_cb_, gx, gy, gz);
    ++dispatches_;
    ++c_.dispatches_;
    stamp(p.name);
  }

  // As dispatch(), the workgroup counts being the VkDispatchIndirectCommand that earlier commands
  // wrote at `offset` bytes into `args` (no host read-back).
  void dispatch_indirect(const Pipeline& p, std::initializer_list<Binding> bindings, const void* push, uint32_t push_bytes,
                         const Buffer& args, size_t offset) {
    require(offset % 4 == 0 && offset + 12 <= args.size(), Status::internal, "Vulkan: indirect dispatch arguments out of range");
    bind(p, bindings, push, push_bytes);
    const Binding sizes = in(args);
    hazard(bindings, &sizes);
    vkCmdDispatchIndirect(c_.record_cb_, args.handle(), offset);
    ++dispatches_;
    ++c_.dispatches_;
    stamp(p.name);
  }

  // Runs f(), whose commands write disjoint parts of their buffers and read nothing another of
  // them writes: they are ordered after the commands before them but not among one another (MoE
  // experts' GEMMs into one grouped buffer: one barrier, not one per expert).
  template <class F>
  void unordered(F&& f) {
    require(!unordered_, Status::internal, "Vulkan: nested unordered() groups");
    unordered_ = true;
    group_written_ = written_.size();
    group_read_ = read_.size();
    try {
      f();
    } catch (...) {
      unordered_ = false;
      throw;
    }
    unordered_ = false;
  }

  // dst[offset, offset + bytes) = 0 (offset and bytes multiples of 4).
  void zero(const Buffer& dst, size_t offset, size_t bytes) {
    hazard({out(dst)});
    vkCmdFillBuffer(c_.record_cb_, dst.handle(), offset, bytes, 0u);
    stamp("fill");
  }

  void copy(const Buffer& src, size_t src_off, const Buffer& dst, size_t dst_off, size_t bytes) {
    hazard({in(src), out(dst)});
    VkBufferCopy region{src_off, dst_off, bytes};
    vkCmdCopyBuffer(c_.record_cb_, src.handle(), dst.handle(), 1, &region);
    stamp("copy");
  }

  // A host-visible buffer holding `bytes` of `data`, alive until the next submit() completes
  // (small per-step inputs: token ids, MoE routing tables).
  const Buffer& temp(const void* data, size_t bytes) {
    temps_.push_back(c_.buffer(bytes, MemoryUse::staging, "per-submission input"));
    std::memcpy(temps_.back().mapped(), data, bytes);
    return temps_.back();
  }

  // A device buffer of `bytes` for intermediates of the recorded commands, alive until the next
  // submit() completes.
  const Buffer& scratch(size_t bytes, const std::string& what) {
    temps_.push_back(c_.buffer(bytes, MemoryUse::activations, what));
    return temps_.back();
  }

  int64_t dispatches() const { return dispatches_; }

  // Runs what was recorded, waits for it, then starts a new batch.
  void submit() {
    VkCommandBuffer cb = c_.record_cb_;
    auto mb = vulkan_info<VkMemoryBarrier>(VK_STRUCTURE_TYPE_MEMORY_BARRIER);
    mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
    vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT,
                         0, 1, &mb, 0, nullptr, 0, nullptr);
    open_ = false;
    c_.submit_and_wait(cb);
    collect_timestamps();
    c_.reset_descriptor_pools();
    temps_.clear();
    begin();
  }

 private:
  void begin() {
    c_.begin_command_buffer(c_.record_cb_);
    Context::order_after_previous_submissions(c_.record_cb_);
    open_ = true;
    written_.clear();
    read_.clear();
    labels_.clear();
    if (c_.profiling_) {
      vkCmdResetQueryPool(c_.record_cb_, c_.query_pool_, 0, Context::kMaxTimestamps);
      vkCmdWriteTimestamp(c_.record_cb_, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, c_.query_pool_, 0);
    }
  }

  // Pipeline, descriptor set and push constants of the next dispatch (barriers recorded after
  // this still precede the dispatch).
  void bind(const Pipeline& p, std::initializer_list<Binding> bindings, const void* push, uint32_t push_bytes) {
    require(bindings.size() == p.bindings, Status::internal,
            [&] { return "Vulkan: " + p.name + " dispatched with the wrong number of buffers"; });
    require(push_bytes <= Context::kPushConstantBytes && push_bytes % 4 == 0, Status::internal, "Vulkan: bad push constants");
    VkDescriptorSet set = c_.descriptor_set(p);
    VkDescriptorBufferInfo infos[16];
    VkWriteDescriptorSet writes[16];
    require(bindings.size() <= 16, Status::internal, "Vulkan: too many bindings");
    uint32_t i = 0;
    for (const Binding& b : bindings) {
      require(b.buffer && b.buffer->valid(), Status::internal, [&] { return "Vulkan: " + p.name + " bound an empty buffer"; });
      require(b.buffer->size() <= c_.max_binding_bytes(), Status::internal, [&] {
        return "Vulkan: " + p.name + " binds a buffer of " + detail::mib(b.buffer->size()) +
               ", more than the device's storage-buffer range";
      });
      infos[i] = VkDescriptorBufferInfo{b.buffer->handle(), 0, VK_WHOLE_SIZE};
      writes[i] = vulkan_info<VkWriteDescriptorSet>(VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET);
      writes[i].dstSet = set;
      writes[i].dstBinding = i;
      writes[i].descriptorCount = 1;
      writes[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
      writes[i].pBufferInfo = &infos[i];
      ++i;
    }
    vkUpdateDescriptorSets(c_.device_, i, writes, 0, nullptr);
    VkCommandBuffer cb = c_.record_cb_;
    vkCmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, p.pipeline);
    vkCmdBindDescriptorSets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, p.layout, 0, 1, &set, 0, nullptr);
    if (push_bytes) vkCmdPushConstants(cb, p.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes, push);
  }

  // Whether buffer h is among the first n entries of v.
  static bool contains(const std::vector<VkBuffer>& v, VkBuffer h, size_t n) {
    return std::find(v.begin(), v.begin() + std::ptrdiff_t(n), h) != v.begin() + std::ptrdiff_t(n);
  }

  // A barrier before the next command if it touches a buffer it conflicts with (`extra`: one more
  // binding, an indirect dispatch's arguments).
  void hazard(std::initializer_list<Binding> bindings, const Binding* extra = nullptr) {
    // Inside unordered(), only what was recorded before the group counts.
    const size_t nw = unordered_ ? group_written_ : written_.size(), nr = unordered_ ? group_read_ : read_.size();
    bool conflict = false;
    auto check_one = [&](const Binding& b) {
      const VkBuffer h = b.buffer->handle();
      if (contains(written_, h, nw) || (b.write && contains(read_, h, nr))) conflict = true;
    };
    for (const Binding& b : bindings) check_one(b);
    if (extra) check_one(*extra);
    if (conflict) {
      auto mb = vulkan_info<VkMemoryBarrier>(VK_STRUCTURE_TYPE_MEMORY_BARRIER);
      mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
      mb.dstAccessMask = Context::kBarrierDstAccess;
      vkCmdPipelineBarrier(c_.record_cb_, Context::kBarrierSrcStages, Context::kBarrierDstStages, 0, 1, &mb, 0, nullptr, 0,
                           nullptr);
      written_.clear();
      read_.clear();
      group_written_ = group_read_ = 0;
      ++barriers_;
    }
    for (const Binding& b : bindings) (b.write ? written_ : read_).push_back(b.buffer->handle());
    if (extra) (extra->write ? written_ : read_).push_back(extra->buffer->handle());
  }

  void stamp(const std::string& label) {
    if (!c_.profiling_ || labels_.size() + 1 >= Context::kMaxTimestamps) return;
    labels_.push_back(label);
    vkCmdWriteTimestamp(c_.record_cb_, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, c_.query_pool_, uint32_t(labels_.size()));
  }

  void collect_timestamps() {
    if (!c_.profiling_ || labels_.empty()) return;
    std::vector<uint64_t> t(labels_.size() + 1);
    check(vkGetQueryPoolResults(c_.device_, c_.query_pool_, 0, uint32_t(t.size()), t.size() * 8, t.data(), 8,
                                VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT),
          "vkGetQueryPoolResults");
    const uint64_t mask = c_.timestamp_bits_ >= 64 ? ~uint64_t(0) : ((uint64_t(1) << c_.timestamp_bits_) - 1);
    const double ns = c_.props_.limits.timestampPeriod;
    for (size_t i = 0; i < labels_.size(); ++i) {
      const uint64_t d = ((t[i + 1] & mask) - (t[i] & mask)) & mask;
      ProfileEntry& e = c_.profile_[labels_[i]];
      ++e.dispatches;
      e.ms += double(d) * ns * 1e-6;
    }
  }

  std::unique_lock<std::recursive_mutex> lock_;  // first member: released after the buffers below
  Context& c_;
  bool open_ = false;
  std::vector<VkBuffer> written_, read_;
  bool unordered_ = false;                     // inside unordered()
  size_t group_written_ = 0, group_read_ = 0;  // entries of written_/read_ from before the group
  std::deque<Buffer> temps_;  // deque: references stay valid as it grows
  std::vector<std::string> labels_;
  int64_t dispatches_ = 0, barriers_ = 0;
};

}  // namespace vulkan
UOCR_NAMESPACE_END
