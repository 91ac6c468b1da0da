// MoE routing on the Vulkan device (backends/vulkan/shaders/moe_route.comp): the routing shader
// against the CPU's rule (uocr::moe_route) on random and crafted router logits — the same expert
// ids bit for bit, ties included —, its grouping by expert and indirect dispatch sizes, the expert
// projections over stacked weights (decode: one mat-vec dispatch per projection; prefill: indirect
// GEMMs) against float64 per slot, stacks split into chunks, the MoE layer through it against the
// CPU, the dispatches of an MoE layer, a decode step as one submission, and the golden (tiny-b)
// prefill and teacher-forced logits within the usual tolerances. Needs a Vulkan device (lavapipe
// in CI; validation layers on where installed, zero errors asserted).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backends/vulkan/decoder.hpp"
#include "support/golden_decoder.hpp"
#include "support/op_reference.hpp"
#include "support/test_support.hpp"
#include "uocr/decoder/moe.hpp"

namespace vk = uocr::vulkan;
using uocr_test::randn;

namespace {

// The golden model (tiny-b) and one Context, built once (the Context is destroyed last).
struct Env : uocr_test::GoldenCase {
  std::unique_ptr<vk::Context> ctx;
  std::shared_ptr<vk::DecoderDeviceWeights> dev_weights;

