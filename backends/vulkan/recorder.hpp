// Command recording of the Vulkan backend: a Recorder records compute dispatches and copies into
// the Context's command buffer, placing barriers only where buffers conflict, and submits them.
//
//   vulkan::Recorder rec(ctx);
//   rec.dispatch(pipeline, {in(a), out(b)}, &push, sizeof push, groups);
//   rec.submit();
#pragma once
#include <vulkan/vulkan.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <initializer_list>
#include <mutex>
#include <string>
#include <vector>

#include "backends/vulkan/context.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN
namespace vulkan {

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
