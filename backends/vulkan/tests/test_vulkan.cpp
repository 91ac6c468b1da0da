// The Vulkan backend's own cases: the device and its setup, the golden vision checks and the
// image-to-logits run on Vulkan (the op cases and the decoder goldens over every backend are
// tests/conformance/). Runs on any Vulkan device; CI uses Mesa lavapipe (CPU, headless). With
// UOCR_VK_VALIDATION=1 (set by meson test) the Khronos validation layer is on and every case
// asserts zero validation errors. Also: the error paths (no such device, no driver, bad SPIR-V,
// out of memory), the on-disk pipeline cache, adopting an application's VkDevice, and per-op
// timestamps.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include "backends/vulkan/decoder.hpp"
#include "backends/vulkan/vision.hpp"
#include "support/golden_decoder.hpp"
#include "support/op_reference.hpp"
#include "support/test_support.hpp"
#include "support/vision_stages.hpp"
#include "support/vulkan_env.hpp"
#include "uocr/decoder/attention.hpp"
#include "uocr/decoder/decoder.hpp"
#include "uocr/vision/encoder.hpp"

namespace vk = uocr::vulkan;
using uocr::Status;
using uocr_test::check_stage;
using uocr_test::randn;
using uocr_test::row_error;
using uocr_test::RowError;
using uocr_test::status_of;

namespace {

using Env = uocr_test::VulkanEnv;

void check_no_validation_errors(const std::string& where) { uocr_test::check_no_validation_errors(Env::get().vk(), where); }

}  // namespace

// ================================================================================================

TEST_CASE("a Vulkan device is available and set up") {
  vk::Context& c = Env::get().vk();
  MESSAGE("device " << c.device_index() << ": " << c.device_name() << " ("
                    << std::string(vk::device_type_name(c.properties().deviceType)) << "), unified memory "
                    << std::string(c.unified_memory() ? "yes" : "no") << ", max binding " << c.max_binding_bytes() << " bytes, validation "
                    << (c.validation_enabled() ? "on" : ("off " + c.validation_note())) << ", pipeline cache "
                    << (c.pipeline_cache_path().empty() ? "(none)" : c.pipeline_cache_path()));
  CHECK(!vk::Context::list_devices().empty());
  if (uocr_test::env_or("UOCR_VK_VALIDATION", "") == "1" && !c.validation_enabled())
    MESSAGE("validation requested but unavailable: " << c.validation_note());
  check_no_validation_errors("context setup");
}

TEST_CASE("golden (tiny-b) vision and end to end on Vulkan: SAM, CLIP, projector, visual tokens, prefill logits") {
  Env& e = Env::get();
  const std::vector<float> image = uocr_test::golden_view();
  vk::VulkanVisionEncoder venc(e.vk(), e.cfg, e.w);
  uocr::VisionEncoder cenc(e.cfg, e.w);
  const uocr_test::GoldenView view = uocr_test::check_golden_view("vulkan", venc, cenc, image);
  const std::vector<float>& vf = view.device;
  const std::vector<float>& cf = view.cpu;
  // visual_tokens() = encode_view() + the host layout; the layout of the features above:
  const std::vector<float> visual = cenc.layout_tokens(vf, {}, 0, 0);
  REQUIRE(int64_t(visual.size()) == venc.token_count(1024, 0, 0, 0) * e.cfg.decoder.hidden);
  check_stage("vulkan", "vision_tokens", visual, e.vision, cenc.layout_tokens(cf, {}, 0, 0));
  check_no_validation_errors("golden vision");

  // End to end on the device: these visual tokens -> Vulkan prefill -> the reference logits.
  {
    vk::VulkanDecoder dec(e.vk(), e.cfg.decoder, e.w.decoder, e.device_weights());
    vk::VulkanKvCache cache(e.vk(), e.cfg.decoder, 8);
    const std::vector<float> logits = dec.prefill(dec.embed_prompt(e.input_ids, visual), 0, cache);
    const RowError err = row_error(logits, uocr_test::golden_f32("prefill_logits.npy"));
    MESSAGE("vulkan image -> visual tokens -> prefill logits: rel err " << err.rel << " (max abs " << err.max_abs << ")");
    CHECK(err.rel <= 1e-4);
  }

  // A 640 tile (interpolated SAM/CLIP position tables, 10x10 tokens) through visual_tokens()
  // with a 1x1 tile grid agrees with the CPU path.
  const std::vector<float> tile = uocr_test::crop_640(image);
  const std::vector<float> vt = venc.encode_view(tile.data(), 640), ct = cenc.encode_view(tile.data(), 640);
  const RowError t = row_error(vt, ct);
  MESSAGE("vulkan 640 tile vs cpu: rel " << t.rel << ", max abs " << t.max_abs);
  CHECK(t.rel <= 1e-5);
  CHECK(status_of([&] { venc.encode_view(tile.data(), 630); }) == Status::invalid_argument);
  CHECK(status_of([&] { venc.visual_tokens(tile, {tile}, 2, 1); }) == Status::invalid_argument);
  const uocr::Deadline passed = uocr::Deadline::after(std::chrono::steady_clock::now() - std::chrono::seconds(1), 0.5);
  CHECK_THROWS_AS(venc.visual_tokens(tile, {tile}, 1, 1, passed), uocr::DeadlinePassed);
  check_no_validation_errors("640 tile");
}

