// The Vulkan backend selected at run time (uocr/engine/): page groups on the device against the
// CPU's, sessions with backend = vulkan against backend = cpu on the demo model, the C ABI and
// `uocr run --backend vulkan`, checkpoints / resume (in process, across backends, and `uocr run
// --checkpoint` killed and resumed), positions past max_position_embeddings, SR-SWA (page groups
// and a session, against the CPU's), and the errors for a device that does not exist. Runs on any
// Vulkan device (CI: lavapipe) with the validation layers on.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include "backends/vulkan/engine.hpp"
#include "support/cli_process.hpp"
#include "support/draft_cases.hpp"
#include "support/logit_agreement.hpp"
#include "support/multi3_case.hpp"
#include "support/resume_case.hpp"
#include "support/test_support.hpp"
#include "support/vulkan_env.hpp"
#include "uocr.h"
#include "uocr/decoder/page_groups.hpp"
#include "uocr/engine/open.hpp"
#include "uocr/model/checkpoint.hpp"
#include "uocr/model/model.hpp"
#include "uocr/model/quantize_folder.hpp"
#include "uocr/session/one_shot.hpp"

extern char** environ;

namespace vk = uocr::vulkan;
using uocr::Status;
using uocr_test::argmax;
using uocr_test::check_no_validation_errors;
using uocr_test::Multi3;
using uocr_test::rel_err;

namespace {

std::string demo_dir() { return uocr_test::source_dir() + "/models/uocr-demo"; }

// Vulkan logits rows against the CPU's: same row count, same argmax in every row, relative error
// within the Vulkan budget; returns the worst relative error.
double compare(const std::vector<std::vector<float>>& got, const std::vector<std::vector<float>>& ref) {
  REQUIRE(got.size() == ref.size());
  double worst = 0;
  for (size_t r = 0; r < ref.size(); ++r) {
    worst = std::max(worst, rel_err(got[r], ref[r]));
    CHECK(argmax(got[r]) == argmax(ref[r]));
  }
  CHECK(worst < 2e-6);
  return worst;
}

vk::Context& test_context() {
  static vk::Context ctx;
  return ctx;
}

// Every logits row of a page-group run: the prefill's, then one per generated token, with the
// page boundary passed after tokens 12 and 26 (the group slides there when G < pages).
// `marker_tokens`: the tokens before the boundary that begin the new page (group positions keep
// them in the window).
template <class PG>
std::vector<std::vector<float>> page_group_rows(PG& eng, const Multi3& f, int64_t marker_tokens = 0) {
  uocr::FunctionPageEmbeddings src = f.source();
  std::vector<std::vector<float>> rows{eng.start(f.layout, src)};
  for (size_t k = 0; k < f.gen.size(); ++k) {
    if (k == 12 || k == 26) eng.next_page(marker_tokens);
    rows.push_back(eng.step(f.gen[k]));
  }
  return rows;
}

}  // namespace

TEST_CASE("page groups on Vulkan match the CPU: one-shot (G >= pages) and sliding (G = 2, O = 1)") {
  Multi3& f = Multi3::get();
  vk::Context& ctx = test_context();
  const auto weights = vk::DecoderDeviceWeights::upload(ctx, f.w.decoder);
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
    const double worst = compare(got, ref);
    MESSAGE("G = " << g << ": " << ref.size() << " logits rows, " << gpu.slides() << " slides, worst relative error "
                   << worst);
    CHECK(gpu.slides() == cpu.slides());
    CHECK(gpu.memory().reference_kv_bytes == cpu.memory().reference_kv_bytes);
    CHECK(gpu.memory().peak_kv_bytes == cpu.memory().peak_kv_bytes);
  }
  check_no_validation_errors(ctx, "page groups");
}

