// The vision encoder on CUDA (vision.hpp) against the CPU encoder and the upstream captures of
// the golden (tiny-b) model: SAM neck (patch embedding, windowed + global attention with rel-pos,
// MLPs, neck convs and LayerNorm2d), the compressor output, CLIP, the projector and the visual
// tokens of the 1024 global view; those tokens through the CUDA decoder to the reference prefill
// logits; a 640 tile (resampled position tables, padded windows); the engine's vision() against
// the CPU engine's; bad views. Every kernel of the encoder is on these paths, and the captures
// say which stage a deviation starts in. Without a usable GPU the cases are skipped and the
// executable exits 77 (gpu_test.hpp).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/decoder.hpp"
#include "backends/cuda/vision.hpp"
#include "support/golden_decoder.hpp"
#include "support/gpu_test.hpp"
#include "support/logit_agreement.hpp"
#include "support/test_support.hpp"
#include "support/vision_stages.hpp"
#include "uocr/engine/open.hpp"
#include "uocr/model/model.hpp"
#include "uocr/vision/encoder.hpp"

namespace cu = uocr::cuda;
using uocr::Status;
using uocr_test::check_stage;
using uocr_test::crop_640;
using uocr_test::no_gpu;
using uocr_test::row_error;
using uocr_test::RowError;

namespace {

// The golden model (tiny-b), a Context and the CUDA encoder on it, made by the first GPU case. The
// Context outlives the encoder (members are destroyed in reverse order).
struct Device : uocr_test::GoldenCase {
  cu::Context ctx;
  cu::CudaVisionEncoder enc{ctx, cfg, w};
  static Device& get() {
    static Device d;
    return d;
  }
};

}  // namespace

TEST_CASE("golden (tiny-b) vision on CUDA: SAM, CLIP, projector, visual tokens, then prefill logits" * doctest::skip(no_gpu())) {
  Device& e = Device::get();
  const std::vector<float> image = uocr_test::golden_view();
  uocr::VisionEncoder cpu(e.cfg, e.w);
  uocr_test::check_golden_view("cuda", e.enc, cpu, image);
  const std::vector<float> visual = e.enc.visual_tokens(image, {}, 0, 0);
  REQUIRE(int64_t(visual.size()) == e.enc.token_count(1024, 0, 0, 0) * e.cfg.decoder.hidden);
  check_stage("cuda", "vision_tokens", visual, e.vision, cpu.visual_tokens(image, {}, 0, 0));
  CHECK(e.enc.peak_activation_bytes() > 0);

  // These visual tokens through the CUDA decoder give the reference prefill logits.
  cu::CudaDecoder dec(e.ctx, e.cfg.decoder, e.w.decoder);
  cu::CudaKvCache cache(e.ctx, e.cfg.decoder, 8);
  const RowError err =
      row_error(dec.prefill(dec.embed_prompt(e.input_ids, visual), 0, cache), uocr_test::golden_f32("prefill_logits.npy"));
  MESSAGE("cuda image -> visual tokens -> prefill logits: rel err " << err.rel << " (max abs " << err.max_abs << ")");
  CHECK(err.rel <= uocr_test::kGoldenRowRel);
}

TEST_CASE("a 640 tile on CUDA (resampled tables, padded windows) matches the CPU; bad views are errors" *
          doctest::skip(no_gpu())) {
  Device& e = Device::get();
  const std::vector<float> tile = crop_640(uocr_test::golden_view());
  uocr::VisionEncoder cpu(e.cfg, e.w);
  const RowError t = row_error(e.enc.encode_view(tile.data(), 640), cpu.encode_view(tile.data(), 640));
  MESSAGE("cuda 640 tile vs cpu: rel " << t.rel << ", max abs " << t.max_abs);
  CHECK(t.rel <= 1e-5);
  CHECK(uocr_test::status_of([&] { e.enc.encode_view(tile.data(), 630); }) == Status::invalid_argument);
  CHECK(uocr_test::status_of([&] { e.enc.encode_view(nullptr, 640); }) == Status::invalid_argument);
  CHECK(uocr_test::status_of([&] { e.enc.visual_tokens(tile, {tile}, 2, 1); }) == Status::invalid_argument);
  CHECK(uocr_test::status_of([&] { e.enc.visual_tokens(std::vector<float>(100), {}, 0, 0); }) == Status::invalid_argument);
}

TEST_CASE("the CUDA engine's vision() matches the CPU engine's (global view + a 2x1 tile grid)" * doctest::skip(no_gpu())) {
  const std::shared_ptr<const uocr::Model> model = uocr::Model::load(uocr_test::golden_model_dir());
  const std::vector<float> image = uocr_test::golden_view();
  const std::vector<float> tile = crop_640(image);
  const std::unique_ptr<uocr::VisionEngine> gpu = uocr::open_engine(model, uocr::Backend::cuda)->vision();
  const std::unique_ptr<uocr::VisionEngine> cpu = uocr::open_engine(model, uocr::Backend::cpu)->vision();
  CHECK(gpu->hidden() == cpu->hidden());
  const RowError err = row_error(gpu->visual_tokens(image, {tile, tile}, 2, 1), cpu->visual_tokens(image, {tile, tile}, 2, 1));
  MESSAGE("cuda engine vision vs cpu engine: rel " << err.rel << ", max abs " << err.max_abs);
  CHECK(err.rel <= 1e-5);
  CHECK(gpu->scratch_bytes() > 0);
}

int main(int argc, char** argv) { return uocr_test::gpu_test_main(argc, argv); }
