// Element types of checkpoint tensors and their conversion to float32 (all compute is float32).
// i8 holds int8-quantized weights (model/quantization.hpp); their values are the integers, and a
// TensorView applies the rows' scales.
#pragma once
#include <cstdint>
#include <cstring>
#include <string>

#include "uocr/core/error.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

enum class DType { f32, f16, bf16, i8 };

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::i8: return 1;
    default: return 2;
  }
}

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::f16: return "F16";
    case DType::bf16: return "BF16";
    case DType::i8: return "I8";
  }
  return "?";
}

inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round-to-nearest-even, like torch's .to(torch.bfloat16); NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x007fffffu)) return uint16_t((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return uint16_t(bits >> 16);
}

inline float round_to_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }

inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: renormalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) { mant <<= 1; --exp; }
      bits = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Converts n elements of type `t` starting at `src` to float32. `src` need not be aligned (a
// safetensors data section may start at any byte), so 16-bit elements are read byte-wise.
inline void to_f32(DType t, const void* src, float* dst, size_t n) {
  const unsigned char* bytes = static_cast<const unsigned char*>(src);
  auto half = [bytes](size_t i) {
    uint16_t h;
    std::memcpy(&h, bytes + 2 * i, 2);
    return h;
  };
  switch (t) {
    case DType::f32: std::memcpy(dst, src, n * 4); return;
    case DType::bf16:
      for (size_t i = 0; i < n; ++i) {
        const uint32_t bits = uint32_t(half(i)) << 16;
        std::memcpy(dst + i, &bits, 4);
      }
      return;
    case DType::f16:
      for (size_t i = 0; i < n; ++i) dst[i] = f16_to_f32(half(i));
      return;
    case DType::i8:
      for (size_t i = 0; i < n; ++i) dst[i] = float(static_cast<const int8_t*>(src)[i]);
      return;
  }
}

UOCR_NAMESPACE_END
