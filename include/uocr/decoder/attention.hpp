// Scaled dot-product attention of the decoder (transformers' eager LlamaAttention semantics:
// scores q·kᵀ/sqrt(head_dim), softmax in float32, then ·v), in float32. Query head h reads KV
// head h / (heads / kv_heads), as repeat_kv does. Inputs already carry RoPE.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include <Eigen/Core>

#include "uocr/backends/cpu/linear.hpp"
#include "uocr/backends/cpu/scratch.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

struct AttentionShape {
  int heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int64_t q_row() const { return int64_t(heads) * head_dim; }
  int64_t kv_row() const { return int64_t(kv_heads) * head_dim; }
  int kv_head_of(int h) const { return h / (heads / kv_heads); }
};

namespace detail {

// One head's columns inside rows of several heads: [rows, head_dim] with the row stride of all heads.
using HeadRows = Eigen::Map<cpu::RowMatrix, 0, Eigen::OuterStride<>>;
using ConstHeadRows = Eigen::Map<const cpu::RowMatrix, 0, Eigen::OuterStride<>>;

// In place: s <- softmax(s · scale) over n entries (Eigen's vectorised exp). Every entry goes
// through the same packet exp and the sum runs in a fixed order from s[0], whatever the address
// of s: Eigen's own reductions peel to an aligned start, so the results (down to the last bit)
// would depend on where a scratch buffer happens to be allocated. Bit-exact comparisons (page
// groups and SR-SWA against one-shot R-SWA) rely on this.
inline void scaled_softmax_inplace(float* s, int64_t n, float scale) {
  namespace ei = Eigen::internal;
  using P = ei::packet_traits<float>::type;
  constexpr int64_t w = ei::packet_traits<float>::size;
  constexpr float inf = std::numeric_limits<float>::infinity();
  const P ps = ei::pset1<P>(scale);
  alignas(64) float tail[w];
  const int64_t body = n - n % w, rest = n - body;
  for (int64_t j = 0; j < w; ++j) tail[j] = j < rest ? s[body + j] * scale : -inf;
  P pm = ei::pload<P>(tail);
  for (int64_t i = 0; i < body; i += w) pm = ei::pmax(pm, ei::pmul(ei::ploadu<P>(s + i), ps));
  const P mx = ei::pset1<P>(ei::predux_max(pm));
  P acc = ei::pset1<P>(0.f);
  for (int64_t i = 0; i < body; i += w) {
    const P e = ei::pexp(ei::psub(ei::pmul(ei::ploadu<P>(s + i), ps), mx));
    ei::pstoreu(s + i, e);
    acc = ei::padd(acc, e);
  }
  if (rest) {
    const P e = ei::pexp(ei::psub(ei::pload<P>(tail), mx));  // padding: exp(-inf) = 0
    ei::pstore(tail, e);
    acc = ei::padd(acc, e);
  }
  const P sum = ei::pset1<P>(ei::predux(acc));
  for (int64_t i = 0; i < body; i += w) ei::pstoreu(s + i, ei::pdiv(ei::ploadu<P>(s + i), sum));
  for (int64_t j = 0; j < rest; ++j) s[body + j] = tail[j] / ei::pfirst(sum);
}

}  // namespace detail

// Rows of cached keys and values [rows, kv_heads·d].
struct KvRows {
  const float* k = nullptr;
  const float* v = nullptr;
  int64_t rows = 0;
};

