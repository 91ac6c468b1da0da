// Checkpoints on CUDA (ReservedKvRing::visit_rows: the KV rows through a host copy, in the CPU's
// layout and file format):
//  - page groups over multi_3 (tiny-b, teacher-forced; the state taken after the slide, before
//    the last page boundary): visit_kv reads the CPU's arrays (to rounding); a CUDA group resumed from a CUDA
//    state goes on bit for bit as the uninterrupted one; resumed from the CPU's state (and the
//    CPU from CUDA's) it goes on as the other backend does, within the CUDA budget;
//  - sessions (tests/resume_case.hpp's sampled three-page document, on the demo model as in
//    backends/vulkan/tests/test_vulkan_session.cpp): a run cancelled at token 23 resumes CUDA -> CUDA, CPU -> CUDA
//    and CUDA -> CPU with exactly the uninterrupted run's tokens.
// Without a usable GPU the cases are skipped and the executable exits 77 (gpu_test.hpp).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

#include "backends/cuda/engine.hpp"
#include "support/gpu_test.hpp"
#include "support/multi3_device.hpp"
#include "support/resume_case.hpp"
#include "uocr/decoder/page_groups.hpp"
#include "uocr/model/model.hpp"

namespace cu = uocr::cuda;
using uocr_test::Multi3;
using uocr_test::no_gpu;

namespace {

using Arrays = std::vector<std::vector<float>>;

// Every KV array of a page group, in visit_kv's (the checkpoint's) order.
template <class PG>
Arrays kv_of(PG& pg) {
  Arrays kv;
  pg.visit_kv([&](float* data, size_t n) { kv.emplace_back(data, data + n); });
  return kv;
}

// Continues multi_3 on `pg` from another group's state and KV arrays, as a checkpoint would.
// `src` is the resumed group's page source (it must outlive the run).
template <class PG>
void resume_from(PG& pg, uocr::FunctionPageEmbeddings& src, const uocr::PageGroupState& st, const Arrays& kv) {
  std::vector<float> skipped;
  for (int64_t p = 0; p < st.loaded; ++p) src.next(skipped);  // pages already in the state
  size_t i = 0;
  pg.resume(Multi3::get().layout, src, st, [&](float* data, size_t n) {
    REQUIRE(i < kv.size());
    REQUIRE(kv[i].size() == n);
    std::copy(kv[i].begin(), kv[i].end(), data);
    ++i;
  });
  CHECK(i == kv.size());
}

void check_same_state(const uocr::PageGroupState& a, const uocr::PageGroupState& b) {
  CHECK(a.slot_pages == b.slot_pages);
  CHECK(a.first == b.first);
  CHECK(a.current == b.current);
  CHECK(a.loaded == b.loaded);
  CHECK(a.generated == b.generated);
  CHECK(a.slides == b.slides);
  CHECK(a.extra_boundaries == b.extra_boundaries);
}

std::string demo_dir() { return uocr_test::source_dir() + "/models/uocr-demo"; }

std::string tmp(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("uocr_cuda_" + std::to_string(getpid()) + "_" + name)).string();
}

// tests/resume_case.hpp's document, on the demo model as on Vulkan (trained: its sampled tokens
// do not hang on rounding, so CPU and CUDA runs agree).
std::vector<std::string> resume_pages() {
  const std::string data = uocr_test::source_dir() + "/samples/data/";
  return {data + "demo-page1.png", data + "demo-page2.png", data + "demo-page3.png"};
}

}  // namespace

