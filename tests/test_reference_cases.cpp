// The whole pipeline against upstream-PyTorch reference cases (tests/data/reference/, written by
// python/uocr_dev/fixtures/make_reference.py from the unmodified Unlimited-OCR remote code): gundam single
// pages with several tile grids and a <= 640 px page, multi-page prompts (2 and 3 pages) with
// teacher-forced R-SWA decoding, and base mode on a padded page (plus the tiny-a dimensions where
// the optional shared/golden/tiny-a is present). Everything starts from the committed PNGs: preprocessing (bf16 checksums of
// every view), visual tokens, prompt ids, prefill logits and decode logits.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/logit_agreement.hpp"
#include "support/test_support.hpp"
#include "uocr/decoder/decoder.hpp"
#include "uocr/decoder/kv_cache.hpp"
#include "uocr/image/image.hpp"
#include "uocr/image/preprocess.hpp"
#include "uocr/io/npy.hpp"
#include "uocr/model/model.hpp"
#include "uocr/session/prompt.hpp"
#include "uocr/vision/encoder.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Float32 against float32 (observed ~1e-6); the bounds leave room for summation order only.
constexpr double kVisionRelTol = 1e-3;  // ‖ours − ref‖ / ‖ref‖ over all visual tokens of a case
constexpr double kCaseRowRelTol = 1e-3;     // same over a full logits row
constexpr uocr_test::AgreementLimits kLimits{1e-3, 1e-3};  // top-16 logits and logsumexp, relative to max(1, |ref|)

std::string ref_dir() { return uocr_test::source_dir() + "/tests/data/reference"; }

json read_json(const std::string& path) {
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "cannot open " << path);
  return json::parse(in);
}

// A complete model folder in a temp dir: config.json from tests/data/reference/<name>/, the
// weights from there too (tiny-b) or from the optional shared/golden/tiny-a (tiny-a-uocr, see
// manifest.json), the tokenizer from tests/data/unlimited-ocr/. Symlinks only.
struct RefModel {
  fs::path dir;
  std::shared_ptr<const uocr::Model> model;
  std::unique_ptr<uocr::VisionEncoder> enc;

