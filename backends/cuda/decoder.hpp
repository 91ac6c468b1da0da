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
// (CudaKvCache::summarize_page reads a page's keys back after it was prefilled), and a mirror on
// the device (CudaSparseReference: backends/device_sparse_reference.hpp) selects each head's
// reference spans per layer with the CPU's rule, bit for bit; the span attention kernel reads them.
// No q read-back: the step's rows-attended / bounds-evaluated counters are read once, after the
// last layer. Budgets covering everything take the dense path: the bits of dense R-SWA. One
// sequence per step (decode_step).
//
// CUDA graphs (set_cuda_graphs, on by default): a dense decode step (no SR-SWA attached) of up to
// ops::kMatvecMaxRows rows is captured once per batch size and then replayed as one graph launch
// instead of ~20 kernel launches per layer; its host work (tables, row pointers, positions,
// tokens) is done before the launch. Logits are bit-identical to eager steps (see replay_step).
// SR-SWA steps, larger batches and MoE steps that read expert counts back run eagerly.
//
// Thread-safety: one CudaDecoder and its caches per thread, like the Context they use.
#pragma once
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/cuda/context.hpp"
#include "backends/cuda/ops.hpp"
#include "backends/cuda/sparse.hpp"
#include "backends/cuda/weights.hpp"
#include "backends/device/decoder.hpp"
#include "backends/device/kv_cache.hpp"
#include "uocr/decoder/backend_contract.hpp"
#include "uocr/decoder/decoder.hpp"
#include "uocr/decoder/kv_cache.hpp"
#include "uocr/decoder/sparse_reference.hpp"
#include "uocr/model/config.hpp"
#include "uocr/model/weights.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN
namespace cuda {

// How the KV cache reaches CUDA memory (backends/device/kv_cache.hpp): rows are device
// addresses, used on the cache's Context (made current for each host transfer).
class KvMemory {
 public:
  using Context = cuda::Context;
  using Array = Buffer;
  using Rows = float*;
  explicit KvMemory(Context& ctx) : ctx_(&ctx) {}
  Context& context() const { return *ctx_; }
  Buffer alloc(size_t bytes, const char* what) { return ctx_->alloc(bytes, what); }
  static float* rows(const Buffer& a) { return a.f32(); }
  void copy(const float* src, float* dst, size_t bytes) {
    ctx_->make_current();
    ctx_->copy(dst, src, bytes);
  }
  void download(const float* a, size_t offset, float* host, size_t bytes) const {
    ctx_->make_current();
    ctx_->download(reinterpret_cast<const char*>(a) + offset, host, bytes);
  }
  void upload(float* a, size_t offset, const float* host, size_t bytes) {
    ctx_->make_current();
    ctx_->upload(reinterpret_cast<char*>(a) + offset, host, bytes);
  }

 private:
  Context* ctx_;
};
using CudaKvCache = DeviceKvCache<KvMemory>;

class CudaDecoder : public DeviceDecoder<CudaDecoder, CudaKvCache> {
 public:
  // batched_decode: dense rows only; SR-SWA documents step alone (decode_batch below).
  static constexpr BackendCapabilities capabilities{/*host_kv*/ false, /*batched_decode*/ true, /*multi_token_decode*/ false};

  // Token→expert assignments up to which MoE runs as grouped mat-vecs without a host round trip.
  static constexpr int64_t kDeviceMoeMaxAssignments = 1024;
  // Rows of logits computed per lm_head pass when a prefill returns every position's logits.
  static constexpr int64_t kLogitRowsPerPass = 256;

