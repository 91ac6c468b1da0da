// The KV cache of one sequence in a device's memory, for every GPU backend: laid out and
// accounted like uocr::KvCache (float32 rows of kv_heads·head_dim per layer: a never-evicted
// reference, then the R-SWA ring or a growing window; the bookkeeping and checkpoints'
// visit_rows are ReservedKvRing's), so a checkpoint of any backend resumes on any other.
//
// A backend supplies only how its memory is reached, a `Memory` adapter:
//   using Context = ...;                      // what the cache is opened on
//   using Array = ...;                        // one owned device array
//   using Rows = ...;                         // what its decoder takes (an array, or an address)
//   explicit Memory(Context&);
//   Context& context() const;
//   Array alloc(size_t bytes, const char* what);
//   static Rows rows(const Array&);
//   void copy(Rows src, Rows dst, size_t bytes);                          // their first bytes
//   void download(Rows a, size_t offset, float* host, size_t bytes);
//   void upload(Rows a, size_t offset, const float* host, size_t bytes);
// (vulkan::KvMemory in vulkan/decoder.hpp, cuda::KvMemory in cuda/decoder.hpp.)
#pragma once
#include <cstdint>
#include <vector>

#include "uocr/core/error.hpp"
#include "uocr/decoder/kv_cache.hpp"
#include "uocr/decoder/sparse_reference.hpp"
#include "uocr/model/config.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

template <class Memory>
class DeviceKvCache : public ReservedKvRing<DeviceKvCache<Memory>> {
  using Ring = ReservedKvRing<DeviceKvCache<Memory>>;

 public:
  using Context = typename Memory::Context;
  using Rows = typename Memory::Rows;

  DeviceKvCache(Context& ctx, const DecoderConfig& config, int window)
      : Ring(config, window), memory_(ctx), layers_(size_t(config.layers)) {
    this->size_ring();
  }

  Context& context() const { return memory_.context(); }  // where the rows live
  Rows reference_k(int layer) const { return Memory::rows(layers_[size_t(layer)].ref_k); }
  Rows reference_v(int layer) const { return Memory::rows(layers_[size_t(layer)].ref_v); }
  Rows generated_k(int layer) const { return Memory::rows(layers_[size_t(layer)].gen_k); }
  Rows generated_v(int layer) const { return Memory::rows(layers_[size_t(layer)].gen_v); }

  // SR-SWA summaries of `page` of s's layout (BasicPageGroupDecoder, after the page's rows were
  // written): its key rows are read back one layer at a time and summarized on the host.
  void summarize_page(SparseReference& s, size_t page) const {
    require(page < s.page_count() && s.layout().pages[page].end() <= this->reference_rows(), Status::invalid_argument,
            "SR-SWA page is outside the cache's reference");
    const RowSpan span = s.layout().pages[page];
    std::vector<float> host(size_t(span.rows * this->row_));
    for (int l = 0; l < this->layers(); ++l) {
      memory_.download(reference_k(l), size_t(span.begin * this->row_) * sizeof(float), host.data(),
                       host.size() * sizeof(float));
      s.summarize_rows(l, page, host.data());
    }
  }

 private:
  friend class KvRing<DeviceKvCache>;
  friend Ring;
  using Array = typename Memory::Array;
  struct Layer {
    Array ref_k, ref_v, gen_k, gen_v;
  };

  Array rows_array(int64_t rows, const char* what) { return memory_.alloc(size_t(rows * this->row_) * sizeof(float), what); }

  // ReservedKvRing::visit_rows (checkpoints): the first `floats` floats of a device array.
  void read_rows(Rows array, float* host, size_t floats) const { memory_.download(array, 0, host, floats * sizeof(float)); }
  void write_rows(Rows array, const float* host, size_t floats) { memory_.upload(array, 0, host, floats * sizeof(float)); }

  // KvRing's draft rollback: `rows` generated rows from `slot` of one layer's keys or values.
  void read_generated(int layer, bool values, int64_t slot, int64_t rows, float* host) const {
    memory_.download(values ? generated_v(layer) : generated_k(layer), size_t(slot * this->row_) * sizeof(float), host,
                     size_t(rows * this->row_) * sizeof(float));
  }
  void write_generated(int layer, bool values, int64_t slot, int64_t rows, const float* host) {
    memory_.upload(values ? generated_v(layer) : generated_k(layer), size_t(slot * this->row_) * sizeof(float), host,
                   size_t(rows * this->row_) * sizeof(float));
  }

  // New reference storage for `rows` rows, the first `keep` rows copied over.
  void grow_reference(int64_t rows, int64_t keep) {
    for (Layer& l : layers_) {
      Array k = rows_array(rows, "KV cache reference keys"), v = rows_array(rows, "KV cache reference values");
      if (keep > 0) {
        memory_.copy(Memory::rows(l.ref_k), Memory::rows(k), size_t(keep * this->row_) * sizeof(float));
        memory_.copy(Memory::rows(l.ref_v), Memory::rows(v), size_t(keep * this->row_) * sizeof(float));
      }
      l.ref_k = std::move(k);
      l.ref_v = std::move(v);
    }
  }

  // Full attention grows geometrically (amortised O(1) appends), keeping the rows held; R-SWA
  // sizes its ring once.
  void grow_generated(int64_t rows) {
    for (Layer& l : layers_) {
      Array k = rows_array(rows, "KV cache generated keys"), v = rows_array(rows, "KV cache generated values");
      if (this->generated_ > 0) {
        memory_.copy(Memory::rows(l.gen_k), Memory::rows(k), size_t(this->generated_ * this->row_) * sizeof(float));
        memory_.copy(Memory::rows(l.gen_v), Memory::rows(v), size_t(this->generated_ * this->row_) * sizeof(float));
      }
      l.gen_k = std::move(k);
      l.gen_v = std::move(v);
    }
    this->capacity_ = rows;
  }

  Memory memory_;
  std::vector<Layer> layers_;
};

UOCR_NAMESPACE_END
