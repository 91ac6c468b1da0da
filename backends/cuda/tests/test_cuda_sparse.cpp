// SR-SWA on the CUDA device. The selection kernel (sparse_select.cu through
// cuda::CudaSparseReference) against the CPU's rule (uocr::SparseReference::select_step) span for
// span and count for count over the cases the Vulkan test runs (tests/sparse_select_cases.hpp:
// gate trees of every depth, budgets, tail lanes, GQA, ties), and the span attention against the
// CPU's. The decoder (decoder.hpp) on the upstream multi_3 case (tiny-b, GQA 4/2 heads, 3 pages)
// with page groups: partial budgets give the CPU's selections, counts and logits (within the
// CUDA budget), budgets covering everything give dense CUDA R-SWA bit for bit (the dense shortcut
// and the span kernel over one merged span both), the CUDA engine takes SR-SWA as the CPU engine
// does (the golden tiny-b, which has a tokenizer), and a batched step with SR-SWA attached is
// Status::unsupported. Without a usable GPU the cases are skipped and the executable exits 77
// (gpu_test.hpp).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <utility>
#include <vector>

#include "backends/cuda/engine.hpp"
#include "backends/cuda/sparse.hpp"
#include "support/gpu_test.hpp"
#include "support/multi3_device.hpp"
#include "support/sparse_select_cases.hpp"
#include "uocr/decoder/decoder.hpp"
#include "uocr/decoder/page_groups.hpp"
#include "uocr/decoder/sparse_reference.hpp"
#include "uocr/engine/open.hpp"
#include "uocr/model/model.hpp"

namespace cu = uocr::cuda;
using uocr::Status;
using uocr_test::compare_cuda_rows;
using uocr_test::Multi3;
using uocr_test::Multi3Device;
using uocr_test::multi3_page_groups;
using uocr_test::multi3_rows;
using uocr_test::no_gpu;

namespace {

cu::Context& context() {
  static cu::Context c;
  return c;
}

// A device buffer holding v.
cu::Buffer upload(cu::Context& ctx, const std::vector<float>& v) {
  cu::Buffer b = ctx.alloc(v.size() * sizeof(float), "test input");
  ctx.upload(b, 0, v.data(), v.size() * sizeof(float));
  return b;
}

// check_device_selection's Device over cuda::CudaSparseReference: a step's queries go up at
// once (one row per layer), the layers' selections are enqueued, the counters read once.
struct CudaSelection {
  cu::Context& ctx = context();
  cu::CudaSparseReference dev{ctx};

  void sync(const uocr::SparseReference& s, int heads) { dev.sync(s, heads); }
  std::pair<int64_t, int64_t> step(const std::vector<std::vector<float>>& queries) {
    std::vector<float> all;
    for (const std::vector<float>& q : queries) all.insert(all.end(), q.begin(), q.end());
    const cu::Buffer q = upload(ctx, all);
    dev.begin_step(ctx);
    for (size_t l = 0; l < queries.size(); ++l) dev.select(ctx, int(l), q.f32() + l * queries[0].size());
    const cu::CudaSparseReference::StepCounts n = dev.step_counts();
    return {n.rows_attended, n.bounds_evaluated};
  }
  std::vector<uocr::RowSpan> spans(int layer, int h) const { return dev.selection(layer, h); }
};

}  // namespace

TEST_CASE("SR-SWA selection on CUDA is the CPU's, span for span, over gate trees, budgets and ties" *
          doctest::skip(no_gpu())) {
  for (const uocr_test::SparseCase& c : uocr_test::sparse_selection_cases()) {
    CudaSelection dev;
    uocr_test::check_device_selection(c, dev);
  }
}

TEST_CASE("SR-SWA attention over the CUDA device's spans and the window matches the CPU's span attention" *
          doctest::skip(no_gpu())) {
  const uocr_test::SpanAttentionCase t;
  uocr::SparseReference cpu = t.f.sparse(t.c.params);
  cu::Context& ctx = context();
  cu::CudaSparseReference dev(ctx);
  dev.sync(cpu, t.c.heads);
  const cu::Buffer rk = upload(ctx, t.keys()), rv = upload(ctx, t.values), wk = upload(ctx, t.win_k),
                   wv = upload(ctx, t.win_v), q = upload(ctx, t.query);
  const cu::Buffer out = ctx.alloc(size_t(t.shape.q_row()) * sizeof(float), "out");
  dev.begin_step(ctx);
  dev.select(ctx, t.layer, q.f32());
  dev.attend(ctx, t.layer, q.f32(), cu::ops::KvSpan{rk.f32(), rv.f32(), t.f.rows},
             cu::ops::KvSpan{wk.f32(), wv.f32(), t.window}, out.f32());
  const std::vector<float> want = t.expected(cpu);
  std::vector<float> got(want.size());
  ctx.download(out, 0, got.data(), got.size() * sizeof(float));
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, double(std::fabs(got[i] - want[i])));
  MESSAGE("device span attention: worst absolute error " << worst);
  CHECK(worst < 1e-5);
}

