// SR-SWA's kernels on CUDA (backends/device/sparse_reference.hpp holds the mirror):
// ops::sparse_select picks each query head's reference spans with the CPU's rule, bit for bit,
// and ops::span_attention attends over them and the window, both enqueued on the Context's
// stream. The kernel sums its counters into two 64-bit words.
//
//   cuda::CudaSparseReference dev(ctx);
//   dev.sync(sparse, heads);
//   dev.begin_step(ctx);
//   dev.select(ctx, layer, q);                           // per layer, q [heads·d] after RoPE
//   dev.attend(ctx, layer, q, reference, window, out);
//   const auto n = dev.step_counts();                    // waits for the stream
#pragma once
#include <cstddef>
#include <cstdint>

#include "backends/cuda/context.hpp"
#include "backends/cuda/ops.hpp"
#include "backends/device/sparse_reference.hpp"
#include "uocr/decoder/sparse_tables.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN
namespace cuda {

class SparseKernels {
 public:
  using Context = cuda::Context;
  using Array = Buffer;
  using Counter = uint64_t;
  using Queue = Context;
  using Query = const float*;
  using Output = float*;
  using KvRange = ops::KvSpan;
  static constexpr const char* kName = "CUDA";
  static constexpr int kMaxHeadDim = ops::kMaxHeadDim;

  explicit SparseKernels(Context& ctx) : ctx_(&ctx) {}
  Buffer alloc(size_t bytes, const char* what, bool /*read_by_host*/) const {
    ctx_->make_current();
    return ctx_->alloc(bytes, what);
  }
  static size_t bytes(const Buffer& b) { return b.bytes(); }
  void upload(const Buffer& b, const void* data, size_t bytes) const {
    ctx_->make_current();
    ctx_->upload(b, 0, data, bytes);
  }
  void download(const Buffer& b, size_t offset, void* host, size_t bytes) const { ctx_->download(b, offset, host, bytes); }
  void zero(Context& c, const Buffer& b, size_t bytes) const { c.zero(b.data(), bytes); }

  void select(Context& c, const SparseSelectParams& p, const float* q, const Buffer& block_bounds, const Buffer& node_bounds,
              const Buffer& tables, const Buffer& scratch, const Buffer& selection, const Buffer& counts) const {
    ops::sparse_select(c, p, q, block_bounds.f32(), node_bounds.f32(), tables.as<uint32_t>(), scratch.as<uint32_t>(),
                       selection.as<uint32_t>(), counts.as<uint64_t>());
  }
  void attend(Context& c, const float* q, int heads, int kv_heads, int head_dim, const ops::KvSpan& reference,
              const ops::KvSpan& window, const Buffer& selection, size_t first_word, uint32_t stride, float* out) const {
    ops::span_attention(c, q, ops::AttentionDims{heads, kv_heads, head_dim}, reference, window,
                        selection.as<uint32_t>() + first_word, int64_t(stride), out);
  }

 private:
  Context* ctx_;
};
using CudaSparseReference = DeviceSparseReference<SparseKernels>;

}  // namespace cuda
UOCR_NAMESPACE_END
