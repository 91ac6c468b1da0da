// The DeepSeek-V2 decoder on a Vulkan device: the same op sequence and API as uocr::Decoder
// (decoder/decoder.hpp), with weights uploaded once and the KV cache (reference + R-SWA ring, or
// a growing window for full attention) in device buffers.
//
//   vulkan::Context ctx;
//   auto weights = vulkan::DecoderDeviceWeights::upload(ctx, model_weights.decoder);
//   vulkan::VulkanDecoder dec(ctx, config.decoder, model_weights.decoder, weights);
//   vulkan::VulkanKvCache cache(ctx, config.decoder, window);   // 0 = full attention
//   std::vector<float> logits = dec.prefill(dec.embed_prompt(ids, visual), 0, cache);
//   logits = dec.decode_step(token, position, cache);
//
// MoE routing runs on the device, with no host read-back: after the router GEMM a shader
// (moe_route.comp) applies the CPU's rule (uocr::moe_route: softmax, greedy top-k, lower index on
// ties), groups the rows by expert and writes, per expert, the VkDispatchIndirectCommand of its
// GEMMs; the rows are gathered into the grouped order. Each projection's expert weights are one
// stacked buffer (per binding-sized chunk): a decode step runs its k mat-vecs per projection in
// one dispatch that reads each slot's expert from the routing; larger blocks issue every expert's
// gate/up/down GEMM with vkCmdDispatchIndirect over exactly its rows (no work for an expert nobody
// chose). moe_combine.comp adds the weighted outputs back in ascending expert order, as the CPU
// does. A dense decode step is one submission and one read-back (the logits).
//
// Page groups (uocr/decoder/page_groups.hpp) run over it as vulkan::VulkanPageGroups
// (engine.hpp): prefill_segment and VulkanKvCache::resize_reference are the calls they need.
//
// SR-SWA (set_decode_attention): the CPU's SparseReference holds the key summaries
// (VulkanKvCache::summarize_page reads a page's keys back once after it was prefilled); a mirror on
// the device (VulkanSparseReference: backends/device_sparse_reference.hpp) selects each head's
// reference spans with the CPU's rule, bit for bit, and the attention shader reads them: a sparse
// decode step is one submission too, with no read-back but the logits and two counters. Budgets
// covering everything take the dense path: the same bits as dense R-SWA.
//
// Thread-safety: one VulkanDecoder and its caches per thread; the Context and the device weights
// may be shared by several (the Context serialises their submissions).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backends/device/decoder.hpp"
#include "backends/device/kv_cache.hpp"
#include "backends/device/weights.hpp"
#include "backends/vulkan/context.hpp"
#include "backends/vulkan/ops.hpp"
#include "backends/vulkan/recorder.hpp"
#include "backends/vulkan/sparse.hpp"
#include "uocr/decoder/backend_contract.hpp"
#include "uocr/decoder/decoder.hpp"
#include "uocr/decoder/kv_cache.hpp"
#include "uocr/decoder/sparse_reference.hpp"
#include "uocr/model/config.hpp"
#include "uocr/model/weights.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN
namespace vulkan {

// How the KV cache reaches Vulkan memory (backends/device/kv_cache.hpp).
class KvMemory {
 public:
  using Context = vulkan::Context;
  using Array = Buffer;
  using Rows = const Buffer&;
  explicit KvMemory(Context& ctx) : ctx_(&ctx) {}
  Context& context() const { return *ctx_; }
  Buffer alloc(size_t bytes, const char* what) { return ctx_->buffer(bytes, MemoryUse::activations, what); }
  static const Buffer& rows(const Buffer& a) { return a; }
  void copy(const Buffer& src, const Buffer& dst, size_t bytes) { ctx_->copy_now(src, 0, dst, 0, bytes); }
  void download(const Buffer& a, size_t offset, float* host, size_t bytes) const { ctx_->download(a, host, bytes, offset); }
  void upload(const Buffer& a, size_t offset, const float* host, size_t bytes) { ctx_->upload(a, host, bytes, offset); }

