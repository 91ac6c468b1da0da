// SR-SWA on the CUDA device: a mirror of a uocr::SparseReference (its tables and key summaries,
// uocr/decoder/sparse_tables.hpp's layout, shared with Vulkan) and the two launches of a sparse
// decode step per layer: ops::sparse_select picks each query head's reference spans with the
// CPU's rule, bit for bit, and ops::span_attention attends over them and the window. Nothing is
// read back during the step; the rows attended and bounds evaluated are summed on the device
// into two 64-bit counters, read once after the step and added to the SparseReference's counters.
//
// The summaries are built on the host (SparseReference::summarize_rows, from a page's keys read
// back once after its prefill: CudaKvCache::summarize_page); sync() uploads them again when
// SparseReference::revision() says they changed, i.e. once per prefill or page-group slide.
//
//   DeviceSparseReference dev(ctx);
//   dev.sync(sparse, heads);                             // before a step
//   dev.begin_step();
//   dev.select(layer, q);                                // per layer, q [heads·d] after RoPE
//   dev.attend(layer, q, dims, reference, window, out);
//   const auto n = dev.step_counts();                    // waits for the stream
//   sparse.count_selection(heads * layers, ref_rows, n.rows_attended, n.bounds_evaluated);
//
// Sizes: per head scratch for the largest candidate set and span list; the selection keeps every
// layer's spans of the last step (selection(), for tests). Thread-safety: as the Context it uses.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "uocr/backends/cuda/context.hpp"
#include "uocr/backends/cuda/ops.hpp"
#include "uocr/decoder/sparse_reference.hpp"
#include "uocr/decoder/sparse_tables.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN
namespace cuda {

class DeviceSparseReference {
 public:
  explicit DeviceSparseReference(Context& ctx) : ctx_(&ctx) {}

  // Uploads s's tables and summaries if they changed since the last sync (any SparseReference:
  // revisions differ between instances too). `heads`: query heads of the decoder.
  void sync(const SparseReference& s, int heads) {
    if (s.revision() == revision_ && uint32_t(heads) == params_.heads) return;
    require(s.head_dim() <= ops::kMaxHeadDim, Status::unsupported, "SR-SWA on CUDA: head_dim above 256");
    const SparseTables t = sparse_tables(s, heads, "CUDA");
    ctx_->make_current();
    layers_ = s.layers();
    params_ = t.params;
    upload(tables_, t.words.data(), t.words.size() * sizeof(uint32_t), "SR-SWA tables");
    block_bounds_.resize(size_t(layers_));
    node_bounds_.resize(size_t(layers_));
    for (int l = 0; l < layers_; ++l) {
      upload(block_bounds_[size_t(l)], s.block_bounds(l).data(), s.block_bounds(l).size() * sizeof(float), "SR-SWA block bounds");
      upload(node_bounds_[size_t(l)], s.node_bounds(l).data(), s.node_bounds(l).size() * sizeof(float), "SR-SWA gate bounds");
    }
    at_least(scratch_, t.scratch_words() * sizeof(uint32_t), "SR-SWA selection scratch");
    at_least(selection_, t.selection_words(layers_) * sizeof(uint32_t), "SR-SWA selected spans");
    at_least(counts_, 2 * sizeof(uint64_t), "SR-SWA step counters");
    revision_ = s.revision();
  }

  // Zeroes the step's counters (before the first layer's select).
  void begin_step() const { ctx_->zero(counts_.data(), 2 * sizeof(uint64_t)); }

  // Enqueues layer `layer`'s selection for the query row q [heads·d] (after RoPE).
  void select(int layer, const float* q) const {
    require(revision_ != 0 && layer >= 0 && layer < layers_, Status::internal, "SR-SWA device selection: not synced");
    SparseSelectParams p = params_;
    p.layer = uint32_t(layer);
    ops::sparse_select(*ctx_, p, q, block_bounds_[size_t(layer)].f32(), node_bounds_[size_t(layer)].f32(),
                       tables_.as<uint32_t>(), scratch_.as<uint32_t>(), selection_.as<uint32_t>(), counts_.as<uint64_t>());
  }

  // Enqueues each head's attention over layer `layer`'s selection of `reference`, then `window`.
  void attend(int layer, const float* q, const ops::AttentionDims& dims, const ops::KvSpan& reference,
              const ops::KvSpan& window, float* out) const {
    ops::span_attention(*ctx_, q, dims, reference, window,
                        selection_.as<uint32_t>() + size_t(layer) * params_.heads * params_.sel_stride, params_.sel_stride,
                        out);
  }

  // After the step: its reference rows attended and Quest bounds evaluated, summed over heads and
  // layers (one read of the two counters; waits for the stream).
  struct StepCounts {
    int64_t rows_attended = 0, bounds_evaluated = 0;
  };
  StepCounts step_counts() const {
    uint64_t c[2] = {0, 0};
    ctx_->download(counts_.data(), c, sizeof c);
    return {int64_t(c[0]), int64_t(c[1])};
  }

  // Head h's spans in layer `layer` of the last step (merged, by row), read back (tests).
  std::vector<RowSpan> selection(int layer, int h) const {
    require(revision_ != 0 && layer >= 0 && layer < layers_ && h >= 0 && uint32_t(h) < params_.heads,
            Status::invalid_argument, "SR-SWA device selection: bad layer or head");
    std::vector<uint32_t> w(params_.sel_stride);
    ctx_->download(selection_.as<uint32_t>() + (size_t(layer) * params_.heads + size_t(h)) * params_.sel_stride, w.data(),
                   w.size() * sizeof(uint32_t));
    return selection_spans<RowSpan>(w);
  }

  size_t bytes() const {
    size_t n = tables_.bytes() + scratch_.bytes() + selection_.bytes() + counts_.bytes();
    for (const Buffer& b : block_bounds_) n += b.bytes();
    for (const Buffer& b : node_bounds_) n += b.bytes();
    return n;
  }

 private:
  // Grows b to at least `bytes` (contents dropped when it grows).
  void at_least(Buffer& b, size_t bytes, const char* what) const {
    if (b.bytes() < bytes || b.empty()) b = ctx_->alloc(std::max<size_t>(bytes, 4), what);
  }
  void upload(Buffer& b, const void* data, size_t bytes, const char* what) const {
    at_least(b, bytes, what);
    ctx_->upload(b, 0, data, bytes);
  }

  Context* ctx_;
  uint64_t revision_ = 0;
  int layers_ = 0;
  SparseSelectParams params_{};  // the selection's parameters (layer set per launch)
  Buffer tables_, scratch_, selection_, counts_;
  std::vector<Buffer> block_bounds_, node_bounds_;  // per layer
};

}  // namespace cuda
UOCR_NAMESPACE_END
