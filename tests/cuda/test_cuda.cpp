// CUDA backend tests. Without a usable GPU (this CI machine has the toolkit but no driver) the
// first case (and the engine case) run for real: creating a Context must fail with
// Status::unsupported and the message "no CUDA device: <cuda error string>"; the GPU cases are
// skipped (doctest counts them as such), the last line says why, and the executable exits 77 so
// `meson test` reports SKIP rather than a pass (gpu_test.hpp). With a GPU: each op
// against a float64 reference (and against the CPU backend), the golden (tiny-b) decoder checks
// (prefill logits at every prefix position, teacher-forced decode with full attention and R-SWA
// n=8) through CudaDecoder, batched decoding bit-identical to single-stream steps, page groups
// against the CPU's, and the error paths (bad inputs, bad device index, out of memory).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "support/golden_decoder.hpp"
#include "support/gpu_test.hpp"
#include "support/op_reference.hpp"
#include "support/test_support.hpp"
#include "uocr/backends/cpu/linear.hpp"
#include "uocr/backends/cuda/decoder.hpp"
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

TEST_CASE("op conformance: linear (bf16, f16, f32 weights; mat-vec and cuBLAS paths; bf16 tensor-core mode)" * doctest::skip(no_gpu())) {
  require_gpu();
  cu::Context& c = *Env::get().ctx;
  // m <= 16: the mat-vec kernel (k % 8 == 0 takes the 16-byte loads); m > 16: cuBLAS (the last
  // shape has more than 2^24 weights: widened in two chunks).
  const uocr_test::LinearShape shapes[] = {{1, 37, 64, false},     {3, 130, 33, true},      {4, 64, 1280, false},
                                          {16, 65, 40, true},     {17, 129, 95, false},    {130, 200, 256, true},
                                          {300, 2051, 64, false}, {17, 16500, 1024, false}};
  uint32_t seed = 10;
  for (uocr::DType t : {uocr::DType::bf16, uocr::DType::f16, uocr::DType::f32})
    for (const uocr_test::LinearShape& s : shapes) {
      const uocr_test::LinearCase lc(t, s, seed);
      const cu::DeviceMatrix dw = cu::upload_matrix(c, lc.w.view);
      const cu::Buffer dx = up(lc.x), db = cu::upload_f32(c, lc.b.view), dy = zeros(size_t(s.m * s.n));
      cu::ops::linear(c, dx.f32(), s.m, dw, s.bias ? db.f32() : nullptr, dy.f32());
      const double err = rel_err(down(dy, size_t(s.m * s.n)), lc.ref);
      std::vector<float> cpu(size_t(s.m * s.n));
      uocr::cpu::linear(lc.x.data(), s.m, lc.w.view, lc.bias(), cpu.data());
      INFO("linear " << uocr::dtype_name(t) << " m=" << s.m << " n=" << s.n << " k=" << s.k << ": rel " << err);
      CHECK(err <= 2e-6);
      CHECK(rel_err(down(dy, size_t(s.m * s.n)), cpu) <= 2e-6);
      if (t == uocr::DType::bf16 && s.m > cu::ops::kMatvecMaxRows) {
        c.set_gemm_precision(uocr::Precision::bf16);
        cu::ops::linear(c, dx.f32(), s.m, dw, s.bias ? db.f32() : nullptr, dy.f32());
        c.set_gemm_precision(uocr::Precision::f32);
        const double e16 = rel_err(down(dy, size_t(s.m * s.n)), lc.ref);
        INFO("bf16 tensor-core mode: rel " << e16);
        CHECK(e16 <= 1e-2);  // activations rounded to bf16 (8 bits of mantissa)
      }
    }
}

