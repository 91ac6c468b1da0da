// The factory behind uocr/backends/cuda.hpp: the one place the engine registry reaches the CUDA
// backend, so a program that opens it links this library.
#include "uocr/backends/cuda.hpp"

#include "backends/cuda/engine.hpp"

UOCR_NAMESPACE_BEGIN
namespace cuda {

EngineFactory engine_factory() {
  return [](const std::shared_ptr<const Model>& model, const EngineOptions& options) -> std::shared_ptr<Engine> {
    return std::make_shared<CudaEngine>(model, options);
  };
}

}  // namespace cuda
UOCR_NAMESPACE_END
