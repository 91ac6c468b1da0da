// The DeepSeek-V2 decoder as every device backend runs it, written once: the layer (norm, q/k/v,
// RoPE, attention, output projection, residual, norm, feed-forward, residual), the feed-forward
// (dense MLP, or the routed experts with the shared expert) and what a device decoder answers on
// the host (prompt embeddings, the position limit, the SR-SWA attachment). uocr::Decoder
// (decoder/decoder.hpp) is the reference it follows op for op.
//
// A backend's decoder derives from DeviceDecoder<itself> (vulkan::VulkanDecoder,
// cuda::CudaDecoder) and supplies its ops on rows of device memory; how a call is driven (one
// command buffer per call on Vulkan; batches and graphs on CUDA) and how attention reads the KV
// cache stay the backend's. What a backend supplies:
//
//   Queue                  where the ops go (Vulkan: a Recorder; CUDA: the Context's stream)
//   Rows                   a place in device memory where rows start
//   Weights                its DeviceDecoderWeights (backends/device_weights.hpp)
//   device_weights()       the uploaded weights
//   activations()          Activations<Rows>: x (hidden state), a (normed), f (sublayer output),
//                          q, attn, shared (the shared expert's output), each from row 0
//   op_rms_norm(q, in, rows, weight, out)    RMSNorm over the hidden width, config's eps
//   op_linear(q, in, rows, matrix, out)      out = in · matrixᵀ, widths from the matrix
//   op_rope(q, rows_at, rows, heads)         RoPE of the call's positions, rows of heads·head_dim
//   op_add(q, x, y, n)                       x += y over n floats
//   op_mlp(q, mlp, in, rows, out)            out = down(silu(gate·in) ⊙ up·in)
//   op_routed_experts(q, layer, rows, with_shared)   f = Σ routing weight · expert(a), over the
//                          layer's chosen experts (routed on the device), plus `shared` when asked
#pragma once
#include <cstdint>
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

template <class Backend>
class DeviceDecoder {
 public:
  const DecoderConfig& config() const { return *c_; }

  // As uocr::Decoder::set_position_limit.
  void set_position_limit(int64_t limit) { host_.set_position_limit(limit); }
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
  DeviceDecoder(const DecoderConfig& config, const DecoderWeights& weights) : c_(&config), host_(config, weights) {}

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

  const DecoderConfig* c_;
  Decoder host_;  // prompt embeddings on the host, the position limit and the calls' checks
  SparseReference* sparse_ = nullptr;

 private:
  Backend& backend() { return static_cast<Backend&>(*this); }
};

UOCR_NAMESPACE_END