 private:
  Context* ctx_;
};
using VulkanKvCache = DeviceKvCache<KvMemory>;

// The decoder's weights on the device (uploaded once; shareable by several VulkanDecoders on the
// same Context); the routed experts of a projection are one StackedMatrix.
struct DecoderDeviceWeights : DeviceDecoderWeights<DeviceMatrix, Buffer, StackedMatrix> {
  static std::shared_ptr<DecoderDeviceWeights> upload(Context& c, const DecoderWeights& w) {
    struct Uploader {
      Context& c;
      DeviceMatrix matrix(const TensorView& t) { return upload_matrix(c, t); }
      Buffer vector(const TensorView& t) { return upload_f32(c, t); }
      StackedMatrix stacked(const std::vector<const TensorView*>& mats, const std::string& what) {
        return upload_stacked(c, mats, what);
      }
      static size_t bytes(const DeviceMatrix& m) { return m.bytes(); }
      static size_t bytes(const StackedMatrix& m) { return m.bytes(); }
    } up{c};
    auto d = std::make_shared<DecoderDeviceWeights>();
    d->upload_all(w, up);
    return d;
  }
};

// Where rows start in a Vulkan buffer (DeviceDecoder's Rows).
struct BufferRows {
  const Buffer* buffer = nullptr;
  int64_t at = 0;  // floats into it
};

class VulkanDecoder : public DeviceDecoder<VulkanDecoder, VulkanKvCache> {
 public:
  static constexpr BackendCapabilities capabilities{/*host_kv*/ false, /*batched_decode*/ false, /*multi_token_decode*/ true};

  VulkanDecoder(Context& ctx, const DecoderConfig& config, const DecoderWeights& weights,
                std::shared_ptr<const DecoderDeviceWeights> device_weights = nullptr)
      : DeviceDecoder(config, weights), ctx_(ctx), rope_(config.head_dim, config.rope_theta),
        d_(device_weights ? std::move(device_weights) : DecoderDeviceWeights::upload(ctx, weights)),
        dims_{config.heads, config.kv_heads, config.head_dim},
        device_sparse_(ctx) {
    require(int(d_->layers.size()) == c_->layers, Status::invalid_argument, "device weights were uploaded for a different config");
    require(c_->head_dim <= ops::kMaxAttentionHeadDim, Status::unsupported, [&] {
      return "Vulkan backend: head_dim " + std::to_string(c_->head_dim) + " exceeds " + std::to_string(ops::kMaxAttentionHeadDim);
    });
    logits_.resize(size_t(c_->vocab));
  }

  Context& context() { return ctx_; }
  const DecoderDeviceWeights& device_weights() const { return *d_; }

  // Head h's reference spans in layer `layer` of the last sparse decode step, as the device
  // selected them (tests compare them with SparseReference's).
  std::vector<RowSpan> device_selection(int layer, int h) const { return device_sparse_.selection(layer, h); }

  // Bytes of working memory held: the device activation buffers and the host-side copies.
  size_t scratch_bytes() const {
    size_t n = host_.scratch_bytes() + logits_.capacity() * sizeof(float);
    for (const Buffer* b : {&x_, &a_, &f_, &q_, &attn_, &gate_, &up_, &probs_, &route_, &rows_in_, &rows_out_, &shared_,
                            &logits_buf_, &seg_k_, &seg_v_, &cos_sin_})
      n += b->size();
    return n + device_sparse_.bytes();
  }

