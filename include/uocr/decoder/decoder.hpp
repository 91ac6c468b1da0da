// uocr::Decoder: the DeepSeek-V2 language model of Unlimited-OCR / DeepSeek-OCR (MHA attention,
// dense layer 0, MoE layers after), computed in float32 from the stored weights.
//
//   Decoder dec(config.decoder, weights.decoder);
//   KvCache cache(config.decoder, config.decoder.sliding_window);  // 0 = full attention
//   std::vector<float> logits = dec.prefill(dec.embed_prompt(ids, visual), 0, cache);
//   for (int64_t pos = ids.size(); ; ++pos) { int32_t t = pick(logits); logits = dec.decode_step(t, pos, cache); }
//
// Positions are explicit and keep increasing through the R-SWA ring (upstream never renumbers);
// a position outside [0, max_position_embeddings) is rejected with Status::invalid_argument,
// as upstream generation stops at that length (set_position_limit() widens the range on purpose,
// for page groups over documents longer than the model's context; see uocr/decoder/page_groups.hpp).
//
// decode_batch() steps several sequences (one KvCache each) at once, every row bit-identical to
// its decode_step: uocr/decoder/step_batcher.hpp merges the steps of documents decoded in
// different threads into it (continuous batching).
//
// Working memory: every temporary of prefill, prefill_segment and decode_step lives in member
// buffers that grow to the largest size a call needs and are then reused (a decode step allocates
// nothing); scratch_bytes() is what they hold.
//
// Thread-safety: the weights may be shared; a Decoder owns its scratch, so use one Decoder per
// thread (and one KvCache per sequence).
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "uocr/backends/cpu/linear.hpp"
#include "uocr/backends/cpu/scratch.hpp"
#include "uocr/core/deadline.hpp"
#include "uocr/core/error.hpp"
#include "uocr/core/precision.hpp"
#include "uocr/decoder/attention.hpp"
#include "uocr/decoder/backend_contract.hpp"
#include "uocr/decoder/kv_cache.hpp"
#include "uocr/decoder/moe.hpp"
#include "uocr/decoder/rope.hpp"
#include "uocr/model/config.hpp"
#include "uocr/model/weights.hpp"
#include "uocr/version.hpp"

// One compiled body for every caller (see Decoder::decode_rows).
#if defined(__clang__)
#define UOCR_NOT_SPECIALIZED __attribute__((noinline))
#elif defined(__GNUC__)
#define UOCR_NOT_SPECIALIZED __attribute__((noinline, noclone))
#else
#define UOCR_NOT_SPECIALIZED
#endif

UOCR_NAMESPACE_BEGIN

// `<image>` id of the published tokenizer: each occurrence takes the next visual embedding.
inline constexpr int32_t kImageTokenId = 128815;

enum class PrefillLogits { last, all };

class Decoder {
 public:
  // host_kv: every array of KvCache is host memory.
  static constexpr BackendCapabilities capabilities{/*host_kv*/ true, /*batched_decode*/ true, /*multi_token_decode*/ true};

