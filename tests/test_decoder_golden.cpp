// Decoder against the golden upstream PyTorch references (tiny-b): prefill logits, every prefix
// position's top-16/logsumexp, and 300 teacher-forced decode steps through the KV cache with full
// attention and R-SWA (n = 128, n = 8). The vision tokens come from vision_tokens.npy, so this
// test does not depend on the vision encoder. Also: KV memory accounting, input errors and a
// prefill's deadline.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include <Eigen/Core>

#include "support/golden_decoder.hpp"
#include "support/logit_agreement.hpp"
#include "support/test_support.hpp"
#include "uocr/core/deadline.hpp"
#include "uocr/decoder/decoder.hpp"
#include "uocr/io/npy.hpp"
#include "uocr/model/checkpoint.hpp"
#include "uocr/model/config.hpp"
#include "uocr/model/weights.hpp"

using uocr::Status;
using uocr_test::status_of;

namespace {

// Float32 against float32: observed errors are ~5e-7 relative. 1e-3 would not separate a window
// that is off by one generated key (~2e-3 on this tiny model), so the bounds are 1e-4.
constexpr double kRowRelTol = 1e-4;    // ‖ours − ref‖ / ‖ref‖ over a full logits row
// Top-16 logits and logsumexp: uocr_test::AgreementLimits' defaults (1e-4 relative).

// The model and its inputs, loaded once for all test cases.
struct Fixture : uocr_test::GoldenCase {
  int64_t vocab() const { return cfg.decoder.vocab; }
  int64_t prompt_len() const { return int64_t(input_ids.size()); }

  static Fixture& get() {
    static Fixture f;
    return f;
  }
};

using uocr_test::Agreement;
using uocr_test::row_error;
using uocr_test::RowError;

// Prefill of the golden prompt into `cache`; returns the last-position logits.
std::vector<float> prefill_prompt(uocr::Decoder& dec, uocr::KvCache& cache) {
  Fixture& g = Fixture::get();
  return dec.prefill(dec.embed_prompt(g.input_ids, g.vision), 0, cache);
}

// Teacher-forces gen_ids[0..steps) after the prompt; calls on_row(g, logits) per step.
template <class OnRow>
void teacher_force(uocr::Decoder& dec, uocr::KvCache& cache, int steps, OnRow on_row) {
  Fixture& g = Fixture::get();
  prefill_prompt(dec, cache);
  for (int s = 0; s < steps; ++s) on_row(s, dec.decode_step(g.gen_ids[size_t(s)], g.prompt_len() + s, cache));
}

void check_variant(const std::string& variant, int window) {
  Fixture& g = Fixture::get();
  const std::vector<int32_t> ids = uocr_test::golden_ids(variant + "_logits_top16_ids.npy");
  const std::vector<float> vals = uocr_test::golden_f32(variant + "_logits_top16_vals.npy");
  const std::vector<float> lse = uocr_test::golden_f32(variant + "_logits_lse.npy");
  const std::vector<float> rows = uocr_test::golden_f32(variant + "_logits_rows.npy");
  const std::vector<int32_t> row_index = uocr_test::golden_ids("logits_rows_gen_index.npy");
  const int steps = int(lse.size());
  REQUIRE(steps == int(g.gen_ids.size()));

  uocr::Decoder dec(g.cfg.decoder, g.w.decoder);
  uocr::KvCache cache(g.cfg.decoder, window);
  Agreement agree;
  RowError worst;
  size_t rows_seen = 0;
  teacher_force(dec, cache, steps, [&](int s, const std::vector<float>& logits) {
    agree.add(logits.data(), g.vocab(), &ids[size_t(s) * 16], &vals[size_t(s) * 16], lse[size_t(s)]);
    for (size_t r = 0; r < row_index.size(); ++r) {
      if (row_index[r] != s) continue;
      const RowError e = row_error(logits.data(), &rows[r * size_t(g.vocab())], g.vocab());
      INFO(variant << " logits row at gen index " << s);
      CHECK(e.rel <= kRowRelTol);
      worst.rel = std::max(worst.rel, e.rel);
      worst.max_abs = std::max(worst.max_abs, e.max_abs);
      ++rows_seen;
    }
    // Exact accounting: the window holds min(s + 1, n) generated rows (all of them in full mode).
    const int64_t held = window > 0 ? std::min<int64_t>(s + 1, window) : s + 1;
    REQUIRE(cache.total_bytes() == size_t(g.prompt_len() + held) * cache.bytes_per_token());
  });
  CHECK(rows_seen == row_index.size());
  MESSAGE(variant << ": full logits rows max rel err " << worst.rel << ", max abs diff " << worst.max_abs);
  agree.check(variant);
}

}  // namespace

