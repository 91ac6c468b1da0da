// The Vulkan backend selected at run time (uocr/engine/): page groups on the device against the
// CPU's, sessions with backend = vulkan against backend = cpu on the demo model, the C ABI and
// `uocr run --backend vulkan`, and the errors for a device that does not exist or a feature the
// backend lacks. Runs on any Vulkan device (CI: lavapipe) with the validation layers on.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include "logit_agreement.hpp"
#include "multi3_case.hpp"
#include "test_support.hpp"
#include "uocr.h"
#include "uocr/backends/vulkan/engine.hpp"
#include "uocr/decoder/page_groups.hpp"
#include "uocr/engine/open.hpp"
#include "uocr/model/checkpoint.hpp"
#include "uocr/model/model.hpp"
#include "uocr/session/session.hpp"

namespace vk = uocr::vulkan;
using uocr::Status;
using uocr_test::argmax;
using uocr_test::Multi3;
using uocr_test::rel_err;

namespace {

std::string demo_dir() { return uocr_test::source_dir() + "/models/uocr-demo"; }

vk::Context& test_context() {
  static vk::Context ctx;
  return ctx;
}

void check_no_validation_errors(vk::Context& c, const std::string& where) {
  if (!c.validation_enabled()) return;
  INFO(where);
  for (const std::string& m : c.validation_messages()) INFO(m);
  CHECK(c.validation_errors() == 0);
}

// Every logits row of a page-group run: the prefill's, then one per generated token, with the
// page boundary passed after tokens 12 and 26 (the group slides there when G < pages).
template <class PG>
std::vector<std::vector<float>> page_group_rows(PG& eng, const Multi3& f) {
  uocr::FunctionPageEmbeddings src = f.source();
  std::vector<std::vector<float>> rows{eng.start(f.layout, src)};
  for (size_t k = 0; k < f.gen.size(); ++k) {
    if (k == 12 || k == 26) eng.next_page();
    rows.push_back(eng.step(f.gen[k]));
  }
  return rows;
}

}  // namespace

TEST_CASE("page groups on Vulkan match the CPU: one-shot (G >= pages) and sliding (G = 2, O = 1)") {
  Multi3& f = Multi3::get();
  vk::Context& ctx = test_context();
  const auto weights = vk::DecoderDeviceWeights::upload(ctx, f.cfg.decoder, f.w.decoder);
  for (int g : {3, 2}) {
    CAPTURE(g);
    uocr::PageGroupParams pp;
    pp.group_pages = g;
    pp.overlap_pages = 1;
    uocr::PageGroupDecoder cpu(f.cfg.decoder, f.w.decoder, f.cfg.decoder.sliding_window, pp);
    vk::VulkanPageGroups gpu(vk::VulkanDecoder(ctx, f.cfg.decoder, f.w.decoder, weights),
                             vk::VulkanKvCache(ctx, f.cfg.decoder, f.cfg.decoder.sliding_window), pp);
    const auto ref = page_group_rows(cpu, f);
    const auto got = page_group_rows(gpu, f);
    REQUIRE(got.size() == ref.size());
    double worst = 0;
    for (size_t r = 0; r < ref.size(); ++r) {
      worst = std::max(worst, rel_err(got[r], ref[r]));
      CHECK(argmax(got[r]) == argmax(ref[r]));
    }
    MESSAGE("G = " << g << ": " << ref.size() << " logits rows, " << gpu.slides() << " slides, worst relative error "
                   << worst);
    CHECK(worst < 2e-6);
    CHECK(gpu.slides() == cpu.slides());
    CHECK(gpu.reference_bytes() == cpu.reference_bytes());
    CHECK(gpu.peak_kv_bytes() == cpu.peak_kv_bytes());
  }
  check_no_validation_errors(ctx, "page groups");
}

TEST_CASE("features the Vulkan backend lacks are refused, not run elsewhere") {
  Multi3& f = Multi3::get();
  vk::Context& ctx = test_context();
  const auto weights = vk::DecoderDeviceWeights::upload(ctx, f.cfg.decoder, f.w.decoder);
  auto make = [&](const uocr::PageGroupParams& pp) {
    vk::VulkanPageGroups eng(vk::VulkanDecoder(ctx, f.cfg.decoder, f.w.decoder, weights),
                             vk::VulkanKvCache(ctx, f.cfg.decoder, 8), pp);
  };
  uocr::PageGroupParams sparse;
  sparse.sparse = true;
  const std::string m1 = uocr_test::message_of([&] { make(sparse); });
  CHECK(uocr_test::status_of([&] { make(sparse); }) == Status::unsupported);
  CHECK(m1.find("SR-SWA") != std::string::npos);
  uocr::PageGroupParams extrapolate;
  extrapolate.allow_position_extrapolation = true;
  CHECK(uocr_test::status_of([&] { make(extrapolate); }) == Status::unsupported);
}

