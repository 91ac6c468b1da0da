// How to open an engine beyond its backend (uocr/engine/open.hpp): the device, batching, CUDA
// graphs and the precision of the large products.
#pragma once
#include "uocr/core/precision.hpp"
#include "uocr/decoder/step_batcher.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

struct EngineOptions {
  int device_index = 0;
  // max_batch > 1: the decode steps of the documents on the engine are batched
  // (uocr/decoder/step_batcher.hpp).
  BatchParams batching;
  bool cuda_graphs = true;  // CUDA: decode steps replay CUDA graphs; other backends ignore it
  // The vision encoder's and the prefill's large products (uocr/core/precision.hpp): bf16 runs
  // on the cpu backend where the CPU has bf16 dot products; everywhere else f32 runs. An engine
  // opened directly computes the reference (f32), as a session does unless told otherwise.
  Precision precision = Precision::f32;
};

UOCR_NAMESPACE_END
