// Which model folder a command uses, as installed tools find their data: --model DIR, else the
// UOCR_MODEL environment variable, else the demo model installed by `meson install`
// (UOCR_DEMO_MODEL_INSTALLED), else the one in the source tree this binary was built from
// (UOCR_DEMO_MODEL_SOURCE), so that a build runs from any working directory.
#pragma once
#include <cstdlib>
#include <filesystem>
#include <string>

#include "args.hpp"
#include "uocr/core/error.hpp"

namespace uocr_cli {

inline std::string model_dir(const Args& args) {
  if (args.has("--model")) return args.get("--model", "");
  namespace fs = std::filesystem;
  // An explicit choice that does not exist is an error, not a reason to pick another model.
  if (const char* env = std::getenv("UOCR_MODEL"); env != nullptr && *env != '\0') {
    uocr::require(fs::is_directory(env), uocr::Status::invalid_argument,
                  [&] { return std::string("UOCR_MODEL is ") + env + ", which is not a model folder"; });
    return env;
  }
  std::string looked;
  for (const char* dir : {UOCR_DEMO_MODEL_INSTALLED, UOCR_DEMO_MODEL_SOURCE}) {
    if (fs::is_regular_file(fs::path(dir) / "config.json")) return dir;
    looked += std::string(looked.empty() ? "" : ", ") + dir;
  }
  throw uocr::Error(uocr::Status::invalid_argument,
                    "no model: give --model DIR or set UOCR_MODEL (the demo model is in none of " + looked + ")");
}

}  // namespace uocr_cli
