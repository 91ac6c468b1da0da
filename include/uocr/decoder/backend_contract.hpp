// The backend contract: what page groups (uocr/decoder/page_groups.hpp) and the step batcher
// (uocr/decoder/step_batcher.hpp) call on a backend's decoder and its KV cache, checked when they
// are instantiated, so that a new backend learns what it lacks from one static_assert naming the
// call instead of from an error deep inside a template.
//
// A backend provides a decoder Dec and a KV cache Cache with
//   Dec:   config() -> const DecoderConfig&, embed(ids) -> vector<float>,
//          prefill(embeddings, first_position, cache) -> logits of the last row,
//          prefill_segment(rows, t, positions, cache, dst, context, want_logits) -> logits or {},
//          decode_step(token, position, cache) -> logits, position_limit(), set_position_limit(n),
//          set_decode_attention(SparseReference*), scratch_bytes(), set_deadline(Deadline) (a
//          prefill past it throws DeadlinePassed between two layers),
//          static constexpr BackendCapabilities capabilities;
//   Cache: the KV ring of uocr/decoder/kv_cache.hpp (KvRing: claim_slot, generated rows and
//          slots, keep_last_generated, byte counts) plus reset, resize_reference,
//          reference_/generated_ k and v arrays per layer, and visit_rows(array, rows, f), which
//          hands f the rows as host floats (in place, or read back and written again).
// and, for each capability it declares, the calls listed with it below. The CPU decoder
// (uocr::Decoder over uocr::KvCache) is the reference every backend is tested against.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <type_traits>
#include <utility>
#include <vector>

#include "uocr/core/deadline.hpp"
#include "uocr/decoder/kv_cache.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

class SparseReference;
class DecodeAttention;
struct DecoderConfig;

// What a backend can do beyond the required calls; generic code asks these instead of testing
// for a backend's type.
struct BackendCapabilities {
  // The KV arrays are host memory (visit_rows works in place): SR-SWA summarizes a page straight
  // from the cache (SparseReference::update_page). Otherwise the cache provides
  // summarize_page(SparseReference&, slot), reading the page's keys back.
  bool host_kv;
  // decode_batch(tokens, positions, caches, attentions) -> logits [n, vocab] and
  // check_step(token, position, cache): one step of several documents in one pass, each row
  // bit-identical to its own decode_step (uocr::StepBatcher, continuous batching).
  bool batched_decode;
  // decode_tokens(tokens, n, first_position, cache, logits): n given tokens of one document in one
  // pass, each row's keys, values and logits ([n, vocab], when logits is not null) bit-identical
  // to n decode_steps' (page groups recompute their window and verify drafts with it). The
  // cache provides KvRing's save_next_slots / restore_slots for the drafts' rollback.
  bool multi_token_decode;
};

namespace contract {

template <class, class = void>
struct has_capabilities : std::false_type {};
template <class T>
struct has_capabilities<T, std::enable_if_t<std::is_same_v<std::remove_cv_t<decltype(T::capabilities)>, BackendCapabilities>>>
    : std::true_type {};

template <class D, class = void>
struct has_config : std::false_type {};
template <class D>
struct has_config<D, std::enable_if_t<std::is_convertible_v<decltype(std::declval<const D&>().config()), const DecoderConfig&>>>
    : std::true_type {};

template <class D, class = void>
struct has_embed : std::false_type {};
template <class D>
struct has_embed<D, std::enable_if_t<std::is_convertible_v<
                        decltype(std::declval<const D&>().embed(std::declval<const std::vector<int32_t>&>())), std::vector<float>>>>
    : std::true_type {};

template <class D, class C, class = void>
struct has_prefill : std::false_type {};
template <class D, class C>
struct has_prefill<D, C,
                   std::enable_if_t<std::is_convertible_v<decltype(std::declval<D&>().prefill(std::declval<const std::vector<float>&>(),
                                                                                              int64_t(0), std::declval<C&>())),
                                                          std::vector<float>>>> : std::true_type {};

template <class D, class C, class = void>
struct has_prefill_segment : std::false_type {};
template <class D, class C>
struct has_prefill_segment<
    D, C,
    std::enable_if_t<std::is_convertible_v<
        decltype(std::declval<D&>().prefill_segment(std::declval<const float*>(), int64_t(0), std::declval<const int64_t*>(),
                                                    std::declval<C&>(), int64_t(0), std::declval<const std::vector<RowSpan>&>(),
                                                    true)),
        std::vector<float>>>> : std::true_type {};

template <class D, class C, class = void>
struct has_decode_step : std::false_type {};
template <class D, class C>
struct has_decode_step<D, C,
                       std::enable_if_t<std::is_convertible_v<
                           decltype(std::declval<D&>().decode_step(int32_t(0), int64_t(0), std::declval<C&>())), const std::vector<float>&>>>
    : std::true_type {};

template <class D, class = void>
struct has_position_limit : std::false_type {};
template <class D>
struct has_position_limit<D, std::void_t<decltype(int64_t(std::declval<const D&>().position_limit())),
                                         decltype(std::declval<D&>().set_position_limit(int64_t(0)))>> : std::true_type {};

template <class D, class = void>
struct has_decode_attention : std::false_type {};
template <class D>
struct has_decode_attention<D, std::void_t<decltype(std::declval<D&>().set_decode_attention(std::declval<SparseReference*>()))>>
    : std::true_type {};

template <class D, class = void>
struct has_set_deadline : std::false_type {};
template <class D>
struct has_set_deadline<D, std::void_t<decltype(std::declval<D&>().set_deadline(std::declval<const Deadline&>()))>> : std::true_type {};

template <class T, class = void>
struct has_scratch_bytes : std::false_type {};
template <class T>
struct has_scratch_bytes<T, std::void_t<decltype(size_t(std::declval<const T&>().scratch_bytes()))>> : std::true_type {};

template <class D, class C, class = void>
struct has_decode_batch : std::false_type {};
template <class D, class C>
struct has_decode_batch<
    D, C,
    std::void_t<std::enable_if_t<std::is_convertible_v<
                    decltype(std::declval<D&>().decode_batch(
                        std::declval<const std::vector<int32_t>&>(), std::declval<const std::vector<int64_t>&>(),
                        std::declval<const std::vector<C*>&>(), std::declval<const std::vector<DecodeAttention*>&>())),
                    const std::vector<float>&>>,
                decltype(std::declval<const D&>().check_step(int32_t(0), int64_t(0), std::declval<const C&>()))>>
    : std::true_type {};

template <class D, class C, class = void>
struct has_decode_tokens : std::false_type {};
template <class D, class C>
struct has_decode_tokens<D, C,
                         std::void_t<decltype(std::declval<D&>().decode_tokens(std::declval<const int32_t*>(), int64_t(0), int64_t(0),
                                                                                std::declval<C&>(), std::declval<float*>()))>>
    : std::true_type {};

template <class C, class = void>
struct has_kv_arrays : std::false_type {};
template <class C>
struct has_kv_arrays<
    C, std::void_t<decltype(std::declval<C&>().reset(int64_t(0))), decltype(std::declval<C&>().resize_reference(int64_t(0))),
                   decltype(std::declval<C&>().reference_k(0)), decltype(std::declval<C&>().reference_v(0)),
                   decltype(std::declval<C&>().generated_k(0)), decltype(std::declval<C&>().generated_v(0)),
                   decltype(int(std::declval<const C&>().layers())), decltype(int64_t(std::declval<const C&>().row_floats())),
                   decltype(size_t(std::declval<const C&>().allocated_bytes()))>> : std::true_type {};

template <class C, class = void>
struct has_visit_rows : std::false_type {};
template <class C>
struct has_visit_rows<C, std::void_t<decltype(std::declval<C&>().visit_rows(std::declval<C&>().reference_k(0), int64_t(0),
                                                                            std::declval<const std::function<void(float*, size_t)>&>()))>>
    : std::true_type {};

template <class C, class = void>
struct has_summarize_page : std::false_type {};
template <class C>
struct has_summarize_page<C, std::void_t<decltype(std::declval<const C&>().summarize_page(std::declval<SparseReference&>(), size_t(0)))>>
    : std::true_type {};

}  // namespace contract