TEST_CASE("prefill matches the reference logits at every prefix position") {
  Fixture& g = Fixture::get();
  uocr::Decoder dec(g.cfg.decoder, g.w.decoder);
  uocr::KvCache cache(g.cfg.decoder, 0);
  const std::vector<float> input = dec.embed_prompt(g.input_ids, g.vision);
  const std::vector<float> all = dec.prefill(input, 0, cache, uocr::PrefillLogits::all);
  const int64_t p = g.prompt_len(), vocab = g.vocab();
  REQUIRE(all.size() == size_t(p * vocab));
  CHECK(cache.reference_rows() == p);

  const std::vector<float> ref_last = uocr_test::golden_f32("prefill_logits.npy");
  const RowError e = row_error(&all[size_t((p - 1) * vocab)], ref_last.data(), vocab);
  MESSAGE("prefill last-position logits: rel err " << e.rel << ", max abs diff " << e.max_abs);
  CHECK(e.rel <= kRowRelTol);

  // The last-position-only path gives the same row.
  const std::vector<float> last = dec.prefill(input, 0, cache);
  CHECK(row_error(last.data(), ref_last.data(), vocab).rel <= kRowRelTol);

  const std::vector<int32_t> ids = uocr_test::golden_ids("prefix_logits_top16_ids.npy");
  const std::vector<float> vals = uocr_test::golden_f32("prefix_logits_top16_vals.npy");
  const std::vector<float> lse = uocr_test::golden_f32("prefix_logits_lse.npy");
  REQUIRE(lse.size() == size_t(p));
  Agreement agree;
  for (int64_t i = 0; i < p; ++i) agree.add(&all[size_t(i * vocab)], vocab, &ids[size_t(i * 16)], &vals[size_t(i * 16)], lse[size_t(i)]);
  agree.check("prefix positions");
}

TEST_CASE("teacher-forced decode through the KV cache: full attention") { check_variant("full_attention", 0); }
TEST_CASE("teacher-forced decode through the KV cache: R-SWA n=128") { check_variant("rswa_n128", 128); }
TEST_CASE("teacher-forced decode through the KV cache: R-SWA n=8") { check_variant("rswa_n8", 8); }

TEST_CASE("a prefill stops between two layers once its deadline passes; without one the decoder prefills as a fresh one") {
  Fixture& g = Fixture::get();
  uocr::Decoder fresh(g.cfg.decoder, g.w.decoder);
  uocr::KvCache fresh_cache(g.cfg.decoder, 128);
  const std::vector<float> expected = prefill_prompt(fresh, fresh_cache);
  const auto t0 = std::chrono::steady_clock::now();
  prefill_prompt(fresh, fresh_cache);  // timed warm, as the decoder under test runs
  const double prefill_seconds = uocr_test::seconds_since(t0);
  const std::string layers = std::to_string(g.cfg.decoder.layers);

  uocr::Decoder dec(g.cfg.decoder, g.w.decoder);
  uocr::KvCache cache(g.cfg.decoder, 128);
  dec.set_deadline(uocr::Deadline::after(std::chrono::steady_clock::now() - std::chrono::seconds(1), 1e-3));
  std::string message;
  CHECK(status_of([&] { prefill_prompt(dec, cache); }, &message) == Status::cancelled);
  CHECK(message == "a prefill (before decoder layer 0 of " + layers + ") ran past the run's time budget");

  // A deadline halfway through stops it at a later layer (a few tries: a loaded machine may stall
  // the first layer past it).
  int stopped_inside = 0;
  for (int attempt = 0; attempt < 5 && !stopped_inside; ++attempt) {
    dec.set_deadline(uocr::Deadline::after(std::chrono::steady_clock::now(), prefill_seconds / 2));
    REQUIRE(status_of([&] { prefill_prompt(dec, cache); }, &message) == Status::cancelled);
    stopped_inside = message.find("before decoder layer 0 ") == std::string::npos;
  }
  CHECK_MESSAGE(stopped_inside, message);

  dec.set_deadline(uocr::Deadline{});
  CHECK(uocr_test::bit_identical(prefill_prompt(dec, cache), expected));
}