TEST_CASE("group positions on Vulkan match the CPU: kept pages and window keys rotated through the host, or recomputed") {
  Multi3& f = Multi3::get();
  vk::Context& ctx = test_context();
  const auto weights = vk::DecoderDeviceWeights::upload(ctx, f.w.decoder);
  for (const bool recompute : {false, true}) {
    CAPTURE(recompute);
    uocr::PageGroupParams pp;
    pp.group_pages = 2;
    pp.overlap_pages = 1;
    pp.group_positions = true;
    pp.recompute_on_slide = recompute;
    uocr::PageGroupDecoder cpu(f.cfg.decoder, f.w.decoder, f.cfg.decoder.sliding_window, pp);
    vk::VulkanPageGroups gpu(vk::VulkanDecoder(ctx, f.cfg.decoder, f.w.decoder, weights),
                             vk::VulkanKvCache(ctx, f.cfg.decoder, f.cfg.decoder.sliding_window), pp);
    const auto ref = page_group_rows(cpu, f, 3);
    const auto got = page_group_rows(gpu, f, 3);
    const double worst = compare(got, ref);
    MESSAGE("G = 2, group positions, recompute_on_slide " << recompute << ": " << ref.size()
                                                          << " logits rows, worst relative error " << worst);
    CHECK(gpu.slides() == 1);
    CHECK(gpu.next_position() == cpu.next_position());
    CHECK(gpu.cache().generated_rows() == cpu.cache().generated_rows());
    CHECK(gpu.state().window_ids == cpu.state().window_ids);
  }
  check_no_validation_errors(ctx, "group positions");
}

TEST_CASE("SR-SWA on Vulkan: partial budgets select and score as on the CPU, full budgets are dense R-SWA bit for bit") {
  Multi3& f = Multi3::get();
  vk::Context& ctx = test_context();
  const auto weights = vk::DecoderDeviceWeights::upload(ctx, f.w.decoder);
  uocr_test::for_partial_budgets([&](const uocr::PageGroupParams& pp) {
    uocr::PageGroupDecoder cpu(f.cfg.decoder, f.w.decoder, f.window(), pp);
    vk::VulkanPageGroups gpu(vk::VulkanDecoder(ctx, f.cfg.decoder, f.w.decoder, weights),
                             vk::VulkanKvCache(ctx, f.cfg.decoder, f.window()), pp);
    const auto ref = page_group_rows(cpu, f);
    const double worst = compare(page_group_rows(gpu, f), ref);
    const int last_layer = f.cfg.decoder.layers - 1;
    uocr_test::check_same_selections(
        *gpu.sparse(), [&](int h) { return gpu.decoder().device_selection(last_layer, h); }, *cpu.sparse(),
        f.cfg.decoder.heads, worst);
  });

  // The selection runs on the device: a sparse decode step is one submission (it was one more
  // per layer, each reading q back), summaries synced once after the prefill.
  {
    uocr::PageGroupParams pp;
    pp.overlap_pages = 1;
    pp.group_pages = 3;
    pp.sparse = true;
    pp.sparse_params = {16, 1, 4, true};
    vk::VulkanPageGroups gpu(vk::VulkanDecoder(ctx, f.cfg.decoder, f.w.decoder, weights),
                             vk::VulkanKvCache(ctx, f.cfg.decoder, f.window()), pp);
    uocr::FunctionPageEmbeddings src = f.source();
    gpu.start(f.layout, src);
    gpu.step(f.gen[0]);
    for (size_t k = 1; k < 6; ++k) {
      const uint64_t before = ctx.submissions();
      gpu.step(f.gen[k]);
      CHECK(ctx.submissions() - before == 1);
    }
    CHECK(gpu.sparse()->rows_attended() < gpu.sparse()->rows_dense());
  }

  // Budgets covering everything: the dense path, the bits of dense R-SWA on Vulkan.
  uocr::PageGroupParams pp;
  pp.overlap_pages = 1;
  pp.sparse = true;
  pp.group_pages = 2;
  pp.sparse_params = {16, 0, 0, true};
  vk::VulkanPageGroups full(vk::VulkanDecoder(ctx, f.cfg.decoder, f.w.decoder, weights),
                            vk::VulkanKvCache(ctx, f.cfg.decoder, f.window()), pp);
  pp.sparse = false;
  vk::VulkanPageGroups dense(vk::VulkanDecoder(ctx, f.cfg.decoder, f.w.decoder, weights),
                             vk::VulkanKvCache(ctx, f.cfg.decoder, f.window()), pp);
  CHECK(page_group_rows(full, f) == page_group_rows(dense, f));
  CHECK(full.sparse()->rows_attended() == full.sparse()->rows_dense());
  check_no_validation_errors(ctx, "SR-SWA");
}