TEST_CASE("op conformance: RMSNorm, RoPE at large positions, SiLU*mul, embedding rows, argmax" * doctest::skip(no_gpu())) {
  require_gpu();
  cu::Context& c = *Env::get().ctx;
  {
    const int64_t rows = 7, n = 1300;
    const std::vector<float> x = randn(size_t(rows * n), 1, 2.0f), w = randn(size_t(n), 2);
    const cu::Buffer dx = up(x), dw = up(w), dy = zeros(x.size());
    cu::ops::rms_norm(c, dx.f32(), rows, n, dw.f32(), 1e-6f, dy.f32());
    CHECK(rel_err(down(dy, x.size()), uocr_test::ref_rms_norm(x, rows, n, w, 1e-6)) <= 1e-6);
  }
  {
    // Positions around 8k and 30k (large angles); the reference uses the same float32 angles.
    for (int64_t pos0 : {int64_t(8180), int64_t(30000)}) {
      const int64_t rows = 5;
      const int heads = 3, d = 16;
      const std::vector<float> x = randn(size_t(rows * heads * d), 6);
      const std::vector<double> ref = uocr_test::ref_rope(x, rows, heads, d, 10000.f, pos0);
      const std::vector<float> cpu = uocr_test::cpu_rope(x, rows, heads, d, 10000.f, pos0);
      const std::vector<float> inv = cu::rope_inv_freq(d, 10000.f);
      const cu::Buffer dx = up(x), dinv = up(inv);
      cu::ops::rope(c, dx.f32(), rows, heads, d, heads * d, dinv.f32(), pos0, nullptr);
      CHECK(rel_err(down(dx, x.size()), ref) <= 1e-6);
      CHECK(rel_err(down(dx, x.size()), cpu) <= 1e-6);
    }
  }
  {
    const std::vector<float> g = randn(1000, 7, 3.0f), u = randn(1000, 8);
    const cu::Buffer dg = up(g), du = up(u);
    cu::ops::silu_mul(c, dg.f32(), du.f32(), int64_t(g.size()));
    CHECK(rel_err(down(dg, g.size()), uocr_test::ref_silu_mul(g, u)) <= 1e-6);
  }
  {
    Env& e = Env::get();
    const uocr::DecoderConfig& d = e.cfg.decoder;
    const std::vector<int32_t> ids = {0, 1, 5, 128815, d.vocab - 1, 4242};
    const std::vector<float> cpu = uocr::Decoder(d, e.w.decoder).embed(ids);
    cu::Buffer dids = c.alloc(ids.size() * 4, "ids"), out = zeros(cpu.size());
    c.upload(dids, 0, ids.data(), ids.size() * 4);
    cu::ops::embed(c, dids.as<int32_t>(), int64_t(ids.size()), e.device_weights()->embed, out.f32());
    CHECK(down(out, cpu.size()) == cpu);  // exact: widening only
  }
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

TEST_CASE("op conformance: causal prefill attention (all rows in one launch), decode over reference + ring" * doctest::skip(no_gpu())) {
  require_gpu();
  cu::Context& c = *Env::get().ctx;
  struct Case {
    int heads, kv_heads, head_dim;
    int64_t t, split;  // split 0: causal over t rows; else one query over split reference rows + t - split ring rows
  };
  const Case cases[] = {{4, 4, 8, 150, 0},     {4, 2, 16, 70, 0},   {2, 1, 128, 66, 0}, {10, 10, 128, 300, 0},
                        {4, 4, 8, 286, 278},   {4, 2, 16, 200, 192}, {3, 3, 256, 65, 64}, {2, 2, 8, 5, 5},
                        {10, 10, 128, 401, 273}};
  uint32_t seed = 100;
  for (const Case& cs : cases) {
    const uocr_test::AttnCase ac = uocr_test::make_attention(cs.heads, cs.kv_heads, cs.head_dim, cs.t, cs.split, seed += 3);
    const uocr::AttentionShape& s = ac.shape;
    const int64_t qr = s.q_row(), kr = s.kv_row();
    const cu::Buffer dq = up(ac.q), dk = up(ac.k), dv = up(ac.v), dout = zeros(ac.q.size());
    std::vector<cu::ops::AttentionRow> rows;
    if (ac.causal()) {
      for (int64_t i = 0; i < cs.t; ++i) rows.push_back({dq.f32() + i * qr, dout.f32() + i * qr, {}, {dk.f32(), dv.f32(), i + 1}});
    } else {
      rows.push_back({dq.f32(), dout.f32(), {dk.f32(), dv.f32(), cs.split},
                      {dk.f32() + cs.split * kr, dv.f32() + cs.split * kr, cs.t - cs.split}});
    }
    cu::Buffer table = c.alloc(rows.size() * sizeof(rows[0]), "rows");
    c.upload(table, 0, rows.data(), rows.size() * sizeof(rows[0]));
    cu::ops::attention(c, table.as<cu::ops::AttentionRow>(), int64_t(rows.size()), {s.heads, s.kv_heads, s.head_dim}, cs.t);
    const std::vector<float> got = down(dout, ac.q.size());
    INFO("heads " << cs.heads << "/" << cs.kv_heads << " d " << cs.head_dim << " t " << cs.t << " split " << cs.split);
    CHECK(rel_err(got, uocr_test::ref_attention(ac)) <= 2e-6);
    CHECK(rel_err(got, uocr_test::cpu_attention(ac)) <= 2e-6);
  }
}

TEST_CASE("op conformance: MoE routing ties and the golden dense MLP / MoE layers (device and per-expert paths)" * doctest::skip(no_gpu())) {
  require_gpu();
  Env& e = Env::get();
  cu::Context& c = *e.ctx;
  const uocr::DecoderConfig& d = e.cfg.decoder;
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
  cu::CudaDecoder dec(c, d, e.w.decoder, e.device_weights());
  // 1 and 37 rows route on the device with grouped mat-vecs; 600 rows (1200 assignments) read the
  // per-expert counts back and run one GEMM per expert.
  for (int layer = 0; layer < d.layers; ++layer)
    for (int64_t m : {int64_t(1), int64_t(37), int64_t(600)}) {
      const std::vector<float> x = randn(size_t(m * d.hidden), uint32_t(500 + layer * 10 + m));
      const double err = rel_err(dec.feed_forward(layer, x), uocr_test::cpu_feed_forward(d, e.w.decoder, layer, x));
      INFO("layer " << layer << " rows " << m << ": rel " << err);
      CHECK(err <= 2e-6);
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
