// The DeepSeek-V2 decoder as every device backend runs it, written once: prefill and segment
// prefill (page groups) from the host's checks to the logits, a decode step's layers, the layer
// (norm, q/k/v, RoPE, attention, output projection, residual, norm, feed-forward, residual), the
// feed-forward (dense MLP, or the routed experts with the shared expert), SR-SWA's bookkeeping
// around a decode step, the MLP widths scratch is sized by, and what a device decoder answers on
// the host (prompt embeddings, the position limit, the SR-SWA attachment). uocr::Decoder
// (decoder/decoder.hpp) is the reference it follows op for op.
//
// A backend's decoder derives from DeviceDecoder<itself, its KV cache> (vulkan::VulkanDecoder,
// cuda::CudaDecoder) and supplies its ops on rows of device memory. What stays the backend's is
// how a decode step is driven (one command buffer per step on Vulkan; batches of sequences and
// graph replay on CUDA) and how attention reads the KV cache. What a backend supplies:
//
//   Rows                   a place in device memory where rows start
//   queue()                where the ops of a call go (Vulkan: a new Recorder; CUDA: the Context)
//   device_weights()       its DeviceDecoderWeights (backends/device/weights.hpp), uploaded
//   activations()          DecoderActivations<Rows>: x (hidden state), a (normed), f (sublayer
//                          output), q, attn, shared (the shared expert's output), each from row 0
//   kv_rows(cache_rows, row)                 where row `row` of a cache array starts
//   begin_rows(embeddings, t, positions, cache, dst, context_rows)   before a prefill's queue
//                          opens: scratch for t rows (and context_rows gathered ones), x = the
//                          embeddings, the positions RoPE rotates by
//   attend_segment(q, l, cache, dst, t, context, context_rows)   attn = layer l's attention of
//                          the t new rows (keys at reference rows dst..) over `context` in full
//                          and causally over each other
//   logits_of_rows(q, first, t)              the queue's work done; logits of rows [first, t) of
//                          x on the host, [(t - first) · vocab] (none when first == t)
//   sparse_device()        its DeviceSparseReference (SR-SWA's mirror on the device)
//   op_embed(q, tokens, n)                   x = the embeddings of n tokens
//   op_rms_norm(q, in, rows, weight, out)    RMSNorm over the hidden width, config's eps
//   op_linear(q, in, rows, matrix, out)      out = in · matrixᵀ, widths from the matrix
//   op_rope(q, rows_at, rows, heads)         RoPE of the call's positions, rows of heads·head_dim
//   op_add(q, x, y, n)                       x += y over n floats
//   op_mlp(q, mlp, in, rows, out)            out = down(silu(gate·in) ⊙ up·in)
//   op_routed_experts(q, layer, rows, with_shared)   f = Σ routing weight · expert(a), over the
//                          layer's chosen experts (routed on the device), plus `shared` when asked
#pragma once
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "uocr/decoder/decoder.hpp"
#include "uocr/decoder/sparse_reference.hpp"
#include "uocr/model/config.hpp"
#include "uocr/model/weights.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

// The activation rows a device decoder's layer works on.
template <class Rows>
struct DecoderActivations {
  Rows x, a, f, q, attn, shared;
};

template <class Backend, class Cache>
class DeviceDecoder {
 public:
  const DecoderConfig& config() const { return *c_; }

  // As uocr::Decoder::prefill: the prompt's t rows become reference rows 0.. of the reset cache;
  // logits of the last row [vocab], or of every row [t, vocab].
  std::vector<float> prefill(const std::vector<float>& embeddings, int64_t first_position, Cache& cache,
                             PrefillLogits which = PrefillLogits::last) {
    const int64_t t = host_.check_prefill(embeddings.size(), first_position, cache);
    cache.reset(t);
    std::vector<int64_t> positions(static_cast<size_t>(t));
    std::iota(positions.begin(), positions.end(), first_position);
    return prefill_rows(embeddings.data(), t, positions.data(), cache, 0, {}, 0, which == PrefillLogits::all ? 0 : t - 1);
  }

  // As uocr::Decoder::prefill_segment (page groups): new row i goes to reference row dst + i and
  // attends to the `context` rows in full and to new rows 0..i; the last row's logits when asked.
  std::vector<float> prefill_segment(const float* embeddings, int64_t t, const int64_t* positions, Cache& cache,
                                     int64_t dst, const std::vector<RowSpan>& context, bool want_logits = false) {
    const int64_t context_rows = host_.check_segment(t, positions, cache, dst, context);
    return prefill_rows(embeddings, t, positions, cache, dst, context, context_rows, want_logits ? t - 1 : t);
  }

  // As uocr::Decoder::set_position_limit and set_deadline (a layer is checked before it is queued).
  void set_position_limit(int64_t limit) { host_.set_position_limit(limit); }
  void set_deadline(const Deadline& deadline) { host_.set_deadline(deadline); }
  int64_t position_limit() const { return host_.position_limit(); }

  // Host-side, identical to uocr::Decoder's (the prefill input is built on the host).
  std::vector<float> embed(const std::vector<int32_t>& ids) const { return host_.embed(ids); }
  std::vector<float> embed_prompt(const std::vector<int32_t>& ids, const std::vector<float>& visual,
                                  int32_t image_token = kImageTokenId) const {
    return host_.embed_prompt(ids, visual, image_token);
  }

  // SR-SWA for decode steps (page groups attach it; nullptr: dense R-SWA). Selection and
  // attention run on the device.
  void set_decode_attention(SparseReference* sparse) { sparse_ = sparse; }