  const std::vector<float>& decode_step(int32_t token, int64_t position, VulkanKvCache& cache) {
    const int64_t qr = int64_t(c_->heads) * c_->head_dim;
    host_.check_step(token, position, cache);
    const int64_t slot = cache.claim_slot();
    const int64_t ref = cache.reference_rows(), gen = cache.generated_rows();
    ensure_scratch(1);
    ensure_logits(1);
    load_rope(&position, 1);
    const bool sparse = begin_sparse_step(ref);

    Recorder rec(ctx_);
    if (sparse) device_sparse_.begin_step(rec);
    step_layers(
        rec, &token, 1,
        [&](int l) { return std::make_pair(kv_rows(cache.generated_k(l), slot), kv_rows(cache.generated_v(l), slot)); },
        [&](int l) {
          const ops::KvSet reference{&cache.reference_k(l), &cache.reference_v(l), ref},
              window{&cache.generated_k(l), &cache.generated_v(l), gen};
          if (sparse) {
            device_sparse_.select(rec, l, q_);
            device_sparse_.attend(rec, l, q_, reference, window, attn_);
          } else {
            ops::attention(rec, q_, 0, 1, qr, dims_, reference, window, false, 0, attn_, 0, qr);
          }
        });
    op_logits(rec, 0, 1);
    rec.submit();
    end_sparse_step(sparse, ref);
    ctx_.download(logits_buf_, logits_.data(), logits_.size() * 4);
    return logits_;
  }

  // As uocr::Decoder::decode_tokens: n given tokens at first_position.., every row's keys, values
  // and logits (when asked: [n, vocab]) the bits of n decode_step() calls (page groups' window
  // recompute, draft verification). The rows go through the weights kStackedRows at a time, on
  // the mat-vec path a step takes; in each layer row i's key and value go to its slot just before
  // it attends, so it sees the later rows' slots as they were. With SR-SWA attached: n steps.
  void decode_tokens(const int32_t* tokens, int64_t n, int64_t first_position, VulkanKvCache& cache,
                     float* logits = nullptr) {
    require(n >= 0, Status::invalid_argument, "decode_tokens: negative token count");
    for (int64_t i = 0; i < n; ++i) host_.check_step(tokens[i], first_position + i, cache);
    if (sparse_) {
      for (int64_t i = 0; i < n; ++i) {
        const std::vector<float>& row = decode_step(tokens[i], first_position + i, cache);
        if (logits) std::copy(row.begin(), row.end(), logits + i * c_->vocab);
      }
      return;
    }
    const int64_t qr = int64_t(c_->heads) * c_->head_dim;
    const size_t row_bytes = size_t(c_->kv_heads) * size_t(c_->head_dim) * 4;
    const int64_t block = std::min(n, kStackedRows);
    ensure_scratch(block);
    ensure_logits(block);
    ensure_segment_rows(block);
    for (int64_t i0 = 0; i0 < n; i0 += kStackedRows) {
      const int64_t m = std::min(kStackedRows, n - i0);
      int64_t slot[kStackedRows], seen[kStackedRows], position[kStackedRows];
      for (int64_t i = 0; i < m; ++i) {
        slot[i] = cache.claim_slot();
        seen[i] = cache.generated_rows();
        position[i] = first_position + i0 + i;
      }
      load_rope(position, m);
      const int64_t ref = cache.reference_rows();
      Recorder rec(ctx_);
      step_layers(
          rec, tokens + i0, m, [&](int) { return std::make_pair(kv_rows(seg_k_, 0), kv_rows(seg_v_, 0)); },
          [&](int l) {
            const Buffer& gk = cache.generated_k(l);
            const Buffer& gv = cache.generated_v(l);
            const ops::KvSet reference{&cache.reference_k(l), &cache.reference_v(l), ref};
            for (int64_t i = 0; i < m; ++i) {
              rec.copy(seg_k_, size_t(i) * row_bytes, gk, size_t(slot[i]) * row_bytes, row_bytes);
              rec.copy(seg_v_, size_t(i) * row_bytes, gv, size_t(slot[i]) * row_bytes, row_bytes);
              ops::attention(rec, q_, i * qr, 1, qr, dims_, reference, ops::KvSet{&gk, &gv, seen[i]}, false, 0, attn_,
                             i * qr, qr);
            }
          });
      if (logits) op_logits(rec, 0, m);
      rec.submit();
      if (logits) ctx_.download(logits_buf_, logits + i0 * c_->vocab, size_t(m * c_->vocab) * 4);
    }
  }

