// Per-layer key/value storage of one sequence, in two regions:
//  - the reference: the P rows of the prefill (BOS + image tokens + prompt), never evicted;
//  - the generated part: either a ring of n slots (R-SWA: appended until P+n, then each new token
//    overwrites the oldest generated one; positions keep increasing because RoPE is baked into
//    the stored keys) or a growing buffer (full causal attention, the baseline).
// Decode attends to every held row without a mask, so slot order inside the ring is irrelevant.
// Rows are float32 [slot][kv_head][head_dim], exactly what the K/V projections produce.
//
// Not thread-safe: one cache per sequence, used by one Decoder call at a time.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "uocr/core/error.hpp"
#include "uocr/model/config.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

// A range of reference rows: [begin, begin + rows).
struct RowSpan {
  int64_t begin = 0;
  int64_t rows = 0;
  int64_t end() const { return begin + rows; }
};

// The bookkeeping every KV cache shares (uocr::KvCache here, cuda::CudaKvCache and
// vulkan::VulkanKvCache in device memory): the row size, the window, how many reference and
// generated rows are held, which slot the next generated token takes, and the byte accounting
// sessions report. A cache derives from KvRing<itself>, owns only the storage, and provides
// grow_generated(rows): make room for `rows` generated rows, keeping the first generated_ rows
// and setting capacity_ (full attention grows; an R-SWA ring is sized once, at construction).
template <class Cache>
class KvRing {
 public:
  int layers() const { return layer_count_; }
  int64_t row_floats() const { return row_; }
  int window() const { return window_; }  // 0 = full attention
  int64_t reference_rows() const { return reference_rows_; }

  // Claims the slot of the next generated token (the same slot in every layer) and returns it.
  // Afterwards generated_rows() counts that token, which attends to itself.
  int64_t claim_slot() {
    require(reference_rows_ > 0, Status::invalid_argument, "decode step before prefill: the KV cache is empty");
    if (window_ > 0) return generated_++ % window_;
    if (generated_ == capacity_) static_cast<Cache&>(*this).grow_generated(std::max<int64_t>(64, 2 * capacity_));
    return generated_++;
  }

  // Tokens decoded since the prefill (keeps counting after the ring wraps).
  int64_t generated_tokens() const { return generated_; }
  // Slot of the generated token with that count (0 = the first since the prefill), while held.
  int64_t generated_slot(int64_t token) const { return window_ > 0 ? token % window_ : token; }
  // Forgets every generated token but the last `keep`, which the caller has moved, oldest first,
  // to slots 0 .. keep - 1 in every layer: the cache then holds them as if only they had been
  // decoded since the prefill.
  void keep_last_generated(int64_t keep) {
    require(keep >= 0 && keep <= generated_rows(), Status::invalid_argument, "keep_last_generated: more rows than held");
    generated_ = keep;
  }
  // Gives back the slots of the last `count` tokens claimed (draft verification forgets the
  // rejected ones): generated_tokens() drops by `count`. A ring's slots held older tokens before
  // those claims; the caller writes them back.
  void unclaim(int64_t count) {
    require(count >= 0 && count <= generated_, Status::invalid_argument, "unclaim: more tokens than claimed");
    generated_ -= count;
  }
  // Draft verification (BasicPageGroupDecoder::verify): a ring's next `count` claims overwrite
  // the rows of its oldest tokens, which a rejected claim must give back. save_next_slots copies
  // what those slots hold now, every layer's keys and values, into `saved`; once the `count`
  // claims are made, restore_slots(count, kept, saved) writes back the rows of the claims after
  // the first `kept` (before unclaim). Full attention keeps nothing: its new slots held no row.
  void save_next_slots(int64_t count, std::vector<float>& saved) const {
    saved.resize(window_ > 0 ? size_t(2 * layer_count_ * count * row_) : 0);
    for_slot_runs(generated_, 0, count, [&](int64_t i, int64_t slot, int64_t rows) {
      for (int l = 0; l < layer_count_; ++l)
        for (int values = 0; values < 2; ++values)
          static_cast<const Cache&>(*this).read_generated(l, values != 0, slot, rows, saved.data() + saved_at(l, values, i, count));
    });
  }
  void restore_slots(int64_t count, int64_t kept, const std::vector<float>& saved) {
    require(count >= 0 && count <= generated_ && kept >= 0 && kept <= count &&
                saved.size() == (window_ > 0 ? size_t(2 * layer_count_ * count * row_) : 0),
            Status::invalid_argument, "restore_slots: not what save_next_slots saved");
    for_slot_runs(generated_ - count, kept, count, [&](int64_t i, int64_t slot, int64_t rows) {
      for (int l = 0; l < layer_count_; ++l)
        for (int values = 0; values < 2; ++values)
          static_cast<Cache&>(*this).write_generated(l, values != 0, slot, rows, saved.data() + saved_at(l, values, i, count));
    });
  }
  // Generated rows a decode step attends to: the last min(tokens, n) in R-SWA mode, all otherwise.
  int64_t generated_rows() const { return window_ > 0 ? std::min<int64_t>(generated_, window_) : generated_; }
  // Rows the generated region can hold without reallocating.
  int64_t generated_capacity() const { return capacity_; }

