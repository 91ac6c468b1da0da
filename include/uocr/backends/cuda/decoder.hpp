// The DeepSeek-V2 decoder on a CUDA device: uocr::Decoder's API and op sequence (decoder.hpp),
// with the weights uploaded once (bf16 kept bf16) and the KV cache (never-evicted reference +
// R-SWA ring, or a growing window for full attention) in device memory.
//
//   cuda::Context ctx;                                              // device 0
//   cuda::CudaDecoder dec(ctx, config.decoder, weights.decoder);    // uploads the weights
//   cuda::CudaKvCache cache(ctx, config.decoder, window);           // 0 = full attention
//   std::vector<float> logits = dec.prefill(dec.embed_prompt(ids, visual), 0, cache);
//   logits = dec.decode_step(token, position, cache);
//
// Batched decoding: decode_batch() / decode_batch_greedy() advance several sequences (one
// CudaKvCache each) by one token in one pass: the linear layers see one row per sequence (the
// weights are read once per step, not once per sequence), attention runs per sequence over its
// own reference + ring. Any set of caches may be passed at each step, so sequences join and
// leave between steps. Sessions drive it through uocr::StepBatcher (uocr/decoder/step_batcher.hpp,
// CudaEngine with BatchParams): one batch CudaDecoder on its own Context per device, the caches
// in the sessions' Contexts (each cache's stream is synchronised before a batch reads it).
//
// Everything runs on the device, MoE routing included (softmax + greedy top-k with the CPU's tie
// rule, moe.cu); up to kDeviceMoeMaxAssignments token→expert assignments the experts run as one
// grouped mat-vec launch per projection with no host round trip; a larger prefill reads the
// per-expert counts back once per MoE layer and runs one GEMM per expert.
//
// SR-SWA (set_decode_attention), as on Vulkan: the CPU's SparseReference holds the key summaries
// and selects on the host; CudaKvCache::summarize_page reads a page's keys back after it was
// prefilled. In a decode step each layer reads q back (one wait per layer), select_step picks
// each head's reference spans, gather_rows packs those rows of the head's KV head (and the ring)
// into one buffer, and the attention kernel runs over it with one row per head. Budgets covering
// everything take the dense path: the bits of dense R-SWA. One sequence per step (decode_step).
//
// Thread-safety: one CudaDecoder and its caches per thread, like the Context they use.
#pragma once
#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "uocr/backends/cuda/context.hpp"
#include "uocr/backends/cuda/ops.hpp"
#include "uocr/backends/cuda/weights.hpp"
#include "uocr/decoder/decoder.hpp"
#include "uocr/decoder/kv_cache.hpp"
#include "uocr/decoder/sparse_reference.hpp"
#include "uocr/model/config.hpp"
#include "uocr/model/weights.hpp"

namespace uocr::cuda {

// Keys and values of one sequence in device memory, laid out and accounted like uocr::KvCache
// (float32 rows of kv_heads·head_dim; the bookkeeping and checkpoints' visit_rows are
// ReservedKvRing's).
class CudaKvCache : public ReservedKvRing<CudaKvCache> {
 public:
  CudaKvCache(Context& ctx, const DecoderConfig& config, int window)
      : ReservedKvRing(config, window), ctx_(&ctx), layers_(size_t(config.layers)) {
    size_ring();
  }

  Context& context() const { return *ctx_; }  // where the rows live and are written by prefills
  float* reference_k(int layer) const { return layers_[size_t(layer)].ref_k.f32(); }
  float* reference_v(int layer) const { return layers_[size_t(layer)].ref_v.f32(); }
  float* generated_k(int layer) const { return layers_[size_t(layer)].gen_k.f32(); }
  float* generated_v(int layer) const { return layers_[size_t(layer)].gen_v.f32(); }

  // SR-SWA summaries of `page` of s's layout (BasicPageGroupDecoder, after the page's rows were
  // written): its key rows are read back one layer at a time and summarized on the host.
  void summarize_page(SparseReference& s, size_t page) const {
    require(page < s.page_count() && s.layout().pages[page].end() <= reference_rows(), Status::invalid_argument,
            "SR-SWA page is outside the cache's reference");
    const RowSpan span = s.layout().pages[page];
    std::vector<float> host(size_t(span.rows * row_));
    ctx_->make_current();
    for (int l = 0; l < layers(); ++l) {
      ctx_->download(reference_k(l) + span.begin * row_, host.data(), host.size() * sizeof(float));
      s.summarize_rows(l, page, host.data());
    }
  }