TEST_CASE("the decode checks see the attention window (a wrong window fails them)") {
  Fixture& g = Fixture::get();
  const std::vector<float> rows = uocr_test::golden_f32("rswa_n8_logits_rows.npy");
  const std::vector<int32_t> row_index = uocr_test::golden_ids("logits_rows_gen_index.npy");
  // Row 0 is gen index 9, the second step after the n = 8 ring first dropped a key.
  REQUIRE(row_index[0] == 9);
  auto error_at = [&](int window) {
    uocr::Decoder dec(g.cfg.decoder, g.w.decoder);
    uocr::KvCache cache(g.cfg.decoder, window);
    RowError e;
    teacher_force(dec, cache, row_index[0] + 1, [&](int s, const std::vector<float>& logits) {
      if (s == row_index[0]) e = row_error(logits.data(), rows.data(), g.vocab());
    });
    return e.rel;
  };
  // One key too few (n = 7), one too many (n = 9), no window at all (full attention).
  const double too_small = error_at(7), too_large = error_at(9), full = error_at(0);
  MESSAGE("rel err vs rswa_n8 rows: n=7 " << too_small << ", n=9 " << too_large << ", full " << full);
  CHECK(too_small > 10 * kRowRelTol);
  CHECK(too_large > 10 * kRowRelTol);
  CHECK(full > 10 * kRowRelTol);
  CHECK(error_at(8) <= kRowRelTol);
}

TEST_CASE("R-SWA KV memory is constant after P+n tokens; full attention grows by one token per step") {
  Fixture& g = Fixture::get();
  const int window = 8, extra = 2000, full_steps = 300;
  uocr::Decoder dec(g.cfg.decoder, g.w.decoder);
  uocr::KvCache ring(g.cfg.decoder, window), full(g.cfg.decoder, 0);
  const int64_t p = g.prompt_len();
  const size_t per_token = ring.bytes_per_token();
  CHECK(per_token == size_t(g.cfg.decoder.layers) * 2 * g.cfg.decoder.kv_heads * g.cfg.decoder.head_dim * sizeof(float));
  auto token = [&](int s) { return g.gen_ids[size_t(s) % g.gen_ids.size()]; };

  prefill_prompt(dec, full);
  for (int s = 0; s < full_steps; ++s) {
    const size_t before = full.total_bytes();
    dec.decode_step(token(s), p + s, full);
    REQUIRE(full.total_bytes() == before + per_token);
  }
  CHECK(full.window_bytes() == size_t(full_steps) * per_token);

  prefill_prompt(dec, ring);
  CHECK(ring.reference_bytes() == size_t(p) * per_token);
  CHECK(ring.window_bytes() == 0);
  const size_t ring_allocated = ring.allocated_bytes();
  const float* ring_storage = ring.generated_k(0);
  for (int s = 0; s < window + extra; ++s) {
    dec.decode_step(token(s), p + s, ring);
    if (s + 1 >= window) REQUIRE(ring.total_bytes() == size_t(p + window) * per_token);
    REQUIRE(ring.allocated_bytes() == ring_allocated);
  }
  CHECK(ring.generated_k(0) == ring_storage);  // the ring never reallocates
  CHECK(ring.generated_tokens() == window + extra);
  CHECK(ring.window_bytes() == size_t(window) * per_token);
  MESSAGE("KV bytes: R-SWA n=8 after " << window + extra << " steps " << ring.total_bytes() << ", full after "
                                       << full_steps << " steps " << full.total_bytes() << " (" << per_token
                                       << " per token)");
}

