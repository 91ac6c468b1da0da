// SR-SWA on a device, written once for every device backend: a mirror of a uocr::SparseReference
// (its tables and key summaries in uocr/decoder/sparse_tables.hpp's layout) and the two kernels of
// a sparse decode step per layer: the selection picks each query head's reference spans with the
// CPU's rule, bit for bit, and the span attention attends over them and the window. Nothing is
// read back during the step; the rows attended and bounds evaluated are summed on the device into
// two counters, read once after the step and added to the SparseReference's counters.
//
// The summaries are built on the host (SparseReference::summarize_rows, from a page's keys read
// back once after its prefill: DeviceKvCache::summarize_page); sync() uploads them again when
// SparseReference::revision() says they changed, i.e. once per prefill or page-group slide.
//
//   DeviceSparseReference<vulkan::SparseKernels> dev(ctx);   // = vulkan::VulkanSparseReference
//   dev.sync(sparse, heads);                        // before a step
//   dev.begin_step(queue);                          // queue: a Vulkan Recorder, a CUDA Context
//   dev.select(queue, layer, q);                    // per layer, q [heads*d] after RoPE
//   dev.attend(queue, layer, q, reference, window, out);
//   ... the step is submitted ...
//   const auto n = dev.step_counts();
//   sparse.end_device_step(heads * layers, ref_rows, true, n.rows_attended, n.bounds_evaluated);
//
// A backend's Kernels adapter supplies (vulkan/sparse.hpp, cuda/sparse.hpp):
//   types Context, Array (a device buffer), Counter (the counters' width in its kernel), Queue
//   (where a step's work goes), Query / Output (a q row, an output row), KvRange (keys/values rows);
//   kName, kMaxHeadDim; Array alloc(bytes, what, read_by_host); static size_t bytes(const Array&);
//   upload(const Array&, const void*, bytes); download(const Array&, offset, void*, bytes);
//   zero(Queue&, const Array&, bytes); select(Queue&, SparseSelectParams, Query, block bounds,
//   node bounds, tables, scratch, selection, counts); attend(Queue&, Query, heads, kv_heads,
//   head_dim, KvRange reference, KvRange window, selection, first word, stride, Output).
//
// Buffers only grow (a sync with smaller tables keeps them). The selection keeps every layer's
// spans of the last step (selection(), for tests). Thread-safety: as the decoder that owns it.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "uocr/core/error.hpp"
#include "uocr/decoder/sparse_reference.hpp"
#include "uocr/decoder/sparse_tables.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

template <class Kernels>
class DeviceSparseReference {
 public:
  using Context = typename Kernels::Context;
  using Array = typename Kernels::Array;
  using Queue = typename Kernels::Queue;
  using Query = typename Kernels::Query;
  using Output = typename Kernels::Output;
  using KvRange = typename Kernels::KvRange;
  using Counter = typename Kernels::Counter;

  explicit DeviceSparseReference(Context& ctx) : k_(ctx) {}

  // Uploads s's tables and summaries if they changed since the last sync (any SparseReference:
  // revisions differ between instances too). `heads`: query heads of the decoder.
  void sync(const SparseReference& s, int heads) {
    if (s.revision() == revision_ && uint32_t(heads) == params_.heads) return;
    require(s.head_dim() <= Kernels::kMaxHeadDim, Status::unsupported,
            [&] { return std::string("SR-SWA on ") + Kernels::kName + ": head_dim above " + std::to_string(Kernels::kMaxHeadDim); });
    const SparseTables t = sparse_tables(s, heads, Kernels::kName);
    layers_ = s.layers();
    kv_heads_ = s.kv_heads();
    head_dim_ = s.head_dim();
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
    at_least(counts_, 2 * sizeof(Counter), "SR-SWA step counters", /*read_by_host*/ true);
    revision_ = s.revision();
  }

  // Zeroes the step's counters (before the first layer's select).
  void begin_step(Queue& queue) const { k_.zero(queue, counts_, 2 * sizeof(Counter)); }

  // Layer `layer`'s selection for the query row q [heads*d] (after RoPE).
  void select(Queue& queue, int layer, Query q) const {
    require(revision_ != 0 && layer >= 0 && layer < layers_, Status::internal, "SR-SWA device selection: not synced");
    SparseSelectParams p = params_;
    p.layer = uint32_t(layer);
    k_.select(queue, p, q, block_bounds_[size_t(layer)], node_bounds_[size_t(layer)], tables_, scratch_, selection_, counts_);
  }

  // Each head's attention over layer `layer`'s selection of `reference`, then every row of
  // `window`; out [heads*d].
  void attend(Queue& queue, int layer, Query q, const KvRange& reference, const KvRange& window, Output out) const {
    k_.attend(queue, q, int(params_.heads), kv_heads_, head_dim_, reference, window, selection_,
              size_t(layer) * params_.heads * params_.sel_stride, params_.sel_stride, out);
  }

  // After the step: its reference rows attended and Quest bounds evaluated, summed over heads and
  // layers (one read of the two counters).
  struct StepCounts {
    int64_t rows_attended = 0, bounds_evaluated = 0;
  };
  StepCounts step_counts() const {
    Counter c[2] = {0, 0};
    k_.download(counts_, 0, c, sizeof c);
    return {int64_t(c[0]), int64_t(c[1])};
  }

  // Head h's spans in layer `layer` of the last step (merged, by row), read back (tests).
  std::vector<RowSpan> selection(int layer, int h) const {
    require(revision_ != 0 && layer >= 0 && layer < layers_ && h >= 0 && uint32_t(h) < params_.heads,
            Status::invalid_argument, "SR-SWA device selection: bad layer or head");
    std::vector<uint32_t> w(params_.sel_stride);
    k_.download(selection_, (size_t(layer) * params_.heads + size_t(h)) * params_.sel_stride * sizeof(uint32_t), w.data(),
                w.size() * sizeof(uint32_t));
    return selection_spans<RowSpan>(w);
  }

  size_t bytes() const {
    size_t n = Kernels::bytes(tables_) + Kernels::bytes(scratch_) + Kernels::bytes(selection_) + Kernels::bytes(counts_);
    for (const Array& b : block_bounds_) n += Kernels::bytes(b);
    for (const Array& b : node_bounds_) n += Kernels::bytes(b);
    return n;
  }

 private:
  // Grows b to at least `bytes` (contents dropped when it grows).
  void at_least(Array& b, size_t bytes, const char* what, bool read_by_host = false) {
    bytes = std::max<size_t>(bytes, 4);
    if (Kernels::bytes(b) < bytes) b = k_.alloc(bytes, what, read_by_host);
  }
  void upload(Array& b, const void* data, size_t bytes, const char* what) {
    at_least(b, bytes, what);
    if (bytes) k_.upload(b, data, bytes);
  }

  Kernels k_;
  uint64_t revision_ = 0;
  int layers_ = 0, kv_heads_ = 0, head_dim_ = 0;
  SparseSelectParams params_{};  // the selection's parameters (layer set per launch)
  Array tables_, scratch_, selection_, counts_;
  std::vector<Array> block_bounds_, node_bounds_;  // per layer
};

UOCR_NAMESPACE_END