 private:
  friend class KvRing<CudaKvCache>;
  friend class ReservedKvRing<CudaKvCache>;
  struct Layer {
    Buffer ref_k, ref_v, gen_k, gen_v;
  };

  Buffer rows_buffer(int64_t rows, const char* what) { return ctx_->alloc(size_t(rows * row_) * sizeof(float), what); }

  // ReservedKvRing::visit_rows (checkpoints): the first `floats` floats of a device array.
  void read_rows(float* array, float* host, size_t floats) const {
    ctx_->make_current();
    ctx_->download(array, host, floats * sizeof(float));
  }
  void write_rows(float* array, const float* host, size_t floats) {
    ctx_->make_current();
    ctx_->upload(array, host, floats * sizeof(float));
  }

  void grow_reference(int64_t rows, int64_t keep) {
    for (Layer& l : layers_) {
      Buffer k = rows_buffer(rows, "KV cache reference keys"), v = rows_buffer(rows, "KV cache reference values");
      ctx_->copy(k.data(), l.ref_k.data(), size_t(keep * row_) * sizeof(float));
      ctx_->copy(v.data(), l.ref_v.data(), size_t(keep * row_) * sizeof(float));
      l.ref_k = std::move(k);
      l.ref_v = std::move(v);
    }
  }

  // Full mode grows geometrically (amortised O(1) appends), keeping the rows held; R-SWA sizes once.
  void grow_generated(int64_t rows) {
    for (Layer& l : layers_) {
      Buffer k = rows_buffer(rows, "KV cache generated keys"), v = rows_buffer(rows, "KV cache generated values");
      ctx_->copy(k.data(), l.gen_k.data(), size_t(generated_ * row_) * sizeof(float));
      ctx_->copy(v.data(), l.gen_v.data(), size_t(generated_ * row_) * sizeof(float));
      l.gen_k = std::move(k);
      l.gen_v = std::move(v);
    }
    capacity_ = rows;
  }

  Context* ctx_;
  std::vector<Layer> layers_;
};

class CudaDecoder {
 public:
  // Token→expert assignments up to which MoE runs as grouped mat-vecs without a host round trip.
  static constexpr int64_t kDeviceMoeMaxAssignments = 1024;
  // Rows of logits computed per lm_head pass when a prefill returns every position's logits.
  static constexpr int64_t kLogitRowsPerPass = 256;

  CudaDecoder(Context& ctx, const DecoderConfig& config, const DecoderWeights& weights,
              std::shared_ptr<const DecoderDeviceWeights> device_weights = nullptr)
      : ctx_(&ctx), c_(&config), host_(config, weights),
        d_(device_weights ? std::move(device_weights) : DecoderDeviceWeights::upload(ctx, config, weights)),
        dims_{config.heads, config.kv_heads, config.head_dim} {
    require(int(d_->layers.size()) == c_->layers, Status::invalid_argument, "device weights were uploaded for a different config");
    require(c_->head_dim <= ops::kMaxHeadDim && c_->head_dim % 2 == 0, Status::unsupported, [&] {
      return "CUDA backend: head_dim " + std::to_string(c_->head_dim) + " must be even and at most " +
             std::to_string(ops::kMaxHeadDim);
    });
    for (const DecoderDeviceWeights::Layer& l : d_->layers) {
      row_inter_ = std::max({row_inter_, l.dense.gate.view.rows, l.shared.gate.view.rows});
      expert_inter_ = std::max(expert_inter_, l.experts.gate.view.rows);
    }
  }

  const DecoderConfig& config() const { return *c_; }
  Context& context() { return *ctx_; }
  const DecoderDeviceWeights& device_weights() const { return *d_; }

  // As uocr::Decoder::set_position_limit (RoPE angles are computed on the device, so positions
  // past max_position_embeddings work here too when asked for).
  void set_position_limit(int64_t limit) { host_.set_position_limit(limit); }
  int64_t position_limit() const { return host_.position_limit(); }

  // SR-SWA for decode steps (page groups attach it; nullptr: dense R-SWA). The selection runs on
  // the host, the attention on the device (see the top of this file).
  void set_decode_attention(SparseReference* sparse) { sparse_ = sparse; }

  // Bytes of working memory held: the device activation buffers and the host-side copies.
  size_t scratch_bytes() const {
    size_t n = host_.scratch_bytes() + (logits_.capacity() + q_host_.capacity()) * sizeof(float) +
               (next_.capacity() + sel_rows_.capacity()) * sizeof(int32_t) + sel_table_.capacity() * sizeof(ops::AttentionRow);
    for (const Buffer* b : {&x_, &a_, &f_, &q_, &attn_, &kb_, &vb_, &gate_, &up_, &ints_, &probs_, &weight_, &moe_ints_,
                            &expert_in_, &expert_out_, &shared_, &logits_dev_, &seg_k_, &seg_v_, &rows_table_,
                            &pointer_table_, &positions_, &sel_k_, &sel_v_, &sel_rows_dev_, &sel_table_dev_})
      n += b->bytes();
    return n;
  }