 protected:
  DeviceDecoder(const DecoderConfig& config, const DecoderWeights& weights) : c_(&config), host_(config, weights) {
    for (const DecoderLayerWeights& l : weights.layers) {
      if (!l.moe) row_inter_ = std::max(row_inter_, l.dense.gate.out());
      if (l.moe && l.has_shared) row_inter_ = std::max(row_inter_, l.shared.gate.out());
      if (l.moe && !l.experts.empty()) expert_inter_ = std::max(expert_inter_, l.experts[0].gate.out());
    }
  }

  // t embedded rows at `positions` through every layer, their keys and values written at reference
  // rows dst.. (attending as prefill_segment says), then the logits of rows [first_logit, t).
  std::vector<float> prefill_rows(const float* embeddings, int64_t t, const int64_t* positions, Cache& cache, int64_t dst,
                                  const std::vector<RowSpan>& context, int64_t context_rows, int64_t first_logit) {
    Backend& b = backend();
    b.begin_rows(embeddings, t, positions, cache, dst, context_rows);
    auto&& queue = b.queue();
    for (int l = 0; l < c_->layers; ++l) {
      host_.check_deadline(l);
      layer(queue, l, t, b.kv_rows(cache.reference_k(l), dst), b.kv_rows(cache.reference_v(l), dst),
            [&] { b.attend_segment(queue, l, cache, dst, t, context, context_rows); });
    }
    return b.logits_of_rows(queue, first_logit, t);
  }

  // Layer l over the t rows of x: q, and the rows' keys and values into k / v (t rows from there),
  // RoPE, then attend() puts the attention into attn (the one part that differs between prefill,
  // segment and decode step), the output projection, residual, feed-forward, residual.
  template <class Queue, class Rows, class Attend>
  void layer(Queue& queue, int l, int64_t t, Rows k, Rows v, Attend&& attend) {
    Backend& b = backend();
    const auto& L = b.device_weights().layers[size_t(l)];
    const DecoderActivations<Rows> r = b.activations();
    b.op_rms_norm(queue, r.x, t, L.input_norm, r.a);
    b.op_linear(queue, r.a, t, L.q, r.q);
    b.op_linear(queue, r.a, t, L.k, k);
    b.op_linear(queue, r.a, t, L.v, v);
    b.op_rope(queue, r.q, t, c_->heads);
    b.op_rope(queue, k, t, c_->kv_heads);
    attend();
    b.op_linear(queue, r.attn, t, L.o, r.f);
    b.op_add(queue, r.x, r.f, t * c_->hidden);
    b.op_rms_norm(queue, r.x, t, L.post_norm, r.a);
    feed_forward(queue, l, t);
    b.op_add(queue, r.x, r.f, t * c_->hidden);
  }

  // The device half of a decode step over n rows: their tokens embedded (op_embed: `tokens` as
  // the backend passes them), then every layer, row i's new key and value going to
  // new_rows(l).first / .second and attend(l) putting the rows' attention into attn.
  template <class Queue, class Tokens, class NewRows, class Attend>
  void step_layers(Queue& queue, Tokens tokens, int64_t n, NewRows&& new_rows, Attend&& attend) {
    backend().op_embed(queue, tokens, n);
    for (int l = 0; l < c_->layers; ++l) {
      const auto kv = new_rows(l);
      layer(queue, l, n, kv.first, kv.second, [&] { attend(l); });
    }
  }

  // f = FFN(a) over t rows: the dense MLP, or the routed experts plus the shared expert.
  template <class Queue>
  void feed_forward(Queue& queue, int l, int64_t t) {
    Backend& b = backend();
    const auto& L = b.device_weights().layers[size_t(l)];
    const auto r = b.activations();
    if (!c_->is_moe_layer(l)) {
      b.op_mlp(queue, L.dense, r.a, t, r.f);
      return;
    }
    const bool shared = c_->n_shared_experts > 0;
    if (shared) b.op_mlp(queue, L.shared, r.a, t, r.shared);
    b.op_routed_experts(queue, l, t, shared);
  }

  // SR-SWA around a one-row decode step over `reference_rows` reference rows: true when the device
  // selects this step's spans (SparseReference::begin_device_step; the mirror is then synced).
  bool begin_sparse_step(int64_t reference_rows) {
    if (!sparse_ || !sparse_->begin_device_step(c_->layers, reference_rows, AttentionShape{c_->heads, c_->kv_heads, c_->head_dim}))
      return false;
    backend().sparse_device().sync(*sparse_, c_->heads);
    return true;
  }
  // After the step's last layer: its selections counted (the device's two counters, one read).
  void end_sparse_step(bool selected, int64_t reference_rows) {
    if (!sparse_) return;
    const auto counts = selected ? backend().sparse_device().step_counts() : decltype(backend().sparse_device().step_counts()){};
    sparse_->end_device_step(int64_t(c_->heads) * c_->layers, reference_rows, selected, counts.rows_attended,
                             counts.bounds_evaluated);
  }

  const DecoderConfig* c_;
  Decoder host_;  // prompt embeddings on the host, the position limit and the calls' checks
  SparseReference* sparse_ = nullptr;
  // The widest MLP intermediate of a token row (dense MLP or shared expert) and of a routed expert.
  int64_t row_inter_ = 1, expert_inter_ = 0;

 private:
  Backend& backend() { return static_cast<Backend&>(*this); }
};

UOCR_NAMESPACE_END
