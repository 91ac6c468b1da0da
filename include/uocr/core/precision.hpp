// The arithmetic of the large matrix products (the vision encoder's, a prefill's): float32, the
// reference, or bf16 inputs with float32 accumulation, what upstream computes under bf16
// autocast and what CPUs with bf16 dot products (and GPUs' tensor cores) run at twice the rate.
// Decode steps always run in float32. bf16 passed the accuracy gate against upstream's own bf16
// run (tests/test_precision_golden.cpp); where a backend or CPU has no bf16 products, f32 runs and
// is what the engine reports. f32 is the default: bf16 is not faster on every CPU that has it.
#pragma once
#include <string>

#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

enum class Precision { f32, bf16 };

inline const char* precision_name(Precision p) { return p == Precision::bf16 ? "bf16" : "f32"; }

// "f32" or "bf16" into `out`; false for anything else.
inline bool parse_precision(const std::string& name, Precision& out) {
  if (name == "f32") out = Precision::f32;
  else if (name == "bf16") out = Precision::bf16;
  else return false;
  return true;
}

UOCR_NAMESPACE_END