  // One layer's feed-forward half (dense MLP or MoE) on rows of x [m, hidden]; the op that
  // prefill/decode_step run after the post-attention norm (exposed for conformance tests).
  std::vector<float> feed_forward(int layer, const std::vector<float>& x) {
    require(layer >= 0 && layer < c_->layers && !x.empty() && x.size() % size_t(c_->hidden) == 0, Status::invalid_argument,
            "feed_forward: bad layer or input size");
    const int64_t m = int64_t(x.size()) / c_->hidden;
    ensure_scratch(m);
    ctx_.upload(a_, x.data(), x.size() * 4);
    Recorder rec(ctx_);
    feed_forward(rec, layer, m);
    rec.submit();
    return ctx_.download_vector<float>(f_, x.size());
  }

 private:
  friend class DeviceDecoder<VulkanDecoder, VulkanKvCache>;
  using DeviceDecoder::feed_forward;

  // DeviceDecoder's ops, recorded into one command buffer per call.
  Recorder queue() { return Recorder(ctx_); }
  VulkanSparseReference& sparse_device() { return device_sparse_; }
  DecoderActivations<BufferRows> activations() const {
    return {{&x_, 0}, {&a_, 0}, {&f_, 0}, {&q_, 0}, {&attn_, 0}, {&shared_, 0}};
  }
  // Cache rows from `row` on (where a layer writes its new keys or values).
  BufferRows kv_rows(const Buffer& b, int64_t row) const { return {&b, row * int64_t(c_->kv_heads) * c_->head_dim}; }

  // A prefill attends to its own rows in the cache when they start at row 0 with no context;
  // otherwise the context rows and the new ones are gathered into seg_k_ / seg_v_.
  static bool attends_in_cache(int64_t dst, int64_t context_rows) { return dst == 0 && context_rows == 0; }

  void begin_rows(const float* embeddings, int64_t t, const int64_t* positions, const VulkanKvCache&, int64_t dst,
                  int64_t context_rows) {
    ensure_scratch(t);
    if (!attends_in_cache(dst, context_rows)) ensure_segment_rows(context_rows + t);
    ctx_.upload(x_, embeddings, size_t(t * c_->hidden) * 4);
    load_rope(positions, t);
  }

  // Per layer the context rows and the segment's own keys/values are gathered into one buffer,
  // context first, so the causal attention shader with causal_base = context rows gives each new
  // token the context (unmasked) and the segment up to itself.
  void attend_segment(Recorder& rec, int l, const VulkanKvCache& cache, int64_t dst, int64_t t,
                      const std::vector<RowSpan>& context, int64_t context_rows) {
    const int64_t qr = int64_t(c_->heads) * c_->head_dim;
    const Buffer& k = cache.reference_k(l);
    const Buffer& v = cache.reference_v(l);
    if (attends_in_cache(dst, context_rows)) {
      ops::attention(rec, q_, 0, t, qr, dims_, ops::KvSet{&k, &v, t}, ops::KvSet{}, true, 0, attn_, 0, qr);
      return;
    }
    const size_t row_bytes = size_t(c_->kv_heads) * size_t(c_->head_dim) * 4;
    int64_t at = 0;
    for (const RowSpan& c : context) {
      if (c.rows == 0) continue;
      rec.copy(k, size_t(c.begin) * row_bytes, seg_k_, size_t(at) * row_bytes, size_t(c.rows) * row_bytes);
      rec.copy(v, size_t(c.begin) * row_bytes, seg_v_, size_t(at) * row_bytes, size_t(c.rows) * row_bytes);
      at += c.rows;
    }
    rec.copy(k, size_t(dst) * row_bytes, seg_k_, size_t(at) * row_bytes, size_t(t) * row_bytes);
    rec.copy(v, size_t(dst) * row_bytes, seg_v_, size_t(at) * row_bytes, size_t(t) * row_bytes);
    ops::attention(rec, q_, 0, t, qr, dims_, ops::KvSet{&seg_k_, &seg_v_, context_rows + t}, ops::KvSet{}, true,
                   context_rows, attn_, 0, qr);
  }