  // Host-side, identical to uocr::Decoder's (the prefill input is built on the host).
  std::vector<float> embed(const std::vector<int32_t>& ids) const { return host_.embed(ids); }
  std::vector<float> embed_prompt(const std::vector<int32_t>& ids, const std::vector<float>& visual,
                                  int32_t image_token = kImageTokenId) const {
    return host_.embed_prompt(ids, visual, image_token);
  }

  std::vector<float> prefill(const std::vector<float>& embeddings, int64_t first_position, CudaKvCache& cache,
                             PrefillLogits which = PrefillLogits::last) {
    const int64_t t = host_.check_prefill(embeddings.size(), first_position, cache);
    ctx_->make_current();
    cache.reset(t);
    ensure_rows(t);
    ctx_->upload(x_, 0, embeddings.data(), embeddings.size() * sizeof(float));
    const ops::AttentionRow* rows = causal_rows(cache, 0, t, [](int) { return ops::KvSpan{}; });
    for (int l = 0; l < c_->layers; ++l)
      layer(l, t, cache.reference_k(l), cache.reference_v(l), nullptr, first_position, nullptr, rows + l * t, t);
    return logits_of_rows(which == PrefillLogits::all ? 0 : t - 1, t);
  }

  // As uocr::Decoder::prefill_segment (page groups): new token i attends to the reference rows
  // in `context` (gathered into one span per layer) and causally to new tokens 0..i.
  std::vector<float> prefill_segment(const float* embeddings, int64_t t, const int64_t* positions, CudaKvCache& cache,
                                     int64_t dst, const std::vector<RowSpan>& context, bool want_logits = false) {
    const int64_t hidden = c_->hidden, kr = cache.row_floats();
    const int64_t ctx_rows = host_.check_segment(t, positions, cache, dst, context);
    ctx_->make_current();
    ensure_rows(t);
    if (ctx_rows > segment_rows_) {
      seg_k_ = ctx_->alloc(size_t(ctx_rows * kr) * sizeof(float), "segment context keys");
      seg_v_ = ctx_->alloc(size_t(ctx_rows * kr) * sizeof(float), "segment context values");
      segment_rows_ = ctx_rows;
    }
    ctx_->upload(x_, 0, embeddings, size_t(t * hidden) * sizeof(float));
    const int64_t* pos = upload_positions(positions, t);
    const ops::KvSpan seg{seg_k_.f32(), seg_v_.f32(), ctx_rows};
    const ops::AttentionRow* table = causal_rows(cache, dst, t, [&](int) { return seg; });
    const size_t row_bytes = size_t(kr) * sizeof(float);
    for (int l = 0; l < c_->layers; ++l) {
      int64_t at = 0;  // stream order: the previous layer's attention has read seg_k_/seg_v_ by now
      for (const RowSpan& c : context) {
        ctx_->copy(seg_k_.f32() + at * kr, cache.reference_k(l) + c.begin * kr, size_t(c.rows) * row_bytes);
        ctx_->copy(seg_v_.f32() + at * kr, cache.reference_v(l) + c.begin * kr, size_t(c.rows) * row_bytes);
        at += c.rows;
      }
      layer(l, t, cache.reference_k(l) + dst * kr, cache.reference_v(l) + dst * kr, nullptr, 0, pos, table + l * t,
            ctx_rows + t);
    }
    if (!want_logits) {
      ctx_->synchronize();  // report a failure here, not at some later call
      return {};
    }
    return logits_of_rows(t - 1, t);
  }

  // Feeds one generated token at `position` through the cache and returns its logits [vocab].
  const std::vector<float>& decode_step(int32_t token, int64_t position, CudaKvCache& cache) {
    CudaKvCache* one = &cache;
    decode_rows(&token, &position, &one, 1);
    logits_.resize(size_t(c_->vocab));
    ctx_->download(logits_dev_.data(), logits_.data(), logits_.size() * sizeof(float));
    return logits_;
  }

