// The backends the conformance suite runs over (tests/conformance/): the CPU (the reference) and
// each device backend compiled in (Vulkan, CUDA), each through the backend contract (its decoder
// and KV cache) and through the op interface (support/op_backend.hpp). A backend without a usable
// device is skipped and says why; the others still run. A new backend adds a runner here.
#pragma once
#include <doctest/doctest.h>

#include <string>
#include <tuple>

#include "support/golden_decoder.hpp"
#include "support/op_backend.hpp"
#include "uocr/decoder/decoder.hpp"
#include "uocr/decoder/kv_cache.hpp"
#if UOCR_HAVE_VULKAN
#include "backends/vulkan/decoder.hpp"
#include "backends/vulkan/tests/vulkan_ops.hpp"
#include "support/vulkan_env.hpp"
#endif
#if UOCR_HAVE_CUDA
#include "backends/cuda/decoder.hpp"
#include "backends/cuda/tests/cuda_ops.hpp"
#include "support/gpu_test.hpp"
#endif

namespace uocr_test {

// A backend for the cases: its fixture (the golden model), why it cannot run here ("" when it
// can), a decoder `dec`, KV caches (`cache(window)`: for the golden model; `make_cache`: for any
// configuration), its ops behind the one op interface (`ops()`), and what it checks after a case.
struct CpuRunner {
  static constexpr const char* name = "cpu";
  static GoldenCase& env() {
    static GoldenCase e;
    return e;
  }
  static std::string unavailable() { return ""; }
  static void after_case(const std::string&) {}
  uocr::Decoder dec{env().cfg.decoder, env().w.decoder};
  static uocr::KvCache make_cache(const uocr::DecoderConfig& c, int window) { return uocr::KvCache(c, window); }
  uocr::KvCache cache(int window) { return make_cache(env().cfg.decoder, window); }
  static OpBackend& ops() {
    static CpuOps o(env());
    return o;
  }
};

#if UOCR_HAVE_VULKAN
struct VulkanRunner {
  static constexpr const char* name = "vulkan";
  static VulkanEnv& env() { return VulkanEnv::get(); }
  static std::string unavailable() { return env().ctx ? "" : env().no_device; }
  static void after_case(const std::string& where) { check_no_validation_errors(env().vk(), where); }
  uocr::vulkan::VulkanDecoder dec{env().vk(), env().cfg.decoder, env().w.decoder, env().device_weights()};
  static uocr::vulkan::VulkanKvCache make_cache(const uocr::DecoderConfig& c, int window) {
    return uocr::vulkan::VulkanKvCache(env().vk(), c, window);
  }
  uocr::vulkan::VulkanKvCache cache(int window) { return make_cache(env().cfg.decoder, window); }
  static OpBackend& ops() {
    static VulkanOps o(env());
    return o;
  }
};
#endif

#if UOCR_HAVE_CUDA
struct CudaRunner {
  static constexpr const char* name = "cuda";
  static CudaEnv& env() { return CudaEnv::get(); }
  static std::string unavailable() { return no_gpu() ? no_gpu_reason() : env().ctx ? "" : env().no_device; }
  static void after_case(const std::string&) {}
  uocr::cuda::CudaDecoder dec{*env().ctx, env().cfg.decoder, env().w.decoder, env().device_weights()};
  static uocr::cuda::CudaKvCache make_cache(const uocr::DecoderConfig& c, int window) {
    return uocr::cuda::CudaKvCache(*env().ctx, c, window);
  }
  uocr::cuda::CudaKvCache cache(int window) { return make_cache(env().cfg.decoder, window); }
  static OpBackend& ops() {
    static CudaOps o(env());
    return o;
  }
};
#endif

using Backends = std::tuple<CpuRunner
#if UOCR_HAVE_VULKAN
                            , VulkanRunner
#endif
#if UOCR_HAVE_CUDA
                            , CudaRunner
#endif
                            >;

// Whether `Runner` can run here; if not, the case says so and passes.
template <class Runner>
bool runs_here() {
  const std::string why = Runner::unavailable();
  if (!why.empty()) MESSAGE(std::string(Runner::name) << ": skipped, no usable device (" << why << ")");
  return why.empty();
}

}  // namespace uocr_test
