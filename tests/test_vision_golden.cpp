// DeepEncoder (SAM -> CLIP -> projector) and the visual-token layout against the golden upstream
// PyTorch reference (float32), plus the gundam tile layout and 640 px tiles.
#include <doctest/doctest.h>

#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "support/test_support.hpp"
#include "support/vision_stages.hpp"
#include "uocr/io/npy.hpp"
#include "uocr/model/checkpoint.hpp"
#include "uocr/model/config.hpp"
#include "uocr/model/weights.hpp"
#include "uocr/vision/encoder.hpp"

using uocr_test::to_chw;

namespace {

using uocr_test::golden_model_dir;


struct TinyModel {
  uocr::ModelConfig cfg = uocr::ModelConfig::load(golden_model_dir() + "/config.json");
  uocr::Checkpoint ck = uocr::Checkpoint::open(golden_model_dir());
  uocr::ModelWeights w = uocr::ModelWeights::bind(ck, cfg);
  uocr::VisionEncoder enc{cfg, w};
};

const TinyModel& model() {
  static const TinyModel m;
  return m;
}

std::vector<float> golden(const std::string& name, const std::vector<int64_t>& shape) {
  const uocr::NpyArray a = uocr::read_npy(uocr_test::golden(name));
  REQUIRE(a.shape == shape);
  return a.to_f32();
}

// ‖ours − ref‖/‖ref‖ and max |ours − ref|, both required ≤ 1e-3.
void check_close(const char* name, const std::vector<float>& ours, const std::vector<float>& ref) {
  REQUIRE(ours.size() == ref.size());
  double diff2 = 0, ref2 = 0, max_abs = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = double(ours[i]) - double(ref[i]);
    diff2 += d * d;
    ref2 += double(ref[i]) * ref[i];
    max_abs = std::max(max_abs, std::isfinite(d) ? std::fabs(d) : INFINITY);
  }
  const double rel = std::sqrt(diff2 / ref2);
  MESSAGE(std::string(name) << ": rel " << rel << ", max abs " << max_abs << " (" << ref.size() << " values)");
  CHECK(rel <= 1e-3);
  CHECK(max_abs <= 1e-3);
}

std::vector<float> constant_view(int size, float value) { return std::vector<float>(size_t(3) * size * size, value); }

bool all_finite(const std::vector<float>& v) {
  for (float x : v)
    if (!std::isfinite(x)) return false;
  return true;
}

using uocr_test::seconds_since;

}  // namespace

TEST_CASE("golden 1024 view: SAM, CLIP, projector and visual tokens match the upstream reference") {
  const TinyModel& m = model();
  const std::vector<float>& image = uocr_test::golden_view();

  uocr::VisionCaptures cap;
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<float> feats = m.enc.encode_view(image.data(), 1024, &cap);
  MESSAGE("golden 1024 view forward: " << seconds_since(t0) << " s");

  REQUIRE(cap.sam_neck.h == 64);
  REQUIRE(cap.sam_out.h == 16);
  check_close("sam_neck", to_chw(cap.sam_neck), golden("sam_neck.npy", {1, 24, 64, 64}));
  check_close("sam_out", to_chw(cap.sam_out), golden("sam_out.npy", {1, 48, 16, 16}));
  check_close("clip_out", cap.clip_out, golden("clip_out.npy", {1, 257, 48}));
  check_close("projector_out", feats, golden("projector_out.npy", {256, 16}));

  const std::vector<float> tokens = m.enc.layout_tokens(feats, {}, 0, 0);
  CHECK(int64_t(tokens.size()) == m.enc.token_count(1024, 0, 0, 0) * 16);
  check_close("vision_tokens", tokens, golden("vision_tokens.npy", {273, 16}));
}