  // One step of several sequences: token i at positions[i] through *caches[i] (distinct caches).
  // Returns the logits [n, vocab], row i for sequence i.
  const std::vector<float>& decode_batch(const std::vector<int32_t>& tokens, const std::vector<int64_t>& positions,
                                         const std::vector<CudaKvCache*>& caches) {
    const int64_t n = check_batch(tokens, positions, caches);
    decode_rows(tokens.data(), positions.data(), caches.data(), n);
    logits_.resize(size_t(n * c_->vocab));
    ctx_->download(logits_dev_.data(), logits_.data(), logits_.size() * sizeof(float));
    return logits_;
  }

  // decode_batch for uocr::StepBatcher: SR-SWA is not batched here, so every attention must be
  // null (dense); CudaEngine keeps SR-SWA documents out of its batches.
  const std::vector<float>& decode_batch(const std::vector<int32_t>& tokens, const std::vector<int64_t>& positions,
                                         const std::vector<CudaKvCache*>& caches,
                                         const std::vector<DecodeAttention*>& attentions) {
    require(std::all_of(attentions.begin(), attentions.end(), [](const DecodeAttention* a) { return a == nullptr; }),
            Status::unsupported, "CUDA batched decoding is dense only: SR-SWA documents step alone");
    return decode_batch(tokens, positions, caches);
  }

  // As uocr::Decoder::check_step, plus a prefilled cache: what every decode step is checked for.
  void check_step(int32_t token, int64_t position, const CudaKvCache& cache) const {
    host_.check_step(token, position, cache);
    require(cache.reference_rows() > 0, Status::invalid_argument, "decode step before prefill: the KV cache is empty");
  }

  // As decode_batch, but returns only each row's argmax (greedy decoding; the logits stay on the
  // device, so a step reads back n ints instead of n·vocab floats).
  const std::vector<int32_t>& decode_batch_greedy(const std::vector<int32_t>& tokens, const std::vector<int64_t>& positions,
                                                  const std::vector<CudaKvCache*>& caches) {
    const int64_t n = check_batch(tokens, positions, caches);
    decode_rows(tokens.data(), positions.data(), caches.data(), n);
    ops::argmax(*ctx_, logits_dev_.f32(), n, c_->vocab, ints_.as<int32_t>());
    next_.resize(size_t(n));
    ctx_->download(ints_.data(), next_.data(), next_.size() * sizeof(int32_t));
    return next_;
  }

  // One layer's feed-forward half (dense MLP or MoE) on rows x [m, hidden] (conformance tests).
  std::vector<float> feed_forward(int layer, const std::vector<float>& x) {
    require(layer >= 0 && layer < c_->layers && !x.empty() && x.size() % size_t(c_->hidden) == 0, Status::invalid_argument,
            "feed_forward: bad layer or input size");
    const int64_t m = int64_t(x.size()) / c_->hidden;
    ctx_->make_current();
    ensure_rows(m);
    ctx_->upload(a_, 0, x.data(), x.size() * sizeof(float));
    feed_forward(layer, m);
    std::vector<float> y(x.size());
    ctx_->download(f_.data(), y.data(), y.size() * sizeof(float));
    return y;
  }

 private:
  int64_t check_batch(const std::vector<int32_t>& tokens, const std::vector<int64_t>& positions,
                      const std::vector<CudaKvCache*>& caches) const {
    require(!tokens.empty() && tokens.size() == positions.size() && tokens.size() == caches.size(), Status::invalid_argument,
            "decode batch: tokens, positions and caches must be non-empty and of equal length");
    std::vector<const CudaKvCache*> seen(caches.begin(), caches.end());
    std::sort(seen.begin(), seen.end());
    require(seen.front() != nullptr && std::adjacent_find(seen.begin(), seen.end()) == seen.end(), Status::invalid_argument,
            "decode batch: every sequence needs its own (non-null) KV cache");
    return int64_t(tokens.size());
  }