  static Env& get() {
    static Env e;
    return e;
  }
  vk::Context& vk() {
    if (!ctx) ctx = std::make_unique<vk::Context>();
    return *ctx;
  }
  const std::shared_ptr<vk::DecoderDeviceWeights>& device_weights() {
    if (!dev_weights) dev_weights = vk::DecoderDeviceWeights::upload(vk(), w.decoder);
    return dev_weights;
  }
  ~Env() {
    dev_weights.reset();
    ctx.reset();
  }
};

void check_no_validation_errors(const std::string& where) {
  vk::Context& c = Env::get().vk();
  if (!c.validation_enabled()) return;
  INFO(where);
  for (const std::string& m : c.validation_messages()) INFO(m);
  CHECK(c.validation_errors() == 0);
}

struct Routing {
  int experts, k;
  bool normalize;
  float scaling;
};

// Routes `logits` ([rows, experts]) on the device and checks everything the shader writes: the
// expert ids against the CPU rule (exact_ids: the same ids; otherwise the same CPU scores, for ties
// that only the CPU's exp rounding makes), weights and softmax within float error, and the
// grouping by expert (slot -> row, slot -> expert), mixing order and indirect dispatch sizes
// against the CPU's counting sort of the device's picks.
void check_routing(const Routing& rt, const std::vector<float>& logits, const std::string& what, bool exact_ids = true) {
  INFO(what << ": " << rt.experts << " experts, top-" << rt.k << std::string(rt.normalize ? ", normalised" : "")
            << ", scaling " << rt.scaling);
  vk::Context& c = Env::get().vk();
  const int64_t rows = int64_t(logits.size()) / rt.experts, a_count = rows * rt.k;
  uocr::DecoderConfig cfg;
  cfg.n_routed_experts = rt.experts;
  cfg.experts_per_token = rt.k;
  cfg.norm_topk_prob = rt.normalize;
  cfg.routed_scaling = rt.scaling;
  std::vector<float> probs = logits, weight(static_cast<size_t>(a_count));
  std::vector<int32_t> choice(static_cast<size_t>(a_count)), rank;
  uocr::moe_route(cfg, probs.data(), rows, choice.data(), weight.data(), rank);

  const vk::ops::MoeRouteLayout l{rows, rt.experts, rt.k};
  const vk::ops::RoutedGemm gate_up{"", 3, 64}, down{"", 7, 4};  // only their sizes matter here
  vk::Buffer dp = c.buffer(logits.size() * 4, vk::MemoryUse::activations, "router logits");
  vk::Buffer dr = c.buffer(size_t(l.words()) * 4, vk::MemoryUse::activations, "routing");
  c.upload(dp, logits.data(), logits.size() * 4);
  {
    vk::Recorder rec(c);
    vk::ops::moe_route(rec, dp, l, rt.normalize, rt.scaling, gate_up, down, dr);
    rec.submit();
  }
  const std::vector<float> dev_probs = c.download_vector<float>(dp, logits.size());
  const std::vector<uint32_t> r = c.download_vector<uint32_t>(dr, size_t(l.words()));
  auto f = [&](int64_t word) {
    float v;
    std::memcpy(&v, &r[size_t(word)], 4);
    return v;
  };

  size_t wrong_ids = 0, other_ids = 0;
  double worst_w = 0, worst_p = 0;
  for (int64_t a = 0; a < a_count; ++a) {
    const int32_t dev = int32_t(r[size_t(l.choice() + a)]), cpu = choice[size_t(a)];
    const float* p = probs.data() + (a / rt.k) * rt.experts;
    REQUIRE((dev >= 0 && dev < rt.experts));
    if (dev != cpu) ++other_ids;
    if (exact_ids ? dev != cpu : p[dev] != p[cpu]) ++wrong_ids;
    worst_w = std::max(worst_w, double(std::fabs(f(l.weight() + a) - weight[size_t(a)])) / std::max(1e-30f, std::fabs(weight[size_t(a)])));
  }
  for (size_t i = 0; i < probs.size(); ++i) worst_p = std::max(worst_p, double(std::fabs(dev_probs[i] - probs[i])));
  CHECK(wrong_ids == 0);
  if (!exact_ids) MESSAGE(what << ": " << other_ids << " of " << a_count << " picks differ from the CPU's among equal CPU scores");
  CHECK(worst_w <= 1e-5);
  CHECK(worst_p <= 1e-6);

  // Grouping: the CPU's counting sort (ascending assignments per expert), slot by slot.
  for (int64_t a = 0; a < a_count; ++a) choice[size_t(a)] = int32_t(r[size_t(l.choice() + a)]);
  int64_t at = 0;
  std::vector<int64_t> slot_of(size_t(a_count), -1);
  for (int e = 0; e < rt.experts; ++e) {
    const int64_t first = r[size_t(l.expert_rows(e))], count = r[size_t(l.expert_rows(e) + 1)];
    CHECK(first == at);
    int64_t n = 0;
    for (int64_t a = 0; a < a_count; ++a)
      if (choice[size_t(a)] == e) {
        CHECK(r[size_t(l.order() + at + n)] == uint32_t(a / rt.k));
        slot_of[size_t(a)] = at + n;
        ++n;
      }
    CHECK(count == n);
    for (int64_t slot = first; slot < first + count; ++slot) CHECK(r[size_t(l.slot_expert() + slot)] == uint32_t(e));
    at += n;
    // Indirect commands: tiles * ceil(n / rows_per_tile) workgroups, none for an unused expert.
    const vk::ops::RoutedGemm* shapes[2] = {&gate_up, &down};
    for (int s = 0; s < 2; ++s) {
      const uint64_t groups = n == 0 ? 0 : uint64_t(shapes[s]->tiles) * uint64_t((n + shapes[s]->rows_per_tile - 1) / shapes[s]->rows_per_tile);
      const int64_t cmd = l.command(e, s);
      const uint64_t x = r[size_t(cmd)], y = r[size_t(cmd + 1)];
      CHECK(r[size_t(cmd + 2)] == 1u);
      CHECK(x <= c.max_workgroups_x());
      CHECK(x * y >= groups);
      CHECK((groups == 0 ? x == 0 : x * (y - 1) < groups));
    }
  }
  CHECK(at == a_count);
  // Mixing order: each row's slots in ascending expert order, with that pick's weight.
  for (int64_t row = 0; row < rows; ++row) {
    std::vector<int64_t> picks(size_t(rt.k));
    for (int j = 0; j < rt.k; ++j) picks[size_t(j)] = row * rt.k + j;
    std::sort(picks.begin(), picks.end(), [&](int64_t x, int64_t y) { return choice[size_t(x)] < choice[size_t(y)]; });
    for (int j = 0; j < rt.k; ++j) {
      const int64_t a = picks[size_t(j)];
      CHECK(int64_t(r[size_t(l.mix_pos() + row * rt.k + j)]) == slot_of[size_t(a)]);
      CHECK(r[size_t(l.mix_weight() + row * rt.k + j)] == r[size_t(l.weight() + a)]);
    }
  }
}

}  // namespace

