// The decoder over every backend this build has (tests/conformance/runners.hpp), through the
// backend contract (the decoder and its KV cache): the golden checks (tiny-b against upstream's
// float32 run: prefill logits at every position, teacher-forced decode with full attention and
// with an R-SWA ring) and the decoder's input errors (the same statuses and no change to the
// cache). The op cases are ops.cpp.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "conformance/runners.hpp"
#include "support/test_support.hpp"

using uocr::Status;
using uocr_test::Backends;
using uocr_test::runs_here;

TEST_CASE_TEMPLATE_DEFINE("golden (tiny-b): prefill logits at every prefix position", Runner, golden_prefill) {
  if (!runs_here<Runner>()) return;
  uocr_test::golden_prefill<Runner>(Runner::env());
  Runner::after_case("golden prefill");
}
TEST_CASE_TEMPLATE_APPLY(golden_prefill, Backends);

TEST_CASE_TEMPLATE_DEFINE("golden (tiny-b): teacher-forced decode, full attention", Runner, golden_decode_full) {
  if (!runs_here<Runner>()) return;
  uocr_test::golden_decode<Runner>(Runner::env(), "full_attention", 0);
  Runner::after_case("golden decode, full attention");
}
TEST_CASE_TEMPLATE_APPLY(golden_decode_full, Backends);

TEST_CASE_TEMPLATE_DEFINE("golden (tiny-b): teacher-forced decode, R-SWA n=8", Runner, golden_decode_rswa) {
  if (!runs_here<Runner>()) return;
  uocr_test::golden_decode<Runner>(Runner::env(), "rswa_n8", 8);
  Runner::after_case("golden decode, R-SWA n=8");
}
TEST_CASE_TEMPLATE_APPLY(golden_decode_rswa, Backends);

TEST_CASE_TEMPLATE_DEFINE("decoder input errors: the same statuses on every backend, the cache unchanged", Runner,
                          input_errors) {
  if (!runs_here<Runner>()) return;
  auto& e = Runner::env();
  Runner run;
  auto cache = run.cache(8);
  const std::vector<float> input = run.dec.embed_prompt(e.input_ids, e.vision);
  CHECK(uocr_test::status_of([&] { run.dec.decode_step(5, 0, cache); }) == Status::invalid_argument);  // before prefill
  CHECK(uocr_test::status_of([&] { run.dec.prefill(input, -1, cache); }) == Status::invalid_argument);
  run.dec.prefill(input, 0, cache);
  CHECK(uocr_test::status_of([&] { run.dec.decode_step(5, e.cfg.decoder.max_positions, cache); }) == Status::invalid_argument);
  CHECK(uocr_test::status_of([&] { run.dec.decode_step(e.cfg.decoder.vocab, 300, cache); }) == Status::invalid_argument);
  CHECK(cache.generated_tokens() == 0);
  CHECK(uocr_test::status_of([&] { run.dec.decode_step(5, 300, cache); }) == Status::ok);
  CHECK(cache.generated_tokens() == 1);
  // A cache made for another configuration is refused.
  uocr::DecoderConfig other = e.cfg.decoder;
  other.layers = 1;
  auto wrong = Runner::make_cache(other, 8);
  CHECK(uocr_test::status_of([&] { run.dec.prefill(input, 0, wrong); }) == Status::invalid_argument);
  Runner::after_case("decoder input errors");
}
TEST_CASE_TEMPLATE_APPLY(input_errors, Backends);
