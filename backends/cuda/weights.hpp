// Checkpoint tensors on a CUDA device: matrices keep their stored type (bf16 stays bf16; the
// kernels widen on the fly), norm vectors are widened to float32 once (as uocr::Decoder does),
// and the routed experts of one MoE projection are stacked into one [experts, rows, cols]
// matrix so one grouped launch serves them all.
#pragma once
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/context.hpp"
#include "backends/cuda/ops.hpp"
#include "backends/device/weights.hpp"
#include "uocr/io/safetensors.hpp"
#include "uocr/model/config.hpp"
#include "uocr/model/weights.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN
namespace cuda {

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
// same Context), plus the RoPE inverse frequencies the rotation kernel reads.
struct DecoderDeviceWeights : DeviceDecoderWeights<DeviceMatrix, Buffer, DeviceMatrix> {
  Buffer inv_freq;

  static std::shared_ptr<DecoderDeviceWeights> upload(Context& c, const DecoderConfig& cfg, const DecoderWeights& w) {
    require(int(w.layers.size()) == cfg.layers, Status::invalid_argument, "decoder weights were bound for a different config");
    struct Uploader {
      Context& c;
      DeviceMatrix matrix(const TensorView& t) { return upload_matrix(c, t); }
      Buffer vector(const TensorView& t) { return upload_f32(c, t); }
      DeviceMatrix stacked(const std::vector<const TensorView*>& mats, const std::string&) { return upload_stacked(c, mats); }
      static size_t bytes(const DeviceMatrix& m) { return m.view.bytes(); }
    } up{c};
    auto d = std::make_shared<DecoderDeviceWeights>();
    d->upload_all(w, up);
    const std::vector<float> inv = rope_inv_freq(cfg.head_dim, cfg.rope_theta);
    d->inv_freq = upload_f32(c, inv.data(), inv.size(), "RoPE inverse frequencies");
    return d;
  }
};

}  // namespace cuda
UOCR_NAMESPACE_END