TEST_CASE("open_engine: backends by name, a device index out of range is a clear error") {
  const auto model = uocr::Model::load(demo_dir());
  CHECK(uocr::parse_backend("vulkan") == uocr::Backend::vulkan);
  CHECK(uocr_test::status_of([] { uocr::parse_backend("metal"); }) == Status::invalid_argument);
  CHECK(uocr::compiled_backends().find("vulkan") != std::string::npos);
  const std::string msg = uocr_test::message_of([&] { uocr::open_engine(model, uocr::Backend::vulkan, 99); });
  INFO(msg);
  CHECK(uocr_test::status_of([&] { uocr::open_engine(model, uocr::Backend::vulkan, 99); }) == Status::unsupported);
  CHECK(msg.find("Vulkan") != std::string::npos);
  CHECK(msg.find("device index 99") != std::string::npos);
  CHECK(msg.find("available") != std::string::npos);  // the devices found are listed
  CHECK(uocr_test::status_of([&] { uocr::open_engine(model, uocr::Backend::cpu, 1); }) == Status::unsupported);
  CHECK(uocr_test::status_of([&] { uocr::open_engine(model, uocr::Backend::cuda, 0); }) == Status::unsupported);

  // One device state per model and device: a second engine shares the uploaded weights.
  auto a = uocr::open_engine(model, uocr::Backend::vulkan, 0);
  auto b = uocr::open_engine(model, uocr::Backend::vulkan, 0);
  CHECK(&static_cast<vk::VulkanEngine&>(*a).context() == &static_cast<vk::VulkanEngine&>(*b).context());
  CHECK(a->device().find("Vulkan device 0") == 0);
}

namespace {

std::string sample(const std::string& f) { return uocr_test::source_dir() + "/samples/data/" + f; }

struct Transcript {
  std::vector<int32_t> ids;
  std::string text;
  uocr::StopReason stop = uocr::StopReason::eos;
  double seconds = 0;
};

// A greedy session run over `pages` of the demo model on `backend`.
Transcript transcribe(const std::shared_ptr<const uocr::Model>& model, uocr::Backend backend,
                      const std::vector<std::string>& pages) {
  uocr::SessionParams p;
  p.backend = backend;
  const auto t0 = std::chrono::steady_clock::now();
  uocr::Session session(model, p);
  for (const std::string& f : pages) session.add_page(uocr::load_image(sample(f)));
  Transcript t;
  const uocr::RunSummary sum = session.run([&](const uocr::Event& e) {
    if (e.type == uocr::Event::Type::token && e.token >= 0) t.ids.push_back(e.token);
    return true;
  });
  t.text = sum.text;
  t.stop = sum.stop;
  t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return t;
}

vk::Context& demo_context(const std::shared_ptr<const uocr::Model>& model) {
  auto e = uocr::open_engine(model, uocr::Backend::vulkan, 0);
  return static_cast<vk::VulkanEngine&>(*e).context();  // the model keeps the device alive
}

void check_same_transcript(const std::shared_ptr<const uocr::Model>& model, const std::vector<std::string>& pages) {
  const Transcript cpu = transcribe(model, uocr::Backend::cpu, pages);
  vk::Context& ctx = demo_context(model);
  ctx.reset_profile();
  const Transcript gpu = transcribe(model, uocr::Backend::vulkan, pages);
  MESSAGE(pages.size() << " page(s): " << cpu.ids.size() << " tokens; cpu " << cpu.seconds << " s, vulkan " << gpu.seconds
                       << " s (" << ctx.device_name() << ")");
  if (ctx.profiling()) MESSAGE("Vulkan per-op device time of the run (UOCR_VK_PROFILE=1):\n" << ctx.profile_report());
  CHECK(!cpu.ids.empty());
  CHECK(gpu.ids == cpu.ids);
  CHECK(gpu.text == cpu.text);
  CHECK(gpu.stop == cpu.stop);
}

}  // namespace

TEST_CASE("a session with backend = vulkan writes the CPU's transcript (demo model, one page)") {
  const auto model = uocr::Model::load(demo_dir());
  check_same_transcript(model, {"demo-page1.png"});
  check_no_validation_errors(demo_context(model), "session, one page");
}

TEST_CASE("a session with backend = vulkan writes the CPU's transcript (demo model, three pages)") {
  const auto model = uocr::Model::load(demo_dir());
  check_same_transcript(model, {"demo-page1.png", "demo-page2.png", "demo-page3.png"});
  check_no_validation_errors(demo_context(model), "session, three pages");
}