  // Validates every sequence first (a rejected call leaves all caches as they were), then claims
  // their slots and runs the step; the logits end in logits_dev_ [n, vocab].
  void decode_rows(const int32_t* tokens, const int64_t* positions, CudaKvCache* const* caches, int64_t n) {
    for (int64_t i = 0; i < n; ++i) check_step(tokens[i], positions[i], *caches[i]);
    require(!sparse_ || n == 1, Status::unsupported,
            "CUDA SR-SWA decodes one sequence per step (decode_step); batched steps need it detached");
    // A cache filled on another Context's stream (a session's, under a StepBatcher) is read here
    // once that stream is done (a resume's uploads are asynchronous).
    for (int64_t i = 0; i < n; ++i)
      if (&caches[i]->context() != ctx_) caches[i]->context().synchronize();
    ctx_->make_current();
    ensure_rows(n);
    const int64_t layers = c_->layers, kr = int64_t(c_->kv_heads) * c_->head_dim, qr = int64_t(c_->heads) * c_->head_dim;
    std::vector<ops::AttentionRow> rows(size_t(layers * n));
    std::vector<float*> dst(size_t(2 * layers * n));  // per layer: n key rows, then n value rows
    int64_t max_keys = 1;
    for (int64_t i = 0; i < n; ++i) {
      CudaKvCache& c = *caches[i];
      const int64_t slot = c.claim_slot(), ref = c.reference_rows(), gen = c.generated_rows();
      max_keys = std::max(max_keys, ref + gen);
      for (int64_t l = 0; l < layers; ++l) {
        const int li = int(l);
        rows[size_t(l * n + i)] = ops::AttentionRow{q_.f32() + i * qr, attn_.f32() + i * qr,
                                                    ops::KvSpan{c.reference_k(li), c.reference_v(li), ref},
                                                    ops::KvSpan{c.generated_k(li), c.generated_v(li), gen}};
        dst[size_t(2 * l * n + i)] = c.generated_k(li) + slot * kr;
        dst[size_t(2 * l * n + n + i)] = c.generated_v(li) + slot * kr;
      }
    }
    const ops::AttentionRow* table = upload_table(rows);
    float* const* ptrs = upload_pointers(dst);
    const int64_t* pos = upload_positions(positions, n);
    ctx_->upload(ints_.data(), tokens, size_t(n) * sizeof(int32_t));
    ops::embed(*ctx_, ints_.as<int32_t>(), n, d_->embed, x_.f32());
    for (int64_t l = 0; l < layers; ++l)
      layer(int(l), n, nullptr, nullptr, ptrs + 2 * l * n, 0, pos, table + l * n, max_keys, sparse_ ? caches[0] : nullptr);
    final_logits(0, n);
  }

  // The attention rows of t new tokens written at reference rows dst.. of `cache`: row i sees
  // span a(layer) in full and the new rows 0..i.
  template <class SpanOf>
  const ops::AttentionRow* causal_rows(const CudaKvCache& cache, int64_t dst, int64_t t, SpanOf&& a) {
    const int64_t qr = int64_t(c_->heads) * c_->head_dim, kr = cache.row_floats();
    std::vector<ops::AttentionRow> rows(size_t(c_->layers * t));
    for (int l = 0; l < c_->layers; ++l)
      for (int64_t i = 0; i < t; ++i)
        rows[size_t(l * t + i)] = ops::AttentionRow{
            q_.f32() + i * qr, attn_.f32() + i * qr, a(l),
            ops::KvSpan{cache.reference_k(l) + dst * kr, cache.reference_v(l) + dst * kr, i + 1}};
    return upload_table(rows);
  }

  // One decoder layer over t rows of x_. New keys/values go to k_dst/v_dst (t contiguous rows)
  // or, when those are null, through kb_/vb_ to the row addresses dst[0..t) / dst[t..2t).
  // `sparse`: the cache of a one-row decode step that SR-SWA selects for.
  void layer(int l, int64_t t, float* k_dst, float* v_dst, float* const* dst, int64_t first_position,
             const int64_t* positions, const ops::AttentionRow* rows, int64_t max_keys,
             const CudaKvCache* sparse = nullptr) {
    const DecoderDeviceWeights::Layer& L = d_->layers[size_t(l)];
    const int64_t hidden = c_->hidden, qr = int64_t(c_->heads) * c_->head_dim, kr = int64_t(c_->kv_heads) * c_->head_dim;
    Context& c = *ctx_;
    float* k = k_dst ? k_dst : kb_.f32();
    float* v = v_dst ? v_dst : vb_.f32();
    ops::rms_norm(c, x_.f32(), t, hidden, L.input_norm.f32(), c_->rms_eps, a_.f32());
    ops::linear(c, a_.f32(), t, L.q, nullptr, q_.f32());
    ops::linear(c, a_.f32(), t, L.k, nullptr, k);
    ops::linear(c, a_.f32(), t, L.v, nullptr, v);
    ops::rope(c, q_.f32(), t, c_->heads, c_->head_dim, qr, d_->inv_freq.f32(), first_position, positions);
    ops::rope(c, k, t, c_->kv_heads, c_->head_dim, kr, d_->inv_freq.f32(), first_position, positions);
    if (!k_dst) {
      ops::scatter_rows(c, k, t, kr, dst);
      ops::scatter_rows(c, v, t, kr, dst + t);
    }
    if (!sparse || !sparse_attention(l, *sparse)) ops::attention(c, rows, t, dims_, max_keys);
    ops::linear(c, attn_.f32(), t, L.o, nullptr, f_.f32());
    ops::add(c, x_.f32(), f_.f32(), t * hidden);
    ops::rms_norm(c, x_.f32(), t, hidden, L.post_norm.f32(), c_->rms_eps, a_.f32());
    feed_forward(l, t);
    ops::add(c, x_.f32(), f_.f32(), t * hidden);
  }