TEST_CASE("page groups on CUDA: visit_kv reads the CPU's KV, and a resumed group goes on as the uninterrupted one" *
          doctest::skip(no_gpu())) {
  const Multi3& f = Multi3::get();
  uocr::PageGroupParams pp;
  pp.group_pages = 2;
  pp.overlap_pages = 1;
  const size_t stop = 20;  // after the slide at token 12, before the boundary at 26; the R-SWA ring (8) has wrapped
  uocr::FunctionPageEmbeddings cpu_src = f.source(), gpu_src = f.source();
  uocr::PageGroupDecoder cpu(f.cfg.decoder, f.w.decoder, f.window(), pp);
  cu::CudaPageGroups gpu = uocr_test::multi3_page_groups(pp);
  cpu.start(f.layout, cpu_src);
  gpu.start(f.layout, gpu_src);
  uocr_test::multi3_steps(cpu, 0, stop);
  uocr_test::multi3_steps(gpu, 0, stop);
  const uocr::PageGroupState cpu_st = cpu.state(), gpu_st = gpu.state();
  check_same_state(gpu_st, cpu_st);
  REQUIRE(gpu_st.slides == 1);

  // One layout: the same arrays in the same order, equal to rounding.
  const Arrays cpu_kv = kv_of(cpu), gpu_kv = kv_of(gpu);
  REQUIRE(gpu_kv.size() == size_t(4 * f.cfg.decoder.layers));
  REQUIRE(cpu_kv.size() == gpu_kv.size());
  double worst = 0;
  for (size_t i = 0; i < cpu_kv.size(); ++i) {
    REQUIRE(gpu_kv[i].size() == cpu_kv[i].size());
    worst = std::max(worst, uocr_test::rel_err(gpu_kv[i], cpu_kv[i]));
  }
  MESSAGE("page groups: CUDA KV arrays vs the CPU's, worst relative error " << worst);
  CHECK(worst <= 1e-5);

  // CUDA -> CUDA: resume writes the rows back exactly, and the logits after it are the
  // uninterrupted group's bit for bit.
  uocr::FunctionPageEmbeddings src_a = f.source(), src_b = f.source(), src_c = f.source();
  cu::CudaPageGroups again = uocr_test::multi3_page_groups(pp);
  resume_from(again, src_a, gpu_st, gpu_kv);
  check_same_state(again.state(), gpu_st);
  CHECK(kv_of(again) == gpu_kv);
  const Arrays gpu_rest = uocr_test::multi3_steps(gpu, stop, f.gen.size());
  CHECK(uocr_test::multi3_steps(again, stop, f.gen.size()) == gpu_rest);
  CHECK(again.slides() == gpu.slides());

  // CPU -> CUDA and CUDA -> CPU: each goes on as the other backend's uninterrupted group.
  cu::CudaPageGroups from_cpu = uocr_test::multi3_page_groups(pp);
  resume_from(from_cpu, src_b, cpu_st, cpu_kv);
  CHECK(kv_of(from_cpu) == cpu_kv);
  uocr::PageGroupDecoder from_gpu(f.cfg.decoder, f.w.decoder, f.window(), pp);
  resume_from(from_gpu, src_c, gpu_st, gpu_kv);
  CHECK(kv_of(from_gpu) == gpu_kv);
  const Arrays cpu_rest = uocr_test::multi3_steps(cpu, stop, f.gen.size());
  MESSAGE("page groups: CPU -> CUDA, worst relative error "
          << uocr_test::compare_cuda_rows(uocr_test::multi3_steps(from_cpu, stop, f.gen.size()), cpu_rest));
  MESSAGE("page groups: CUDA -> CPU, worst relative error "
          << uocr_test::compare_cuda_rows(uocr_test::multi3_steps(from_gpu, stop, f.gen.size()), gpu_rest));
}

TEST_CASE("sessions on CUDA: a cancelled run resumes exactly; CPU and CUDA checkpoints resume on either backend" *
          doctest::skip(no_gpu())) {
  const auto model = uocr::Model::load(demo_dir());
  uocr_test::check_resume_across_backends(uocr::open_engine(model, uocr::Backend::cuda), uocr::open_engine(model, uocr::Backend::cpu),
                                          resume_pages(), tmp(""));
}

int main(int argc, char** argv) { return uocr_test::gpu_test_main(argc, argv); }
