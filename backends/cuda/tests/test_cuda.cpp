// CUDA backend tests. Without a usable GPU (this CI machine has the toolkit but no driver) the
// first case (and the engine case) run for real: creating a Context must fail with
// Status::unsupported and the message "no CUDA device: <cuda error string>"; the GPU cases are
// skipped (doctest counts them as such), the last line says why, and the executable exits 77 so
// `meson test` reports SKIP rather than a pass (gpu_test.hpp). With a GPU: what only this backend
// has (the caching allocator, cuBLAS's bf16 tensor-core mode, argmax, the routing kernel's ties),
// batched decoding bit-identical to single-stream steps, page groups against the CPU's, the
// engine, and the error paths. The ops and the decoder goldens over every backend are
// tests/conformance/.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/decoder.hpp"
#include "support/golden_decoder.hpp"
#include "support/gpu_test.hpp"
#include "support/op_reference.hpp"
#include "support/test_support.hpp"
#include "uocr/backends/cpu/linear.hpp"
#include "uocr/decoder/attention.hpp"
#include "uocr/decoder/decoder.hpp"
#include "uocr/decoder/page_groups.hpp"
#include "uocr/engine/open.hpp"
#include "uocr/model/checkpoint.hpp"

namespace cu = uocr::cuda;
using uocr::Status;
using uocr_test::no_gpu;
using uocr_test::randn;
using uocr_test::rel_err;

namespace {

using Env = uocr_test::CudaEnv;

// In a GPU case: the device must also open (a listed but unusable GPU fails the case).
void require_gpu() {
  Env& e = Env::get();
  REQUIRE_MESSAGE(e.ctx != nullptr, e.no_device);
}

// Device round trips for the op cases.
cu::Buffer up(const std::vector<float>& v) {
  cu::Context& c = *Env::get().ctx;
  return cu::upload_f32(c, v.data(), v.size(), "test input");
}
template <class T = float>
std::vector<T> down(const cu::Buffer& b, size_t n) {
  std::vector<T> v(n);
  Env::get().ctx->download(b, 0, v.data(), n * sizeof(T));
  return v;
}
cu::Buffer zeros(size_t floats) { return Env::get().ctx->alloc(floats * sizeof(float), "test output"); }

}  // namespace

// ================================================================================================

TEST_CASE("a CUDA context: the device, or Status::unsupported naming why there is none") {
  Env& e = Env::get();
  if (!e.ctx) {
    // This part runs on machines without a GPU or driver (CI): a clear error, no crash.
    MESSAGE("no GPU here: " << e.no_device);
    CHECK(e.no_device_status == Status::unsupported);
    CHECK(e.no_device.rfind("no CUDA device: ", 0) == 0);
    CHECK(uocr_test::status_of([] { cu::list_devices(); }) == Status::unsupported);
    CHECK(uocr_test::message_of([] { cu::Context c(3); }).rfind("no CUDA device: ", 0) == 0);
    return;
  }
  const cu::DeviceInfo& d = e.ctx->info();
  MESSAGE("device " << d.index << ": " << d.name << ", sm_" << d.major << d.minor << ", " << d.multiprocessors << " SMs, "
                    << (d.total_bytes >> 20) << " MiB");
  CHECK(!cu::list_devices().empty());
  CHECK(uocr_test::status_of([] { cu::Context c(1000); }) == Status::invalid_argument);
  CHECK(uocr_test::status_of([] { cu::Context c(-1); }) == Status::invalid_argument);
}

TEST_CASE("caching allocator: blocks are reused; an impossible allocation is Status::out_of_memory" * doctest::skip(no_gpu())) {
  require_gpu();
  cu::Context& c = *Env::get().ctx;
  void* first = nullptr;
  {
    cu::Buffer b = c.alloc(3000, "a");
    first = b.data();
  }
  const cu::MemoryStats before = c.memory();
  cu::Buffer again = c.alloc(2900, "b");  // the same 512-byte size class
  CHECK(again.data() == first);
  CHECK(c.memory().reserved == before.reserved);
  std::string msg;
  CHECK(uocr_test::status_of([&] { c.alloc(size_t(1) << 50, "a petabyte"); }) == Status::out_of_memory);
  CHECK(uocr_test::message_of([&] { c.alloc(size_t(1) << 50, "a petabyte"); }).find("a petabyte") != std::string::npos);
  c.synchronize();  // the failed allocation left no sticky error behind
}

