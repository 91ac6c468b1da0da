// What the CUDA test executables share for machines without a usable GPU (CI has the toolkit but
// no driver): no_gpu() for doctest::skip on the GPU cases, and gpu_test_main(), which runs the
// cases and then, without a GPU, prints "GPU cases skipped: <why>" and exits 77 (meson: SKIP);
// and CudaEnv, the golden model with a CUDA Context. Include after DOCTEST_CONFIG_IMPLEMENT.
#pragma once
#include <doctest/doctest.h>

#include <iostream>
#include <memory>
#include <string>

#include "backends/cuda/context.hpp"
#include "backends/cuda/weights.hpp"
#include "support/golden_decoder.hpp"

namespace uocr_test {

// Why this machine has no usable CUDA device ("" when it has one); evaluated once.
inline const std::string& no_gpu_reason() {
  static const std::string why = [] {
    try {
      return uocr::cuda::list_devices().empty() ? std::string("no CUDA device listed") : std::string();
    } catch (const uocr::Error& e) {
      return std::string(e.what());
    }
  }();
  return why;
}
inline bool no_gpu() { return !no_gpu_reason().empty(); }

// Runs the cases; without a GPU, exits 77 once everything that could run has passed.
inline int gpu_test_main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  const int failed = context.run();
  if (context.shouldExit() || failed) return failed;
  if (no_gpu()) {
    std::cout << "GPU cases skipped: " << no_gpu_reason() << "\n";
    return 77;
  }
  return 0;
}

// The golden model (tiny-b), the device's Context (or why there is none) and the decoder's device
// weights, uploaded on first use.
struct CudaEnv : DeviceGolden<uocr::cuda::Context, uocr::cuda::DecoderDeviceWeights> {
  static CudaEnv& get() {
    static CudaEnv e;
    return e;
  }
  const std::shared_ptr<uocr::cuda::DecoderDeviceWeights>& device_weights() {
    if (!dev_weights) dev_weights = uocr::cuda::DecoderDeviceWeights::upload(*ctx, cfg.decoder, w.decoder);
    return dev_weights;
  }
};

}  // namespace uocr_test