  CudaDecoder(Context& ctx, const DecoderConfig& config, const DecoderWeights& weights,
              std::shared_ptr<const DecoderDeviceWeights> device_weights = nullptr)
      : DeviceDecoder(config, weights), ctx_(&ctx),
        d_(device_weights ? std::move(device_weights) : DecoderDeviceWeights::upload(ctx, config, weights)),
        dims_{config.heads, config.kv_heads, config.head_dim} {
    require(int(d_->layers.size()) == c_->layers, Status::invalid_argument, "device weights were uploaded for a different config");
    // The attention kernels read keys in float4 (ops::attention): checked here, before any upload.
    require(c_->head_dim <= ops::kMaxHeadDim && c_->head_dim % 4 == 0, Status::unsupported, [&] {
      return "CUDA backend: head_dim " + std::to_string(c_->head_dim) + " must be a multiple of 4 and at most " +
             std::to_string(ops::kMaxHeadDim);
    });
  }

  Context& context() { return *ctx_; }
  const DecoderDeviceWeights& device_weights() const { return *d_; }

  // Decode steps through CUDA graphs (on by default; see the top of this file); either way the
  // logits are the same bits.
  void set_cuda_graphs(bool on) {
    graphs_on_ = on;
    if (!on) graphs_.clear();
  }
  bool cuda_graphs() const { return graphs_on_; }
  // What the graph path did: steps captured (a graph made or brought up to date), steps replayed
  // from a graph (captured ones included), graph-eligible steps run eagerly (a capture that first
  // needed an allocation, or failed), and the last capture failure ("" when none).
  struct GraphStats {
    int64_t captures = 0, replays = 0, eager_steps = 0;
    std::string last_failure;
  };
  const GraphStats& graph_stats() const { return graph_stats_; }

  // Head h's reference spans in layer `layer` of the last SR-SWA decode step that selected on the
  // device, read back (tests).
  std::vector<RowSpan> device_selection(int layer, int h) const { return sparse_dev_.selection(layer, h); }

  // Bytes of working memory held: the device activation buffers and the host-side copies.
  size_t scratch_bytes() const {
    size_t n = host_.scratch_bytes() + logits_.capacity() * sizeof(float) + next_.capacity() * sizeof(int32_t) +
               sparse_dev_.bytes();
    for (const Buffer* b : {&x_, &a_, &f_, &q_, &attn_, &kb_, &vb_, &gate_, &up_, &ints_, &probs_, &weight_, &moe_ints_,
                            &expert_in_, &expert_out_, &shared_, &logits_dev_, &seg_k_, &seg_v_, &rows_table_,
                            &pointer_table_, &positions_})
      n += b->bytes();
    return n;
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
    feed_forward(*ctx_, layer, m);
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
    ctx_->make_current();
    const bool sparse = begin_sparse_step(caches[0]->reference_rows());
    if (sparse) sparse_dev_.begin_step(*ctx_);
    // A cache filled on another Context's stream (a session's, under a StepBatcher) is read here
    // once that stream is done (a resume's uploads are asynchronous).
    for (int64_t i = 0; i < n; ++i)
      if (&caches[i]->context() != ctx_) caches[i]->context().synchronize();
    ctx_->make_current();
    ensure_rows(n);
    ensure_logits(n);
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
    const StepArgs step{n, table, ptrs, pos, max_keys, sparse ? caches[0] : nullptr};
    const bool moe_on_device = c_->n_routed_experts == 0 || n * c_->experts_per_token <= kDeviceMoeMaxAssignments;
    if (graphs_on_ && !sparse_ && n <= ops::kMatvecMaxRows && moe_on_device)
      replay_step(step);
    else
      run_step(step);
    end_sparse_step(sparse, caches[0]->reference_rows());
  }

  // The device half of a decode step: n rows of ints_ through the layers, logits in logits_dev_.
  struct StepArgs {
    int64_t n;
    const ops::AttentionRow* table;  // per layer, n rows
    float* const* ptrs;              // per layer, n key rows then n value rows
    const int64_t* positions;
    int64_t max_keys;
    const CudaKvCache* sparse;  // the one cache SR-SWA selects for, else null
  };
  void run_step(const StepArgs& s) {
    Context& c = *ctx_;
    const int64_t kr = int64_t(c_->kv_heads) * c_->head_dim;
    rope_at(0, s.positions);
    // The new rows go through kb_/vb_ to their ring slots (one address per sequence).
    step_layers(
        c, ints_.as<int32_t>(), s.n, [&](int) { return std::make_pair(kb_.f32(), vb_.f32()); },
        [&](int l) {
          float* const* dst = s.ptrs + 2 * l * s.n;
          ops::scatter_rows(c, kb_.f32(), s.n, kr, dst);
          ops::scatter_rows(c, vb_.f32(), s.n, kr, dst + s.n);
          if (s.sparse)
            sparse_attention(l, *s.sparse);
          else
            ops::attention(c, s.table + l * s.n, s.n, dims_, s.max_keys);
        });
    final_logits(0, s.n);
  }