TEST_CASE("SR-SWA and checkpoints asked of a Vulkan session are refused with Status::unsupported") {
  const auto model = uocr::Model::load(demo_dir());
  uocr::SessionParams p;
  p.backend = uocr::Backend::vulkan;
  auto refused = [&](const uocr::InfiniteParams& inf, const uocr::CheckpointOptions& ck) {
    uocr::InfiniteSession session(model, p, inf);
    uocr::FilePages pages({sample("demo-page1.png")});
    return uocr_test::message_of([&] { session.run(pages, {}, ck); });
  };
  uocr::InfiniteParams sparse;
  sparse.groups.sparse = true;
  CHECK(refused(sparse, {}).find("SR-SWA") != std::string::npos);
  uocr::CheckpointOptions ck;
  ck.path = std::filesystem::temp_directory_path().string() + "/uocr-vulkan-checkpoint-" + std::to_string(getpid());
  CHECK(refused({}, ck).find("host memory") != std::string::npos);
  std::filesystem::remove(ck.path);
}

TEST_CASE("two threads run Vulkan sessions on one shared device at once, each with the CPU's transcript") {
  const auto model = uocr::Model::load(demo_dir());
  const Transcript cpu = transcribe(model, uocr::Backend::cpu, {"demo-page1.png"});
  Transcript a, b;
  std::thread other([&] { b = transcribe(model, uocr::Backend::vulkan, {"demo-page1.png"}); });
  a = transcribe(model, uocr::Backend::vulkan, {"demo-page1.png"});
  other.join();
  CHECK(a.ids == cpu.ids);
  CHECK(b.ids == cpu.ids);
  check_no_validation_errors(demo_context(model), "two threads");
}

TEST_CASE("C ABI: backend = vulkan runs, a device that does not exist is UOCR_E_UNSUPPORTED with the devices listed") {
  CHECK(std::string(uocr_build_info()).find("backends: cpu, vulkan") != std::string::npos);
  uocr_model* model = nullptr;
  REQUIRE(uocr_model_load(demo_dir().c_str(), nullptr, &model) == UOCR_OK);
  uocr_session_params p;
  uocr_session_params_init(&p);
  CHECK(p.backend == UOCR_BACKEND_CPU);
  CHECK(p.device_index == 0);

  p.backend = UOCR_BACKEND_VULKAN;
  p.device_index = 99;
  uocr_session* bad = nullptr;
  CHECK(uocr_session_create(model, &p, &bad) == UOCR_E_UNSUPPORTED);
  CHECK(bad == nullptr);
  const std::string msg = uocr_last_error();
  INFO(msg);
  CHECK(msg.find("device index 99") != std::string::npos);
  CHECK(msg.find("available") != std::string::npos);
  p.backend = 7;
  CHECK(uocr_session_create(model, &p, &bad) == UOCR_E_INVALID_ARGUMENT);

  p.backend = UOCR_BACKEND_VULKAN;
  p.device_index = 0;
  uocr_session* s = nullptr;
  REQUIRE(uocr_session_create(model, &p, &s) == UOCR_OK);
  REQUIRE(uocr_session_add_image_file(s, sample("demo-page1.png").c_str()) == UOCR_OK);
  uocr_run_summary sum;
  uocr_run_summary_init(&sum);
  REQUIRE(uocr_session_run(s, nullptr, nullptr, &sum) == UOCR_OK);
  size_t len = 0;
  REQUIRE(uocr_session_text(s, nullptr, 0, &len) == UOCR_OK);
  std::string text(len, '\0');
  REQUIRE(uocr_session_text(s, &text[0], len + 1, &len) == UOCR_OK);
  text.resize(len);
  CHECK(text == transcribe(uocr::Model::load(demo_dir()), uocr::Backend::cpu, {"demo-page1.png"}).text);
  uocr_session_free(s);
  uocr_model_free(model);
}

namespace {

struct Command {
  int exit_code = -1;
  std::string out;
};

Command run_cli(const std::string& args) {
  const std::string cmd = uocr_test::cli_path() + " " + args + " 2>&1";
  Command c;
  FILE* f = popen(cmd.c_str(), "r");
  REQUIRE(f != nullptr);
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, f)) > 0;) c.out.append(buf, n);
  const int st = pclose(f);
  c.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return c;
}

}  // namespace

TEST_CASE("uocr run --backend vulkan on the 3-page PDF writes the CPU's text; a missing device is exit 1 with a message") {
  const std::string common = " --model " + demo_dir() + " --quiet " + sample("demo-doc.pdf");
  const Command cpu = run_cli("run" + common);
  const Command gpu = run_cli("run --backend vulkan" + common);
  INFO(cpu.out);
  CHECK(cpu.exit_code == 0);
  CHECK(gpu.exit_code == cpu.exit_code);
  CHECK(gpu.out == cpu.out);

  const Command bad = run_cli("run --backend vulkan --device 5" + common);
  INFO(bad.out);
  CHECK(bad.exit_code == 1);
  CHECK(bad.out.find("device index 5 does not exist") != std::string::npos);
  CHECK(run_cli("run --backend metal" + common).exit_code == 2);
}