  // SR-SWA attention of layer l for the one row of a decode step. q is read back and the host
  // selects (SparseReference::select_step); false: budgets cover the whole reference, the dense
  // kernel serves. Else attn_ = each head's attention over its selected reference rows + the ring:
  // gather_rows copies those rows of its KV head into sel_k_/sel_v_ (the cache viewed as
  // [rows·kv_heads, head_dim]; per head its reference rows, then per KV head the ring in slot
  // order), and one attention launch runs one row per head with dims 1/1/head_dim. The keys come
  // in the dense kernel's order (reference rows ascending, then the ring), so a selection of the
  // whole reference gives the dense bits.
  bool sparse_attention(int l, const CudaKvCache& cache) {
    const int heads = c_->heads, kv_heads = c_->kv_heads;
    const int64_t d = c_->head_dim, ref = cache.reference_rows(), gen = cache.generated_rows();
    q_host_.resize(size_t(heads * d));
    ctx_->download(q_.data(), q_host_.data(), q_host_.size() * sizeof(float));
    const AttentionShape shape{heads, kv_heads, c_->head_dim};
    if (sparse_->select_step(l, q_host_.data(), ref, shape)) return false;
    require(std::max(ref, gen) * kv_heads <= std::numeric_limits<int32_t>::max(), Status::unsupported,
            "CUDA SR-SWA: the KV cache has more rows than 32-bit gather indices reach");
    sel_rows_.clear();
    std::vector<int64_t> first(size_t(heads) + 1);
    for (int h = 0; h < heads; ++h) {
      first[size_t(h)] = int64_t(sel_rows_.size());
      for (const RowSpan& sp : sparse_->last_selection(h))
        for (int64_t r = sp.begin; r < sp.end(); ++r) sel_rows_.push_back(int32_t(r * kv_heads + shape.kv_head_of(h)));
    }
    const int64_t selected = first[size_t(heads)] = int64_t(sel_rows_.size());
    for (int g = 0; g < kv_heads; ++g)
      for (int64_t r = 0; r < gen; ++r) sel_rows_.push_back(int32_t(r * kv_heads + g));
    const int64_t total = int64_t(sel_rows_.size());
    if (total > sel_capacity_) {
      sel_k_ = ctx_->alloc(size_t(total * d) * sizeof(float), "SR-SWA selected keys");
      sel_v_ = ctx_->alloc(size_t(total * d) * sizeof(float), "SR-SWA selected values");
      sel_capacity_ = total;
    }
    const int32_t* idx = upload_vector(sel_rows_dev_, sel_rows_, "SR-SWA gather indices");
    ops::gather_rows(*ctx_, cache.reference_k(l), idx, selected, d, sel_k_.f32());
    ops::gather_rows(*ctx_, cache.reference_v(l), idx, selected, d, sel_v_.f32());
    ops::gather_rows(*ctx_, cache.generated_k(l), idx + selected, total - selected, d, sel_k_.f32() + selected * d);
    ops::gather_rows(*ctx_, cache.generated_v(l), idx + selected, total - selected, d, sel_v_.f32() + selected * d);
    sel_table_.resize(size_t(heads));
    int64_t max_keys = 1;
    for (int h = 0; h < heads; ++h) {
      const int64_t a0 = first[size_t(h)], a_rows = first[size_t(h) + 1] - a0, b0 = selected + shape.kv_head_of(h) * gen;
      sel_table_[size_t(h)] = ops::AttentionRow{q_.f32() + h * d, attn_.f32() + h * d,
                                                ops::KvSpan{sel_k_.f32() + a0 * d, sel_v_.f32() + a0 * d, a_rows},
                                                ops::KvSpan{sel_k_.f32() + b0 * d, sel_v_.f32() + b0 * d, gen}};
      max_keys = std::max(max_keys, a_rows + gen);
    }
    ops::attention(*ctx_, upload_vector(sel_table_dev_, sel_table_, "SR-SWA attention rows"), heads,
                   ops::AttentionDims{1, 1, c_->head_dim}, max_keys);
    return true;
  }

