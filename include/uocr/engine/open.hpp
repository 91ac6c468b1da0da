// Opening a backend by name at run time. Which backends exist is fixed at build time: Vulkan
// when compiled with UOCR_HAVE_VULKAN (the 'uocr-vulkan' meson dependency defines it), CUDA with
// UOCR_HAVE_CUDA ('uocr-cuda').
//
//   std::shared_ptr<uocr::Engine> e = uocr::open_engine(model, uocr::Backend::vulkan, 0);
#pragma once
#include <memory>
#include <string>

#include "uocr/engine/cpu.hpp"
#include "uocr/engine/engine.hpp"
#include "uocr/model/model.hpp"
#if UOCR_HAVE_VULKAN
#include "uocr/backends/vulkan/engine.hpp"
#endif
#if UOCR_HAVE_CUDA
#include "uocr/backends/cuda/engine.hpp"
#endif

namespace uocr {

// The backends this build contains, e.g. "cpu, vulkan".
inline std::string compiled_backends() {
  std::string s = "cpu";
#if UOCR_HAVE_VULKAN
  s += ", vulkan";
#endif
#if UOCR_HAVE_CUDA
  s += ", cuda";
#endif
  return s;
}

// Validates the choice without opening anything (index range, backend built in).
inline void check_backend(Backend backend, int device_index) {
  require(device_index >= 0, Status::invalid_argument,
          [&] { return "device index must be >= 0, got " + std::to_string(device_index); });
  require(backend != Backend::cpu || device_index == 0, Status::unsupported,
          [&] { return "the cpu backend has one device (index 0), not " + std::to_string(device_index); });
  bool built = backend == Backend::cpu;
#if UOCR_HAVE_VULKAN
  built = built || backend == Backend::vulkan;
#endif
#if UOCR_HAVE_CUDA
  built = built || backend == Backend::cuda;
#endif
  require(built, Status::unsupported, [&] {
    return std::string("the ") + backend_name(backend) + " backend is not built into this library (built: " +
           compiled_backends() + ")";
  });
}

// The backend `backend` on device `device_index` for `model`. Status::unsupported when it is not
// built in, or (opening the device) when there is no such device: the message names the backend
// and lists the devices found. `batching` (max_batch > 1): the documents decoded by engines
// opened with the same parameters on this model and device have their decode steps batched
// (uocr/decoder/step_batcher.hpp); CPU and CUDA only, Status::unsupported on Vulkan.
// `cuda_graphs`: CUDA decode steps replay CUDA graphs (cuda/decoder.hpp); other backends ignore it.
inline std::shared_ptr<Engine> open_engine(const std::shared_ptr<const Model>& model, Backend backend, int device_index = 0,
                                           const BatchParams& batching = {}, bool cuda_graphs = true) {
  require(model != nullptr, Status::invalid_argument, "engine needs a model");
  check_backend(backend, device_index);
  validate(batching);
  require(backend != Backend::vulkan || batching.max_batch == 1, Status::unsupported,
          "continuous batching (max_batch > 1) is not available on the vulkan backend");
#if UOCR_HAVE_VULKAN
  if (backend == Backend::vulkan) return std::make_shared<vulkan::VulkanEngine>(model, device_index);
#endif
#if UOCR_HAVE_CUDA
  if (backend == Backend::cuda) return std::make_shared<cuda::CudaEngine>(model, device_index, batching, cuda_graphs);
#else
  (void)cuda_graphs;
#endif
  return std::make_shared<CpuEngine>(model, batching);
}

}  // namespace uocr
