// One conformance suite over every backend this build has: each case runs on the CPU (the
// reference) and on each device backend compiled in (Vulkan, CUDA), through the backend contract
// (the decoder and its KV cache). A backend without a usable device is skipped and says why; the
// others still run. The cases: the golden checks (tiny-b against upstream's float32 run: prefill
// logits at every position, teacher-forced decode with full attention and with an R-SWA ring)
// and the decoder's input errors (the same statuses and no change to the cache).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "support/golden_decoder.hpp"
#include "support/test_support.hpp"
#include "uocr/decoder/decoder.hpp"
#include "uocr/decoder/kv_cache.hpp"
#if UOCR_HAVE_VULKAN
#include "support/vulkan_env.hpp"
#include "uocr/backends/vulkan/decoder.hpp"
#endif
#if UOCR_HAVE_CUDA
#include "support/gpu_test.hpp"
#include "uocr/backends/cuda/decoder.hpp"
#endif

using uocr::Status;

namespace {

// A backend for the cases: its fixture (the golden model), why it cannot run here ("" when it
// can), a decoder `dec`, KV caches (`cache(window)`: for the golden model; `make_cache`: for any
// configuration), and what it checks after a case.
struct CpuRunner {
  static constexpr const char* name = "cpu";
  static uocr_test::GoldenCase& env() {
    static uocr_test::GoldenCase e;
    return e;
  }
  static std::string unavailable() { return ""; }
  static void after_case(const std::string&) {}
  uocr::Decoder dec{env().cfg.decoder, env().w.decoder};
  static uocr::KvCache make_cache(const uocr::DecoderConfig& c, int window) { return uocr::KvCache(c, window); }
  uocr::KvCache cache(int window) { return make_cache(env().cfg.decoder, window); }
};

#if UOCR_HAVE_VULKAN
struct VulkanRunner {
  static constexpr const char* name = "vulkan";
  static uocr_test::VulkanEnv& env() { return uocr_test::VulkanEnv::get(); }
  static std::string unavailable() { return env().ctx ? "" : env().no_device; }
  static void after_case(const std::string& where) { uocr_test::check_no_validation_errors(env().vk(), where); }
  uocr::vulkan::VulkanDecoder dec{env().vk(), env().cfg.decoder, env().w.decoder, env().device_weights()};
  static uocr::vulkan::VulkanKvCache make_cache(const uocr::DecoderConfig& c, int window) {
    return uocr::vulkan::VulkanKvCache(env().vk(), c, window);
  }
  uocr::vulkan::VulkanKvCache cache(int window) { return make_cache(env().cfg.decoder, window); }
};
#endif

#if UOCR_HAVE_CUDA
struct CudaRunner {
  static constexpr const char* name = "cuda";
  static uocr_test::CudaEnv& env() { return uocr_test::CudaEnv::get(); }
  static std::string unavailable() { return uocr_test::no_gpu() ? uocr_test::no_gpu_reason() : env().ctx ? "" : env().no_device; }
  static void after_case(const std::string&) {}
  uocr::cuda::CudaDecoder dec{*env().ctx, env().cfg.decoder, env().w.decoder, env().device_weights()};
  static uocr::cuda::CudaKvCache make_cache(const uocr::DecoderConfig& c, int window) {
    return uocr::cuda::CudaKvCache(*env().ctx, c, window);
  }
  uocr::cuda::CudaKvCache cache(int window) { return make_cache(env().cfg.decoder, window); }
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

}  // namespace

TEST_CASE_TEMPLATE_DEFINE("golden (tiny-b): prefill logits at every prefix position", Runner, golden_prefill) {
  if (!runs_here<Runner>()) return;
  uocr_test::golden_prefill<Runner>(Runner::env());
  Runner::after_case("golden prefill");
}
TEST_CASE_TEMPLATE_APPLY(golden_prefill, Backends);

TEST_CASE_TEMPLATE_DEFINE("golden (tiny-b): teacher-forced decode, full attention", Runner, golden_decode_full) {
  if (!runs_here<Runner>()) return;
  uocr_test::golden_decode<Runner>(Runner::env(), "full_attention", 0);
  Runner::after_case("golden decode, full attention");
}
TEST_CASE_TEMPLATE_APPLY(golden_decode_full, Backends);

TEST_CASE_TEMPLATE_DEFINE("golden (tiny-b): teacher-forced decode, R-SWA n=8", Runner, golden_decode_rswa) {
  if (!runs_here<Runner>()) return;
  uocr_test::golden_decode<Runner>(Runner::env(), "rswa_n8", 8);
  Runner::after_case("golden decode, R-SWA n=8");
}
TEST_CASE_TEMPLATE_APPLY(golden_decode_rswa, Backends);

TEST_CASE_TEMPLATE_DEFINE("decoder input errors: the same statuses on every backend, the cache unchanged", Runner,
                          input_errors) {
  if (!runs_here<Runner>()) return;
  auto& e = Runner::env();
  Runner run;
  auto cache = run.cache(8);
  const std::vector<float> input = run.dec.embed_prompt(e.input_ids, e.vision);
  CHECK(uocr_test::status_of([&] { run.dec.decode_step(5, 0, cache); }) == Status::invalid_argument);  // before prefill
  CHECK(uocr_test::status_of([&] { run.dec.prefill(input, -1, cache); }) == Status::invalid_argument);
  run.dec.prefill(input, 0, cache);
  CHECK(uocr_test::status_of([&] { run.dec.decode_step(5, e.cfg.decoder.max_positions, cache); }) == Status::invalid_argument);
  CHECK(uocr_test::status_of([&] { run.dec.decode_step(e.cfg.decoder.vocab, 300, cache); }) == Status::invalid_argument);
  CHECK(cache.generated_tokens() == 0);
  CHECK(uocr_test::status_of([&] { run.dec.decode_step(5, 300, cache); }) == Status::ok);
  CHECK(cache.generated_tokens() == 1);
  // A cache made for another configuration is refused.
  uocr::DecoderConfig other = e.cfg.decoder;
  other.layers = 1;
  auto wrong = Runner::make_cache(other, 8);
  CHECK(uocr_test::status_of([&] { run.dec.prefill(input, 0, wrong); }) == Status::invalid_argument);
  Runner::after_case("decoder input errors");
}
TEST_CASE_TEMPLATE_APPLY(input_errors, Backends);