  // run_step through a CUDA graph per batch size n (n <= kMatvecMaxRows: every linear layer is a
  // mat-vec kernel, so no cuBLAS call, hence no cuBLAS workspace, is in the graph; MoE stays on the
  // device). What changes from step to step reaches the kernels through device memory written
  // before the launch (tokens in ints_, positions, the new KV rows' addresses, the attention rows
  // with their key counts and KV addresses), so the graph's kernel arguments are buffer addresses,
  // sizes fixed by n, and attention's max_keys, which only strides its score scratch: the graph is
  // captured with a power-of-two key capacity (grow-only per batch size, so caches of different
  // lengths taking turns do not recapture), which gives the bits of the exact count. A graph is
  // therefore replayed while those addresses and the capacity stay the same (graph_key); when one
  // changes (a buffer re-sized by a prefill, a cache past the capacity, the scratch replaced) the
  // step is captured again and Context::capture brings the executable up to date with
  // cudaGraphExecUpdate (re-instantiating when refused). Re-capturing every step instead would
  // cost a capture's host time per step, what the graph is there to save. Buffers are sized
  // before capture (ensure_rows, ensure_logits); a capture that still needs an allocation (the
  // attention scratch growing) runs that step eagerly, which allocates, and the next step
  // captures. A capture that fails runs its step eagerly and is not retried until the key changes.
  void replay_step(StepArgs s) {
    if (graphs_.size() <= size_t(s.n)) graphs_.resize(size_t(s.n) + 1);
    StepGraph& g = graphs_[size_t(s.n)];
    while (g.capacity < s.max_keys) g.capacity *= 2;
    s.max_keys = g.capacity;
    std::vector<uintptr_t> key = graph_key(g.capacity);
    if (key != g.key) {
      g.key.clear();
      g.failed = false;
      try {
        if (ctx_->capture(g.graph, [&] { run_step(s); })) {
          g.key = std::move(key);
          ++graph_stats_.captures;
        }
      } catch (const Error& e) {
        graph_stats_.last_failure = e.what();
        g.key = std::move(key);
        g.failed = true;
      }
    }
    if (g.key.empty() || g.failed) {
      run_step(s);
      ++graph_stats_.eager_steps;
      return;
    }
    ctx_->launch(g.graph);
    ++graph_stats_.replays;
  }

  // What a step graph has baked in: the key capacity, the scratch generation and the address of
  // every buffer a decode step touches.
  std::vector<uintptr_t> graph_key(int64_t capacity) const {
    std::vector<uintptr_t> key{uintptr_t(capacity), uintptr_t(ctx_->scratch_generation())};
    for (const Buffer* b : {&x_, &a_, &f_, &q_, &attn_, &kb_, &vb_, &gate_, &up_, &ints_, &probs_, &weight_, &moe_ints_,
                            &expert_in_, &expert_out_, &shared_, &logits_dev_, &rows_table_, &pointer_table_, &positions_})
      key.push_back(reinterpret_cast<uintptr_t>(b->data()));
    return key;
  }