TEST_CASE("linear in bf16 tensor-core mode: cuBLAS with the activations rounded to bf16" * doctest::skip(no_gpu())) {
  require_gpu();
  cu::Context& c = *Env::get().ctx;
  // Shapes past the mat-vec kernel's rows (float32 linear over every backend: tests/conformance/).
  const uocr_test::LinearShape shapes[] = {{17, 129, 95, false}, {130, 200, 256, true}, {300, 2051, 64, false}};
  uint32_t seed = 10;
  for (const uocr_test::LinearShape& s : shapes) {
    const uocr_test::LinearCase lc(uocr::DType::bf16, s, seed);
    const cu::DeviceMatrix dw = cu::upload_matrix(c, lc.w.view);
    const cu::Buffer dx = up(lc.x), db = cu::upload_f32(c, lc.b.view), dy = zeros(size_t(s.m * s.n));
    c.set_gemm_precision(uocr::Precision::bf16);
    cu::ops::linear(c, dx.f32(), s.m, dw, s.bias ? db.f32() : nullptr, dy.f32());
    c.set_gemm_precision(uocr::Precision::f32);
    const double e16 = rel_err(down(dy, size_t(s.m * s.n)), lc.ref);
    INFO("m=" << s.m << " n=" << s.n << " k=" << s.k << ": rel " << e16);
    CHECK(e16 <= 1e-2);  // activations rounded to bf16 (8 bits of mantissa)
  }
}

TEST_CASE("argmax: the first index on ties, rows narrower than the kernel's slices" * doctest::skip(no_gpu())) {
  require_gpu();
  cu::Context& c = *Env::get().ctx;
  {
    std::vector<float> x = randn(3 * 5000, 9);
    x[1234] = x[4321] = 50.f;              // row 0: a tie, the first index wins
    x[5000 + 4999] = 60.f;                 // row 1: the last column
    x[10000 + 0] = x[10000 + 256] = 70.f;  // row 2: a tie across thread strides
    const cu::Buffer dx = up(x);
    cu::Buffer out = c.alloc(3 * 4, "argmax");
    cu::ops::argmax(c, dx.f32(), 3, 5000, out.as<int32_t>());
    CHECK(down<int32_t>(out, 3) == std::vector<int32_t>{1234, 4999, 0});
    // Fewer columns than the kernel's slices: empty slices take no part; ties still go first.
    const cu::Buffer small = up(std::vector<float>{1, 3, 3, 0, -1, 2, 3, /* row 1 */ -5, -5, -5, -5, -5, -5, -5});
    cu::ops::argmax(c, small.f32(), 2, 7, out.as<int32_t>());
    CHECK(down<int32_t>(out, 2) == std::vector<int32_t>{1, 0});
  }
}

TEST_CASE("MoE routing: equal router logits go to the lower expert index, as on the CPU" * doctest::skip(no_gpu())) {
  require_gpu();
  cu::Context& c = *Env::get().ctx;
  {
    // Equal router logits: the lower expert index must win, as on the CPU.
    const int experts = 8, k = 3;
    const std::vector<float> logits = {1, 2, 2, 0, 2, 1, 0, 0, /* row 1 */ 5, 5, 5, 5, 5, 5, 5, 5};
    const cu::Buffer dl = up(logits), dw = zeros(2 * k);
    cu::Buffer ch = c.alloc(2 * k * 4, "choice");
    cu::ops::moe_route(c, dl.f32(), 2, experts, k, false, 1.0f, ch.as<int32_t>(), dw.f32());
    CHECK(down<int32_t>(ch, 2 * k) == std::vector<int32_t>{1, 2, 4, 0, 1, 2});
    const std::vector<float> w = down(dw, 2 * k);
    CHECK(w[3] == doctest::Approx(0.125f).epsilon(1e-6));
  }
}

namespace {

cu::CudaDecoder make_decoder() {
  Env& e = Env::get();
  return cu::CudaDecoder(*e.ctx, e.cfg.decoder, e.w.decoder, e.device_weights());
}

}  // namespace

TEST_CASE("batched decoding: several sequences per step give exactly the single-stream logits" * doctest::skip(no_gpu())) {
  require_gpu();
  Env& e = Env::get();
  const uocr::DecoderConfig& d = e.cfg.decoder;
  cu::CudaDecoder single = make_decoder(), batched = make_decoder();
  const int64_t p = int64_t(e.input_ids.size());
  const std::vector<float> input = single.embed_prompt(e.input_ids, e.vision);
  // Three sequences with different windows and lengths: the same prompt, shifted token streams.
  std::vector<cu::CudaKvCache> solo = e.staggered_caches<cu::CudaKvCache>(single, input),
                               group = e.staggered_caches<cu::CudaKvCache>(batched, input);
  for (int s = 0; s < 20; ++s) {
    const auto b = e.staggered_step(s);
    const size_t n = b.tokens.size();
    std::vector<cu::CudaKvCache*> caches;
    std::vector<float> expected;
    for (size_t i = 0; i < n; ++i) {
      caches.push_back(&group[i]);
      const std::vector<float>& l = single.decode_step(b.tokens[i], b.positions[i], solo[i]);
      expected.insert(expected.end(), l.begin(), l.end());
    }
    if (s % 2) {
      CHECK(batched.decode_batch(b.tokens, b.positions, caches) == expected);
    } else {
      const std::vector<int32_t> next = batched.decode_batch_greedy(b.tokens, b.positions, caches);
      for (size_t i = 0; i < n; ++i) {
        const float* row = expected.data() + i * size_t(d.vocab);
        CHECK(next[i] == int32_t(std::max_element(row, row + d.vocab) - row));
      }
    }
  }
  cu::CudaKvCache* dup = &group[0];
  CHECK(uocr_test::status_of([&] { batched.decode_batch({5, 6}, {p + 30, p + 30}, {dup, dup}); }) == Status::invalid_argument);
}