TEST_CASE("positions past max_position_embeddings (extrapolation) on Vulkan match the CPU") {
  Multi3& f = Multi3::get();
  vk::Context& ctx = test_context();
  const auto weights = vk::DecoderDeviceWeights::upload(ctx, f.w.decoder);
  SUBCASE("page groups past the limit") {
    // tiny-b's own 32,768 positions would take ~120 page prefills on lavapipe: the same model
    // with max_position_embeddings = 4 pages instead. multi_3's pages cycled over 7 pages, G = 2
    // sliding up to four pages before each step: pages 4..6, the tail and every generated
    // token are past the limit.
    uocr::DecoderConfig dc = f.cfg.decoder;
    uocr::DocumentLayout layout = f.layout;
    dc.max_positions = int(4 * layout.page_tokens);
    layout.pages = 7;
    REQUIRE(layout.page_position(4) > dc.max_positions);
    uocr::PageGroupParams pp;
    pp.group_pages = 2;
    pp.overlap_pages = 1;
    pp.allow_position_extrapolation = true;
    auto source = [&] {
      return uocr::FunctionPageEmbeddings(layout.pages, [&](int64_t p, std::vector<float>& out) { f.page(p % 3, out); });
    };
    auto rows = [&](auto& eng) {
      uocr::FunctionPageEmbeddings src = source();
      std::vector<std::vector<float>> r{eng.start(layout, src)};
      for (size_t k = 0; k < f.gen.size(); ++k) {
        for (int i = 0; i < 4 && eng.pages_pending(); ++i) eng.next_page();
        r.push_back(eng.step(f.gen[k]));
      }
      return r;
    };
    uocr::PageGroupDecoder cpu(dc, f.w.decoder, f.window(), pp);
    vk::VulkanPageGroups gpu(vk::VulkanDecoder(ctx, dc, f.w.decoder, weights), vk::VulkanKvCache(ctx, dc, f.window()), pp);
    const double worst = compare(rows(gpu), rows(cpu));
    MESSAGE("page groups, positions up to " << gpu.next_position() - 1 << " (limit " << dc.max_positions
                                            << "): worst relative error " << worst);
    CHECK(gpu.slides() == layout.pages - 2);
    CHECK(gpu.next_position() == cpu.next_position());

    // Without the opt-in the same document is refused, as on the CPU.
    pp.allow_position_extrapolation = false;
    vk::VulkanPageGroups bounded(vk::VulkanDecoder(ctx, dc, f.w.decoder, weights), vk::VulkanKvCache(ctx, dc, f.window()), pp);
    uocr::FunctionPageEmbeddings src = source();
    CHECK(uocr_test::status_of([&] { bounded.start(layout, src); }) == Status::invalid_argument);
  }

  SUBCASE("the last positions below 2^24") {
    // Angles of ~2^24 rad: a prefill of the prompt head and teacher-forced steps ending at the
    // largest position extrapolation allows.
    const int64_t limit = uocr::kMaxExtrapolatedPosition;
    const int64_t first = limit - int64_t(f.layout.head.size()) - int64_t(f.gen.size());
    uocr::Decoder cpu(f.cfg.decoder, f.w.decoder);
    vk::VulkanDecoder gpu(ctx, f.cfg.decoder, f.w.decoder, weights);
    cpu.set_position_limit(limit);
    gpu.set_position_limit(limit);
    uocr::KvCache cpu_cache(f.cfg.decoder, f.window());
    vk::VulkanKvCache gpu_cache(ctx, f.cfg.decoder, f.window());
    auto rows = [&](auto& dec, auto& cache) {
      std::vector<std::vector<float>> r{dec.prefill(dec.embed(f.layout.head), first, cache)};
      int64_t pos = first + int64_t(f.layout.head.size());
      for (int32_t t : f.gen) r.push_back(dec.decode_step(t, pos++, cache));
      CHECK(pos == limit);
      return r;
    };
    const double worst = compare(rows(gpu, gpu_cache), rows(cpu, cpu_cache));
    MESSAGE("decoder, positions " << first << ".." << limit - 1 << ": worst relative error " << worst);
    CHECK(uocr_test::status_of([&] { gpu.decode_step(f.gen[0], limit, gpu_cache); }) == Status::invalid_argument);
  }
  check_no_validation_errors(ctx, "position extrapolation");
}