// Compiles only for a decoder/cache pair that keeps the contract; each unmet requirement is
// its own message. Returns Dec::capabilities.
template <class Dec, class Cache>
constexpr BackendCapabilities check_backend_contract() {
  using namespace contract;
  static_assert(has_capabilities<Dec>::value, "backend decoder: needs static constexpr BackendCapabilities capabilities");
  static_assert(has_config<Dec>::value, "backend decoder: needs config() -> const DecoderConfig&");
  static_assert(has_embed<Dec>::value, "backend decoder: needs embed(const vector<int32_t>&) -> vector<float>");
  static_assert(has_prefill<Dec, Cache>::value, "backend decoder: needs prefill(embeddings, first_position, Cache&) -> vector<float>");
  static_assert(has_prefill_segment<Dec, Cache>::value,
                "backend decoder: needs prefill_segment(rows, t, positions, Cache&, dst, context, want_logits) -> vector<float>");
  static_assert(has_decode_step<Dec, Cache>::value,
                "backend decoder: needs decode_step(token, position, Cache&) -> const vector<float>&");
  static_assert(has_position_limit<Dec>::value, "backend decoder: needs position_limit() and set_position_limit(int64_t)");
  static_assert(has_decode_attention<Dec>::value, "backend decoder: needs set_decode_attention(SparseReference*)");
  static_assert(has_scratch_bytes<Dec>::value, "backend decoder: needs scratch_bytes() -> size_t");
  static_assert(has_set_deadline<Dec>::value, "backend decoder: needs set_deadline(const Deadline&)");
  static_assert(std::is_base_of_v<KvRing<Cache>, Cache>, "backend KV cache: must be a KvRing<Cache> (uocr/decoder/kv_cache.hpp)");
  static_assert(has_kv_arrays<Cache>::value,
                "backend KV cache: needs reset, resize_reference, reference_k/v(layer), generated_k/v(layer), layers(), "
                "row_floats(), allocated_bytes()");
  static_assert(has_visit_rows<Cache>::value, "backend KV cache: needs visit_rows(array, rows, function<void(float*, size_t)>)");
  if constexpr (has_capabilities<Dec>::value) {
    constexpr BackendCapabilities caps = Dec::capabilities;
    static_assert(caps.host_kv || has_summarize_page<Cache>::value,
                  "backend KV cache without host_kv: needs summarize_page(SparseReference&, slot) const");
    static_assert(!caps.batched_decode || has_decode_batch<Dec, Cache>::value,
                  "batched_decode: needs decode_batch(tokens, positions, vector<Cache*>, vector<DecodeAttention*>) and "
                  "check_step(token, position, const Cache&)");
    static_assert(!caps.multi_token_decode || has_decode_tokens<Dec, Cache>::value,
                  "multi_token_decode: needs decode_tokens(tokens, n, first_position, Cache&, float* logits)");
    return caps;
  } else {
    return {};
  }
}

UOCR_NAMESPACE_END