  explicit RefModel(const std::string& name) {
    const json manifest = read_json(ref_dir() + "/manifest.json");
    const std::string weights = manifest["models"][name]["weights"].get<std::string>();
    // "golden/..." is a folder under the shared dir; otherwise a shard path under tests/data/reference.
    const bool shared = weights.rfind("golden/", 0) == 0;
    const fs::path wdir = shared ? fs::path(uocr_test::shared_dir()) / weights
                                 : (fs::path(ref_dir()) / weights).parent_path();
    dir = fs::temp_directory_path() / ("uocr_ref_" + name + "_" + std::to_string(std::random_device{}()));
    fs::create_directories(dir);
    auto link = [&](const fs::path& from, const char* as) { fs::create_symlink(fs::absolute(from), dir / as); };
    link(fs::path(ref_dir()) / name / "config.json", "config.json");
    link(wdir / "model.safetensors.index.json", "model.safetensors.index.json");
    link(wdir / "model-00001-of-000001.safetensors", "model-00001-of-000001.safetensors");
    for (const char* f : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"})
      link(fs::path(uocr_test::published_dir()) / f, f);
    model = uocr::Model::load(dir.string());
    enc = std::make_unique<uocr::VisionEncoder>(model->config(), model->weights());
  }
  ~RefModel() {
    enc.reset();
    model.reset();
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

RefModel& ref_model(const std::string& name) {
  static std::map<std::string, std::unique_ptr<RefModel>> models;
  auto& m = models[name];
  if (!m) m = std::make_unique<RefModel>(name);
  return *m;
}


using uocr_test::row_error;
using uocr_test::RowError;

// Agreement of our logits rows with the reference top-16 / logsumexp summaries.
struct CaseAgreement : uocr_test::Agreement {
  CaseAgreement() : uocr_test::Agreement(kLimits) {}
};

using uocr_test::seconds_since;

void run_case(const std::string& name) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string dir = ref_dir() + "/cases/" + name + "/";
  const json c = read_json(dir + "case.json");
  auto npy = [&](const std::string& f) { return uocr::read_npy(dir + f); };
  auto npy_i32 = [&](const std::string& f) {
    const std::vector<int64_t> v = npy(f).to_i64();
    return std::vector<int32_t>(v.begin(), v.end());
  };

  RefModel& rm = ref_model(c["model"].get<std::string>());
  const uocr::Model& model = *rm.model;
  const uocr::ModelConfig& cfg = model.config();
  const int64_t hidden = cfg.decoder.hidden, vocab = cfg.decoder.vocab;
  REQUIRE(hidden == c["hidden"].get<int64_t>());
  REQUIRE(cfg.model_type == "unlimited-ocr");
  // The R-SWA window comes from the config (sliding_window_size), as upstream reads it.
  REQUIRE(cfg.decoder.sliding_window == c["window"].get<int>());

  // 1. Preprocessing, from the committed PNGs.
  const std::string mode = c["mode"].get<std::string>();
  std::vector<uocr::ImageU8> images;
  for (const auto& f : c["images"]) images.push_back(uocr::load_image(ref_dir() + "/images/" + f.get<std::string>()));
  std::vector<uocr::PreparedImage> prepared;
  if (mode == "multi") {
    prepared = uocr::prepare_pages(images, c["preprocess"][1].get<int>());
  } else {
    REQUIRE(images.size() == 1);
    const uocr::PreprocessConfig pc{c["preprocess"][0].get<int>(), c["preprocess"][1].get<int>(),
                                    c["preprocess"][2].get<bool>()};
    prepared.push_back(uocr::prepare_image(images[0], pc));
  }
  REQUIRE(c["spatial_crop"].size() == prepared.size());
  for (size_t i = 0; i < prepared.size(); ++i) {
    const uocr::PreparedImage& p = prepared[i];
    // Upstream images_spatial_crop: [tiles across, tiles down], [1, 1] without tiles.
    const int sx = c["spatial_crop"][i][0].get<int>(), sy = c["spatial_crop"][i][1].get<int>();
    INFO(name << " image " << i);
    CHECK((p.tiles_chw.empty() ? 1 : p.tiles_x) == sx);
    CHECK((p.tiles_chw.empty() ? 1 : p.tiles_y) == sy);
    CHECK(p.tiles_chw.size() == (sx * sy > 1 ? size_t(sx * sy) : 0));
  }
  size_t n_views = 0;
  for (const uocr::PreparedImage& p : prepared) n_views += 1 + p.tiles_chw.size();
  CHECK(c["views"].size() == n_views);  // every view of ours has a reference checksum
  int views_matched = 0;
  for (const auto& v : c["views"]) {
    const std::string kind = v["view"].get<std::string>();
    const size_t img = v["image_index"].get<size_t>();
    REQUIRE(img < prepared.size());
    const uocr::PreparedImage& p = prepared[img];
    const int idx = v["index"].get<int>();
    REQUIRE((kind == "global" || size_t(idx) < p.tiles_chw.size()));
    const std::vector<float>& chw = kind == "global" ? p.global_chw : p.tiles_chw[size_t(idx)];
    const int side = kind == "global" ? p.global_size : p.tile_size;
    INFO(name << ": " << kind << " view " << idx << " of " << v["image"].get<std::string>());
    CHECK(json({3, side, side}) == v["shape"]);
    bool all_bf16 = false;
    const std::string h = uocr_test::bf16_hash(chw, &all_bf16);
    CHECK(all_bf16);
    double sum = 0;
    for (float x : chw) sum += x;
    INFO("sum ours " << sum << " ref " << v["sum"].get<double>());
    CHECK(h == v["bf16_hash"].get<std::string>());
    views_matched += h == v["bf16_hash"].get<std::string>();
  }

  // 2. Visual tokens: per image, concatenated in page order.
  std::vector<float> visual;
  size_t expected_count = 0;
  for (const uocr::PreparedImage& p : prepared) {
    const std::vector<float> v = rm.enc->visual_tokens(p.global_chw, p.tiles_chw, p.tiles_x, p.tiles_y);
    CHECK(v.size() == uocr::visual_token_count(p) * size_t(hidden));
    // 273 per global view; a gundam i x j grid adds 10j(10i+1).
    const size_t tiles = p.tiles_chw.empty() ? 0 : size_t(10 * p.tiles_y) * size_t(10 * p.tiles_x + 1);
    expected_count += 273 + tiles;
    visual.insert(visual.end(), v.begin(), v.end());
  }
  const int64_t n_visual = int64_t(visual.size()) / hidden;
  CHECK(n_visual == c["visual_tokens"].get<int64_t>());
  CHECK(size_t(n_visual) == expected_count);
  const uocr::NpyArray ref_vis = npy("vision_tokens.npy");
  REQUIRE(ref_vis.shape == std::vector<int64_t>{c["visual_tokens"].get<int64_t>(), hidden});
  const std::vector<float> ref_visual = ref_vis.to_f32();
  REQUIRE(visual.size() == ref_visual.size());
  const RowError ve = row_error(visual.data(), ref_visual.data(), int64_t(visual.size()));
  MESSAGE(name << ": " << prepared.size() << " image(s), " << views_matched << "/" << c["views"].size()
               << " views bit-exact, " << n_visual << " visual tokens, rel err " << ve.rel << ", max abs "
               << ve.max_abs);
  CHECK(ve.rel <= kVisionRelTol);

  // 3. Prompt ids.
  const std::vector<int32_t> ref_ids = npy_i32("input_ids.npy");
  const uocr::Prompt prompt = uocr::build_prompt(model, c["prompt"].get<std::string>(), n_visual);
  CHECK(prompt.ids == ref_ids);
  CHECK(prompt.image_offset == 1);
  REQUIRE(int64_t(prompt.ids.size()) == c["prompt_len"].get<int64_t>());

  // 4. Prefill (our visual tokens, end to end) and the logits at the last prompt position.
  uocr::Decoder dec(cfg.decoder, model.weights().decoder);
  {
    // Diagnostic: the decoder alone, fed the reference visual tokens.
    uocr::KvCache cache(cfg.decoder, cfg.decoder.sliding_window);
    const std::vector<float> logits = dec.prefill(dec.embed_prompt(ref_ids, ref_visual), 0, cache);
    CaseAgreement a;
    a.add(logits.data(), vocab, npy_i32("prefill_top16_ids.npy").data(), npy("prefill_top16_vals.npy").to_f32().data(),
          npy("prefill_lse.npy").to_f32()[0]);
    a.check(name + " prefill, reference visual tokens");
  }
  uocr::KvCache cache(cfg.decoder, cfg.decoder.sliding_window);
  const std::vector<float> prefill = dec.prefill(dec.embed_prompt(prompt.ids, visual), 0, cache);
  REQUIRE(prefill.size() == size_t(vocab));
  {
    CaseAgreement a;
    a.add(prefill.data(), vocab, npy_i32("prefill_top16_ids.npy").data(), npy("prefill_top16_vals.npy").to_f32().data(),
          npy("prefill_lse.npy").to_f32()[0]);
    a.check(name + " prefill, end to end");
  }
  if (fs::exists(dir + "prefill_logits.npy")) {
    const RowError e = row_error(prefill.data(), npy("prefill_logits.npy").to_f32().data(), vocab);
    MESSAGE(name << ": full prefill logits row rel err " << e.rel << ", max abs " << e.max_abs);
    CHECK(e.rel <= kCaseRowRelTol);
  }

  // 5. Teacher-forced decode through the R-SWA ring (window from the config).
  const int gen = c["gen"].get<int>();
  if (gen > 0) {
    const std::vector<int32_t> gen_ids = npy_i32("gen_ids.npy");
    const std::vector<int32_t> ids16 = npy_i32("gen_top16_ids.npy");
    const std::vector<float> vals16 = npy("gen_top16_vals.npy").to_f32();
    const std::vector<float> lse = npy("gen_lse.npy").to_f32();
    REQUIRE(gen_ids.size() == size_t(gen));
    REQUIRE(lse.size() == size_t(gen));
    std::vector<int32_t> row_index;
    std::vector<float> rows;
    if (fs::exists(dir + "gen_rows_index.npy")) {
      row_index = npy_i32("gen_rows_index.npy");
      rows = npy("gen_logits_rows.npy").to_f32();
    }
    CaseAgreement a;
    size_t rows_seen = 0;
    const int64_t p = int64_t(prompt.ids.size());
    for (int g = 0; g < gen; ++g) {
      const std::vector<float>& logits = dec.decode_step(gen_ids[size_t(g)], p + g, cache);
      a.add(logits.data(), vocab, &ids16[size_t(g) * 16], &vals16[size_t(g) * 16], lse[size_t(g)]);
      for (size_t r = 0; r < row_index.size(); ++r) {
        if (row_index[r] != g) continue;
        const RowError e = row_error(logits.data(), &rows[r * size_t(vocab)], vocab);
        MESSAGE(name << ": full logits row at generated index " << g << " rel err " << e.rel << ", max abs "
                     << e.max_abs);
        CHECK(e.rel <= kCaseRowRelTol);
        ++rows_seen;
      }
      CHECK(cache.generated_rows() == std::min<int64_t>(g + 1, cfg.decoder.sliding_window));
    }
    CHECK(rows_seen == row_index.size());
    a.check(name + " teacher-forced R-SWA n=" + std::to_string(cfg.decoder.sliding_window));
  }
  MESSAGE(name << ": " << seconds_since(t0) << " s");
}

}  // namespace

// tiny-b's dimensions are checked in tests/test_io.cpp (it is also the golden model); here, that
// the folder the manifest describes loads as unlimited-ocr with every tensor bound.
TEST_CASE("reference model folder: tiny-b as the manifest describes it loads as unlimited-ocr") {
  CHECK(ref_model("tiny-b").model->config().model_type == "unlimited-ocr");
  CHECK(ref_model("tiny-b").model->checkpoint().unused().empty());
}

TEST_CASE("reference gundam_small: a page within 640 x 640 (global view only)") { run_case("gundam_small"); }
TEST_CASE("reference gundam_3x1: wide page, 3 x 1 tiles") { run_case("gundam_3x1"); }
TEST_CASE("reference gundam_2x3: portrait page upscaled to 2 x 3 tiles, 12 decode steps") { run_case("gundam_2x3"); }
TEST_CASE("reference gundam_1x2: 640 px wide tall page, 1 x 2 tiles") { run_case("gundam_1x2"); }
TEST_CASE("reference multi_2: infer_multi with 2 pages, 40 R-SWA (n=8) decode steps") { run_case("multi_2"); }
TEST_CASE("reference multi_3: infer_multi with 3 pages, 40 R-SWA (n=8) decode steps") { run_case("multi_3"); }
TEST_CASE("reference base_tiny_b: base mode on a padded page, 160 R-SWA (n=8) decode steps") { run_case("base_tiny_b"); }

// An extra case where the optional reference material is present (UOCR_SHARED_DIR with
// golden/tiny-a): the tiny-a dimensions (MHA, head_dim 8) with a 128-token window.
TEST_CASE("reference base_tiny_a_uocr (with shared/golden/tiny-a): base mode, tiny-a dims, 160 R-SWA (n=128) decode steps") {
  if (uocr_test::shared_dir().empty() || !fs::exists(fs::path(uocr_test::shared_dir()) / "golden" / "tiny-a" / "model-00001-of-000001.safetensors")) {
    MESSAGE("no shared/golden/tiny-a: the extra case has nothing to run");
    return;
  }
  const uocr::ModelConfig& a = ref_model("tiny-a-uocr").model->config();
  CHECK(a.model_type == "unlimited-ocr");
  CHECK(a.decoder.hidden == 32);
  CHECK(a.decoder.sliding_window == 128);
  CHECK(ref_model("tiny-a-uocr").model->checkpoint().unused().empty());
  run_case("base_tiny_a_uocr");
}
