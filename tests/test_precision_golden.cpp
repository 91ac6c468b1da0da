// --precision bf16 against upstream's own bf16 run (golden/bf16_*.npy: the model cast to bf16
// under bf16 autocast, as upstream's README runs it) and its float32 run, end to end on the
// golden page: uocr's bf16 vision encoder, then its bf16 prefill over those visual tokens.
// The gate: uocr bf16 is no farther from float32 than upstream bf16 is, no farther from upstream
// bf16 than the two upstream runs are from each other, and picks the float32 top-1 token at
// least as often.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "support/golden_decoder.hpp"
#include "support/test_support.hpp"
#include "uocr/backends/cpu/gemm_bf16.hpp"
#include "uocr/decoder/decoder.hpp"
#include "uocr/io/npy.hpp"
#include "uocr/vision/encoder.hpp"

namespace {

// ‖a − b‖ / ‖b‖
double rel(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double d2 = 0, b2 = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    d2 += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    b2 += double(b[i]) * b[i];
  }
  return std::sqrt(d2 / b2);
}

struct Distances {
  double ours_to_f32, ours_to_bf16, bf16_to_f32;
};

Distances distances(const std::string& what, const std::vector<float>& ours, const std::vector<float>& up_f32,
                    const std::vector<float>& up_bf16) {
  const Distances d{rel(ours, up_f32), rel(ours, up_bf16), rel(up_bf16, up_f32)};
  MESSAGE(what << ": uocr bf16 to upstream f32 " << d.ours_to_f32 << ", to upstream bf16 " << d.ours_to_bf16
               << "; upstream bf16 to upstream f32 " << d.bf16_to_f32);
  return d;
}

// Each row's log-probabilities at the float32 reference's top-16 ids.
std::vector<float> logprobs_at(const std::vector<float>& logits, int64_t rows, int64_t vocab, const std::vector<int32_t>& ids) {
  std::vector<float> out;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = &logits[size_t(r * vocab)];
    double m = row[0], s = 0;
    for (int64_t v = 1; v < vocab; ++v) m = std::max(m, double(row[v]));
    for (int64_t v = 0; v < vocab; ++v) s += std::exp(double(row[v]) - m);
    const double lse = m + std::log(s);
    for (int k = 0; k < 16; ++k) out.push_back(float(row[ids[size_t(r * 16 + k)]] - lse));
  }
  return out;
}

}  // namespace

TEST_CASE("bf16 precision against upstream's bf16 and float32 runs of the golden page") {
  const uocr_test::GoldenCase g;
  const uocr::VisionEncoder enc(g.cfg, g.w, uocr::Precision::bf16);
  uocr::Decoder dec(g.cfg.decoder, g.w.decoder, uocr::Precision::bf16);
  if (!uocr::cpu::bf16_compute_available()) {
    // The float32 path is what runs, and says so; the float32 goldens cover it.
    CHECK(enc.precision() == uocr::Precision::f32);
    return;
  }
  REQUIRE(enc.precision() == uocr::Precision::bf16);

  const std::vector<float> projector = enc.encode_view(uocr_test::golden_view().data(), 1024);
  const Distances vision = distances("projector_out", projector, uocr_test::golden_f32("projector_out.npy"),
                                     uocr_test::golden_f32("bf16_projector_out.npy"));

  uocr::KvCache cache(g.cfg.decoder, 0);
  const std::vector<float> tokens = enc.layout_tokens(projector, {}, 0, 0);
  const std::vector<float> logits = dec.prefill(dec.embed_prompt(g.input_ids, tokens), 0, cache, uocr::PrefillLogits::all);
  const int64_t p = int64_t(g.input_ids.size()), vocab = g.cfg.decoder.vocab;
  REQUIRE(logits.size() == size_t(p * vocab));
  const std::vector<int32_t> top16 = uocr_test::golden_ids("prefix_logits_top16_ids.npy");
  const std::vector<float> vals = uocr_test::golden_f32("prefix_logits_top16_vals.npy");
  const std::vector<float> lse = uocr_test::golden_f32("prefix_logits_lse.npy");
  std::vector<float> f32_logprobs;
  for (int64_t r = 0; r < p; ++r)
    for (int k = 0; k < 16; ++k) f32_logprobs.push_back(vals[size_t(r * 16 + k)] - lse[size_t(r)]);
  const Distances prefix = distances("prefix log-probabilities", logprobs_at(logits, p, vocab, top16), f32_logprobs,
                                     uocr_test::golden_f32("bf16_prefix_logprobs.npy"));

  const std::vector<int32_t> up_bf16_top1 = uocr_test::golden_ids("bf16_prefix_top1.npy");
  int ours_agree = 0, upstream_agree = 0;
  for (int64_t r = 0; r < p; ++r) {
    const float* row = &logits[size_t(r * vocab)];
    const int32_t f32_top1 = top16[size_t(r * 16)];
    ours_agree += int(std::max_element(row, row + vocab) - row) == f32_top1;
    upstream_agree += up_bf16_top1[size_t(r)] == f32_top1;
  }
  MESSAGE("top-1 as float32's at " << p << " prefix positions: uocr bf16 " << ours_agree << ", upstream bf16 " << upstream_agree);

  for (const Distances& d : {vision, prefix}) {
    CHECK(d.ours_to_f32 > 0);  // bf16 really ran
    CHECK(d.ours_to_f32 <= d.bf16_to_f32);
    // Two independent roundings add in quadrature: with uocr's the smaller one, at most √2 times
    // upstream's own distance; 1.25 keeps the bound tight.
    CHECK(d.ours_to_bf16 <= d.bf16_to_f32 * 1.25);
  }
  CHECK(ours_agree >= upstream_agree);
}
