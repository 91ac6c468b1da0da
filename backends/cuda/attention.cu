// Attention of query rows over two spans of cached keys/values: the R-SWA decode step (span a =
// the never-evicted reference, span b = the ring of generated rows, all visible, no mask: slot
// order inside the ring is irrelevant), causal prefill (a = the page group's context, b = prompt
// rows 0..i for query i) and CLIP. One kernel pair serves all, and batched decode passes one row
// per sequence: split_attention.cuh (chunks of keys in parallel, then an exact combine).
#include "split_attention.cuh"

#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN
namespace cuda {

void ops::attention(Context& c, const AttentionRow* rows, int64_t n, const AttentionDims& d, int64_t max_keys) {
  const int64_t kv_row = int64_t(d.kv_heads) * d.head_dim;
  detail::split_attention<detail::RowKeys>(
      c, [&](int64_t first) { return detail::RowKeys{rows + first, kv_row}; }, n, d, max_keys, "attention");
}

}  // namespace cuda
UOCR_NAMESPACE_END
