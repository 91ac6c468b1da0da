// The factory behind uocr/backends/vulkan.hpp: the one place the engine registry reaches the
// Vulkan backend, so a program that opens it links this library.
#include "uocr/backends/vulkan.hpp"

#include "backends/vulkan/engine.hpp"

UOCR_NAMESPACE_BEGIN
namespace vulkan {

EngineFactory engine_factory() {
  return [](const std::shared_ptr<const Model>& model, const EngineOptions& options) -> std::shared_ptr<Engine> {
    require(options.batching.max_batch == 1, Status::unsupported,
            "continuous batching (max_batch > 1) is not available on the vulkan backend");
    return std::make_shared<VulkanEngine>(model, options);
  };
}

}  // namespace vulkan
UOCR_NAMESPACE_END
