// SR-SWA's kernels on Vulkan (backends/device/sparse_reference.hpp holds the mirror):
// sparse_select.comp picks each query head's reference spans with the CPU's rule, bit for bit
// (same Quest bound sums, same tie order), and attention.comp (SPANS) attends over them and the
// window, both recorded into the step's command buffer. The shader sums its counters into a
// host-visible pair of 32-bit words.
//
//   vulkan::VulkanSparseReference dev(ctx);
//   dev.sync(sparse, heads);
//   vulkan::Recorder rec(ctx);
//   dev.begin_step(rec);
//   dev.select(rec, layer, q);                      // per layer, q [heads*d] after RoPE
//   dev.attend(rec, layer, q, reference, window, out);
//   rec.submit();
//   const auto n = dev.step_counts();
#pragma once
#include <cstddef>
#include <cstdint>

#include "backends/device/sparse_reference.hpp"
#include "backends/vulkan/context.hpp"
#include "backends/vulkan/ops.hpp"
#include "backends/vulkan/recorder.hpp"
#include "uocr/decoder/sparse_tables.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN
namespace vulkan {

class SparseKernels {
 public:
  using Context = vulkan::Context;
  using Array = Buffer;
  using Counter = uint32_t;
  using Queue = Recorder;
  using Query = const Buffer&;
  using Output = const Buffer&;
  using KvRange = ops::KvSet;
  static constexpr const char* kName = "Vulkan";
  static constexpr int kMaxHeadDim = ops::kMaxAttentionHeadDim;

  explicit SparseKernels(Context& ctx) : ctx_(&ctx) {}
  // What the host reads after each step (the counters) lives in host-visible memory.
  Buffer alloc(size_t bytes, const char* what, bool read_by_host) const {
    return ctx_->buffer(bytes, read_by_host ? MemoryUse::staging : MemoryUse::activations, what);
  }
  static size_t bytes(const Buffer& b) { return b.size(); }
  void upload(const Buffer& b, const void* data, size_t bytes) const { ctx_->upload(b, data, bytes); }
  void download(const Buffer& b, size_t offset, void* host, size_t bytes) const { ctx_->download(b, host, bytes, offset); }
  void zero(Recorder& rec, const Buffer& b, size_t bytes) const { rec.zero(b, 0, bytes); }

  void select(Recorder& rec, const SparseSelectParams& p, const Buffer& q, const Buffer& block_bounds,
              const Buffer& node_bounds, const Buffer& tables, const Buffer& scratch, const Buffer& selection,
              const Buffer& counts) const {
    rec.dispatch(kernel(rec.context(), "sparse_select", 7),
                 {in(q), in(block_bounds), in(node_bounds), in(tables), out(scratch), out(selection), out(counts)}, &p,
                 sizeof p, p.heads);
  }
  void attend(Recorder& rec, const Buffer& q, int heads, int kv_heads, int head_dim, const ops::KvSet& reference,
              const ops::KvSet& window, const Buffer& selection, size_t first_word, uint32_t stride,
              const Buffer& out) const {
    ops::span_attention(rec, q, 0, ops::AttentionDims{heads, kv_heads, head_dim}, reference, window, selection,
                        int64_t(first_word), int64_t(stride), out, 0);
  }

 private:
  Context* ctx_;
};
using VulkanSparseReference = DeviceSparseReference<SparseKernels>;

}  // namespace vulkan
UOCR_NAMESPACE_END