TEST_CASE("routing shader = CPU routing on random router logits (ids exact)") {
  uint32_t seed = 7;
  for (const Routing& rt : {Routing{8, 2, false, 1.0f}, Routing{64, 6, false, 1.0f}, Routing{64, 6, true, 2.5f},
                            Routing{4, 2, true, 1.0f}, Routing{160, 8, false, 16.0f}, Routing{5, 5, true, 1.0f}})
    for (int64_t rows : {int64_t(1), int64_t(3), int64_t(37), int64_t(700)})
      check_routing(rt, randn(size_t(rows * rt.experts), seed++, 3.0f), std::to_string(rows) + " random rows");
  check_no_validation_errors("random routing");
}

TEST_CASE("routing shader = CPU routing on crafted ties: the lower expert index wins") {
  const int e = 8;
  std::vector<float> rows = {
      1, 2, 2, 0, 2, 1, 0, 0,          // three-way tie at the top
      5, 5, 5, 5, 5, 5, 5, 5,          // all equal: experts 0.. in order
      0, 0, 0, 0, 0, 0, 0, 3,          // one winner, then a seven-way tie
      -1, 4, -1, -1, 4, -1, -1, -1,    // tie for first
      9, -200, -300, -250, 9, -400, -220, -260,  // scores that underflow to 0 on the CPU tie too
  };
  for (const Routing& rt : {Routing{e, 2, false, 1.0f}, Routing{e, 3, true, 1.0f}, Routing{e, 6, false, 2.0f}})
    check_routing(rt, rows, "crafted rows");
  // Logits one ulp apart whose CPU probabilities round to the same float: a tie only the CPU's
  // exp rounding makes (exp(-3e-8) = 1.0f there). The device's exp may round the other way (Vulkan
  // bounds exp's error, not its rounding), so the picks must carry the CPU's top scores, not
  // necessarily its ids.
  const float base = 0.25f, next = std::nextafter(base, 1.0f);
  const std::vector<float> ulp_row = {base, next, base, -3, -3, next, -8, base};
  check_routing(Routing{e, 2, false, 1.0f}, ulp_row, "logits one ulp apart", false);
  check_no_validation_errors("crafted routing");
}

