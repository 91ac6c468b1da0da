// The golden (tiny-b) decoder checks every decoder backend runs (tests/conformance/decoder.cpp):
// prefill logits at every prefix position, and
// teacher-forced decode through the backend's KV cache with its memory accounting. A Runner is
// default-constructible and has `static constexpr const char* name`, a decoder `dec` and
// `cache(window)` making that decoder's KV cache; the fixture has the golden config, prompt ids,
// generated ids and vision tokens.
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "logit_agreement.hpp"
#include "test_support.hpp"
#include "uocr/decoder/decoder.hpp"
#include "uocr/model/checkpoint.hpp"
#include "uocr/model/config.hpp"
#include "uocr/model/weights.hpp"

namespace uocr_test {

// The golden (tiny-b) model and the inputs of its reference run, the fixture every decoder test uses.
struct GoldenCase {
  uocr::ModelConfig cfg = uocr::ModelConfig::load(golden_model_dir() + "/config.json");
  uocr::Checkpoint ck = uocr::Checkpoint::open(golden_model_dir());
  uocr::ModelWeights w = uocr::ModelWeights::bind(ck, cfg);
  std::vector<int32_t> input_ids = golden_ids("input_ids.npy");
  std::vector<int32_t> gen_ids = golden_ids("gen_ids.npy");

  // Step s of the staggered batch the batched-decoding tests run: sequences 0 and 1 from step 0,
  // sequence 2 joining at step 5 (continuous batching: any set of caches per step), sequence i
  // fed the golden stream shifted by i, each at its own position after the prompt.
  struct BatchStep {
    std::vector<int32_t> tokens;
    std::vector<int64_t> positions;
  };
  BatchStep staggered_step(int s) const {
    const int64_t p = int64_t(input_ids.size());
    BatchStep b;
    for (int i = 0; i < (s < 5 ? 2 : 3); ++i) {
      const int step = i == 2 ? s - 5 : s;
      b.tokens.push_back(gen_ids[size_t(step + i)]);
      b.positions.push_back(p + step);
    }
    return b;
  }
  std::vector<float> vision = golden_f32("vision_tokens.npy");
};

// GoldenCase with a GPU backend's Context (or why there is none) and the decoder's device
// weights (set by the test on first use). The Context is the first member, so it is destroyed
// last: buffers must not outlive it.
template <class Context, class DeviceWeights>
struct DeviceGolden : GoldenCase {
  std::unique_ptr<Context> ctx;
  std::string no_device;  // the Context's error when there is no usable device
  uocr::Status no_device_status = uocr::Status::ok;
  std::shared_ptr<DeviceWeights> dev_weights;

  DeviceGolden() {
    try {
      ctx = std::make_unique<Context>();
    } catch (const uocr::Error& e) {
      no_device = e.what();
      no_device_status = e.status();
    }
  }
  ~DeviceGolden() {
    dev_weights.reset();
    ctx.reset();
  }

  // The caches of the staggered batch (staggered_step): R-SWA windows 8 and 3 (rings that wrap)
  // and 0 (a growing full-attention cache), each prefilled with `input` by `dec`.
  template <class Cache, class Decoder>
  std::vector<Cache> staggered_caches(Decoder& dec, const std::vector<float>& input) const {
    std::vector<Cache> caches;
    caches.reserve(3);
    for (int window : {8, 0, 3}) {
      caches.emplace_back(*ctx, cfg.decoder, window);
      dec.prefill(input, 0, caches.back());
    }
    return caches;
  }
};

constexpr double kGoldenRowRel = 1e-4;  // full logits rows against the upstream float32 run
// Top-16 logits and logsumexp: AgreementLimits' defaults (1e-4 relative to max(1, |ref|)).

template <class Runner, class Fixture>
void golden_prefill(const Fixture& e) {
  Runner run;
  auto cache = run.cache(0);
  const std::vector<float> input = run.dec.embed_prompt(e.input_ids, e.vision);
  const std::vector<float> all = run.dec.prefill(input, 0, cache, uocr::PrefillLogits::all);
  const int64_t p = int64_t(e.input_ids.size()), vocab = e.cfg.decoder.vocab;
  REQUIRE(all.size() == size_t(p * vocab));
  const std::vector<float> ref_last = golden_f32("prefill_logits.npy");
  const RowError err = row_error(std::vector<float>(all.end() - vocab, all.end()), ref_last);
  const RowError err_last = row_error(run.dec.prefill(input, 0, cache), ref_last);
  const std::vector<int32_t> ids = golden_ids("prefix_logits_top16_ids.npy");
  const std::vector<float> vals = golden_f32("prefix_logits_top16_vals.npy"), lse = golden_f32("prefix_logits_lse.npy");
  Agreement top;
  for (int64_t i = 0; i < p; ++i) top.add(&all[size_t(i * vocab)], vocab, &ids[size_t(i * 16)], &vals[size_t(i * 16)], lse[size_t(i)]);
  MESSAGE(std::string(Runner::name) << " prefill: last-position logits rel err " << err.rel << " (max abs " << err.max_abs
                       << "), last-only path rel " << err_last.rel);
  CHECK(err.rel <= kGoldenRowRel);
  CHECK(err_last.rel <= kGoldenRowRel);
  top.check(std::string(Runner::name) + " prefill, every prefix position");
}

template <class Runner, class Fixture>
void golden_decode(const Fixture& e, const std::string& variant, int window) {
  const std::vector<int32_t> ids = golden_ids(variant + "_logits_top16_ids.npy");
  const std::vector<float> vals = golden_f32(variant + "_logits_top16_vals.npy");
  const std::vector<float> lse = golden_f32(variant + "_logits_lse.npy");
  const std::vector<float> rows = golden_f32(variant + "_logits_rows.npy");
  const std::vector<int32_t> row_index = golden_ids("logits_rows_gen_index.npy");
  const int steps = int(lse.size());
  const int64_t vocab = e.cfg.decoder.vocab, p = int64_t(e.input_ids.size());
  Runner run;
  auto cache = run.cache(window);
  run.dec.prefill(run.dec.embed_prompt(e.input_ids, e.vision), 0, cache);
  Agreement top;
  double worst_row = 0;
  size_t rows_seen = 0;
  for (int s = 0; s < steps; ++s) {
    const std::vector<float>& logits = run.dec.decode_step(e.gen_ids[size_t(s)], p + s, cache);
    top.add(logits.data(), vocab, &ids[size_t(s) * 16], &vals[size_t(s) * 16], lse[size_t(s)]);
    for (size_t r = 0; r < row_index.size(); ++r) {
      if (row_index[r] != s) continue;
      worst_row = std::max(worst_row, row_error(logits.data(), &rows[r * size_t(vocab)], vocab).rel);
      ++rows_seen;
    }
    const int64_t held = window > 0 ? std::min<int64_t>(s + 1, window) : s + 1;
    REQUIRE(cache.total_bytes() == size_t(p + held) * cache.bytes_per_token());
  }
  MESSAGE(std::string(Runner::name) << " " << variant << ": " << steps << " teacher-forced steps, full logits rows max rel err "
                       << worst_row << " (" << rows_seen << " rows)");
  CHECK(rows_seen == row_index.size());
  CHECK(worst_row <= kGoldenRowRel);
  top.check(std::string(Runner::name) + " " + variant);
}

}  // namespace uocr_test
