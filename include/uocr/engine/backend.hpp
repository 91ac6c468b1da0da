// The backends by name: what session parameters and the CLI choose from. Which ones a program
// can open is up to the engine registry (uocr/engine/registry.hpp).
#pragma once
#include <string>

#include "uocr/core/error.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

enum class Backend { cpu, vulkan, cuda };

inline const char* backend_name(Backend b) {
  switch (b) {
    case Backend::cpu: return "cpu";
    case Backend::vulkan: return "vulkan";
    case Backend::cuda: return "cuda";
  }
  return "?";
}

// "cpu" / "vulkan" / "cuda" -> Backend; Status::invalid_argument for anything else.
inline Backend parse_backend(const std::string& name) {
  for (Backend b : {Backend::cpu, Backend::vulkan, Backend::cuda})
    if (name == backend_name(b)) return b;
  throw Error(Status::invalid_argument, "unknown backend '" + name + "' (expected cpu, vulkan or cuda)");
}

UOCR_NAMESPACE_END