TEST_CASE("errors: missing device, no driver, bad SPIR-V, out of device memory") {
  Env::get().vk();
  std::string msg;
  SUBCASE("a device index that does not exist") {
    vk::ContextOptions o;
    o.device_index = 99;
    CHECK(status_of([&] { vk::Context c(o); }, &msg) == Status::unsupported);
    MESSAGE(msg);
    CHECK(msg.find("device index 99") != std::string::npos);
  }
  SUBCASE("no Vulkan driver at all") {
    // Point the loader at a driver manifest that does not exist.
    const std::string saved_icd = uocr_test::env_or("VK_ICD_FILENAMES", ""), saved_drv = uocr_test::env_or("VK_DRIVER_FILES", "");
    setenv("VK_ICD_FILENAMES", "/nonexistent/uocr_no_icd.json", 1);
    setenv("VK_DRIVER_FILES", "/nonexistent/uocr_no_icd.json", 1);
    vk::ContextOptions o;
    o.validation = 0;
    const Status s = status_of([&] { vk::Context c(o); }, &msg);
    const size_t listed = vk::Context::list_devices().size();
    auto restore = [](const char* name, const std::string& value) {
      if (value.empty())
        unsetenv(name);
      else
        setenv(name, value.c_str(), 1);
    };
    restore("VK_ICD_FILENAMES", saved_icd);
    restore("VK_DRIVER_FILES", saved_drv);
    MESSAGE(msg);
    CHECK(s == Status::unsupported);
    CHECK(msg.find("no Vulkan device") != std::string::npos);
    CHECK(listed == 0);
  }
  SUBCASE("a shader blob that is not SPIR-V") {
    const uint32_t junk[8] = {0xdeadbeef, 1, 2, 3, 4, 5, 6, 7};
    CHECK(status_of([&] { Env::get().vk().pipeline("junk", junk, 8, 1); }, &msg) == Status::internal);
    MESSAGE(msg);
    CHECK(msg.find("junk") != std::string::npos);
  }
  SUBCASE("an allocation larger than the device memory") {
    CHECK(status_of([&] { Env::get().vk().buffer(size_t(1) << 50, vk::MemoryUse::weights, "a petabyte"); }, &msg) ==
          Status::out_of_memory);
    MESSAGE(msg);
    CHECK(msg.find("a petabyte") != std::string::npos);
  }
  check_no_validation_errors("error paths");
}