// Causal attention of t new tokens that also see earlier rows: q [t, heads·d], k/v [t, kv_heads·d]
// (the new tokens), out [t, heads·d]. New token i attends to every row of `context` (no mask:
// those rows precede it) and to new tokens 0..i; page groups prefill a page against the pages
// they keep with it (Decoder::prefill_segment), and with no context it is a prompt's
// causal_attention. Queries go in blocks of `block` rows, so scores take O(block·(context + t))
// floats per thread instead of O(heads·t²); block × head tasks run in parallel, longest first.
// `scratch` holds the scores, one slice per thread (cpu::thread_slices; the caller keeps it for
// the next call).
inline void segment_attention(const float* q, const float* k, const float* v, int64_t t,
                              const std::vector<KvRows>& context, const AttentionShape& s, float* out,
                              std::vector<float>& scratch) {
  constexpr int64_t block = 64;
  int64_t n_ctx = 0;
  for (const KvRows& c : context) n_ctx += c.rows;
  const int64_t blocks = (t + block - 1) / block;
  const int64_t qr = s.q_row(), kr = s.kv_row(), per_thread = std::min(block, t) * (n_ctx + t);
  const float scale = 1.0f / std::sqrt(float(s.head_dim));
  float* const slices = cpu::thread_slices(scratch, per_thread);
#pragma omp parallel
  {
    float* const scores = cpu::thread_slice(slices, per_thread);
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < blocks * s.heads; ++task) {
      const int64_t b = blocks - 1 - task / s.heads;  // later blocks see more keys: start them first
      const int h = int(task % s.heads), g = s.kv_head_of(h);
      const int64_t i0 = b * block, rows = std::min(block, t - i0), keys = i0 + rows, width = n_ctx + keys;
      const int64_t off = int64_t(g) * s.head_dim;
      detail::ConstHeadRows qm(q + i0 * qr + int64_t(h) * s.head_dim, rows, s.head_dim, Eigen::OuterStride<>(qr));
      cpu::MatrixMap sm(scores, rows, width);
      int64_t at = 0;
      for (const KvRows& c : context) {
        if (c.rows == 0) continue;
        sm.middleCols(at, c.rows).noalias() =
            qm * detail::ConstHeadRows(c.k + off, c.rows, s.head_dim, Eigen::OuterStride<>(kr)).transpose();
        at += c.rows;
      }
      detail::ConstHeadRows km(k + off, keys, s.head_dim, Eigen::OuterStride<>(kr));
      detail::ConstHeadRows vm(v + off, keys, s.head_dim, Eigen::OuterStride<>(kr));
      sm.middleCols(n_ctx, keys).noalias() = qm * km.transpose();
      for (int64_t r = 0; r < rows; ++r) {
        float* row = scores + r * width;
        const int64_t visible = n_ctx + i0 + r + 1;
        detail::scaled_softmax_inplace(row, visible, scale);
        std::fill(row + visible, row + width, 0.0f);
      }
      detail::HeadRows om(out + i0 * qr + int64_t(h) * s.head_dim, rows, s.head_dim, Eigen::OuterStride<>(qr));
      om.noalias() = sm.middleCols(n_ctx, keys) * vm;
      at = 0;
      for (const KvRows& c : context) {
        if (c.rows == 0) continue;
        om.noalias() += sm.middleCols(at, c.rows) * detail::ConstHeadRows(c.v + off, c.rows, s.head_dim, Eigen::OuterStride<>(kr));
        at += c.rows;
      }
    }
  }
}

// Causal self-attention over a prompt of t tokens: q [t, heads·d], k/v [t, kv_heads·d],
// out [t, heads·d]; segment_attention with no context rows.
inline void causal_attention(const float* q, const float* k, const float* v, int64_t t, const AttentionShape& s,
                             float* out, std::vector<float>& scratch) {
  segment_attention(q, k, v, t, {}, s, out, scratch);
}

// The same with its own scratch (one-off calls, tests).
inline void causal_attention(const float* q, const float* k, const float* v, int64_t t, const AttentionShape& s,
                             float* out) {
  std::vector<float> scratch;
  causal_attention(q, k, v, t, s, out, scratch);
}

// One query token q [heads·d] over the concatenation of two row sets (the prefill reference and
// the generated window), all visible: decode needs no mask. `scores` holds heads·(a.rows+b.rows)
// floats of scratch; out [heads·d].
inline void decode_attention(const float* q, const KvRows& a, const KvRows& b, const AttentionShape& s,
                             float* scores, float* out) {
  const int64_t n = a.rows + b.rows, kr = s.kv_row(), d = s.head_dim;
  const float scale = 1.0f / std::sqrt(float(d));
  // Each head streams all n cached rows; split heads across threads only when that is sizeable,
  // one at a time (on a shared machine a descheduled thread's heads go to the running one).
#pragma omp parallel for schedule(dynamic) if (n * kr > (int64_t(1) << 18))
  for (int h = 0; h < s.heads; ++h) {
    const int64_t off = int64_t(s.kv_head_of(h)) * d;
    Eigen::Map<const Eigen::VectorXf> qh(q + h * d, d);
    Eigen::Map<Eigen::VectorXf> sh(scores + h * n, n);
    const KvRows* parts[2] = {&a, &b};
    int64_t at = 0;
    for (const KvRows* p : parts) {
      if (p->rows == 0) continue;
      sh.segment(at, p->rows).noalias() = detail::ConstHeadRows(p->k + off, p->rows, d, Eigen::OuterStride<>(kr)) * qh;
      at += p->rows;
    }
    detail::scaled_softmax_inplace(sh.data(), n, scale);
    Eigen::Map<Eigen::VectorXf> oh(out + h * d, d);
    oh.setZero();
    at = 0;
    for (const KvRows* p : parts) {
      if (p->rows == 0) continue;
      oh.noalias() += detail::ConstHeadRows(p->v + off, p->rows, d, Eigen::OuterStride<>(kr)).transpose() *
                      sh.segment(at, p->rows);
      at += p->rows;
    }
  }
}

// Replaces the dense reference attention of Decoder::decode_step (Decoder::set_decode_attention):
// SR-SWA (uocr/decoder/sparse_reference.hpp) attends to a selection of the reference instead.
// `reference` is the whole reference of `layer`, `generated` the window; out [heads·d].
class DecodeAttention {
 public:
  virtual ~DecodeAttention() = default;
  virtual void attend(int layer, const float* q, const KvRows& reference, const KvRows& generated,
                      const AttentionShape& s, float* out) = 0;
};

UOCR_NAMESPACE_END