  // y[m, hidden] = down(silu(gate·x) ⊙ up·x) with single matrices.
  void mlp(const MatrixView& gate, const MatrixView& up, const MatrixView& down, const float* x, int64_t m, float* y) {
    ops::linear(*ctx_, x, m, gate, nullptr, gate_.f32());
    ops::linear(*ctx_, x, m, up, nullptr, up_.f32());
    ops::silu_mul(*ctx_, gate_.f32(), up_.f32(), m * gate.rows);
    ops::linear(*ctx_, gate_.f32(), m, down, nullptr, y);
  }

  // f_ = FFN(a_) over t rows.
  void feed_forward(int l, int64_t t) {
    const DecoderDeviceWeights::Layer& L = d_->layers[size_t(l)];
    Context& c = *ctx_;
    const int64_t hidden = c_->hidden;
    if (!c_->is_moe_layer(l)) {
      mlp(L.dense.gate, L.dense.up, L.dense.down, a_.f32(), t, f_.f32());
      return;
    }
    const int experts = c_->n_routed_experts, k = c_->experts_per_token;
    const int64_t assignments = t * k, inter = L.experts.gate.view.rows;
    int32_t* start = moe_ints_.as<int32_t>();
    int32_t* choice = start + (experts + 1);
    int32_t* order = choice + assignments;
    int32_t* rows = order + assignments;
    int32_t* slot = rows + assignments;
    {
      // The router stays float32 in bf16 GEMM mode too: bf16 router logits flip top-k choices
      // (13 of 176 in a peer's measurement), which changes the output text, not just its digits.
      struct Float32Router {
        Context& c;
        GemmPrecision was = c.gemm_precision();
        explicit Float32Router(Context& ctx) : c(ctx) { c.set_gemm_precision(GemmPrecision::f32); }
        ~Float32Router() { c.set_gemm_precision(was); }
      } f32_router(c);
      ops::linear(c, a_.f32(), t, L.router, nullptr, probs_.f32());
    }
    ops::moe_route(c, probs_.f32(), t, experts, k, c_->norm_topk_prob, c_->routed_scaling, choice, weight_.f32());
    ops::moe_group(c, choice, t, experts, k, start, order, rows, slot);
    if (assignments <= kDeviceMoeMaxAssignments) {
      ops::grouped_matvec(c, L.experts.gate, a_.f32(), hidden, rows, start, assignments, nullptr, gate_.f32());
      ops::grouped_matvec(c, L.experts.up, a_.f32(), hidden, rows, start, assignments, nullptr, up_.f32());
      ops::silu_mul(c, gate_.f32(), up_.f32(), assignments * inter);
      ops::grouped_matvec(c, L.experts.down, gate_.f32(), inter, nullptr, start, assignments, nullptr, expert_out_.f32());
    } else {
      std::vector<int32_t> first(size_t(experts + 1));
      c.download(start, first.data(), first.size() * sizeof(int32_t));
      ops::gather_rows(c, a_.f32(), rows, assignments, hidden, expert_in_.f32());
      for (int e = 0; e < experts; ++e) {
        const int64_t a0 = first[size_t(e)], n = first[size_t(e + 1)] - a0;
        if (n == 0) continue;
        mlp(L.experts.gate.view.group(e), L.experts.up.view.group(e), L.experts.down.view.group(e),
            expert_in_.f32() + a0 * hidden, n, expert_out_.f32() + a0 * hidden);
      }
    }
    const bool shared = L.shared.gate.view.rows > 0;
    if (shared) mlp(L.shared.gate, L.shared.up, L.shared.down, a_.f32(), t, shared_.f32());
    ops::moe_combine(c, expert_out_.f32(), choice, weight_.f32(), slot, shared ? shared_.f32() : nullptr, t, k, hidden,
                     f_.f32());
  }

  // Final norm + lm_head of x_ rows [first, t) into logits_dev_ (at most kLogitRowsPerPass rows).
  void final_logits(int64_t first, int64_t t) {
    const int64_t hidden = c_->hidden, rows = t - first;
    ensure_logits(rows);
    ops::rms_norm(*ctx_, x_.f32() + first * hidden, rows, hidden, d_->final_norm.f32(), c_->rms_eps, a_.f32());
    ops::linear(*ctx_, a_.f32(), rows, d_->lm_head, nullptr, logits_dev_.f32());
  }

  // Logits of x_ rows [first, t) on the host, lm_head in passes of kLogitRowsPerPass rows.
  std::vector<float> logits_of_rows(int64_t first, int64_t t) {
    const int64_t vocab = c_->vocab;
    std::vector<float> out(size_t((t - first) * vocab));
    for (int64_t r0 = first; r0 < t; r0 += kLogitRowsPerPass) {
      const int64_t r1 = std::min(t, r0 + kLogitRowsPerPass);
      final_logits(r0, r1);
      ctx_->download(logits_dev_.data(), out.data() + size_t((r0 - first) * vocab), size_t((r1 - r0) * vocab) * sizeof(float));
    }
    return out;
  }

