// `uocr quantize IN_DIR OUT_DIR`: writes the model folder's int8 copy (uocr/model/quantize_folder.hpp)
// and says what it made.
#pragma once
#include <cstdio>
#include <string>

#include "args.hpp"
#include "uocr/core/error.hpp"
#include "uocr/model/quantize_folder.hpp"

namespace uocr_cli {

inline CommandOptions quantize_options() { return {"quantize", {}, {"--quiet"}, true, {}}; }

inline int cmd_quantize(const Args& args) {
  const auto& dirs = args.positional();
  uocr::require(dirs.size() == 2, uocr::Status::invalid_argument, "quantize needs IN_DIR and OUT_DIR");
  const uocr::QuantizeReport r = uocr::quantize_model_folder(dirs[0], dirs[1]);
  if (!args.has("--quiet"))
    std::fprintf(stderr,
                 "uocr: %s: %lld matrices int8 (%lld of %lld parameters), weights %.1f MB -> %.1f MB\n",
                 dirs[1].c_str(), static_cast<long long>(r.matrices), static_cast<long long>(r.quantized_parameters),
                 static_cast<long long>(r.parameters), double(r.bytes_before) / 1e6, double(r.bytes_after) / 1e6);
  return 0;
}

}  // namespace uocr_cli
