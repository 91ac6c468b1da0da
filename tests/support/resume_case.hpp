// The document settings of the resume tests (CPU: tests/test_resume.cpp; Vulkan and across
// backends: backends/vulkan/tests/test_vulkan_session.cpp): sampled, so the RNG state matters; two
// pages held of three; the fallback sliding every 8 tokens when the output has no <PAGE>.
// resume_run runs such a document on any backend, straight through, cancelled with checkpoints, or
// resumed.
#pragma once
#include <doctest/doctest.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "uocr/engine/open.hpp"
#include "uocr/session/page_source.hpp"
#include "uocr/session/session.hpp"

namespace uocr_test {

inline uocr::SessionParams resume_params(uocr::Backend backend = uocr::Backend::cpu) {
  uocr::SessionParams p;
  p.backend = backend;
  p.precision = uocr::Precision::f32;  // what every backend runs, so checkpoints cross backends
  p.max_new_tokens = 40;
  p.sampling.temperature = 0.8f;
  p.sampling.seed = 7;
  return p;
}

inline uocr::DocumentParams resume_groups(bool group_positions = false) {
  uocr::DocumentParams ip;
  ip.groups.group_pages = 2;
  ip.groups.overlap_pages = 1;
  ip.groups.group_positions = group_positions;
  ip.page_fallback_tokens = 8;
  return ip;
}

struct ResumeRun {
  std::vector<int32_t> tokens;
  uocr::RunSummary summary;
  int64_t resumed_at = -1, slides = 0;
};

// One run of the document `pages` (image files) on `engine`: uninterrupted (no path), cancelled
// after `stop_at` tokens with a checkpoint every 5, or resumed from `path`.
inline ResumeRun resume_run(const std::shared_ptr<uocr::Engine>& engine, const std::vector<std::string>& pages,
                            const std::string& path = "", int64_t stop_at = 0,
                            const uocr::DocumentParams& groups = resume_groups()) {
  uocr::Session session(engine, resume_params(engine->backend()), groups);
  uocr::FilePages source(pages);
  uocr::CheckpointOptions ck;
  ck.path = path;
  ck.every_tokens = path.empty() ? 0 : 5;
  ck.resume = !path.empty() && stop_at == 0;
  ResumeRun r;
  r.summary = session.run(source, [&](const uocr::Event& e) {
    if (e.type != uocr::Event::Type::token) return true;
    r.tokens.push_back(e.token);
    return stop_at == 0 || int64_t(r.tokens.size()) < stop_at;
  }, ck);
  r.resumed_at = session.stats().resumed_at_token;
  r.slides = session.stats().slides;
  return r;
}

// The same on an engine of its own on `backend`.
inline ResumeRun resume_run(const std::shared_ptr<const uocr::Model>& model, uocr::Backend backend,
                            const std::vector<std::string>& pages, const std::string& path = "", int64_t stop_at = 0,
                            const uocr::DocumentParams& groups = resume_groups()) {
  return resume_run(uocr::open_engine(model, backend), pages, path, stop_at, groups);
}

// The cross-backend resume check of a device backend: its uninterrupted run equals the CPU's; runs
// cancelled at token 23 (one on `device`, one on `cpu`) resume device -> device, CPU -> device and
// device -> CPU with exactly the uninterrupted tokens, slides and KV figures. `tmp_prefix` names
// the checkpoint files.
inline void check_resume_across_backends(const std::shared_ptr<uocr::Engine>& device, const std::shared_ptr<uocr::Engine>& cpu,
                                         const std::vector<std::string>& pages, const std::string& tmp_prefix) {
  const ResumeRun full = resume_run(device, pages);
  REQUIRE(full.summary.generated_tokens == 40);
  REQUIRE(full.slides >= 1);
  // The KV rows of both backends have one layout and agree to rounding, so their runs agree.
  REQUIRE(resume_run(cpu, pages).tokens == full.tokens);

  // Stopped at token 23: the last checkpoint is the one of token 20 or of a page boundary after it.
  const std::string gpu_ck = tmp_prefix + "gpu.ckpt", cpu_ck = tmp_prefix + "cpu.ckpt", copy = tmp_prefix + "copy.ckpt";
  CHECK(resume_run(device, pages, gpu_ck, 23).summary.stop == uocr::StopReason::cancelled);
  CHECK(resume_run(cpu, pages, cpu_ck, 23).summary.stop == uocr::StopReason::cancelled);
  std::filesystem::copy_file(gpu_ck, copy, std::filesystem::copy_options::overwrite_existing);

  struct Case {
    const char* what;
    std::string path;
    const std::shared_ptr<uocr::Engine>& engine;
  };
  for (const Case& c : {Case{"device -> device", gpu_ck, device}, Case{"cpu -> device", cpu_ck, device},
                        Case{"device -> cpu", copy, cpu}}) {
    CAPTURE(c.what);
    const ResumeRun rest = resume_run(c.engine, pages, c.path);
    REQUIRE(rest.resumed_at >= 20);
    REQUIRE(rest.resumed_at < 23);
    CHECK(rest.tokens == std::vector<int32_t>(full.tokens.begin() + rest.resumed_at, full.tokens.end()));
    CHECK(rest.slides == full.slides);
    CHECK(rest.summary.stop == full.summary.stop);
    CHECK(rest.summary.generated_tokens == full.summary.generated_tokens);
    CHECK(rest.summary.memory.peak_kv_bytes == full.summary.memory.peak_kv_bytes);
    CHECK(rest.summary.memory.kv_allocated_bytes == full.summary.memory.kv_allocated_bytes);
    std::filesystem::remove(c.path);
  }
}

}  // namespace uocr_test