  // Submits what rec holds; the logits of x_ rows [first, t) on the host. The logits of many rows
  // exceed one binding: lm_head in blocks of rows.
  std::vector<float> logits_of_rows(Recorder& rec, int64_t first, int64_t t) {
    const int64_t rows = t - first;
    if (rows == 0) {
      rec.submit();
      return {};
    }
    std::vector<float> logits(size_t(rows * c_->vocab));
    const int64_t block = std::max<int64_t>(1, std::min<int64_t>(rows, int64_t(ctx_.max_binding_bytes() / 4) / c_->vocab));
    ensure_logits(block);
    for (int64_t r0 = 0; r0 < rows; r0 += block) {
      const int64_t n = std::min(block, rows - r0);
      op_logits(rec, first + r0, n);
      rec.submit();
      ctx_.download(logits_buf_, logits.data() + size_t(r0 * c_->vocab), size_t(n * c_->vocab) * 4);
    }
    return logits;
  }

  // logits_buf_ = lm_head(final norm(x_ rows first..first + rows)) (ensure_logits(rows) first).
  void op_logits(Recorder& rec, int64_t first, int64_t rows) {
    ops::rms_norm(rec, x_, first * c_->hidden, rows, c_->hidden, d_->final_norm, c_->rms_eps, a_, 0);
    ops::linear(rec, a_, 0, rows, c_->hidden, d_->lm_head, nullptr, logits_buf_, 0, c_->vocab);
  }
  void op_rms_norm(Recorder& rec, BufferRows in, int64_t rows, const Buffer& w, BufferRows out) {
    ops::rms_norm(rec, *in.buffer, in.at, rows, c_->hidden, w, c_->rms_eps, *out.buffer, out.at);
  }
  void op_linear(Recorder& rec, BufferRows in, int64_t rows, const DeviceMatrix& w, BufferRows out) {
    ops::linear(rec, *in.buffer, in.at, rows, w.cols, w, nullptr, *out.buffer, out.at, w.rows);
  }
  void op_rope(Recorder& rec, BufferRows x, int64_t rows, int heads) {
    ops::rope(rec, *x.buffer, x.at, rows, heads, c_->head_dim, int64_t(heads) * c_->head_dim, cos_sin_);
  }
  void op_add(Recorder& rec, BufferRows x, BufferRows y, int64_t n) { ops::add(rec, *x.buffer, x.at, *y.buffer, y.at, n); }
  // Token ids are non-negative (checked), so their int32 bytes are the shader's uint32 ids.
  void op_embed(Recorder& rec, const int32_t* tokens, int64_t n) {
    ops::embed(rec, rec.temp(tokens, size_t(n) * 4), n, d_->embed, x_, 0);
  }

  static constexpr int64_t kMlpChunk = 256;   // rows per dense-MLP pass, as the CPU path
  static constexpr int64_t kMoeChunk = 1024;  // rows per MoE routing: bounds the grouped buffers
  // MoE blocks of up to this many rows (decode steps) run the stacked mat-vecs: rows x k slots,
  // each reading its expert's weights, in 3 dispatches per stack chunk; larger ones one GEMM per
  // expert and projection (each expert's weights read once for all its rows).
  static constexpr int64_t kStackedRows = 4;