  // The attention rows of t new tokens written at reference rows dst.. of `cache`, uploaded into
  // rows_table_: row i sees `context` in full and the new rows 0..i.
  void causal_rows(const CudaKvCache& cache, int64_t dst, int64_t t, const ops::KvSpan& context) {
    const int64_t qr = int64_t(c_->heads) * c_->head_dim, kr = cache.row_floats();
    std::vector<ops::AttentionRow> rows(size_t(c_->layers * t));
    for (int l = 0; l < c_->layers; ++l)
      for (int64_t i = 0; i < t; ++i)
        rows[size_t(l * t + i)] = ops::AttentionRow{
            q_.f32() + i * qr, attn_.f32() + i * qr, context,
            ops::KvSpan{cache.reference_k(l) + dst * kr, cache.reference_v(l) + dst * kr, i + 1}};
    upload_table(rows);
  }

  friend class DeviceDecoder<CudaDecoder, CudaKvCache>;
  using DeviceDecoder::feed_forward;

  // DeviceDecoder's ops, enqueued on the Context's stream.
  Context& queue() { return *ctx_; }
  CudaSparseReference& sparse_device() { return sparse_dev_; }
  float* kv_rows(float* rows, int64_t row) const { return rows + row * int64_t(c_->kv_heads) * c_->head_dim; }

  // A prefill's t rows at reference rows dst..: the context rows are gathered into seg_k_ /
  // seg_v_ (attend_segment), so the attention table (rows_table_) has one context span per row.
  void begin_rows(const float* embeddings, int64_t t, const int64_t* positions, const CudaKvCache& cache, int64_t dst,
                  int64_t context_rows) {
    const int64_t kr = cache.row_floats();
    ctx_->make_current();
    ensure_rows(t);
    if (context_rows > segment_rows_) {
      seg_k_ = ctx_->alloc(size_t(context_rows * kr) * sizeof(float), "segment context keys");
      seg_v_ = ctx_->alloc(size_t(context_rows * kr) * sizeof(float), "segment context values");
      segment_rows_ = context_rows;
    }
    ctx_->upload(x_, 0, embeddings, size_t(t * c_->hidden) * sizeof(float));
    const ops::KvSpan gathered = context_rows > 0 ? ops::KvSpan{seg_k_.f32(), seg_v_.f32(), context_rows} : ops::KvSpan{};
    causal_rows(cache, dst, t, gathered);
    rope_at(0, upload_positions(positions, t));
  }

  // Layer l's context rows gathered (stream order: the previous layer's attention has read
  // seg_k_ / seg_v_ by now; the context is disjoint from the rows this layer wrote), then the
  // attention of begin_rows' table.
  void attend_segment(Context& c, int l, const CudaKvCache& cache, int64_t, int64_t t, const std::vector<RowSpan>& context,
                      int64_t context_rows) {
    const int64_t kr = cache.row_floats();
    int64_t at = 0;
    for (const RowSpan& s : context) {
      c.copy(seg_k_.f32() + at * kr, cache.reference_k(l) + s.begin * kr, size_t(s.rows * kr) * sizeof(float));
      c.copy(seg_v_.f32() + at * kr, cache.reference_v(l) + s.begin * kr, size_t(s.rows * kr) * sizeof(float));
      at += s.rows;
    }
    ops::attention(c, rows_table_.as<ops::AttentionRow>() + l * t, t, dims_, context_rows + t);
  }
  DecoderActivations<float*> activations() const {
    return {x_.f32(), a_.f32(), f_.f32(), q_.f32(), attn_.f32(), shared_.f32()};
  }
  // The positions the next layers rotate: first, first + 1, ... or, when not null, the device
  // array `positions`.
  void rope_at(int64_t first, const int64_t* positions) {
    rope_first_ = first;
    rope_positions_ = positions;
  }
  void op_rms_norm(Context& c, float* in, int64_t rows, const Buffer& w, float* out) {
    ops::rms_norm(c, in, rows, c_->hidden, w.f32(), c_->rms_eps, out);
  }
  void op_linear(Context& c, float* in, int64_t rows, const DeviceMatrix& w, float* out) {
    ops::linear(c, in, rows, w, nullptr, out);
  }
  void op_rope(Context& c, float* x, int64_t rows, int heads) {
    ops::rope(c, x, rows, heads, c_->head_dim, int64_t(heads) * c_->head_dim, d_->inv_freq.f32(), rope_first_,
              rope_positions_);
  }
  void op_add(Context& c, float* x, float* y, int64_t n) { ops::add(c, x, y, n); }
  // `tokens`: n ids already on the device (a graph replays the step with new ones there).
  void op_embed(Context& c, const int32_t* tokens, int64_t n) { ops::embed(c, tokens, n, d_->embed, x_.f32()); }
  void op_mlp(Context&, const DecoderDeviceWeights::Mlp& w, float* in, int64_t rows, float* out) {
    mlp(w.gate, w.up, w.down, in, rows, out);
  }

