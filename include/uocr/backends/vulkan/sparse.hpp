// SR-SWA on the Vulkan device: a mirror of a uocr::SparseReference (its tables and key summaries)
// and the two dispatches of a sparse decode step per layer: sparse_select.comp picks each query
// head's reference spans with the CPU's rule, bit for bit (same Quest bound sums, same tie order),
// and attention.comp (SPANS) attends over them and the window. Nothing is read back during the
// step; the rows attended and bounds evaluated are summed on the device into a host-visible word
// pair, read after the step and added to the SparseReference's counters.
//
// The summaries are still built on the host (SparseReference::summarize_rows, from a page's keys
// read back once after its prefill: VulkanKvCache::summarize_page); sync() uploads them again
// when SparseReference::revision() says they changed, i.e. once per prefill or page-group slide.
//
//   DeviceSparseReference dev(ctx);
//   dev.sync(sparse, heads);                        // before recording a step
//   dev.begin_step(rec);
//   dev.select(rec, layer, q);                      // per layer, q [heads*d] after RoPE
//   dev.attend(rec, layer, q, reference, window, out);
//   rec.submit();
//   const auto n = dev.step_counts();
//   sparse.count_selection(heads * layers, ref_rows, n.rows_attended, n.bounds_evaluated);
//
// Sizes: per head scratch for the largest candidate set (gate level or gated blocks, a power of
// two) and span list; the selection output keeps every layer's spans of the last step
// (selection(), for tests). Thread-safety: as the VulkanDecoder that owns it.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "uocr/backends/vulkan/context.hpp"
#include "uocr/backends/vulkan/recorder.hpp"
#include "uocr/backends/vulkan/ops.hpp"
#include "uocr/decoder/sparse_reference.hpp"
#include "uocr/decoder/sparse_tables.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN
namespace vulkan {

class DeviceSparseReference {
 public:
  explicit DeviceSparseReference(Context& ctx) : ctx_(&ctx) {}

  // Uploads s's tables and summaries if they changed since the last sync (any SparseReference:
  // revisions differ between instances too). `heads`: query heads of the decoder.
  void sync(const SparseReference& s, int heads) {
    if (s.revision() == revision_ && heads == heads_) return;
    require(s.head_dim() <= ops::kMaxAttentionHeadDim, Status::unsupported, "SR-SWA on Vulkan: head_dim above 256");
    const SparseTables t = sparse_tables(s, heads, "Vulkan");
    layers_ = s.layers();
    heads_ = heads;
    kv_heads_ = s.kv_heads();
    head_dim_ = s.head_dim();
    push_ = t.params;
    tables_ = upload(tables_, t.words.data(), t.words.size() * 4, "SR-SWA tables");
    block_bounds_.resize(size_t(layers_));
    node_bounds_.resize(size_t(layers_));
    for (int l = 0; l < layers_; ++l) {
      block_bounds_[size_t(l)] = upload(block_bounds_[size_t(l)], s.block_bounds(l).data(), s.block_bounds(l).size() * 4, "SR-SWA block bounds");
      node_bounds_[size_t(l)] = upload(node_bounds_[size_t(l)], s.node_bounds(l).data(), s.node_bounds(l).size() * 4, "SR-SWA gate bounds");
    }
    scratch_ = sized(std::move(scratch_), t.scratch_words() * 4, "SR-SWA selection scratch");
    selection_ = sized(std::move(selection_), t.selection_words(layers_) * 4, "SR-SWA selected spans");
    if (counts_.size() == 0) counts_ = ctx_->buffer(8, MemoryUse::staging, "SR-SWA step counters");
    revision_ = s.revision();
  }

  // Zeroes the step's counters (before the first layer's select).
  void begin_step(Recorder& rec) const { rec.zero(counts_, 0, 8); }

  // Records layer `layer`'s selection for the query row q [heads*d] (after RoPE).
  void select(Recorder& rec, int layer, const Buffer& q) const {
    require(revision_ != 0 && layer >= 0 && layer < layers_, Status::internal, "SR-SWA device selection: not synced");
    SparseSelectParams pc = push_;
    pc.layer = uint32_t(layer);
    rec.dispatch(kernel(rec.context(), "sparse_select", 7),
                 {in(q), in(block_bounds_[size_t(layer)]), in(node_bounds_[size_t(layer)]), in(tables_), out(scratch_),
                  out(selection_), out(counts_)},
                 &pc, sizeof pc, uint32_t(heads_));
  }

  // Records each head's attention over layer `layer`'s selection of `reference` then `window`.
  void attend(Recorder& rec, int layer, const Buffer& q, const ops::KvSet& reference, const ops::KvSet& window,
              const Buffer& out) const {
    ops::span_attention(rec, q, 0, ops::AttentionDims{heads_, kv_heads_, head_dim_}, reference, window, selection_,
                        int64_t(layer) * heads_ * push_.sel_stride, push_.sel_stride, out, 0);
  }

  // After the step's submit: its reference rows attended and Quest bounds evaluated, summed over
  // heads and layers (one read of the two words).
  struct StepCounts {
    int64_t rows_attended = 0, bounds_evaluated = 0;
  };
  StepCounts step_counts() const {
    uint32_t c[2] = {0, 0};
    ctx_->download(counts_, c, sizeof c);
    return {int64_t(c[0]), int64_t(c[1])};
  }

  // Head h's spans in layer `layer` of the last step (merged, by row), read back (tests).
  std::vector<RowSpan> selection(int layer, int h) const {
    require(revision_ != 0 && layer >= 0 && layer < layers_ && h >= 0 && h < heads_, Status::invalid_argument,
            "SR-SWA device selection: bad layer or head");
    const std::vector<uint32_t> w = ctx_->download_vector<uint32_t>(
        selection_, push_.sel_stride, (size_t(layer) * size_t(heads_) + size_t(h)) * push_.sel_stride);
    return selection_spans<RowSpan>(w);
  }

  size_t bytes() const {
    size_t n = tables_.size() + scratch_.size() + selection_.size() + counts_.size();
    for (const Buffer& b : block_bounds_) n += b.size();
    for (const Buffer& b : node_bounds_) n += b.size();
    return n;
  }

 private:
  // A buffer of exactly `bytes` (at least 4), reusing `b` when it already has that size.
  Buffer sized(Buffer b, size_t bytes, const char* what) const {
    bytes = std::max<size_t>(bytes, 4);
    return b.size() == bytes ? std::move(b) : ctx_->buffer(bytes, MemoryUse::activations, what);
  }
  Buffer upload(Buffer& b, const void* data, size_t bytes, const char* what) const {
    Buffer out = sized(std::move(b), bytes, what);
    if (bytes) ctx_->upload(out, data, bytes);
    return out;
  }

  Context* ctx_;
  uint64_t revision_ = 0;
  int layers_ = 0, heads_ = 0, kv_heads_ = 0, head_dim_ = 0;
  SparseSelectParams push_{};  // sparse_select.comp's push constants (layer set per dispatch)
  Buffer tables_, scratch_, selection_, counts_;
  std::vector<Buffer> block_bounds_, node_bounds_;  // per layer
};

}  // namespace vulkan
UOCR_NAMESPACE_END
