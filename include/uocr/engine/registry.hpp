// The engine registry: which backends this program can open, and how. It stands above the
// backends: each backend's public header registers a factory when it is included
// (uocr/backends/cpu/engine.hpp, uocr/backends/vulkan.hpp, uocr/backends/cuda.hpp), and
// open_engine (uocr/engine/open.hpp) asks the registry, so no inline function's body depends on
// which backends a translation unit was built with.
#pragma once
#include <array>
#include <memory>
#include <string>

#include "uocr/engine/backend.hpp"
#include "uocr/engine/engine_options.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

class Engine;
class Model;

// Opens the backend for a model; options are already validated for what every backend shares.
using EngineFactory = std::shared_ptr<Engine> (*)(const std::shared_ptr<const Model>& model, const EngineOptions& options);

// The factories by backend, filled while the program starts: registration runs in the static
// initialisation of each translation unit that includes a backend's public header, so an engine
// opened from main() on finds every backend; one opened from another static initialiser may not.
inline std::array<EngineFactory, 3>& engine_factories() {
  static std::array<EngineFactory, 3> factories{};
  return factories;
}

// For a backend's public header: `inline const bool registered = register_engine(...);`.
inline bool register_engine(Backend backend, EngineFactory factory) {
  engine_factories()[size_t(backend)] = factory;
  return true;
}

inline EngineFactory engine_factory(Backend backend) { return engine_factories()[size_t(backend)]; }

// The backends this program can open, e.g. "cpu, vulkan".
inline std::string compiled_backends() {
  std::string s;
  for (Backend b : {Backend::cpu, Backend::vulkan, Backend::cuda})
    if (engine_factory(b)) s += std::string(s.empty() ? "" : ", ") + backend_name(b);
  return s;
}

UOCR_NAMESPACE_END