namespace {

// One projection of E random expert matrices [n_out, n_in] (bf16) over the grouped rows of a
// routing of `logits`: the decode path (ops::linear_stacked, rows <= 4) or the indirect GEMMs
// (ops::linear_routed), the stack in chunks of at most `chunk_experts` experts. Checks each slot
// against the float64 product of the CPU-chosen expert and the slot's row (CPU routing and
// counting sort) and returns the grouped outputs [rows * k, n_out].
std::vector<float> expert_projection(const Routing& rt, const std::vector<float>& logits, int64_t n_out, int64_t n_in,
                                     int64_t chunk_experts, bool stacked, uint32_t seed) {
  vk::Context& c = Env::get().vk();
  const int64_t rows = int64_t(logits.size()) / rt.experts, a_count = rows * rt.k;
  INFO(rt.experts << " experts, top-" << rt.k << ", " << rows << " rows, [" << n_out << ", " << n_in << "], stack chunks of "
                  << chunk_experts << (stacked ? ", stacked mat-vecs" : ", indirect GEMMs"));
  std::vector<uocr_test::HostTensor> w;
  w.reserve(size_t(rt.experts));  // the views point into the tensors: no reallocation
  std::vector<const uocr::TensorView*> views;
  for (int e = 0; e < rt.experts; ++e) {
    w.emplace_back(uocr::DType::bf16, std::vector<int64_t>{n_out, n_in}, randn(size_t(n_out * n_in), seed + uint32_t(e), 0.2f));
    views.push_back(&w.back().view);
  }
  const size_t one = size_t(n_out * n_in) * 2;
  const vk::StackedMatrix stack = vk::upload_stacked(c, views, "test experts", size_t(chunk_experts) * one);
  CHECK(int64_t(stack.chunks.size()) == (rt.experts + chunk_experts - 1) / chunk_experts);
  const std::vector<float> x = randn(size_t(rows * n_in), seed + 1000);

  const vk::ops::MoeRouteLayout l{rows, rt.experts, rt.k};
  const vk::ops::RoutedGemm g = vk::ops::routed_gemm(stack);
  vk::Buffer dp = c.buffer(logits.size() * 4, vk::MemoryUse::activations, "router logits");
  vk::Buffer dr = c.buffer(size_t(l.words()) * 4, vk::MemoryUse::activations, "routing");
  vk::Buffer dx = c.buffer(x.size() * 4, vk::MemoryUse::activations, "rows");
  vk::Buffer dg = c.buffer(size_t(a_count * n_in) * 4, vk::MemoryUse::activations, "grouped rows");
  vk::Buffer dy = c.buffer(size_t(a_count * n_out) * 4, vk::MemoryUse::activations, "grouped outputs");
  c.upload(dp, logits.data(), logits.size() * 4);
  c.upload(dx, x.data(), x.size() * 4);
  const uint64_t before = c.dispatches();
  {
    vk::Recorder rec(c);
    vk::ops::moe_route(rec, dp, l, rt.normalize, rt.scaling, g, g, dr);
    vk::ops::gather_rows(rec, dr, l.order(), a_count, n_in, dx, 0, dg, 0);
    rec.unordered([&] {
      if (stacked) {
        vk::ops::linear_stacked(rec, dg, n_in, stack, dr, l, dy, n_out);
      } else {
        for (int e = 0; e < rt.experts; ++e) vk::ops::linear_routed(rec, dg, n_in, stack, g, 0, dr, l, e, dy, n_out);
      }
    });
    rec.submit();
  }
  // route + gather + one dispatch per chunk (stacked) or per expert (indirect)
  CHECK(c.dispatches() - before == 2 + (stacked ? stack.chunks.size() : size_t(rt.experts)));
  const std::vector<float> y = c.download_vector<float>(dy, size_t(a_count * n_out));

  std::vector<float> probs = logits, weight(static_cast<size_t>(a_count));
  std::vector<int32_t> choice(static_cast<size_t>(a_count)), rank;
  uocr::DecoderConfig cfg;
  cfg.n_routed_experts = rt.experts;
  cfg.experts_per_token = rt.k;
  cfg.norm_topk_prob = rt.normalize;
  cfg.routed_scaling = rt.scaling;
  uocr::moe_route(cfg, probs.data(), rows, choice.data(), weight.data(), rank);
  double worst = 0;
  int64_t slot = 0;
  for (int e = 0; e < rt.experts; ++e) {
    const std::vector<double> we = w[size_t(e)].values();
    for (int64_t a = 0; a < a_count; ++a) {
      if (choice[size_t(a)] != e) continue;
      double num = 0, den = 0;
      for (int64_t j = 0; j < n_out; ++j) {
        double ref = 0;
        for (int64_t i = 0; i < n_in; ++i) ref += we[size_t(j * n_in + i)] * double(x[size_t((a / rt.k) * n_in + i)]);
        const double d = double(y[size_t(slot * n_out + j)]) - ref;
        num += d * d;
        den += ref * ref;
      }
      worst = std::max(worst, std::sqrt(num / std::max(den, 1e-300)));
      ++slot;
    }
  }
  CHECK(slot == a_count);
  CHECK(worst <= 1e-6);
  return y;
}

}  // namespace

TEST_CASE("expert projections over stacked weights = float64 per slot (decode mat-vecs, indirect GEMMs, chunked stacks, ties)") {
  uint32_t seed = 300;
  // Crafted ties (the lower expert index wins) and random rows, up to 4 rows (the decode path).
  const std::vector<float> ties = {
      1, 2, 2, 0, 2, 1, 0, 0,  5, 5, 5, 5, 5, 5, 5, 5,  0, 0, 0, 0, 0, 0, 0, 3,  -1, 4, -1, -1, 4, -1, -1, -1,
  };
  struct Case {
    Routing rt;
    std::vector<float> logits;
  };
  std::vector<Case> cases = {{Routing{8, 2, true, 1.0f}, ties},
                             {Routing{8, 6, false, 2.0f}, ties},
                             {Routing{64, 6, false, 1.0f}, randn(64, seed++, 3.0f)},
                             {Routing{64, 6, true, 2.5f}, randn(3 * 64, seed++, 3.0f)}};
  cases.push_back({Routing{64, 6, false, 1.0f}, std::vector<float>(64, 0.5f)});  // all 64 equal: experts 0..5
  for (const Case& k : cases)
    for (const auto& shape : {std::pair<int64_t, int64_t>{40, 48}, std::pair<int64_t, int64_t>{24, 600}}) {
      // matvec_cols (rows up to 512 long) and matvec; one chunk, and chunks of 3 experts
      const std::vector<float> one = expert_projection(k.rt, k.logits, shape.first, shape.second, k.rt.experts, true, seed);
      const std::vector<float> split = expert_projection(k.rt, k.logits, shape.first, shape.second, 3, true, seed);
      CHECK(std::memcmp(one.data(), split.data(), one.size() * 4) == 0);  // same arithmetic per slot
      expert_projection(k.rt, k.logits, shape.first, shape.second, 3, false, seed);  // GEMMs at an offset in a chunk
      seed += 100;
    }
  check_no_validation_errors("stacked expert projections");
}