static uocr::EngineOptions on_device(int index) {
  uocr::EngineOptions o;
  o.device_index = index;
  return o;
}

TEST_CASE("open_engine: backends by name, a device index out of range is a clear error") {
  const auto model = uocr::Model::load(demo_dir());
  CHECK(uocr::parse_backend("vulkan") == uocr::Backend::vulkan);
  CHECK(uocr_test::status_of([] { uocr::parse_backend("metal"); }) == Status::invalid_argument);
  CHECK(uocr::compiled_backends().find("vulkan") != std::string::npos);
  const std::string msg = uocr_test::message_of([&] { uocr::open_engine(model, uocr::Backend::vulkan, on_device(99)); });
  INFO(msg);
  CHECK(uocr_test::status_of([&] { uocr::open_engine(model, uocr::Backend::vulkan, on_device(99)); }) == Status::unsupported);
  CHECK(msg.find("Vulkan") != std::string::npos);
  CHECK(msg.find("device index 99") != std::string::npos);
  CHECK(msg.find("available") != std::string::npos);  // the devices found are listed
  CHECK(uocr_test::status_of([&] { uocr::open_engine(model, uocr::Backend::cpu, on_device(1)); }) == Status::unsupported);
  CHECK(uocr_test::status_of([&] { uocr::open_engine(model, uocr::Backend::cuda); }) == Status::unsupported);

  // Each engine owns its device state; the sessions on one engine share it.
  auto a = uocr::open_engine(model, uocr::Backend::vulkan);
  auto b = uocr::open_engine(model, uocr::Backend::vulkan);
  CHECK(&static_cast<vk::VulkanEngine&>(*a).context() != &static_cast<vk::VulkanEngine&>(*b).context());
  CHECK(uocr::Session(a).engine() == a);
  CHECK(a->device().find("Vulkan device 0") == 0);
}

TEST_CASE("an int8 model folder is refused on Vulkan, naming the tensor; the CPU runs it") {
  const std::string dir = (std::filesystem::temp_directory_path() / ("uocr_vk_int8_" + std::to_string(::getpid()))).string();
  uocr::quantize_model_folder(demo_dir(), dir);
  const auto model = uocr::Model::load(dir);
  std::filesystem::remove_all(dir);  // the mapped files stay readable
  const std::string msg = uocr_test::message_of([&] { uocr::open_engine(model, uocr::Backend::vulkan); });
  INFO(msg);
  CHECK(uocr_test::status_of([&] { uocr::open_engine(model, uocr::Backend::vulkan); }) == Status::unsupported);
  CHECK(msg.find("is int8: quantized folders run on the CPU backend") != std::string::npos);
  CHECK(uocr::open_engine(model, uocr::Backend::cpu) != nullptr);
}