  // prefill_precision: the arithmetic of prefill() and prefill_segment()'s projections and
  // feed-forward (uocr/core/precision.hpp); decode steps and the MoE router are float32 whatever it is.
  Decoder(const DecoderConfig& config, const DecoderWeights& weights, Precision prefill_precision = Precision::f32)
      : c_(config), w_(weights), prefill_precision_(prefill_precision), rope_(config.head_dim, config.rope_theta),
        shape_{config.heads, config.kv_heads, config.head_dim} {
    require(int(w_.layers.size()) == c_.layers, Status::invalid_argument, "decoder weights were bound for a different config");
    for (const DecoderLayerWeights& lw : w_.layers) {
      input_norm_.push_back(lw.input_norm.weight->to_vector());
      post_norm_.push_back(lw.post_attention_norm.weight->to_vector());
    }
    final_norm_ = w_.final_norm.weight->to_vector();
    logits_.resize(size_t(c_.vocab));
    const auto fewest = [this](const LinearWeights& l) { batch_rows_ = std::min(batch_rows_, cpu::row_exact_rows(*l.weight)); };
    for (const DecoderLayerWeights& lw : w_.layers) {
      for (const LinearWeights* l : {&lw.q, &lw.k, &lw.v, &lw.o}) fewest(*l);
      std::vector<const MlpWeights*> mlps;
      if (lw.moe) {
        fewest(lw.router);
        for (const MlpWeights& e : lw.experts) mlps.push_back(&e);
        if (lw.has_shared) mlps.push_back(&lw.shared);
      } else {
        mlps.push_back(&lw.dense);
      }
      for (const MlpWeights* m : mlps)
        for (const LinearWeights* l : {&m->gate, &m->up, &m->down}) fewest(*l);
    }
    batch_rows_ = std::min(batch_rows_, cpu::row_exact_rows(*w_.lm_head));
    // Rows after the first start as aligned as it only when the row widths are whole alignment units.
    if (cpu::aligned_floats(c_.hidden) != c_.hidden || cpu::aligned_floats(shape_.q_row()) != shape_.q_row() ||
        cpu::aligned_floats(shape_.kv_row()) != shape_.kv_row())
      batch_rows_ = 1;
  }

  const DecoderConfig& config() const { return c_; }

  // Positions accepted are [0, limit); the default is the config's max_position_embeddings. A
  // larger limit extrapolates RoPE beyond what the model was trained on (explicit opt-in only).
  void set_position_limit(int64_t limit) {
    require(limit > 0 && limit <= (int64_t(1) << 24), Status::invalid_argument,
            "position limit must be in (0, 2^24] (float32 positions are exact up to 2^24)");
    position_limit_ = limit;
  }
  int64_t position_limit() const { return position_limit_; }

  Precision prefill_precision() const { return prefill_precision_; }

  // When a prefill must stop (a session sets its run's deadline; none: never). Past it, prefill()
  // and prefill_segment() throw DeadlinePassed before their next layer, the cache rows they were
  // writing left unfinished: the session ends the run there and drops this decoder with its cache.
  void set_deadline(const Deadline& deadline) { deadline_ = deadline; }
  // What every backend's prefill calls before decoder layer `layer`.
  void check_deadline(int layer) const {
    if (deadline_.passed())
      throw DeadlinePassed("a prefill (before decoder layer " + std::to_string(layer) + " of " + std::to_string(c_.layers) + ")");
  }

  // The argument checks of prefill, prefill_segment and decode_step, public so that every backend's
  // decoder (Vulkan, CUDA) refuses a bad call with the same error before touching its cache.
  // Returns the prefill's token count.
  template <class Cache>
  int64_t check_prefill(size_t floats, int64_t first_position, const Cache& cache) const {
    require(floats > 0 && floats % size_t(c_.hidden) == 0, Status::invalid_argument, [&] {
      return "prefill input holds " + std::to_string(floats) + " floats, not a positive multiple of hidden size " +
             std::to_string(c_.hidden);
    });
    const int64_t t = int64_t(floats) / c_.hidden;
    check_positions(first_position, t);
    check_cache(cache);
    return t;
  }
  // Returns the number of context rows.
  template <class Cache>
  int64_t check_segment(int64_t t, const int64_t* positions, const Cache& cache, int64_t dst,
                        const std::vector<RowSpan>& context) const {
    require(t > 0, Status::invalid_argument, "a reference segment needs at least one token");
    for (int64_t i = 0; i < t; ++i) check_positions(positions[i], 1);
    check_cache(cache);
    const int64_t rows = cache.reference_rows();
    require(dst >= 0 && dst + t <= rows, Status::invalid_argument, [&] {
      return "segment rows " + std::to_string(dst) + ".." + std::to_string(dst + t - 1) + " are outside the reference (" +
             std::to_string(rows) + " rows)";
    });
    int64_t context_rows = 0;
    for (const RowSpan& c : context) {
      require(c.begin >= 0 && c.rows >= 0 && c.end() <= rows && (c.end() <= dst || c.begin >= dst + t),
              Status::invalid_argument, "segment context must be reference rows outside the segment");
      context_rows += c.rows;
    }
    return context_rows;
  }
  template <class Cache>
  void check_step(int32_t token, int64_t position, const Cache& cache) const {
    check_positions(position, 1);
    check_cache(cache);
    check_token(token);
  }

