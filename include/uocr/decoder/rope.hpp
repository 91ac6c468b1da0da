// Rotary position embedding of the decoder's MHA path: transformers' LlamaRotaryEmbedding
// ("default" rope type, no scaling) applied with rotate_half, i.e. the half-split (NeoX) pairing
// (i, i + d/2) over the whole head_dim, NOT the interleaved pairing of DeepSeek-V2's MLA path.
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>

#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

class Rope {
 public:
  Rope(int head_dim, float theta) : half_(head_dim / 2), inv_freq_(size_t(head_dim / 2)) {
    // transformers: 1.0 / (base ** (arange(0, d, 2).float() / d)), all in float32.
    for (int i = 0; i < half_; ++i)
      inv_freq_[size_t(i)] = 1.0f / std::pow(theta, float(2 * i) / float(head_dim));
  }

  // cos and sin of position `pos`'s angles, as apply() computes them: out[2i] = cos, out[2i + 1]
  // = sin for i < head_dim / 2 (device backends rotate with these).
  void cos_sin(int64_t pos, float* out) const {
    for (int i = 0; i < half_; ++i) {
      const float angle = float(pos) * inv_freq_[size_t(i)];
      out[2 * i] = std::cos(angle);
      out[2 * i + 1] = std::sin(angle);
    }
  }

  // Rotates `heads` consecutive vectors of head_dim floats to position `pos`:
  // x' = x·cos + rotate_half(x)·sin with rotate_half([x1 | x2]) = [-x2 | x1].
  void apply(float* x, int64_t heads, int64_t pos) const {
    const int64_t d = 2 * int64_t(half_);
    for (int i = 0; i < half_; ++i) {
      // The angle is one float32 product (transformers' inv_freq @ position_ids), then cos/sin.
      const float angle = float(pos) * inv_freq_[size_t(i)];
      const float c = std::cos(angle), s = std::sin(angle);
      for (int64_t h = 0; h < heads; ++h) {
        float* v = x + h * d;
        const float x1 = v[i], x2 = v[i + half_];
        v[i] = x1 * c - x2 * s;
        v[i + half_] = x2 * c + x1 * s;
      }
    }
  }

 private:
  int half_;
  std::vector<float> inv_freq_;
};

UOCR_NAMESPACE_END