  // SR-SWA attention of layer l for the one row of a decode step: the device selects each head's
  // reference spans from q_ and attn_ = each head's attention over those rows of its KV head,
  // then the ring (reference keys in row order, then the ring: the dense kernel's order, so a
  // selection of the whole reference gives the dense bits).
  void sparse_attention(int l, const CudaKvCache& cache) {
    sparse_dev_.select(*ctx_, l, q_.f32());
    sparse_dev_.attend(*ctx_, l, q_.f32(), ops::KvSpan{cache.reference_k(l), cache.reference_v(l), cache.reference_rows()},
                       ops::KvSpan{cache.generated_k(l), cache.generated_v(l), cache.generated_rows()}, attn_.f32());
  }

  // y[m, hidden] = down(silu(gate·x) ⊙ up·x) with single matrices.
  void mlp(const MatrixView& gate, const MatrixView& up, const MatrixView& down, const float* x, int64_t m, float* y) {
    ops::linear(*ctx_, x, m, gate, nullptr, gate_.f32());
    ops::linear(*ctx_, x, m, up, nullptr, up_.f32());
    ops::silu_mul(*ctx_, gate_.f32(), up_.f32(), m * gate.rows);
    ops::linear(*ctx_, gate_.f32(), m, down, nullptr, y);
  }

  // f_ = the routed experts of a_'s t rows (+ shared_, added by the combine).
  void op_routed_experts(Context& c, int l, int64_t t, bool with_shared) {
    const DecoderDeviceWeights::Layer& L = d_->layers[size_t(l)];
    const int64_t hidden = c_->hidden;
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
        Precision was = c.gemm_precision();
        explicit Float32Router(Context& ctx) : c(ctx) { c.set_gemm_precision(Precision::f32); }
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
    ops::moe_combine(c, expert_out_.f32(), choice, weight_.f32(), slot, with_shared ? shared_.f32() : nullptr, t, k, hidden,
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
  std::vector<float> logits_of_rows(Context&, int64_t first, int64_t t) {
    if (first == t) {
      ctx_->synchronize();  // report a failure here, not at some later call
      return {};
    }
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
  std::shared_ptr<const DecoderDeviceWeights> d_;
  ops::AttentionDims dims_;
  int64_t rows_ = 0, logit_rows_ = 0, segment_rows_ = 0;
  Buffer x_, a_, f_, q_, attn_, kb_, vb_, gate_, up_, ints_, probs_, weight_, moe_ints_, expert_in_, expert_out_, shared_;
  Buffer logits_dev_, seg_k_, seg_v_, rows_table_, pointer_table_, positions_;
  int64_t rope_first_ = 0;                 // rope_at()
  const int64_t* rope_positions_ = nullptr;
  CudaSparseReference sparse_dev_{*ctx_};  // SR-SWA selection on the device (buffers from the first sparse step)
  std::vector<float> logits_;
  std::vector<int32_t> next_;
  struct StepGraph {
    Graph graph;
    std::vector<uintptr_t> key;  // graph_key of the capture; empty: none usable
    bool failed = false;         // the capture under `key` failed: eager until the key changes
    int64_t capacity = 256;      // keys attention's scores are strided by (a power of two)
  };
  bool graphs_on_ = true;
  std::vector<StepGraph> graphs_;  // by batch size
  GraphStats graph_stats_;
};

}  // namespace cuda
UOCR_NAMESPACE_END