namespace {

std::string sample(const std::string& f) { return uocr_test::source_dir() + "/samples/data/" + f; }

struct Transcript {
  std::vector<int32_t> ids;
  std::string text;
  uocr::StopReason stop = uocr::StopReason::eos;
  double seconds = 0;
};

// A greedy one-shot session over `pages` of the demo model on `engine`.
Transcript transcribe(const std::shared_ptr<uocr::Engine>& engine, const std::vector<std::string>& pages) {
  uocr::SessionParams p;
  const auto t0 = std::chrono::steady_clock::now();
  uocr::OneShotSession session(engine, p);
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

// The demo model on the CPU and on Vulkan device 0 (f32, the CPU's reference arithmetic, which
// Vulkan runs), each one engine its sessions share.
struct DemoEngines {
  std::shared_ptr<const uocr::Model> model = uocr::Model::load(demo_dir());
  std::shared_ptr<uocr::Engine> cpu = uocr::open_engine(model, uocr::Backend::cpu);
  std::shared_ptr<uocr::Engine> vulkan = uocr::open_engine(model, uocr::Backend::vulkan);
  vk::Context& context() { return static_cast<vk::VulkanEngine&>(*vulkan).context(); }
};

void check_same_transcript(DemoEngines& e, const std::vector<std::string>& pages) {
  const Transcript cpu = transcribe(e.cpu, pages);
  vk::Context& ctx = e.context();
  ctx.reset_profile();
  const Transcript gpu = transcribe(e.vulkan, pages);
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
  DemoEngines e;
  check_same_transcript(e, {"demo-page1.png"});
  check_no_validation_errors(e.context(), "session, one page");
}

TEST_CASE("a session with backend = vulkan writes the CPU's transcript (demo model, three pages)") {
  DemoEngines e;
  check_same_transcript(e, {"demo-page1.png", "demo-page2.png", "demo-page3.png"});
  check_no_validation_errors(e.context(), "session, three pages");
}

TEST_CASE("SR-SWA in a Vulkan session writes the CPU's SR-SWA transcript (demo model, one page)") {
  DemoEngines e;
  uocr::DocumentParams ip;
  ip.groups.sparse = true;
  ip.groups.sparse_params = {16, 1, 4, true};  // 4 of the page's blocks per layer and head
  auto run = [&](const std::shared_ptr<uocr::Engine>& engine, uocr::SessionStats& stats) {
    uocr::Session session(engine, {}, ip);
    uocr::FilePages pages({sample("demo-page1.png")});
    const uocr::RunSummary sum = session.run(pages);
    stats = session.stats();
    return sum.text;
  };
  uocr::SessionStats cpu, gpu;
  const std::string ref = run(e.cpu, cpu);
  CHECK(run(e.vulkan, gpu) == ref);
  CHECK(!ref.empty());
  CHECK(gpu.sparse_rows_attended < gpu.sparse_rows_dense);
  CHECK(gpu.sparse_rows_attended == cpu.sparse_rows_attended);
  check_no_validation_errors(e.context(), "session, SR-SWA");
}

namespace {

std::string tmp(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("uocr_vulkan_" + std::to_string(getpid()) + "_" + name)).string();
}

// tests/resume_case.hpp's document, on the demo model (the golden model.s 129k-token vocabulary is
// slow on lavapipe).
std::vector<std::string> resume_pages() {
  return {sample("demo-page1.png"), sample("demo-page2.png"), sample("demo-page3.png")};
}

}  // namespace

TEST_CASE("drafts on Vulkan: verify() and settle(kept) leave the page groups as `kept` steps would") {
  const auto model = uocr_test::demo_model();
  const uocr::DecoderConfig& c = model->config().decoder;
  vk::Context& ctx = test_context();
  const auto weights = vk::DecoderDeviceWeights::upload(ctx, model->weights().decoder);
  uocr_test::check_verify_matches_steps([&](int window, const uocr::PageGroupParams& pp) {
    return vk::VulkanPageGroups(vk::VulkanDecoder(ctx, c, model->weights().decoder, weights), vk::VulkanKvCache(ctx, c, window),
                                pp);
  });
  check_no_validation_errors(ctx, "draft verification");
}

TEST_CASE("drafts in Vulkan sessions: right, wrong or empty give exactly the tokens of plain decoding there") {
  // One group; sliding groups whose window is recomputed (decode_tokens) with verified runs
  // across slides; SR-SWA (steps stand in for the multi-token pass). Full attention: above.
  DemoEngines e;
  const std::vector<uocr_test::DraftSetup> setups = uocr_test::draft_setups();
  for (size_t i : {0, 3, 4}) uocr_test::check_drafts_keep_the_tokens(e.vulkan, setups[i]);
  check_no_validation_errors(e.context(), "sessions with drafts");
}

TEST_CASE("checkpoints on Vulkan: a cancelled run resumes exactly; CPU and Vulkan checkpoints resume on either backend") {
  DemoEngines e;
  uocr_test::check_resume_across_backends(e.vulkan, e.cpu, resume_pages(), tmp(""));
  check_no_validation_errors(e.context(), "checkpoints");
}

TEST_CASE("two threads run Vulkan sessions on one shared device at once, each with the CPU's transcript") {
  DemoEngines e;
  const Transcript cpu = transcribe(e.cpu, {"demo-page1.png"});
  Transcript a, b;
  std::thread other([&] { b = transcribe(e.vulkan, {"demo-page1.png"}); });
  a = transcribe(e.vulkan, {"demo-page1.png"});
  other.join();
  CHECK(a.ids == cpu.ids);
  CHECK(b.ids == cpu.ids);
  check_no_validation_errors(e.context(), "two threads");
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
  CHECK(text == transcribe(uocr::open_engine(uocr::Model::load(demo_dir()), uocr::Backend::cpu), {"demo-page1.png"}).text);
  uocr_session_free(s);
  uocr_model_free(model);
}

namespace {

using uocr_test::run_cli;

}  // namespace

TEST_CASE("uocr run --backend vulkan on the 3-page PDF writes the CPU's text; a missing device is exit 1 with a message") {
  const std::string common = " --model " + demo_dir() + " --quiet " + sample("demo-doc.pdf");
  const uocr_test::CliRun cpu = run_cli("run --precision f32" + common);
  const uocr_test::CliRun gpu = run_cli("run --backend vulkan" + common);
  INFO(cpu.output);
  CHECK(cpu.status == 0);
  CHECK(gpu.status == cpu.status);
  CHECK(gpu.output == cpu.output);

  const uocr_test::CliRun bad = run_cli("run --backend vulkan --device 5" + common);
  INFO(bad.output);
  CHECK(bad.status == 1);
  CHECK(bad.output.find("device index 5 does not exist") != std::string::npos);
  CHECK(run_cli("run --backend metal" + common).status == 2);
}


TEST_CASE("uocr run --backend vulkan --checkpoint, killed mid-document, then --resume writes the uninterrupted output") {
  const std::string ref_out = tmp("ref.md"), out = tmp("killed.md"), ck = tmp("cli.ckpt"), log = tmp("cli.log");
  for (const std::string& f : {ref_out, out, ck}) std::filesystem::remove(f);
  // The demo model's <PAGE> markers slide the two-page group.
  std::vector<std::string> common = {"run", "--backend", "vulkan", "--model", demo_dir(), "--max-tokens", "150",
                                     "--pages-per-group", "2", "--overlap", "1", "--quiet"};
  for (const std::string& p : resume_pages()) common.push_back(p);
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), common.begin(), common.end());
    return extra;
  };

  const int exit_code = uocr_test::wait_exit(uocr_test::spawn_cli(with({"-o", ref_out, "--stats", "json"}), log));
  const std::string expected = uocr_test::read_file(ref_out);
  INFO(uocr_test::read_file(log));
  REQUIRE((exit_code == 0 || exit_code == 3));  // EOS or --max-tokens
  REQUIRE(uocr_test::read_file(log).find("\"slides\": 0") == std::string::npos);
  REQUIRE(expected.size() > 60);

  // Killed once the output is past the slide and a checkpoint exists.
  const std::vector<std::string> ckpt = with({"-o", out, "--checkpoint", ck, "--checkpoint-every", "10"});
  const pid_t pid = uocr_test::spawn_cli(ckpt, log);
  const auto t0 = std::chrono::steady_clock::now();
  bool killed = false;
  while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(300)) {
    std::error_code ec;
    if (std::filesystem::exists(ck) && std::filesystem::file_size(out, ec) >= expected.size() / 2 && !ec) {
      killed = ::kill(pid, SIGKILL) == 0;
      break;
    }
    int st;
    if (waitpid(pid, &st, WNOHANG) == pid) FAIL("uocr run finished before it could be killed: " << uocr_test::read_file(log));
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  REQUIRE(killed);
  CHECK(uocr_test::wait_exit(pid) == 128 + SIGKILL);
  const size_t partial = uocr_test::read_file(out).size();
  MESSAGE("killed after " << partial << " of " << expected.size() << " bytes");
  REQUIRE(partial < expected.size());

  std::vector<std::string> resume = ckpt;
  resume.insert(resume.end(), {"--resume", "--stats", "json"});
  CHECK(uocr_test::wait_exit(uocr_test::spawn_cli(resume, log)) == exit_code);
  INFO(uocr_test::read_file(log));
  CHECK(uocr_test::read_file(log).find("\"resumed_at_token\": -1") == std::string::npos);
  CHECK(uocr_test::read_file(out) == expected);
  CHECK_FALSE(std::filesystem::exists(ck));  // a finished run removes its checkpoint
  for (const std::string& f : {ref_out, out, log}) std::filesystem::remove(f);
}