  // Bytes of K and V held for one token across all layers.
  size_t bytes_per_token() const { return size_t(2 * row_) * sizeof(float) * size_t(layer_count_); }
  size_t reference_bytes() const { return size_t(reference_rows_) * bytes_per_token(); }
  size_t window_bytes() const { return size_t(generated_rows()) * bytes_per_token(); }
  size_t total_bytes() const { return reference_bytes() + window_bytes(); }

 protected:
  KvRing(const DecoderConfig& config, int window)
      : row_(int64_t(config.kv_heads) * config.head_dim), window_(window), layer_count_(config.layers) {
    require(window >= 0, Status::invalid_argument, [&] { return "KV cache window must be >= 0, got " + std::to_string(window); });
  }
  // For the caches' constructors, once their storage exists: R-SWA preallocates its ring, so
  // memory is constant once P+window rows are held.
  void size_ring() {
    if (window_ > 0) static_cast<Cache&>(*this).grow_generated(window_);
  }
  // f(i, slot, rows) over the ring slots of tokens first + [from, count), in runs of consecutive
  // slots (a run ends where the ring wraps); nothing without a ring.
  template <class F>
  void for_slot_runs(int64_t first, int64_t from, int64_t count, F&& f) const {
    if (window_ == 0) return;
    for (int64_t i = from; i < count;) {
      const int64_t slot = generated_slot(first + i), rows = std::min<int64_t>(count - i, window_ - slot);
      f(i, slot, rows);
      i += rows;
    }
  }
  // Where token i of `count` saved rows has layer l's keys (values = 0) or values.
  size_t saved_at(int l, int values, int64_t i, int64_t count) const { return size_t(((2 * l + values) * count + i) * row_); }
  // reset(rows) and resize_reference(rows) check their argument first (before any storage is sized).
  static void require_prefill_rows(int64_t rows) {
    require(rows > 0, Status::invalid_argument, "prefill must have at least one token");
  }
  static void require_reference_rows(int64_t rows) {
    require(rows >= 0, Status::invalid_argument, "reference rows must be >= 0");
  }

  int64_t row_;
  int window_;
  int layer_count_;
  int64_t reference_rows_ = 0;
  int64_t generated_ = 0;
  int64_t capacity_ = 0;
};

// A KvRing whose storage is reallocated explicitly (device memory): the reference grows to exactly
// the rows asked for, keeping the rows held, and never shrinks; allocated bytes are the rows
// reserved. Cache also provides grow_reference(rows, keep): new storage for `rows` reference
// rows with the first `keep` copied over, and read_rows / write_rows(array, host, floats): the
// first `floats` floats of one of its arrays to / from the host.
template <class Cache>
class ReservedKvRing : public KvRing<Cache> {
 public:
  // Starts a new sequence whose prefill has `rows` tokens; drops all generated rows.
  void reset(int64_t rows) {
    this->require_prefill_rows(rows);
    if (rows > ref_capacity_) reserve_reference(rows, 0);
    this->reference_rows_ = rows;
    this->generated_ = 0;
  }
  // As KvCache::resize_reference: keeps the rows held (copied when the storage grows) and every
  // generated row; storage never shrinks.
  void resize_reference(int64_t rows) {
    this->require_reference_rows(rows);
    if (rows > ref_capacity_) reserve_reference(rows, std::min(this->reference_rows_, rows));
    this->reference_rows_ = rows;
  }
  size_t allocated_bytes() const { return size_t(ref_capacity_ + this->capacity_) * this->bytes_per_token(); }

