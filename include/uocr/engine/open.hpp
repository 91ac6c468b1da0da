// Opening a backend by name at run time, through the engine registry (uocr/engine/registry.hpp).
// The CPU is always there; Vulkan and CUDA are compiled libraries (libuocr_vulkan, libuocr_cuda)
// whose public face, uocr/backends/vulkan.hpp or cuda.hpp, registers them when any translation
// unit of the program includes it. This header includes them for builds that have them (the
// 'uocr-vulkan' meson dependency defines UOCR_HAVE_VULKAN and links the library, 'uocr-cuda'
// UOCR_HAVE_CUDA).
//
//   std::shared_ptr<uocr::Engine> e = uocr::open_engine(model, uocr::Backend::vulkan, 0);
#pragma once
#include <memory>
#include <string>

#include "uocr/backends/cpu/engine.hpp"
#include "uocr/engine/engine.hpp"
#include "uocr/engine/registry.hpp"
#include "uocr/model/model.hpp"
#include "uocr/version.hpp"
#if UOCR_HAVE_VULKAN
#include "uocr/backends/vulkan.hpp"
#endif
#if UOCR_HAVE_CUDA
#include "uocr/backends/cuda.hpp"
#endif

UOCR_NAMESPACE_BEGIN

// Validates the choice without opening anything (index range, backend registered).
inline void check_backend(Backend backend, int device_index) {
  require(device_index >= 0, Status::invalid_argument,
          [&] { return "device index must be >= 0, got " + std::to_string(device_index); });
  require(backend != Backend::cpu || device_index == 0, Status::unsupported,
          [&] { return "the cpu backend has one device (index 0), not " + std::to_string(device_index); });
  require(engine_factory(backend) != nullptr, Status::unsupported, [&] {
    return std::string("the ") + backend_name(backend) + " backend is not built into this library (built: " +
           compiled_backends() + ")";
  });
}

// The backend `backend` on the device and with the options of `options` for `model`.
// Status::unsupported when it is not built in, or (opening the device) when there is no such
// device: the message names the backend and lists the devices found; also for what a backend
// cannot do (continuous batching on Vulkan). bf16 precision runs on the cpu backend only; the
// others run (and report) f32.
inline std::shared_ptr<Engine> open_engine(const std::shared_ptr<const Model>& model, Backend backend,
                                           const EngineOptions& options = {}) {
  require(model != nullptr, Status::invalid_argument, "engine needs a model");
  check_backend(backend, options.device_index);
  validate(options.batching);
  return engine_factory(backend)(model, options);
}

UOCR_NAMESPACE_END