  void ensure_scratch(int64_t t) {
    if (t <= rows_) return;
    const int64_t hidden = c_->hidden, qr = int64_t(c_->heads) * c_->head_dim;
    auto buf = [&](int64_t floats, const char* what) { return ctx_.buffer(size_t(std::max<int64_t>(1, floats)) * 4, MemoryUse::activations, what); };
    x_ = buf(t * hidden, "decoder hidden state");
    a_ = buf(t * hidden, "decoder normed state");
    f_ = buf(t * hidden, "decoder sublayer output");
    q_ = buf(t * qr, "decoder queries");
    attn_ = buf(t * qr, "decoder attention output");
    // MLPs run in chunks of rows; routed experts over a block's grouped rows (k per row).
    const int64_t mlp_rows = std::min(t, kMlpChunk), moe_rows = std::min(t, kMoeChunk) * c_->experts_per_token;
    gate_ = buf(std::max(mlp_rows * row_inter_, moe_rows * expert_inter_), "MLP gate");
    up_ = buf(std::max(mlp_rows * row_inter_, moe_rows * expert_inter_), "MLP up");
    if (c_->n_routed_experts > 0) {
      probs_ = buf(std::min(t, kMoeChunk) * c_->n_routed_experts, "MoE router logits");
      route_ = buf(ops::MoeRouteLayout{std::min(t, kMoeChunk), c_->n_routed_experts, c_->experts_per_token}.words(),
                   "MoE routing");
      rows_in_ = buf(moe_rows * hidden, "MoE expert inputs");  // grouped by expert
      rows_out_ = buf(moe_rows * hidden, "MoE expert outputs");
      shared_ = buf(t * hidden, "MoE shared expert output");
    }
    // Host-visible: load_rope() writes it in place before each submission.
    cos_sin_ = ctx_.buffer(size_t(t * c_->head_dim) * 4, MemoryUse::staging, "RoPE cos/sin");
    rows_ = t;
  }

  // The cos/sin of the `t` positions the next submission rotates (ensure_scratch(t) first; no
  // submission may be pending, which holds between calls).
  void load_rope(const int64_t* positions, int64_t t) {
    rope_cos_sin(rope_, c_->head_dim, positions, t, static_cast<float*>(cos_sin_.mapped()));
  }

  // seg_k_ / seg_v_ hold at least `rows` key / value rows.
  void ensure_segment_rows(int64_t rows) {
    if (rows <= segment_rows_) return;
    const size_t bytes = size_t(rows) * size_t(c_->kv_heads) * size_t(c_->head_dim) * 4;
    seg_k_ = ctx_.buffer(bytes, MemoryUse::activations, "segment keys");
    seg_v_ = ctx_.buffer(bytes, MemoryUse::activations, "segment values");
    segment_rows_ = rows;
  }

  void ensure_logits(int64_t rows) {
    if (rows <= logits_rows_) return;
    logits_buf_ = ctx_.buffer(size_t(rows * c_->vocab) * 4, MemoryUse::activations, "logits");
    logits_rows_ = rows;
  }

  // y[m, hidden] = down(silu(gate·x) ⊙ up·x), in passes of kMlpChunk rows.
  void op_mlp(Recorder& rec, const DecoderDeviceWeights::Mlp& w, BufferRows in, int64_t m, BufferRows out) {
    const Buffer &x = *in.buffer, &y = *out.buffer;
    const int64_t x_off = in.at, y_off = out.at;
    const int64_t hidden = c_->hidden, inter = w.gate.rows, chunk = kMlpChunk;
    for (int64_t r0 = 0; r0 < m; r0 += chunk) {
      const int64_t rows = std::min(chunk, m - r0);
      ops::linear(rec, x, x_off + r0 * hidden, rows, hidden, w.gate, nullptr, gate_, 0, inter);
      ops::linear(rec, x, x_off + r0 * hidden, rows, hidden, w.up, nullptr, up_, 0, inter);
      ops::silu_mul(rec, gate_, 0, up_, 0, rows * inter);
      ops::linear(rec, gate_, 0, rows, inter, w.down, nullptr, y, y_off + r0 * hidden, hidden);
    }
  }

