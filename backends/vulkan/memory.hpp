// Device memory of the Vulkan backend: three pools of large VkDeviceMemory blocks sub-allocated
// first-fit, one per use: weights (device-local, uploaded once), activations and KV cache
// (device-local), staging and per-submission temporaries (host-visible, coherent, persistently
// mapped). Where the device-local type is also host-visible (integrated GPUs, Mesa lavapipe),
// buffers are mapped directly and no staging copies happen. A Context owns one MemoryPools and
// hands out its buffers (Context::buffer).
#pragma once
#include <vulkan/vulkan.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "backends/vulkan/device.hpp"
#include "uocr/core/error.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN
namespace vulkan {

enum class MemoryUse { weights, activations, staging };

class MemoryPools;

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
  friend class MemoryPools;
  MemoryPools* pools_ = nullptr;
  VkBuffer buf_ = VK_NULL_HANDLE;
  size_t size_ = 0;
  MemoryUse use_ = MemoryUse::activations;
  size_t block_ = 0;
  VkDeviceSize offset_ = 0, alloc_size_ = 0;
  uint8_t* map_ = nullptr;
};

class MemoryPools {
 public:
  // `lock`: the Context's, held by every call here and by a buffer's release.
  explicit MemoryPools(std::recursive_mutex& lock) : mutex_(&lock) {}
  MemoryPools(const MemoryPools&) = delete;
  MemoryPools& operator=(const MemoryPools&) = delete;

  // The pools of `device`, whose memory `props` describes; `max_allocation`: the largest single
  // allocation it allows; `device_name` names it in errors.
  void open(VkDevice device, const VkPhysicalDeviceMemoryProperties& props, VkDeviceSize max_allocation,
            std::string device_name) {
    device_ = device;
    mem_props_ = props;
    max_allocation_ = max_allocation;
    device_name_ = std::move(device_name);
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
    // Small BAR windows (256 MiB device-local host-visible heaps on discrete GPUs) are not unified
    // memory.
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

  // Device-local memory is host-visible too: buffers are mapped, no staging copies.
  bool unified() const { return unified_; }

  // A buffer of `bytes` (rounded up to 4) usable as storage buffer and copy source/target.
  // Status::out_of_memory when the device (heap or allocation limit) cannot hold it.
  Buffer buffer(size_t bytes, MemoryUse use, const std::string& what) {
    std::lock_guard<std::recursive_mutex> lock(*mutex_);
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
      return "Vulkan: " + what + " needs " + detail::mib(bytes) + " but device '" + device_name_ + "' allows at most " +
             detail::mib(std::min<VkDeviceSize>(heap.size, max_allocation_)) + " in one allocation";
    });
    Buffer b;
    b.pools_ = this;
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
      b.pools_ = nullptr;
      throw;
    }
    check(vkBindBufferMemory(device_, b.buf_, pool.blocks[b.block_]->memory, b.offset_), "vkBindBufferMemory");
    if (pool.blocks[b.block_]->map) b.map_ = pool.blocks[b.block_]->map + b.offset_;
    return b;
  }

  // Bytes of device memory blocks held by a pool (sub-allocated or free).
  size_t pool_bytes(MemoryUse use) const {
    std::lock_guard<std::recursive_mutex> lock(*mutex_);
    size_t n = 0;
    for (const auto& b : pools_[size_t(use)].blocks)
      if (b) n += size_t(b->size);
    return n;
  }

  // Frees every block (the Context's destructor, once the device is idle).
  void free_all() {
    for (Pool& pool : pools_)
      for (auto& b : pool.blocks)
        if (b) free_block(*b);
  }

 private:
  friend class Buffer;

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
                      pool.name + " pool, " + detail::mib(pool_total(pool)) + " already held on '" + device_name_ +
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
    std::lock_guard<std::recursive_mutex> lock(*mutex_);
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

  std::recursive_mutex* mutex_;
  VkDevice device_ = VK_NULL_HANDLE;
  VkPhysicalDeviceMemoryProperties mem_props_{};
  VkDeviceSize max_allocation_ = 0;
  std::string device_name_;
  Pool pools_[3];
  bool unified_ = false;
};

inline Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    reset();
    pools_ = o.pools_;
    buf_ = o.buf_;
    size_ = o.size_;
    use_ = o.use_;
    block_ = o.block_;
    offset_ = o.offset_;
    alloc_size_ = o.alloc_size_;
    map_ = o.map_;
    o.pools_ = nullptr;
    o.buf_ = VK_NULL_HANDLE;
    o.map_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

inline void Buffer::reset() {
  if (pools_ && buf_) pools_->release(*this);
  pools_ = nullptr;
  buf_ = VK_NULL_HANDLE;
  map_ = nullptr;
  size_ = 0;
}

}  // namespace vulkan
UOCR_NAMESPACE_END
