// Checkpoint tensors on a CUDA device: matrices keep their stored type (bf16 stays bf16; the
// kernels widen on the fly), norm vectors are widened to float32 once (as uocr::Decoder does),
// and the routed experts of one MoE projection are stacked into one [experts, rows, cols]
// matrix so one grouped launch serves them all.
#pragma once
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "uocr/backends/cuda/context.hpp"
#include "uocr/backends/cuda/ops.hpp"
#include "uocr/io/safetensors.hpp"
#include "uocr/model/config.hpp"
#include "uocr/model/weights.hpp"

namespace uocr::cuda {

// A checkpoint tensor as [dim0, numel / dim0] in its stored type.
inline DeviceMatrix upload_matrix(Context& c, const TensorView& t) {
  require(!t.shape.empty() && t.numel() > 0, Status::invalid_argument, [&] { return "CUDA: empty tensor " + t.name; });
  DeviceMatrix m;
  m.buf = c.alloc(size_t(t.numel()) * dtype_size(t.dtype), t.name.c_str());
  m.view = MatrixView{m.buf.data(), t.dtype, 1, t.dim(0), t.numel() / t.dim(0)};
  c.upload(m.buf, 0, t.data, m.view.bytes());
  return m;
}

// Tensors of one shape and type stacked as [tensors.size(), rows, cols].
inline DeviceMatrix upload_stacked(Context& c, const std::vector<const TensorView*>& tensors) {
  require(!tensors.empty(), Status::invalid_argument, "CUDA: nothing to stack");
  const TensorView& first = *tensors[0];
  for (const TensorView* t : tensors)
    require(t->dtype == first.dtype && t->shape == first.shape, Status::invalid_model, [&] {
      return "CUDA: stacked tensors differ in type or shape: " + first.name + " vs " + t->name;
    });
  DeviceMatrix m;
  const size_t each = size_t(first.numel()) * dtype_size(first.dtype);
  m.buf = c.alloc(each * tensors.size(), first.name.c_str());
  m.view = MatrixView{m.buf.data(), first.dtype, int64_t(tensors.size()), first.dim(0), first.numel() / first.dim(0)};
  for (size_t i = 0; i < tensors.size(); ++i) c.upload(m.buf, i * each, tensors[i]->data, each);
  return m;
}

inline Buffer upload_f32(Context& c, const float* data, size_t n, const char* what) {
  Buffer b = c.alloc(n * sizeof(float), what);
  c.upload(b, 0, data, n * sizeof(float));
  return b;
}

inline Buffer upload_f32(Context& c, const TensorView& t) {
  const std::vector<float> v = t.to_vector();
  return upload_f32(c, v.data(), v.size(), t.name.c_str());
}

// uocr::Rope's inverse frequencies, computed exactly as it does on the host.
inline std::vector<float> rope_inv_freq(int head_dim, float theta) {
  std::vector<float> f(size_t(head_dim / 2));
  for (int i = 0; i < head_dim / 2; ++i) f[size_t(i)] = 1.0f / std::pow(theta, float(2 * i) / float(head_dim));
  return f;
}

// The decoder's weights on one device (uploaded once, shareable by every CudaDecoder on the
// same Context).
struct DecoderDeviceWeights {
  struct Mlp {
    DeviceMatrix gate, up, down;
  };
  struct Layer {
    Buffer input_norm, post_norm;
    DeviceMatrix q, k, v, o;
    Mlp dense;          // dense layers
    DeviceMatrix router;  // MoE layers
    Mlp experts;        // stacked [experts, rows, cols]
    Mlp shared;         // when the layer has shared experts
  };
  DeviceMatrix embed, lm_head;
  Buffer final_norm, inv_freq;
  std::vector<Layer> layers;
  size_t bytes = 0;  // matrices only

  static std::shared_ptr<DecoderDeviceWeights> upload(Context& c, const DecoderConfig& cfg, const DecoderWeights& w) {
    require(int(w.layers.size()) == cfg.layers, Status::invalid_argument, "decoder weights were bound for a different config");
    auto d = std::make_shared<DecoderDeviceWeights>();
    auto mat = [&](const TensorView* t) {
      DeviceMatrix m = upload_matrix(c, *t);
      d->bytes += m.view.bytes();
      return m;
    };
    auto mlp = [&](const MlpWeights& m) { return Mlp{mat(m.gate.weight), mat(m.up.weight), mat(m.down.weight)}; };
    d->embed = mat(w.embed);
    d->lm_head = mat(w.lm_head);
    d->final_norm = upload_f32(c, *w.final_norm.weight);
    const std::vector<float> inv = rope_inv_freq(cfg.head_dim, cfg.rope_theta);
    d->inv_freq = upload_f32(c, inv.data(), inv.size(), "RoPE inverse frequencies");
    for (const DecoderLayerWeights& lw : w.layers) {
      Layer l;
      l.input_norm = upload_f32(c, *lw.input_norm.weight);
      l.post_norm = upload_f32(c, *lw.post_attention_norm.weight);
      l.q = mat(lw.q.weight);
      l.k = mat(lw.k.weight);
      l.v = mat(lw.v.weight);
      l.o = mat(lw.o.weight);
      if (lw.moe) {
        l.router = mat(lw.router.weight);
        std::vector<const TensorView*> gate, up, down;
        for (const MlpWeights& e : lw.experts) {
          gate.push_back(e.gate.weight);
          up.push_back(e.up.weight);
          down.push_back(e.down.weight);
        }
        l.experts = Mlp{upload_stacked(c, gate), upload_stacked(c, up), upload_stacked(c, down)};
        d->bytes += l.experts.gate.view.bytes() + l.experts.up.view.bytes() + l.experts.down.view.bytes();
        if (lw.has_shared) l.shared = mlp(lw.shared);
      } else {
        l.dense = mlp(lw.dense);
      }
      d->layers.push_back(std::move(l));
    }
    return d;
  }
};

}  // namespace uocr::cuda