  // f_ = the routed experts of a_'s t rows (+ shared_). Per block of up to kMoeChunk rows: router
  // GEMM, routing on the device, rows gathered by expert, then the expert projections over the
  // stacked weights: for up to kStackedRows rows (decode) one mat-vec dispatch per projection (and
  // stack chunk) running every slot's mat-vec with its expert read from the routing; for more,
  // each expert's GEMMs launched indirectly over its rows (one unordered group per GEMM: the
  // experts' rows are disjoint). Last the weighted sum into f_.
  void op_routed_experts(Recorder& rec, int l, int64_t t, bool with_shared) {
    const DecoderDeviceWeights::Layer& L = d_->layers[size_t(l)];
    const int64_t hidden = c_->hidden;
    const DecoderDeviceWeights::Experts& X = L.experts;
    const int64_t e_count = c_->n_routed_experts, inter = X.gate.rows;
    const ops::RoutedGemm gate_up = ops::routed_gemm(X.gate), down = ops::routed_gemm(X.down);
    for (int64_t r0 = 0; r0 < t; r0 += kMoeChunk) {
      const int64_t n = std::min(kMoeChunk, t - r0);
      const ops::MoeRouteLayout route{n, e_count, c_->experts_per_token};
      ops::linear(rec, a_, r0 * hidden, n, hidden, L.router, nullptr, probs_, 0, e_count);
      ops::moe_route(rec, probs_, route, c_->norm_topk_prob, c_->routed_scaling, gate_up, down, route_);
      ops::gather_rows(rec, route_, route.order(), route.assignments(), hidden, a_, r0 * hidden, rows_in_, 0);
      if (n <= kStackedRows) {
        rec.unordered([&] {
          ops::linear_stacked(rec, rows_in_, hidden, X.gate, route_, route, gate_, inter);
          ops::linear_stacked(rec, rows_in_, hidden, X.up, route_, route, up_, inter);
        });
        ops::silu_mul(rec, gate_, 0, up_, 0, route.assignments() * inter);
        rec.unordered([&] { ops::linear_stacked(rec, gate_, inter, X.down, route_, route, rows_out_, hidden); });
      } else {
        rec.unordered([&] {
          for (int64_t e = 0; e < e_count; ++e) {
            ops::linear_routed(rec, rows_in_, hidden, X.gate, gate_up, 0, route_, route, e, gate_, inter);
            ops::linear_routed(rec, rows_in_, hidden, X.up, gate_up, 0, route_, route, e, up_, inter);
          }
        });
        ops::silu_mul(rec, gate_, 0, up_, 0, route.assignments() * inter);
        rec.unordered([&] {
          for (int64_t e = 0; e < e_count; ++e)
            ops::linear_routed(rec, gate_, inter, X.down, down, 1, route_, route, e, rows_out_, hidden);
        });
      }
      ops::moe_combine(rec, route_, route, rows_out_, hidden, f_, r0);
    }
    if (with_shared) ops::add(rec, f_, 0, shared_, 0, t * hidden);
  }

  Context& ctx_;
  Rope rope_;     // the CPU's RoPE angles (load_rope)
  std::shared_ptr<const DecoderDeviceWeights> d_;
  ops::AttentionDims dims_;
  int64_t rows_ = 0, logits_rows_ = 0, segment_rows_ = 0;
  Buffer x_, a_, f_, q_, attn_, gate_, up_, probs_, rows_in_, rows_out_, shared_, logits_buf_;
  Buffer route_;          // MoE: one block's routing (ops::MoeRouteLayout)
  Buffer cos_sin_;        // RoPE cos/sin of the rows being rotated (load_rope)
  Buffer seg_k_, seg_v_;  // prefill_segment: the keys/values a segment attends to, gathered; decode_tokens: new rows
  VulkanSparseReference device_sparse_;  // SR-SWA selection on the device
  std::vector<float> logits_;
};

}  // namespace vulkan
UOCR_NAMESPACE_END