TEST_CASE("gundam layout: local stitched grid with a newline per row, then global, then separator") {
  const TinyModel& m = model();
  const int tiles_x = 2, tiles_y = 3, d = m.enc.hidden();
  const std::vector<float> global = constant_view(1024, 0.25f);
  std::vector<std::vector<float>> tiles;
  for (int t = 0; t < tiles_x * tiles_y; ++t) tiles.push_back(constant_view(640, -0.9f + 0.3f * float(t)));

  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<float> tokens = m.enc.visual_tokens(global, tiles, tiles_x, tiles_y);
  MESSAGE("gundam 2x3 (1 global + 6 tiles of 640) forward: " << seconds_since(t0) << " s");

  const int64_t count = 10 * tiles_y * (10 * tiles_x + 1) + 273;
  CHECK(count == 903);
  CHECK(m.enc.token_count(1024, 640, tiles_x, tiles_y) == count);
  REQUIRE(int64_t(tokens.size()) == count * d);

  // Expected rows from each view encoded on its own.
  const std::vector<float> gf = m.enc.encode_view(global.data(), 1024);
  std::vector<std::vector<float>> tf;
  for (const auto& t : tiles) tf.push_back(m.enc.encode_view(t.data(), 640));
  for (size_t a = 0; a < tf.size(); ++a) {
    REQUIRE(tf[a].size() == size_t(100 * d));
    for (size_t b = a + 1; b < tf.size(); ++b) REQUIRE(tf[a] != tf[b]);  // order is observable
  }
  const std::vector<float> newline = m.w.glue.image_newline->to_vector();
  const std::vector<float> separator = m.w.glue.view_separator->to_vector();

  auto row_is = [&](int64_t pos, const float* expect) {
    for (int c = 0; c < d; ++c)
      if (std::fabs(tokens[size_t(pos * d + c)] - expect[c]) > 1e-6f) return false;
    return true;
  };
  int64_t pos = 0, bad = 0;
  for (int r = 0; r < 10 * tiles_y; ++r) {
    for (int c = 0; c < 10 * tiles_x; ++c) {
      const std::vector<float>& tile = tf[size_t((r / 10) * tiles_x + c / 10)];
      bad += !row_is(pos++, tile.data() + ((r % 10) * 10 + c % 10) * d);
    }
    bad += !row_is(pos++, newline.data());  // end of each stitched row
  }
  CHECK(pos == 630);
  for (int r = 0; r < 16; ++r) {
    for (int c = 0; c < 16; ++c) bad += !row_is(pos++, gf.data() + (r * 16 + c) * d);
    bad += !row_is(pos++, newline.data());
  }
  bad += !row_is(pos++, separator.data());
  CHECK(pos == count);
  CHECK(bad == 0);
}

TEST_CASE("640 tile forward runs with interpolated position tables and is finite") {
  const TinyModel& m = model();
  const std::vector<float>& image = uocr_test::golden_view();
  std::vector<float> tile(size_t(3) * 640 * 640);  // top-left 640 px of the page
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 640; ++y)
      std::copy_n(image.data() + (size_t(c) * 1024 + y) * 1024, 640, tile.data() + (size_t(c) * 640 + y) * 640);

  uocr::VisionCaptures cap;
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<float> feats = m.enc.encode_view(tile.data(), 640, &cap);
  MESSAGE("golden model 640 tile forward: " << seconds_since(t0) << " s");
  CHECK(cap.sam_neck.h == 40);
  CHECK(cap.sam_out.h == 10);
  CHECK(cap.clip_out.size() == size_t(101 * 48));
  CHECK(feats.size() == size_t(100 * 16));
  CHECK(all_finite(cap.sam_neck.data));
  CHECK(all_finite(cap.clip_out));
  CHECK(all_finite(feats));
}

TEST_CASE("a passed deadline stops the encoder inside SAM; the workspace forgets it after the call") {
  const TinyModel& m = model();
  const std::vector<float>& image = uocr_test::golden_view();
  uocr::vision::Workspace ws;
  const uocr::Deadline passed = uocr::Deadline::after(std::chrono::steady_clock::now() - std::chrono::seconds(1), 0.5);
  REQUIRE(passed.passed());
  std::string message;
  try {
    m.enc.visual_tokens(image, {}, 0, 0, ws, passed);
  } catch (const uocr::DeadlinePassed& e) {
    message = e.what();
  }
  CHECK(message == "encoding a page (SAM) ran past the run's time budget");
  // The same workspace without a deadline: the page as a fresh encoder gives it.
  CHECK(m.enc.visual_tokens(image, {}, 0, 0, ws) == m.enc.visual_tokens(image, {}, 0, 0));
}

TEST_CASE("vision input errors are reported, not crashed on") {
  const TinyModel& m = model();
  const std::vector<float> view = constant_view(1024, 0.f);
  CHECK_THROWS_AS(m.enc.encode_view(view.data(), 1000), uocr::Error);
  CHECK_THROWS_AS(m.enc.visual_tokens(view, {constant_view(640, 0.f)}, 2, 1), uocr::Error);
  CHECK_THROWS_AS(m.enc.visual_tokens(std::vector<float>(100, 0.f), {}, 0, 0), uocr::Error);
}