TEST_CASE("MoE layer with device routing = CPU (tiny-b layer 1; 1, 3, 37 rows and 2,500 rows in routing blocks)") {
  Env& e = Env::get();
  const uocr::DecoderConfig& d = e.cfg.decoder;
  vk::VulkanDecoder dec(e.vk(), d, e.w.decoder, e.device_weights());
  for (int64_t m : {int64_t(1), int64_t(3), int64_t(37), int64_t(2500)}) {
    const std::vector<float> x = randn(size_t(m * d.hidden), uint32_t(900 + m));
    const std::vector<float> cpu = uocr_test::cpu_feed_forward(d, e.w.decoder, 1, x);
    const double err = uocr_test::row_error(dec.feed_forward(1, x), cpu).rel;
    INFO(m << " rows: rel " << err);
    CHECK(err <= 2e-6);
  }
  check_no_validation_errors("MoE layer");
}

TEST_CASE("an MoE layer's dispatches: 3 expert projections for a decode step, 3 per expert for larger blocks") {
  Env& e = Env::get();
  const uocr::DecoderConfig& d = e.cfg.decoder;
  REQUIRE(d.n_routed_experts == 6);
  vk::VulkanDecoder dec(e.vk(), d, e.w.decoder, e.device_weights());
  // router, route, gather, silu_mul, combine + the shared expert's gate, up, silu_mul, down and
  // the add: 10; then the expert projections: gate, up, down (decode, one stack chunk each) or
  // 3 per expert (indirect GEMMs).
  for (const auto& [m, projections] : {std::pair<int64_t, uint64_t>{1, 3}, {4, 3}, {5, 18}, {37, 18}}) {
    const std::vector<float> x = randn(size_t(m * d.hidden), uint32_t(950 + m));
    const uint64_t before = e.vk().dispatches();
    dec.feed_forward(1, x);
    INFO(m << " rows");
    CHECK(e.vk().dispatches() - before == 10 + projections);
  }
}

TEST_CASE("a decode step is one submission: no host wait per MoE layer") {
  Env& e = Env::get();
  vk::Context& c = e.vk();
  vk::VulkanDecoder dec(c, e.cfg.decoder, e.w.decoder, e.device_weights());
  vk::VulkanKvCache cache(c, e.cfg.decoder, 8);
  const int64_t p = int64_t(e.input_ids.size());
  uint64_t before = c.submissions();
  dec.prefill(dec.embed_prompt(e.input_ids, e.vision), 0, cache);
  MESSAGE("prefill of " << p << " tokens: " << c.submissions() - before << " submission(s)");
  CHECK(c.submissions() - before == 1);
  for (int s = 0; s < 4; ++s) {
    before = c.submissions();
    const uint64_t dispatched = c.dispatches();
    dec.decode_step(e.gen_ids[size_t(s)], p + s, cache);
    CHECK(c.submissions() - before == 1);
    if (s == 0) MESSAGE("decode step: " << c.dispatches() - dispatched << " dispatches");
  }
}

namespace {
struct VulkanRunner {
  static constexpr const char* name = "vulkan";
  vk::VulkanDecoder dec{Env::get().vk(), Env::get().cfg.decoder, Env::get().w.decoder, Env::get().device_weights()};
  vk::VulkanKvCache cache(int window) { return vk::VulkanKvCache(Env::get().vk(), Env::get().cfg.decoder, window); }
};
}  // namespace

TEST_CASE("golden (tiny-b) through device routing: prefill logits at every prefix, teacher-forced decode (full, R-SWA n=8)") {
  uocr_test::golden_prefill<VulkanRunner>(Env::get());
  uocr_test::golden_decode<VulkanRunner>(Env::get(), "full_attention", 0);
  uocr_test::golden_decode<VulkanRunner>(Env::get(), "rswa_n8", 8);
  check_no_validation_errors("golden (tiny-b)");
}