  // Replaces the dense reference attention of decode_step (nullptr: dense, the default). The
  // object must outlive its use; SR-SWA (uocr/decoder/sparse_reference.hpp) plugs in here.
  void set_decode_attention(DecodeAttention* attention) { attention_ = attention; }

  // Token embeddings widened to float32: [ids.size(), hidden].
  std::vector<float> embed(const std::vector<int32_t>& ids) const {
    std::vector<float> out(ids.size() * size_t(c_.hidden));
    for (size_t i = 0; i < ids.size(); ++i) embed_row(ids[i], out.data() + i * size_t(c_.hidden));
    return out;
  }

  // The prefill input: embed(ids) with the rows of `image_token` ids replaced, in order, by the
  // rows of `visual` [n, hidden]; n must equal the number of `image_token` ids. Pass the
  // tokenizer's `<image>` id when it is known.
  std::vector<float> embed_prompt(const std::vector<int32_t>& ids, const std::vector<float>& visual,
                                  int32_t image_token = kImageTokenId) const {
    const size_t hidden = size_t(c_.hidden);
    require(visual.size() % hidden == 0, Status::invalid_argument, [&] {
      return "visual embeddings hold " + std::to_string(visual.size()) + " floats, not a multiple of hidden size " +
             std::to_string(hidden);
    });
    size_t placeholders = 0;
    for (int32_t id : ids) placeholders += id == image_token;
    require(placeholders == visual.size() / hidden, Status::invalid_argument, [&] {
      return "prompt has " + std::to_string(placeholders) + " image tokens (id " + std::to_string(image_token) + ") but " +
             std::to_string(visual.size() / hidden) + " visual embeddings were given";
    });
    std::vector<float> out = embed(ids);
    const float* next = visual.data();
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] != image_token) continue;
      std::copy(next, next + hidden, out.data() + i * hidden);
      next += hidden;
    }
    return out;
  }

  // Runs the prompt [P, hidden] at positions first_position.. with causal attention, storing its
  // keys/values as the cache's reference (any previous sequence in `cache` is dropped). Returns
  // the logits of the last position [vocab], or of every position [P, vocab] (tests/scoring).
  std::vector<float> prefill(const std::vector<float>& embeddings, int64_t first_position, KvCache& cache,
                             PrefillLogits which = PrefillLogits::last) {
    const int64_t t = check_prefill(embeddings.size(), first_position, cache);
    cache.reset(t);
    float* const x = begin_rows(embeddings.data(), t);
    token_positions_.resize(size_t(t));
    for (int64_t i = 0; i < t; ++i) token_positions_[size_t(i)] = first_position + i;
    for (int l = 0; l < c_.layers; ++l) {
      check_deadline(l);
      layer(l, t, cache.reference_k(l), cache.reference_v(l), token_positions_.data(), prefill_precision_,
            [&](const float* q, const float* k, const float* v, float* attn) {
              causal_attention(q, k, v, t, shape_, attn, block_scores_);
            });
    }
    const int64_t rows = which == PrefillLogits::all ? t : 1;
    std::vector<float> logits(size_t(rows * c_.vocab));
    final_logits(x + (t - rows) * c_.hidden, rows, logits.data());
    return logits;
  }

  // Computes `t` more reference tokens (embeddings [t, hidden] at explicit `positions`) into rows
  // [dst, dst + t) of the cache's reference, which must already hold them (KvCache::resize_reference).
  // New token i attends to the reference rows in `context` (no mask: they precede it in the
  // document) and causally to new tokens 0..i; every other row, generated ones included, is left
  // as it is. Page groups prefill a page this way against the pages they keep. Returns the logits
  // of the last new token [vocab] when `want_logits`, else nothing.
  std::vector<float> prefill_segment(const float* embeddings, int64_t t, const int64_t* positions, KvCache& cache,
                                     int64_t dst, const std::vector<RowSpan>& context, bool want_logits = false) {
    const int64_t kr = shape_.kv_row();
    check_segment(t, positions, cache, dst, context);
    float* const x = begin_rows(embeddings, t);
    context_.resize(context.size());
    for (int l = 0; l < c_.layers; ++l) {
      check_deadline(l);
      layer(l, t, cache.reference_k(l) + dst * kr, cache.reference_v(l) + dst * kr, positions, prefill_precision_,
            [&](const float* q, const float* k, const float* v, float* attn) {
              for (size_t i = 0; i < context.size(); ++i)
                context_[i] = KvRows{cache.reference_k(l) + context[i].begin * kr,
                                     cache.reference_v(l) + context[i].begin * kr, context[i].rows};
              segment_attention(q, k, v, t, context_, shape_, attn, block_scores_);
            });
    }
    if (!want_logits) return {};
    std::vector<float> logits(size_t(c_.vocab));
    final_logits(x + (t - 1) * c_.hidden, 1, logits.data());
    return logits;
  }

  // Feeds one generated token at `position` through the cache (ring or growing window per the
  // cache's mode) and returns its logits [vocab]; the reference stays valid until the next call.
  const std::vector<float>& decode_step(int32_t token, int64_t position, KvCache& cache) {
    check_step(token, position, cache);
    KvCache* const caches[1] = {&cache};
    DecodeAttention* const attentions[1] = {attention_};
    decode_rows(&token, &position, caches, attentions, 1, logits_.data());
    return logits_;
  }

  // One step of several sequences (continuous batching, uocr/decoder/step_batcher.hpp): token i
  // at positions[i] through *caches[i] (distinct caches), attending with attentions[i] (nullptr or
  // no list: dense; set_decode_attention() is not used here). Returns the logits [n, vocab], row i
  // for sequence i, valid until the next call. Every row is validated before any cache changes.
  // Rows go through the linear layers and the MoE together (the weights are read once per
  // group of batch_rows() rows, not once per sequence); attention runs per row over its own cache.
  // Row i gets exactly the bits decode_step gives it alone: the CPU kernels keep per-row
  // accumulators up to batch_rows() rows (cpu::row_exact_rows), larger batches go in groups, and
  // every row starts as aligned as the first (1 row at a time for widths that would not).
  const std::vector<float>& decode_batch(const std::vector<int32_t>& tokens, const std::vector<int64_t>& positions,
                                         const std::vector<KvCache*>& caches,
                                         const std::vector<DecodeAttention*>& attentions = {}) {
    const int64_t n = int64_t(tokens.size());
    require(n > 0 && positions.size() == tokens.size() && caches.size() == tokens.size() &&
                (attentions.empty() || attentions.size() == tokens.size()),
            Status::invalid_argument,
            "decode batch: tokens, positions, caches (and attentions, when given) must be non-empty and of equal length");
    std::vector<const KvCache*> seen(caches.begin(), caches.end());
    std::sort(seen.begin(), seen.end());
    require(seen.front() != nullptr && std::adjacent_find(seen.begin(), seen.end()) == seen.end(), Status::invalid_argument,
            "decode batch: every sequence needs its own (non-null) KV cache");
    for (int64_t i = 0; i < n; ++i) check_step(tokens[size_t(i)], positions[size_t(i)], *caches[size_t(i)]);
    const std::vector<DecodeAttention*> dense(attentions.empty() ? size_t(n) : 0, nullptr);
    DecodeAttention* const* att = attentions.empty() ? dense.data() : attentions.data();
    float* const logits = grow(batch_logits_, n * c_.vocab);
    for (int64_t i0 = 0; i0 < n; i0 += batch_rows_) {
      const int64_t rows = std::min(batch_rows_, n - i0);
      decode_rows(tokens.data() + i0, positions.data() + i0, caches.data() + i0, att + i0, rows, logits + i0 * c_.vocab);
    }
    batch_logits_.resize(size_t(n * c_.vocab));  // never shrinks capacity: a smaller batch reuses it
    return batch_logits_;
  }

  // Feeds tokens[0 .. n) of one sequence at positions first_position, first_position + 1, ...
  // through `cache`, leaving it (and the SR-SWA counters) exactly as n decode_step() calls would,
  // bit for bit; no logits (the caller knows the tokens). The rows go through the weights together
  // (batch_rows() at a time) and row i attends to what step i would see: the generated rows held
  // after its own slot, the later rows' slots still holding the older tokens they held then. Page
  // groups recompute their window this way at each slide; draft verification asks for every
  // row's logits too (logits: [n, vocab], each row the bits decode_step() would return).
  // Every row is validated first.
  void decode_tokens(const int32_t* tokens, int64_t n, int64_t first_position, KvCache& cache, float* logits = nullptr) {
    require(n >= 0, Status::invalid_argument, "decode_tokens: negative token count");
    if (n == 0) return;
    check_positions(first_position, n);
    check_cache(cache);
    for (int64_t i = 0; i < n; ++i) check_token(tokens[i]);
    token_positions_.resize(size_t(n));
    for (int64_t i = 0; i < n; ++i) token_positions_[size_t(i)] = first_position + i;
    const std::vector<KvCache*> caches(size_t(std::min(n, batch_rows_)), &cache);
    const std::vector<DecodeAttention*> attentions(caches.size(), attention_);
    for (int64_t i0 = 0; i0 < n; i0 += batch_rows_)
      decode_rows(tokens + i0, token_positions_.data() + i0, caches.data(), attentions.data(),
                  std::min(batch_rows_, n - i0), logits ? logits + i0 * c_.vocab : nullptr);
  }

  // Rows decode_batch() and decode_tokens() run through the weights in one pass.
  int64_t batch_rows() const { return batch_rows_; }

  // Bytes of working memory this decoder holds (its buffers' capacities; SR-SWA's are its own).
  size_t scratch_bytes() const {
    size_t floats = 0;
    for (const cpu::AlignedFloats* b : {&x_, &a_, &f_, &q_, &attn_, &new_k_, &new_v_, &scores_}) floats += b->capacity();
    for (const std::vector<float>* b : {&block_scores_, &logits_, &batch_logits_}) floats += b->capacity();
    return floats * sizeof(float) + context_.capacity() * sizeof(KvRows) +
           (slots_.capacity() + generated_seen_.capacity() + token_positions_.capacity()) * sizeof(int64_t) +
           mlp_.bytes() + moe_.bytes();
  }

 private:
  void embed_row(int32_t id, float* out) const {
    check_token(id);
    w_.embed->read_f32(int64_t(id) * c_.hidden, c_.hidden, out);
  }

  // The step of n validated rows (decode_step, decode_batch, decode_tokens): hidden states
  // [n, hidden] layer by layer; each row's new key/value goes to a slot claimed in its cache, and
  // the row attends to the generated rows its cache held right after that claim (rows of one
  // sequence: each sees its predecessors, as in n steps). logits: [n, vocab], or none when null.
  // Neither inlined nor cloned: decode_step's constant n = 1 would let the compiler vectorise
  // the RMSNorm reductions differently from decode_batch's, and rows would not match to the bit.
  UOCR_NOT_SPECIALIZED void decode_rows(const int32_t* tokens, const int64_t* positions, KvCache* const* caches,
                   DecodeAttention* const* attentions, int64_t n, float* logits) {
    const int64_t hidden = c_.hidden, kr = shape_.kv_row(), qr = shape_.q_row();
    float* const x = begin_rows(nullptr, n);
    float* const k = grow(new_k_, n * kr);
    float* const v = grow(new_v_, n * kr);
    slots_.resize(size_t(n));
    generated_seen_.resize(size_t(n));
    int64_t score_rows = 0;
    for (int64_t i = 0; i < n; ++i) {
      embed_row(tokens[i], x + i * hidden);
      slots_[size_t(i)] = caches[i]->claim_slot();  // after validation: a rejected call leaves the cache as it was
      generated_seen_[size_t(i)] = caches[i]->generated_rows();
      // Grows only when a cache does (full mode); in R-SWA mode it is sized once.
      if (!attentions[i]) score_rows = std::max(score_rows, caches[i]->reference_rows() + caches[i]->generated_capacity());
    }
    float* const scores = score_rows ? grow(scores_, shape_.heads * score_rows) : nullptr;
    for (int l = 0; l < c_.layers; ++l)
      layer(l, n, k, v, positions, Precision::f32, [&](const float* q, const float* nk, const float* nv, float* attn) {
        // Row by row: a later row's slot may still hold an older token an earlier row attends to.
        for (int64_t i = 0; i < n; ++i) {
          KvCache& cache = *caches[i];
          std::copy(nk + i * kr, nk + (i + 1) * kr, cache.generated_k(l) + slots_[size_t(i)] * kr);
          std::copy(nv + i * kr, nv + (i + 1) * kr, cache.generated_v(l) + slots_[size_t(i)] * kr);
          const KvRows ref{cache.reference_k(l), cache.reference_v(l), cache.reference_rows()};
          const KvRows gen{cache.generated_k(l), cache.generated_v(l), generated_seen_[size_t(i)]};
          if (attentions[i])
            attentions[i]->attend(l, q + i * qr, ref, gen, shape_, attn + i * qr);
          else
            decode_attention(q + i * qr, ref, gen, shape_, scores, attn + i * qr);
        }
      });
    if (logits) final_logits(x, n, logits);
  }

  // The hidden-state rows of a call of t rows, the first t·hidden floats of x_ (copied from
  // `embeddings` when given), with the other row buffers grown to t rows.
  float* begin_rows(const float* embeddings, int64_t t) {
    const int64_t hidden = c_.hidden;
    float* const x = grow(x_, t * hidden);
    grow(a_, t * hidden);
    grow(f_, t * hidden);
    grow(q_, t * shape_.q_row());
    grow(attn_, t * shape_.q_row());
    if (embeddings) std::copy(embeddings, embeddings + t * hidden, x);
    return x;
  }

  // Layer l over the t rows of x_ (prefill, segment and decode rows alike): the rows' keys and
  // values into k / v [t, kv_row], RoPE at `positions`, then attend(q, k, v, attn) fills attn_
  // (the one part that differs; it may also store k and v elsewhere), the output projection,
  // residual, MLP or MoE, residual. `precision`: of the projections and the feed-forward.
  template <class Attend>
  UOCR_NOT_SPECIALIZED void layer(int l, int64_t t, float* k, float* v, const int64_t* positions, Precision precision,
                                  Attend&& attend) {
    const int64_t hidden = c_.hidden, qr = shape_.q_row(), kr = shape_.kv_row();
    const DecoderLayerWeights& lw = w_.layers[size_t(l)];
    float* const x = x_.data();
    float* const a = a_.data();
    float* const f = f_.data();
    float* const q = q_.data();
    float* const attn = attn_.data();
    rms_norm(x, t, hidden, input_norm_[size_t(l)].data(), c_.rms_eps, a);
    const cpu::LinearJob qkv[] = {{a, t, lw.q.weight, nullptr, q}, {a, t, lw.k.weight, nullptr, k}, {a, t, lw.v.weight, nullptr, v}};
    cpu::linear_batch(qkv, 3, precision);
    for (int64_t i = 0; i < t; ++i) {
      rope_.apply(q + i * qr, shape_.heads, positions[i]);
      rope_.apply(k + i * kr, shape_.kv_heads, positions[i]);
    }
    attend(q, k, v, attn);
    cpu::linear(attn, t, lw.o, f, precision);
    add_into(x, f, t * hidden);
    rms_norm(x, t, hidden, post_norm_[size_t(l)].data(), c_.rms_eps, a);
    feed_forward(lw, a, t, f, mlp_, moe_, precision);
    add_into(x, f, t * hidden);
  }

  // logits [rows, vocab] of hidden-state rows x: the final norm, then lm_head; one compiled body,
  // so a row's logits do not depend on which call computed them.
  UOCR_NOT_SPECIALIZED void final_logits(const float* x, int64_t rows, float* logits) {
    rms_norm(x, rows, c_.hidden, final_norm_.data(), c_.rms_eps, a_.data());
    cpu::linear(a_.data(), rows, *w_.lm_head, nullptr, logits);
  }

  void check_positions(int64_t first, int64_t count) const {
    require(first >= 0 && first + count <= position_limit_, Status::invalid_argument, [&] {
      return "positions " + std::to_string(first) + ".." + std::to_string(first + count - 1) +
             " exceed the model's range [0, " + std::to_string(position_limit_) + ")" +
             (position_limit_ == c_.max_positions ? " (max_position_embeddings)" : " (position limit)");
    });
  }

  void check_token(int32_t id) const {
    require(id >= 0 && id < c_.vocab, Status::invalid_argument,
            [&] { return "token id " + std::to_string(id) + " is outside the vocabulary [0, " + std::to_string(c_.vocab) + ")"; });
  }

  template <class Cache>
  void check_cache(const Cache& cache) const {
    require(cache.layers() == c_.layers && cache.row_floats() == shape_.kv_row(), Status::invalid_argument,
            "KV cache was built for a different decoder configuration");
  }

  void feed_forward(const DecoderLayerWeights& lw, const float* x, int64_t m, float* y, MlpScratch& mlp, MoeScratch& moe,
                    Precision precision) const {
    if (lw.moe)
      moe_forward(c_, lw, x, m, y, moe, precision);
    else
      mlp_forward(lw.dense, x, m, y, mlp, precision);
  }

  // `n` floats of `buffer`, grown when smaller and never shrunk.
  template <class Floats>
  static float* grow(Floats& buffer, int64_t n) {
    if (buffer.size() < size_t(n)) buffer.resize(size_t(n));
    return buffer.data();
  }

  static void add_into(float* x, const float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) x[i] += y[i];
  }

  const DecoderConfig& c_;
  const DecoderWeights& w_;
  int64_t position_limit_ = c_.max_positions;
  Deadline deadline_;
  Precision prefill_precision_;
  int64_t batch_rows_ = cpu::kSmallGemmRows;  // lowered by the constructor to what every weight allows
  DecodeAttention* attention_ = nullptr;
  Rope rope_;
  AttentionShape shape_;
  std::vector<std::vector<float>> input_norm_, post_norm_;
  std::vector<float> final_norm_;
  // Scratch of every call (see the top of the file): rows of hidden states, queries, attention
  // outputs; decode scores (they follow the cache capacity); the blocked prefill attentions'
  // per-thread scores; the decode logits (one row; decode_batch's rows); a decode step's new keys
  // and values, the cache slots they go to and the generated rows each one sees; decode_tokens'
  // positions; a segment's context rows; the feed-forward buffers.
  // The row buffers are aligned as Eigen aligns (cpu/scratch.hpp): vectorised reductions (RMSNorm,
  // softmax) peel to an aligned start, so a row's bits would otherwise depend on the heap.
  cpu::AlignedFloats x_, a_, f_, q_, attn_, new_k_, new_v_, scores_;
  std::vector<float> block_scores_, logits_, batch_logits_;
  std::vector<int64_t> slots_, generated_seen_, token_positions_;
  std::vector<KvRows> context_;
  MlpScratch mlp_;
  MoeScratch moe_;
};

UOCR_NAMESPACE_END