  // Per-call tables (attention rows, row pointers, positions) travel in grow-only device buffers.
  template <class T>
  T* upload_vector(Buffer& buf, const std::vector<T>& v, const char* what) {
    const size_t bytes = v.size() * sizeof(T);
    if (buf.bytes() < bytes) buf = ctx_->alloc(bytes, what);
    ctx_->upload(buf, 0, v.data(), bytes);
    return buf.as<T>();
  }
  const ops::AttentionRow* upload_table(const std::vector<ops::AttentionRow>& rows) {
    return upload_vector(rows_table_, rows, "attention row table");
  }
  float* const* upload_pointers(const std::vector<float*>& p) { return upload_vector(pointer_table_, p, "KV row pointers"); }
  const int64_t* upload_positions(const int64_t* positions, int64_t n) {
    return upload_vector(positions_, std::vector<int64_t>(positions, positions + n), "positions");
  }

  // Activation buffers for steps of up to `t` rows (grow-only).
  void ensure_rows(int64_t t) {
    if (t <= rows_) return;
    const int64_t hidden = c_->hidden, qr = int64_t(c_->heads) * c_->head_dim, kr = int64_t(c_->kv_heads) * c_->head_dim;
    const int64_t k = std::max(1, c_->experts_per_token), experts = std::max(1, c_->n_routed_experts);
    auto floats = [&](int64_t n, const char* what) { return ctx_->alloc(size_t(std::max<int64_t>(n, 1)) * sizeof(float), what); };
    x_ = floats(t * hidden, "decoder hidden state");
    a_ = floats(t * hidden, "decoder normed state");
    f_ = floats(t * hidden, "decoder sublayer output");
    q_ = floats(t * qr, "decoder queries");
    attn_ = floats(t * qr, "decoder attention output");
    kb_ = floats(t * kr, "new keys");
    vb_ = floats(t * kr, "new values");
    const int64_t mlp = t * std::max(row_inter_, k * expert_inter_);  // the widest MLP intermediate
    gate_ = floats(mlp, "MLP gate");
    up_ = floats(mlp, "MLP up");
    ints_ = ctx_->alloc(size_t(t) * sizeof(int32_t), "token ids");
    if (c_->n_routed_experts > 0) {
      probs_ = floats(t * experts, "MoE router probabilities");
      weight_ = floats(t * k, "MoE routing weights");
      moe_ints_ = ctx_->alloc(size_t(experts + 1 + 4 * t * k) * sizeof(int32_t), "MoE routing indices");
      expert_in_ = floats(t * k > kDeviceMoeMaxAssignments ? t * k * hidden : 1, "MoE expert inputs");
      expert_out_ = floats(t * k * hidden, "MoE expert outputs");
      shared_ = floats(t * hidden, "MoE shared expert output");
    }
    rows_ = t;
  }

  void ensure_logits(int64_t rows) {
    if (rows <= logit_rows_) return;
    logits_dev_ = ctx_->alloc(size_t(rows * c_->vocab) * sizeof(float), "logits");
    logit_rows_ = rows;
  }

  Context* ctx_;
  const DecoderConfig* c_;
  Decoder host_;  // prompt embeddings on the host, as the CPU path
  std::shared_ptr<const DecoderDeviceWeights> d_;
  ops::AttentionDims dims_;
  int64_t row_inter_ = 1, expert_inter_ = 1;  // MLP widths: per token row (dense, shared), per routed expert
  int64_t rows_ = 0, logit_rows_ = 0, segment_rows_ = 0;
  Buffer x_, a_, f_, q_, attn_, kb_, vb_, gate_, up_, ints_, probs_, weight_, moe_ints_, expert_in_, expert_out_, shared_;
  Buffer logits_dev_, seg_k_, seg_v_, rows_table_, pointer_table_, positions_;
  SparseReference* sparse_ = nullptr;
  std::vector<float> q_host_;                  // SR-SWA: the step's q, read back for the selection
  std::vector<int32_t> sel_rows_;              // SR-SWA: gather indices (see sparse_attention)
  std::vector<ops::AttentionRow> sel_table_;   // SR-SWA: one attention row per head
  Buffer sel_k_, sel_v_, sel_rows_dev_, sel_table_dev_;
  int64_t sel_capacity_ = 0;                   // rows sel_k_/sel_v_ hold
  std::vector<float> logits_;
  std::vector<int32_t> next_;
};

}  // namespace uocr::cuda
