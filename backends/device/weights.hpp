// The decoder's checkpoint tensors as a device backend holds them, and the one walk over
// uocr::DecoderWeights that fills them. A backend supplies its storage types and an uploader:
//
//   up.matrix(const TensorView&) -> Matrix          a weight matrix in its stored type
//   up.vector(const TensorView&) -> Vector          a norm vector (float32 on the device)
//   up.stacked(std::vector<const TensorView*>, name) -> Stacked   the routed experts of one
//                                                   projection, stacked as [experts, out, in]
//   up.bytes(const Matrix&), up.bytes(const Stacked&) -> size_t   device bytes, for accounting
//
// so that what is uploaded, and in which order, is written once for Vulkan and CUDA.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "uocr/core/error.hpp"
#include "uocr/model/weights.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

template <class Matrix, class Vector, class Stacked>
struct DeviceDecoderWeights {
  struct Mlp {
    Matrix gate, up, down;
  };
  struct Experts {  // routed experts, per projection stacked as [experts, out, in]
    Stacked gate, up, down;
  };
  struct Layer {
    Vector input_norm, post_norm;
    Matrix q, k, v, o;
    Mlp dense;      // dense layers
    Matrix router;  // MoE layers
    Experts experts;
    Mlp shared;  // when the MoE layer has shared experts
  };
  Matrix embed, lm_head;
  Vector final_norm;
  std::vector<Layer> layers;
  size_t bytes = 0;  // matrices only

  template <class Uploader>
  void upload_all(const DecoderWeights& w, Uploader& up) {
    auto device_type = [](const TensorView* t) {
      require(t->dtype != DType::i8, Status::unsupported, [&] {
        return "tensor " + t->name + " is int8: quantized folders run on the CPU backend (a device backend reads bf16, "
               "f16 or f32 weights)";
      });
      return t;
    };
    auto mat = [&](const TensorView* t) {
      Matrix m = up.matrix(*device_type(t));
      bytes += up.bytes(m);
      return m;
    };
    auto mlp = [&](const MlpWeights& m) { return Mlp{mat(m.gate.weight), mat(m.up.weight), mat(m.down.weight)}; };
    embed = mat(w.embed);
    lm_head = mat(w.lm_head);
    final_norm = up.vector(*w.final_norm.weight);
    for (const DecoderLayerWeights& lw : w.layers) {
      Layer l;
      l.input_norm = up.vector(*lw.input_norm.weight);
      l.post_norm = up.vector(*lw.post_attention_norm.weight);
      l.q = mat(lw.q.weight);
      l.k = mat(lw.k.weight);
      l.v = mat(lw.v.weight);
      l.o = mat(lw.o.weight);
      if (lw.moe) {
        l.router = mat(lw.router.weight);
        auto stack = [&](LinearWeights MlpWeights::*proj, const char* name) {
          std::vector<const TensorView*> mats;
          for (const MlpWeights& e : lw.experts) mats.push_back(device_type((e.*proj).weight));
          Stacked s = up.stacked(mats, std::string("routed experts' ") + name + " (stacked)");
          bytes += up.bytes(s);
          return s;
        };
        l.experts = Experts{stack(&MlpWeights::gate, "gate"), stack(&MlpWeights::up, "up"), stack(&MlpWeights::down, "down")};
        if (lw.has_shared) l.shared = mlp(lw.shared);
      } else {
        l.dense = mlp(lw.dense);
      }
      layers.push_back(std::move(l));
    }
  }
};

UOCR_NAMESPACE_END