  // Checkpoints (BasicPageGroupDecoder::visit_kv): f(data, floats) reads or rewrites the first
  // `rows` rows of `array` (what reference_k(layer) and the like return) in a host copy, which
  // is then written back. The rows are laid out as KvCache's, so a checkpoint of any backend
  // resumes on any other.
  template <class Array>
  void visit_rows(const Array& array, int64_t rows, const std::function<void(float*, size_t)>& f) {
    Cache& cache = static_cast<Cache&>(*this);
    std::vector<float> host(size_t(rows * this->row_));
    cache.read_rows(array, host.data(), host.size());
    f(host.data(), host.size());
    cache.write_rows(array, host.data(), host.size());
  }

 protected:
  using KvRing<Cache>::KvRing;

 private:
  void reserve_reference(int64_t rows, int64_t keep) {
    static_cast<Cache&>(*this).grow_reference(rows, keep);
    ref_capacity_ = rows;
  }

  int64_t ref_capacity_ = 0;
};

class KvCache : public KvRing<KvCache> {
 public:
  // window > 0: R-SWA with `window` generated slots (preallocated now, so memory is constant once
  // P+window rows are held); window == 0: full attention, the generated part grows.
  KvCache(const DecoderConfig& config, int window) : KvRing(config, window), layers_(size_t(config.layers)) { size_ring(); }

  // Starts a new sequence whose prefill has `rows` tokens; drops all generated rows.
  void reset(int64_t rows) {
    require_prefill_rows(rows);
    for (Layer& l : layers_) {
      l.ref_k.resize(size_t(rows * row_));
      l.ref_v.resize(size_t(rows * row_));
    }
    reference_rows_ = rows;
    generated_ = 0;
  }

  // Sets the number of reference rows, keeping the rows held and every generated row (page
  // groups extend and rewrite the reference between decode steps). Storage grows to exactly
  // `rows` when smaller and never shrinks, so a later reset() to at most `rows` does not reallocate.
  void resize_reference(int64_t rows) {
    require_reference_rows(rows);
    for (Layer& l : layers_) {
      if (l.ref_k.capacity() < size_t(rows * row_)) {
        l.ref_k.reserve(size_t(rows * row_));
        l.ref_v.reserve(size_t(rows * row_));
      }
      l.ref_k.resize(size_t(rows * row_));
      l.ref_v.resize(size_t(rows * row_));
    }
    reference_rows_ = rows;
  }

  float* reference_k(int layer) { return layers_[size_t(layer)].ref_k.data(); }
  float* reference_v(int layer) { return layers_[size_t(layer)].ref_v.data(); }
  const float* reference_k(int layer) const { return layers_[size_t(layer)].ref_k.data(); }
  const float* reference_v(int layer) const { return layers_[size_t(layer)].ref_v.data(); }
  float* generated_k(int layer) { return layers_[size_t(layer)].gen_k.data(); }
  float* generated_v(int layer) { return layers_[size_t(layer)].gen_v.data(); }
  // Checkpoints (BasicPageGroupDecoder::visit_kv): f(rows, floats) on the first `rows` rows of
  // one of the arrays above, in place.
  void visit_rows(float* data, int64_t rows, const std::function<void(float*, size_t)>& f) { f(data, size_t(rows * row_)); }

  // Bytes actually reserved (includes ring slots not yet filled and full-mode growth headroom).
  size_t allocated_bytes() const {
    size_t n = 0;
    for (const Layer& l : layers_) n += l.ref_k.capacity() + l.ref_v.capacity() + l.gen_k.capacity() + l.gen_v.capacity();
    return n * sizeof(float);
  }

 private:
  friend class KvRing<KvCache>;
  struct Layer {
    std::vector<float> ref_k, ref_v, gen_k, gen_v;
  };

  // KvRing's draft rollback: `rows` generated rows from `slot` of one layer's keys or values.
  void read_generated(int layer, bool values, int64_t slot, int64_t rows, float* host) const {
    const Layer& l = layers_[size_t(layer)];
    std::copy_n((values ? l.gen_v : l.gen_k).data() + slot * row_, rows * row_, host);
  }
  void write_generated(int layer, bool values, int64_t slot, int64_t rows, const float* host) {
    Layer& l = layers_[size_t(layer)];
    std::copy_n(host, rows * row_, (values ? l.gen_v : l.gen_k).data() + slot * row_);
  }

  // Geometric growth keeps full-mode appends amortised O(1); the ring sizes itself once.
  void grow_generated(int64_t rows) {
    for (Layer& l : layers_) {
      l.gen_k.resize(size_t(rows * row_));
      l.gen_v.resize(size_t(rows * row_));
    }
    capacity_ = rows;
  }

  std::vector<Layer> layers_;
};

UOCR_NAMESPACE_END