TEST_CASE("attention kernels match a naive reference with grouped KV heads and several query blocks") {
  const uocr::AttentionShape shape{4, 2, 8};  // two query heads per KV head
  const int64_t t = 150;                      // crosses the 64-row query blocks
  std::vector<float> q(size_t(t * shape.q_row())), k(size_t(t * shape.kv_row())), v(k.size());
  for (size_t i = 0; i < q.size(); ++i) q[i] = float(std::sin(0.37 * double(i)));
  for (size_t i = 0; i < k.size(); ++i) {
    k[i] = float(std::cos(0.11 * double(i)));
    v[i] = float(std::sin(0.05 * double(i) + 1.0));
  }
  auto naive = [&](int64_t i, int h, int64_t keys, int64_t dim) {  // output element of query row i
    const int g = h / 2;
    std::vector<double> s(static_cast<size_t>(keys));
    double mx = -1e300, sum = 0, out = 0;
    for (int64_t j = 0; j < keys; ++j) {
      double dot = 0;
      for (int d = 0; d < shape.head_dim; ++d)
        dot += double(q[size_t(i * shape.q_row() + h * shape.head_dim + d)]) * k[size_t(j * shape.kv_row() + g * shape.head_dim + d)];
      s[size_t(j)] = dot / std::sqrt(double(shape.head_dim));
      mx = std::max(mx, s[size_t(j)]);
    }
    for (int64_t j = 0; j < keys; ++j) sum += std::exp(s[size_t(j)] - mx);
    for (int64_t j = 0; j < keys; ++j)
      out += std::exp(s[size_t(j)] - mx) / sum * v[size_t(j * shape.kv_row() + g * shape.head_dim + dim)];
    return out;
  };
  std::vector<float> out(q.size());
  uocr::causal_attention(q.data(), k.data(), v.data(), t, shape, out.data());
  double worst = 0;
  for (int64_t i = 0; i < t; ++i)
    for (int h = 0; h < shape.heads; ++h)
      for (int d = 0; d < shape.head_dim; ++d)
        worst = std::max(worst, std::abs(out[size_t(i * shape.q_row() + h * shape.head_dim + d)] - naive(i, h, i + 1, d)));
  CHECK(worst < 1e-5);

  // Decode: the last query over the keys split into a "reference" and a "window" part.
  const int64_t split = 100, last = t - 1;
  std::vector<float> dec_out(size_t(shape.q_row())), scores(size_t(shape.heads * t));
  uocr::decode_attention(q.data() + last * shape.q_row(), uocr::KvRows{k.data(), v.data(), split},
                         uocr::KvRows{k.data() + split * shape.kv_row(), v.data() + split * shape.kv_row(), t - split}, shape,
                         scores.data(), dec_out.data());
  double worst_decode = 0;
  for (int h = 0; h < shape.heads; ++h)
    for (int d = 0; d < shape.head_dim; ++d)
      worst_decode = std::max(worst_decode, std::abs(dec_out[size_t(h * shape.head_dim + d)] - naive(last, h, t, d)));
  CHECK(worst_decode < 1e-5);
}

TEST_CASE("decoder input errors") {
  Fixture& g = Fixture::get();
  uocr::Decoder dec(g.cfg.decoder, g.w.decoder);
  uocr::KvCache cache(g.cfg.decoder, 8);

  SUBCASE("image-token count differs from the visual embeddings") {
    std::vector<float> fewer(g.vision.begin(), g.vision.end() - g.cfg.decoder.hidden);
    CHECK(status_of([&] { dec.embed_prompt(g.input_ids, fewer); }) == Status::invalid_argument);
    std::vector<int32_t> extra_placeholder = g.input_ids;
    extra_placeholder.push_back(uocr::kImageTokenId);
    CHECK(status_of([&] { dec.embed_prompt(extra_placeholder, g.vision); }) == Status::invalid_argument);
    std::vector<float> ragged(g.vision.begin(), g.vision.end() - 1);
    CHECK(status_of([&] { dec.embed_prompt(g.input_ids, ragged); }) == Status::invalid_argument);
  }
  SUBCASE("positions at or beyond max_position_embeddings are rejected, leaving the cache intact") {
    const int64_t max_pos = g.cfg.decoder.max_positions;
    const std::vector<float> input = dec.embed_prompt(g.input_ids, g.vision);
    CHECK(status_of([&] { dec.prefill(input, max_pos - g.prompt_len() + 1, cache); }) == Status::invalid_argument);
    CHECK(status_of([&] { dec.prefill(input, -1, cache); }) == Status::invalid_argument);
    dec.prefill(input, 0, cache);
    CHECK(status_of([&] { dec.decode_step(5, max_pos, cache); }) == Status::invalid_argument);
    CHECK(cache.generated_tokens() == 0);
    CHECK(status_of([&] { dec.decode_step(5, max_pos - 1, cache); }) == Status::ok);
    CHECK(cache.generated_tokens() == 1);
  }
  SUBCASE("token ids outside the vocabulary and decoding before prefill") {
    CHECK(status_of([&] { dec.embed({int32_t(g.vocab())}); }) == Status::invalid_argument);
    CHECK(status_of([&] { dec.embed({-1}); }) == Status::invalid_argument);
    CHECK(status_of([&] { dec.decode_step(5, 0, cache); }) == Status::invalid_argument);
  }
}