TEST_CASE("the pipeline cache is written to disk and reloaded") {
  Env::get().vk();
  const std::string dir = (std::filesystem::temp_directory_path() / ("uocr-vk-cache-test-" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(dir);
  vk::ContextOptions o;
  o.cache_dir = dir;
  o.validation = 0;
  std::string path;
  {
    vk::Context c(o);
    path = c.pipeline_cache_path();
    CHECK(!c.pipeline_cache_loaded());
    vk::kernel(c, "matmul_bf16", 4);
    vk::kernel(c, "attention", 6);
  }
  CHECK(std::filesystem::exists(path));
  CHECK(std::filesystem::file_size(path) >= 32);  // lavapipe stores only the header
  {
    vk::Context c(o);
    CHECK(c.pipeline_cache_path() == path);
    CHECK(c.pipeline_cache_loaded());
    vk::kernel(c, "matmul_bf16", 4);
  }
  {  // a corrupt file is ignored, not an error
    std::ofstream(path, std::ios::binary | std::ios::trunc) << "not a pipeline cache, but long enough to have a header";
    vk::Context c(o);
    CHECK(!c.pipeline_cache_loaded());
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("adopting a VkDevice and queue created by the application") {
  Env::get().vk();
  auto app = vk::vulkan_info<VkApplicationInfo>(VK_STRUCTURE_TYPE_APPLICATION_INFO);
  app.apiVersion = VK_API_VERSION_1_1;
  auto ici = vk::vulkan_info<VkInstanceCreateInfo>(VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO);
  ici.pApplicationInfo = &app;
  VkInstance inst = VK_NULL_HANDLE;
  REQUIRE(vkCreateInstance(&ici, nullptr, &inst) == VK_SUCCESS);
  uint32_t n = 1;
  VkPhysicalDevice pd = VK_NULL_HANDLE;
  const VkResult er = vkEnumeratePhysicalDevices(inst, &n, &pd);
  REQUIRE((er == VK_SUCCESS || er == VK_INCOMPLETE));
  REQUIRE(n >= 1);
  uint32_t nf = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(pd, &nf, nullptr);
  std::vector<VkQueueFamilyProperties> fam(nf);
  vkGetPhysicalDeviceQueueFamilyProperties(pd, &nf, fam.data());
  uint32_t qf = 0;
  while (qf < nf && !(fam[qf].queueFlags & VK_QUEUE_COMPUTE_BIT)) ++qf;
  REQUIRE(qf < nf);
  const float prio = 1.0f;
  auto qi = vk::vulkan_info<VkDeviceQueueCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO);
  qi.queueFamilyIndex = qf;
  qi.queueCount = 1;
  qi.pQueuePriorities = &prio;
  auto dci = vk::vulkan_info<VkDeviceCreateInfo>(VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO);
  dci.queueCreateInfoCount = 1;
  dci.pQueueCreateInfos = &qi;
  VkDevice dev = VK_NULL_HANDLE;
  REQUIRE(vkCreateDevice(pd, &dci, nullptr, &dev) == VK_SUCCESS);
  VkQueue queue = VK_NULL_HANDLE;
  vkGetDeviceQueue(dev, qf, 0, &queue);
  {
    vk::ContextOptions o;
    o.pipeline_cache = false;
    vk::Context c(vk::ExternalDevice{inst, pd, dev, qf, queue}, o);
    CHECK(!c.owns_device());
    const std::vector<float> x = randn(300, 1), y = randn(300, 2);
    vk::Buffer bx = vk::upload_f32(c, x.data(), x.size(), vk::MemoryUse::activations, "x");
    vk::Buffer by = vk::upload_f32(c, y.data(), y.size(), vk::MemoryUse::activations, "y");
    {
      vk::Recorder r(c);
      vk::ops::add(r, bx, 0, by, 0, 300);
      r.submit();
    }
    const std::vector<float> got = c.download_vector<float>(bx, 300);
    for (size_t i = 0; i < 300; ++i) REQUIRE(got[i] == x[i] + y[i]);
  }
  // The application's device is still alive and ours to destroy.
  CHECK(vkDeviceWaitIdle(dev) == VK_SUCCESS);
  vkDestroyDevice(dev, nullptr);
  vkDestroyInstance(inst, nullptr);
}

TEST_CASE("per-op device timestamps") {
  Env& e = Env::get();
  e.vk();
  vk::ContextOptions o;
  o.profiling = 1;
  o.validation = 0;
  vk::Context c(o);
  if (!c.profiling()) {
    MESSAGE("device '" << c.device_name() << "' has no compute timestamps; profiling skipped");
    return;
  }
  vk::VulkanDecoder dec(c, e.cfg.decoder, e.w.decoder);
  vk::VulkanKvCache cache(c, e.cfg.decoder, 8);
  const int64_t p = int64_t(e.input_ids.size());
  dec.prefill(dec.embed_prompt(e.input_ids, e.vision), 0, cache);
  c.reset_profile();
  for (int s = 0; s < 20; ++s) dec.decode_step(e.gen_ids[size_t(s)], p + s, cache);
  MESSAGE("20 decode steps on " << c.device_name()
                                << std::string(c.properties().deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU ? " (a CPU device: these are CPU times)" : "")
                                << ":\n"
                                << c.profile_report());
  CHECK(c.profile().count("attention") == 1);
  CHECK(c.profile().at("attention").dispatches == 20 * e.cfg.decoder.layers);
}

TEST_CASE("zz: zero validation errors over the whole run") {
  vk::Context& c = Env::get().vk();
  MESSAGE("validation " << std::string(c.validation_enabled() ? "on" : "off") << ": " << c.validation_errors() << " errors, "
                        << c.validation_warnings() << " warnings");
  for (const std::string& m : c.validation_messages()) MESSAGE(m);
  check_no_validation_errors("whole run");
}