TEST_CASE("SR-SWA on CUDA: partial budgets select and score as on the CPU" * doctest::skip(no_gpu())) {
  const Multi3& f = Multi3::get();
  uocr_test::for_partial_budgets([&](const uocr::PageGroupParams& pp) {
    uocr::PageGroupDecoder cpu(f.cfg.decoder, f.w.decoder, f.window(), pp);
    cu::CudaPageGroups gpu = multi3_page_groups(pp);
    const auto ref = multi3_rows(cpu);
    const double worst = compare_cuda_rows(multi3_rows(gpu), ref);
    const int last_layer = f.cfg.decoder.layers - 1;
    uocr_test::check_same_selections(
        *gpu.sparse(), [&](int h) { return gpu.decoder().device_selection(last_layer, h); }, *cpu.sparse(),
        f.cfg.decoder.heads, worst);
  });
}

TEST_CASE("SR-SWA on CUDA: budgets covering everything are dense R-SWA bit for bit, shortcut or gathered" *
          doctest::skip(no_gpu())) {
  uocr::PageGroupParams pp;
  pp.group_pages = 2;
  pp.overlap_pages = 1;
  cu::CudaPageGroups dense = multi3_page_groups(pp);
  const auto expected = multi3_rows(dense);
  pp.sparse = true;
  for (bool shortcut : {true, false}) {
    // shortcut: the step goes to the dense kernel; else every head selects the whole reference as
    // one span and the span kernel sees the same keys in the same order.
    CAPTURE(shortcut);
    pp.sparse_params = {16, 0, 0, shortcut};
    cu::CudaPageGroups full = multi3_page_groups(pp);
    CHECK(multi3_rows(full) == expected);
    CHECK(full.sparse()->rows_attended() == full.sparse()->rows_dense());
  }
}

TEST_CASE("SR-SWA through the CUDA engine matches the CPU engine (golden tiny-b, one page)" * doctest::skip(no_gpu())) {
  // A model folder with a tokenizer: the golden (tiny-b), its prompt's one page of visual tokens.
  const std::shared_ptr<const uocr::Model> model = uocr::Model::load(uocr_test::golden_model_dir());
  const std::vector<int32_t> ids = uocr_test::golden_ids("input_ids.npy"), gen = uocr_test::golden_ids("gen_ids.npy");
  const std::vector<float> vision = uocr_test::golden_f32("vision_tokens.npy");
  const auto image = std::find(ids.begin(), ids.end(), uocr::kImageTokenId);
  uocr::DocumentLayout layout;
  layout.page_tokens = int64_t(vision.size()) / model->config().decoder.hidden;
  layout.pages = 1;
  layout.head.assign(ids.begin(), image);
  layout.tail.assign(image + layout.page_tokens, ids.end());
  uocr::PageGroupParams pp;
  pp.sparse = true;
  pp.sparse_params = {16, 1, 4, true};
  auto run = [&](uocr::Backend b) {
    const std::unique_ptr<uocr::DecoderEngine> eng = uocr::open_engine(model, b)->decoder(8, pp);
    uocr::FunctionPageEmbeddings pages(1, [&](int64_t, std::vector<float>& out) { out = vision; });
    std::vector<std::vector<float>> rows{eng->start(layout, pages)};
    for (size_t k = 0; k < 16; ++k) rows.push_back(eng->step(gen[k]));
    return std::make_pair(rows, eng->sparse()->rows_attended());
  };
  const auto gpu = run(uocr::Backend::cuda), cpu = run(uocr::Backend::cpu);
  const double worst = compare_cuda_rows(gpu.first, cpu.first);
  MESSAGE("engine, SR-SWA: worst relative error " << worst << ", reference rows attended " << gpu.second);
  CHECK(gpu.second == cpu.second);
}

TEST_CASE("a batched CUDA step with SR-SWA attached is Status::unsupported, caches untouched" * doctest::skip(no_gpu())) {
  // The selection holds one sequence's summaries.
  const Multi3& f = Multi3::get();
  Multi3Device& dev = Multi3Device::get();
  cu::CudaDecoder dec(dev.ctx, f.cfg.decoder, f.w.decoder, dev.weights);
  cu::CudaKvCache a(dev.ctx, f.cfg.decoder, f.window()), b(dev.ctx, f.cfg.decoder, f.window());
  const std::vector<float> prompt = dec.embed_prompt(f.ids, f.vision);
  dec.prefill(prompt, 0, a);
  dec.prefill(prompt, 0, b);
  uocr::ReferenceLayout layout;
  layout.always = {uocr::RowSpan{0, a.reference_rows()}};
  uocr::SparseReference sparse(f.cfg.decoder, layout, {});
  dec.set_decode_attention(&sparse);
  const int64_t p = a.reference_rows();
  CHECK(uocr_test::status_of([&] { dec.decode_batch({5, 6}, {p, p}, {&a, &b}); }) == Status::unsupported);
  CHECK(a.generated_tokens() == 0);
  CHECK(b.generated_tokens() == 0);
  dec.set_decode_attention(nullptr);
  CHECK(dec.decode_batch({5, 6}, {p, p}, {&a, &b}).size() == size_t(2 * f.cfg.decoder.vocab));
}

int main(int argc, char** argv) { return uocr_test::gpu_test_main(argc, argv); }
