// The CUDA backend's public face. The backend itself (context, kernels, cuBLAS, decoder, encoder,
// engine: backends/cuda/) is compiled into the static library uocr_cuda, which the meson
// dependency 'uocr-cuda' links; this header only registers it, so that
//
//   uocr::open_engine(model, uocr::Backend::cuda, options)   // uocr/engine/open.hpp
//
// opens it. uocr/engine/open.hpp includes it in builds that define UOCR_HAVE_CUDA.
#pragma once
#include "uocr/engine/registry.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN
namespace cuda {

// Opens a CudaEngine: device `options.device_index` in CUDA's order, continuous batching and
// CUDA graphs as `options` say. Status::unsupported without a driver or a device ("no CUDA
// device: ..."), or with an index out of range.
EngineFactory engine_factory();

inline const bool engine_registered = register_engine(Backend::cuda, engine_factory());

}  // namespace cuda
UOCR_NAMESPACE_END