TEST_CASE("page groups over CudaDecoder match the CPU's" * doctest::skip(no_gpu())) {
  require_gpu();
  Env& e = Env::get();
  const uocr::DecoderConfig& d = e.cfg.decoder;
  // Three synthetic 20-token pages of visual-like rows, groups of 2 with overlap 1.
  uocr::DocumentLayout layout;
  layout.head = {0};
  layout.page_tokens = 20;
  layout.pages = 3;
  layout.tail = {e.input_ids.end()[-3], e.input_ids.end()[-2], e.input_ids.end()[-1]};
  uocr::PageGroupParams params;
  params.group_pages = 2;
  params.overlap_pages = 1;
  auto page = [&](int64_t i, std::vector<float>& out) { out = randn(size_t(20 * d.hidden), uint32_t(900 + i), 0.5f); };
  uocr::FunctionPageEmbeddings cpu_pages(3, page), cuda_pages(3, page);
  uocr::PageGroupDecoder cpu(d, e.w.decoder, 8, params);
  uocr::BasicPageGroupDecoder<cu::CudaDecoder, cu::CudaKvCache> gpu(make_decoder(), cu::CudaKvCache(*e.ctx, d, 8), params);
  double worst = rel_err(gpu.start(layout, cuda_pages), cpu.start(layout, cpu_pages));
  for (int s = 0; s < 40; ++s) {
    if (s % 12 == 11 && cpu.pages_pending()) {
      CHECK(gpu.next_page() == cpu.next_page());
    }
    const int32_t t = e.gen_ids[size_t(s)];
    worst = std::max(worst, rel_err(gpu.step(t), cpu.step(t)));
  }
  MESSAGE("page groups, cuda vs cpu: worst logits rel err " << worst);
  CHECK(worst <= 1e-5);
  CHECK(gpu.slides() == cpu.slides());
}

TEST_CASE("open_engine(Backend::cuda): Status::unsupported without a GPU; with one, a CUDA decoder and no vision yet") {
  const std::shared_ptr<const uocr::Model> model = uocr::Model::load(uocr_test::golden_model_dir());
  CHECK(uocr::compiled_backends().find("cuda") != std::string::npos);
  Env& e = Env::get();
  if (!e.ctx) {
    CHECK(uocr_test::status_of([&] { uocr::open_engine(model, uocr::Backend::cuda); }) == Status::unsupported);
    CHECK(uocr_test::message_of([&] { uocr::open_engine(model, uocr::Backend::cuda); }).rfind("no CUDA device: ", 0) == 0);
    return;
  }
  const std::shared_ptr<uocr::Engine> engine = uocr::open_engine(model, uocr::Backend::cuda);
  CHECK(engine->backend() == uocr::Backend::cuda);
  MESSAGE(engine->device());
  CHECK(engine->vision()->hidden() == e.cfg.decoder.hidden);  // vision parity: test_cuda_vision.cpp
  // One page (the golden prompt's visual tokens) through the engine's decoder vs the CPU engine.
  const uocr::DecoderConfig& d = e.cfg.decoder;
  const auto image = std::find(e.input_ids.begin(), e.input_ids.end(), uocr::kImageTokenId);
  const int64_t page_tokens = int64_t(e.vision.size()) / d.hidden;
  uocr::DocumentLayout layout;
  layout.head.assign(e.input_ids.begin(), image);
  layout.tail.assign(image + page_tokens, e.input_ids.end());
  layout.pages = 1;
  layout.page_tokens = page_tokens;
  auto page = [&](int64_t, std::vector<float>& out) { out = e.vision; };
  uocr::FunctionPageEmbeddings gpu_pages(1, page), cpu_pages(1, page);
  const std::unique_ptr<uocr::DecoderEngine> gpu = engine->decoder(8, {});
  const std::unique_ptr<uocr::DecoderEngine> cpu = uocr::open_engine(model, uocr::Backend::cpu)->decoder(8, {});
  double worst = rel_err(gpu->start(layout, gpu_pages), cpu->start(layout, cpu_pages));
  for (int s = 0; s < 10; ++s) worst = std::max(worst, rel_err(gpu->step(e.gen_ids[size_t(s)]), cpu->step(e.gen_ids[size_t(s)])));
  MESSAGE("cuda engine vs cpu engine: worst logits rel err " << worst);
  CHECK(worst <= 1e-5);
}

int main(int argc, char** argv) { return uocr_test::gpu_test_main(argc, argv); }
