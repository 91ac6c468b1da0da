// Image decoding, Pillow-exact geometry, the upstream preprocessing modes and the position-table
// interpolation, against fixtures made by python/uocr_dev/fixtures/gen_preprocess.py (Pillow, PyTorch) and
// the golden page (checksum of the tensor captured from upstream infer(), tests/data/reference/golden).
#include <doctest/doctest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "support/test_support.hpp"
#include "uocr/image/exif.hpp"
#include "uocr/image/image.hpp"
#include "uocr/image/interpolate.hpp"
#include "uocr/image/png_palette.hpp"
#include "uocr/image/preprocess.hpp"
#include "uocr/image/resample.hpp"
#include "uocr/io/npy.hpp"

using json = nlohmann::json;
using uocr::ImageU8;
using uocr::Status;
using uocr_test::message_of;
using uocr_test::status_of;

namespace {

#ifdef UOCR_HAVE_LIBJPEG
constexpr bool kLibjpeg = true;  // JPEG decoded by libjpeg, as Pillow does: exact
#else
constexpr bool kLibjpeg = false;  // stb_image fallback
#endif

std::string data_dir() { return uocr_test::source_dir() + "/tests/data/preprocess/"; }

const json& manifest() {
  static const json m = [] {
    std::ifstream f(data_dir() + "manifest.json");
    REQUIRE_MESSAGE(f.good(), "missing fixture manifest in " << data_dir());
    return json::parse(f);
  }();
  return m;
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// Same hash noise as procedural() in gen_preprocess.py.
ImageU8 procedural(int w, int h, uint32_t seed) {
  ImageU8 im = uocr::make_image(w, h);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) {
        uint32_t v = (uint32_t(x) * 73856093u) ^ (uint32_t(y) * 19349663u) ^ (uint32_t(c) * 83492791u) ^ seed;
        v ^= v >> 13;
        v *= 0x5BD1E995u;
        v ^= v >> 15;
        im.row(y)[3 * x + c] = uint8_t(v & 255);
      }
  return im;
}

// Same as checksum() in gen_preprocess.py: byte sum and sum of byte * (index + 1), mod 2^64.
std::vector<std::string> checksum(const ImageU8& im) {
  uint64_t s = 0, ws = 0;
  for (size_t i = 0; i < im.rgb.size(); ++i) {
    s += im.rgb[i];
    ws += uint64_t(im.rgb[i]) * (i + 1);
  }
  return {std::to_string(s), std::to_string(ws)};
}

ImageU8 source_image(const json& src) {
  if (src.is_string()) return uocr::load_image(data_dir() + src.get<std::string>());
  return procedural(src["w"], src["h"], src["seed"]);
}

// An HxWx3 uint8 .npy fixture as an image.
ImageU8 npy_image(const std::string& name) {
  const uocr::NpyArray a = uocr::read_npy(data_dir() + name);
  REQUIRE(a.descr == "|u1");
  REQUIRE(a.shape.size() == 3);
  REQUIRE(a.shape[2] == 3);
  ImageU8 im = uocr::make_image(int(a.shape[1]), int(a.shape[0]));
  im.rgb = a.bytes;
  return im;
}

// Number of differing bytes; sizes must match.
size_t count_diff(const ImageU8& a, const ImageU8& b) {
  REQUIRE(a.width == b.width);
  REQUIRE(a.height == b.height);
  size_t n = 0;
  for (size_t i = 0; i < a.rgb.size(); ++i) n += a.rgb[i] != b.rgb[i];
  return n;
}

// Largest difference over the first `columns` columns of every row.
int max_abs_diff(const ImageU8& a, const ImageU8& b, int columns) {
  int m = 0;
  for (int y = 0; y < a.height; ++y)
    for (int x = 0; x < 3 * columns; ++x) m = std::max(m, std::abs(int(a.row(y)[x]) - int(b.row(y)[x])));
  return m;
}

// A PNG signature and IHDR chunk claiming w x h, 8 bits per sample, RGB (colour type 2) unless
// told; no image data.
std::vector<uint8_t> png_header(uint32_t w, uint32_t h, uint8_t colour_type = 2, uint8_t depth = 8) {
  std::vector<uint8_t> b = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  std::vector<uint8_t> ihdr;
  for (uint32_t v : {w, h}) {
    for (int s = 24; s >= 0; s -= 8) ihdr.push_back(uint8_t(v >> s));
  }
  for (uint8_t v : {depth, colour_type, uint8_t(0), uint8_t(0), uint8_t(0)}) ihdr.push_back(v);
  const std::vector<uint8_t> chunk = uocr::detail::png_chunk("IHDR", ihdr);
  b.insert(b.end(), chunk.begin(), chunk.end());
  return b;
}

}  // namespace

TEST_CASE("decoding matches Pillow's open + exif_transpose + convert('RGB')") {
  const json& cases = manifest()["decode"];
  REQUIRE(cases.size() >= 20);
  for (const json& c : cases) {
    const std::string file = c["file"];
    CAPTURE(file);
    const ImageU8 got = uocr::load_image(data_dir() + file);
    const ImageU8 want = npy_image(c["expected"]);
    REQUIRE(got.width == want.width);
    REQUIRE(got.height == want.height);
    if (!c["jpeg"].get<bool>() || kLibjpeg) {
      CHECK(count_diff(got, want) == 0);
    } else {
      // stb's JPEG decoder is not libjpeg: identical geometry, pixels within 3 levels except in the
      // last column, where stb upsamples odd-width 4:2:2 chroma differently (18 levels off here).
      CHECK(max_abs_diff(got, want, got.width - 1) <= 3);
    }
    // Decoding from memory is the same path.
    const std::vector<uint8_t> bytes = read_bytes(data_dir() + file);
    CHECK(count_diff(uocr::decode_image(bytes.data(), bytes.size()), got) == 0);
  }
}

TEST_CASE("cut JPEGs fail exactly where Pillow fails") {
  const json& cases = manifest()["truncated"];
  REQUIRE(cases.size() >= 30);
  for (const json& c : cases) {
    CAPTURE(c.dump());
    std::vector<uint8_t> b = read_bytes(data_dir() + c["file"].get<std::string>());
    b.resize(c["bytes"].get<size_t>());
    if (c["pillow_decodes"].get<bool>()) {
      const std::vector<uint8_t> full = read_bytes(data_dir() + c["file"].get<std::string>());
      CHECK(count_diff(uocr::decode_image(b.data(), b.size()), uocr::decode_image(full.data(), full.size())) == 0);
    } else if (kLibjpeg) {
      // stb decodes some cut files (grey fill); libjpeg's "Premature end of JPEG file" is an error, as in Pillow.
      CHECK(status_of([&] { uocr::decode_image(b.data(), b.size()); }) == Status::invalid_image);
      CHECK(message_of([&] { uocr::decode_image(b.data(), b.size()); }).find("cannot decode image: ") == 0);
    }
  }
}

#ifdef UOCR_HAVE_LIBJPEG
TEST_CASE("libjpeg errors: corrupt headers and limits give clean errors") {
  const std::vector<uint8_t> good = read_bytes(data_dir() + "j420_33x17.jpg");
  // The pixel limit is checked from the header, before the pixels are decoded.
  const std::string limit_msg =
      message_of([&] { uocr::decode_image(good.data(), good.size(), uocr::DecodeLimits{33 * 17 - 1}); });
  CHECK(limit_msg.find("33x17") != std::string::npos);
  CHECK(uocr::decode_image(good.data(), good.size(), uocr::DecodeLimits{33 * 17}).width == 33);
  // No image after the SOI.
  const std::vector<uint8_t> soi_only = {0xFF, 0xD8, 0xFF, 0xD9};
  CHECK(message_of([&] { uocr::decode_image(soi_only.data(), soi_only.size()); }) ==
        "cannot decode image: JPEG datastream contains no image");
  // Two components (libjpeg reads them as an unknown colour space; Pillow refuses them): drop the
  // third component from the frame header (SOF0) and the scan header (SOS) of a 4:4:4 file.
  std::vector<uint8_t> two = read_bytes(data_dir() + "j444_19x23.jpg");
  for (size_t i = 2; i + 1 < two.size(); ++i) {
    if (two[i] != 0xFF || (two[i + 1] != 0xC0 && two[i + 1] != 0xDA)) continue;
    const bool sof = two[i + 1] == 0xC0;
    const size_t count_at = i + (sof ? 9 : 4), spec = sof ? 3 : 2;  // component count, bytes per component
    REQUIRE(two[count_at] == 3);
    two[count_at] = 2;
    two[i + 3] = uint8_t(two[i + 3] - spec);  // marker length (low byte)
    two.erase(two.begin() + std::ptrdiff_t(count_at + 1 + 2 * spec), two.begin() + std::ptrdiff_t(count_at + 1 + 3 * spec));
    if (!sof) break;
  }
  CHECK(message_of([&] { uocr::decode_image(two.data(), two.size()); }) == "cannot decode image: JPEG with 2 components");
  // Invalid Huffman tables.
  std::vector<uint8_t> bad_tables = good;
  for (size_t i = 2; i + 4 < bad_tables.size(); ++i)
    if (bad_tables[i] == 0xFF && bad_tables[i + 1] == 0xC4) {
      bad_tables[i + 4] = 0x7F;  // DHT class/id out of range
      break;
    }
  CHECK(status_of([&] { uocr::decode_image(bad_tables.data(), bad_tables.size()); }) == Status::invalid_image);
}
#endif

TEST_CASE("EXIF orientation is read from PNG eXIf and JPEG APP1 and applied like Pillow") {
  for (int o = 1; o <= 8; ++o) {
    const std::vector<uint8_t> b = read_bytes(data_dir() + "orient" + std::to_string(o) + "_7x5.png");
    CHECK(uocr::exif_orientation(b.data(), b.size()) == o);
  }
  const std::vector<uint8_t> j1 = read_bytes(data_dir() + "photo1_48x32.jpg");
  const ImageU8 upright = uocr::decode_image(j1.data(), j1.size());
  for (int o : {3, 6}) {
    const std::vector<uint8_t> b = read_bytes(data_dir() + "photo" + std::to_string(o) + "_48x32.jpg");
    CHECK(uocr::exif_orientation(b.data(), b.size()) == o);
    CHECK(count_diff(uocr::decode_image(b.data(), b.size()), uocr::apply_exif_orientation(upright, o)) == 0);
  }
  // Plain images and garbage have no orientation.
  const std::vector<uint8_t> png = read_bytes(data_dir() + "noise_37x53.png");
  CHECK(uocr::exif_orientation(png.data(), png.size()) == 1);
  const uint8_t junk[] = {0xFF, 0xD8, 0xFF, 0xE1, 0x00, 0x08, 'E', 'x', 'i', 'f', 0, 0};
  CHECK(uocr::exif_orientation(junk, sizeof(junk)) == 1);
}

TEST_CASE("resize_bicubic is Pillow's Image.resize(BICUBIC) bit for bit") {
  const json& cases = manifest()["resize"];
  REQUIRE(cases.size() >= 20);
  for (const json& c : cases) {
    CAPTURE(c.dump());
    const ImageU8 got = uocr::resize_bicubic(source_image(c["source"]), c["w"], c["h"]);
    REQUIRE(got.width == c["w"].get<int>());
    REQUIRE(got.height == c["h"].get<int>());
    if (c.contains("expected")) {
      CHECK(count_diff(got, npy_image(c["expected"])) == 0);
    } else {
      CHECK(checksum(got) == c["checksum"].get<std::vector<std::string>>());
    }
  }
}

TEST_CASE("pad is ImageOps.pad with colour (127,127,127) bit for bit") {
  const json& cases = manifest()["pad"];
  REQUIRE(cases.size() >= 20);
  for (const json& c : cases) {
    CAPTURE(c.dump());
    const int s = c["size"];
    CHECK(count_diff(uocr::pad(source_image(c["source"]), s, s), npy_image(c["expected"])) == 0);
  }
}

TEST_CASE("crop copies the box; contain rounds half to even") {
  const ImageU8 im = procedural(9, 7, 3);
  const ImageU8 c = uocr::crop(im, 2, 1, 7, 6);
  REQUIRE(c.width == 5);
  REQUIRE(c.height == 5);
  for (int y = 0; y < 5; ++y)
    for (int x = 0; x < 15; ++x) CHECK(c.row(y)[x] == im.row(y + 1)[6 + x]);
  int w = 0, h = 0;
  uocr::contain_size(5, 128, 64, 64, w, h);  // 2.5 -> 2
  CHECK((w == 2 && h == 64));
  uocr::contain_size(7, 128, 64, 64, w, h);  // 3.5 -> 4
  CHECK((w == 4 && h == 64));
  uocr::contain_size(128, 3, 64, 64, w, h);  // 1.5 -> 2
  CHECK((w == 64 && h == 2));
  // 0.5 -> 0: Pillow <= 12 raises here, Pillow 13 returns the plain canvas; so do we.
  const ImageU8 blank = uocr::pad(procedural(1, 128, 7), 64, 64);
  REQUIRE(blank.width == 64);
  for (uint8_t v : blank.rgb) CHECK(v == 127);
}

TEST_CASE("tile grid search reproduces upstream dynamic_preprocess") {
  const json& g = manifest()["grid"];
  const auto& cand = g["candidates"];
  REQUIRE(cand.size() == std::size(uocr::detail::kGridCandidates));
  for (size_t i = 0; i < cand.size(); ++i) {
    CHECK(cand[i][0].get<int>() == uocr::detail::kGridCandidates[i][0]);
    CHECK(cand[i][1].get<int>() == uocr::detail::kGridCandidates[i][1]);
  }
  REQUIRE(g["cases"].size() == 200);
  for (const json& c : g["cases"]) {
    CAPTURE(c.dump());
    const uocr::TileGrid t = uocr::choose_tile_grid(c[0], c[1]);
    CHECK(t.x == c[2].get<int>());
    CHECK(t.y == c[3].get<int>());
  }
}

TEST_CASE("views of every mode match upstream infer()") {
  const json& cases = manifest()["views"];
  REQUIRE(cases.size() >= 9);
  for (const json& c : cases) {
    CAPTURE(c.dump().substr(0, 120));
    const std::string mode = c["mode"];
    const uocr::PreprocessConfig cfg = mode == "gundam" ? uocr::preset_gundam()
                                       : mode == "tiny" ? uocr::preset_tiny()
                                       : mode == "small" ? uocr::preset_small()
                                       : mode == "large" ? uocr::preset_large()
                                                         : uocr::preset_base();
    const uocr::ImageViews v = uocr::make_views(source_image(c["source"]), cfg);
    CHECK(v.global.width == c["global_size"].get<int>());
    CHECK(v.global.height == c["global_size"].get<int>());
    CHECK(checksum(v.global) == c["global"].get<std::vector<std::string>>());
    CHECK(v.grid.x == c["grid"][0].get<int>());
    CHECK(v.grid.y == c["grid"][1].get<int>());
    REQUIRE(v.tiles.size() == c["tiles"].size());
    for (size_t t = 0; t < v.tiles.size(); ++t) {
      CAPTURE(t);
      CHECK(checksum(v.tiles[t]) == c["tiles"][t].get<std::vector<std::string>>());
    }
  }
}

TEST_CASE("golden page: decode + base preprocessing equals the tensor captured from upstream") {
  const uocr::PreparedImage p = uocr::prepare_image(uocr::load_image(uocr_test::golden("page.png")), uocr::preset_base());
  std::ifstream f(uocr_test::golden("golden.json"));
  REQUIRE(f.good());
  const json view = json::parse(f)["view"];
  REQUIRE(view["shape"] == json::array({3, 1024, 1024}));
  REQUIRE(p.global_size == 1024);
  CHECK(p.tiles_chw.empty());
  bool all_bf16 = false;
  CHECK(uocr_test::bf16_hash(p.global_chw, &all_bf16) == view["bf16_hash"].get<std::string>());
  CHECK(all_bf16);
  double sum = 0;
  for (float v : p.global_chw) sum += v;
  CHECK(sum == doctest::Approx(view["sum"].get<double>()).epsilon(1e-12));
  CHECK(uocr::visual_token_count(p) == 273);
  CHECK(p.global_chw == uocr_test::golden_view());
}

TEST_CASE("normalised values are bf16(((u8/255) - 0.5) / 0.5), pad colour included") {
  ImageU8 im = uocr::make_image(2, 1);
  im.rgb = {0, 127, 255, 128, 1, 254};
  const std::vector<float> t = uocr::normalize_chw(im);
  // CHW: R plane, G plane, B plane.
  CHECK(t[0] == -1.0f);
  CHECK(t[1] == uocr::round_to_bf16(((128 / 255.0f) - 0.5f) / 0.5f));
  CHECK(t[2] == uocr::round_to_bf16(((127 / 255.0f) - 0.5f) / 0.5f));
  CHECK(t[2] == -0.0039367676f);  // the pad colour: not 0
  CHECK(t[4] == 1.0f);
}

TEST_CASE("prepared tensors and visual token counts per mode") {
  const uocr::PreparedImage g = uocr::prepare_image(procedural(1000, 1500, 11), uocr::preset_gundam());
  CHECK(g.global_size == 1024);
  CHECK(g.global_chw.size() == size_t(3 * 1024 * 1024));
  CHECK((g.tiles_x == 2 && g.tiles_y == 3 && g.tile_size == 640));
  REQUIRE(g.tiles_chw.size() == 6);
  CHECK(g.tiles_chw[5].size() == size_t(3 * 640 * 640));
  CHECK(uocr::visual_token_count(g) == 903);

  uocr::PreparedImage fake;
  fake.global_size = 1024;
  fake.tile_size = 640;
  fake.tiles_x = 4;
  fake.tiles_y = 6;
  fake.tiles_chw.resize(24);
  CHECK(uocr::visual_token_count(fake) == 2733);
  fake.tiles_x = 4;
  fake.tiles_y = 8;
  fake.tiles_chw.resize(32);
  CHECK(uocr::visual_token_count(fake) == 3553);

  const uocr::PreparedImage small = uocr::prepare_image(procedural(600, 400, 1), uocr::preset_gundam());
  CHECK(small.tiles_chw.empty());
  CHECK(uocr::visual_token_count(small) == 273);
  CHECK(uocr::visual_token_count(uocr::prepare_image(procedural(50, 80, 1), uocr::preset_tiny())) == 73);
  CHECK(uocr::visual_token_count(uocr::prepare_image(procedural(50, 80, 1), uocr::preset_large())) == 421);

  const auto pages = uocr::prepare_pages({procedural(300, 400, 1), procedural(500, 200, 2)});
  REQUIRE(pages.size() == 2);
  for (const auto& p : pages) {
    CHECK(p.global_size == 1024);
    CHECK(uocr::visual_token_count(p) == 273);
  }
  CHECK(pages[1].global_chw == uocr::prepare_image(procedural(500, 200, 2), uocr::preset_base()).global_chw);
}

TEST_CASE("position-table interpolation matches PyTorch bit for bit") {
  const json& cases = manifest()["interpolate"];
  REQUIRE(cases.size() >= 10);
  for (const json& c : cases) {
    const std::string in_name = c["input"];
    CAPTURE(in_name);
    const uocr::NpyArray in = uocr::read_npy(data_dir() + in_name);
    const uocr::NpyArray want = uocr::read_npy(data_dir() + c["expected"].get<std::string>());
    const std::vector<float> x = in.to_f32();
    std::vector<float> got;
    if (c["mode"] == "bicubic_aa") {
      got = uocr::interpolate_bicubic_aa(x.data(), int(in.shape[0]), int(in.shape[1]), int(in.shape[2]),
                                         int(want.shape[1]), int(want.shape[2]));
    } else {
      got = uocr::interpolate_linear(x.data(), int(in.shape[0]), int(in.shape[1]), int(want.shape[1]));
    }
    const std::vector<float> w = want.to_f32();
    REQUIRE(got.size() == w.size());
    // Fixtures come from torch's x86-64 CPU kernels (FMA-contracted); other builds of torch
    // would stay within 1e-6 but not bit-exact.
    float worst = 0;
    size_t inexact = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      worst = std::max(worst, std::fabs(got[i] - w[i]));
      inexact += got[i] != w[i];
    }
    CHECK(worst <= 1e-6f);
    CHECK(inexact == 0);
  }
}

TEST_CASE("decode errors carry the right status") {
  CHECK(status_of([] { uocr::load_image(data_dir() + "no_such_file.png"); }) == Status::io);

  const std::vector<uint8_t> junk = {'n', 'o', 't', ' ', 'a', 'n', ' ', 'i', 'm', 'a', 'g', 'e', 0, 1, 2, 3};
  CHECK(status_of([&] { uocr::decode_image(junk.data(), junk.size()); }) == Status::invalid_image);
  CHECK(message_of([&] { uocr::decode_image(junk.data(), junk.size()); }).find("cannot decode image: ") == 0);
  CHECK(status_of([&] { uocr::decode_image(junk.data(), 0); }) == Status::invalid_image);
  CHECK(status_of([&] { uocr::decode_image(nullptr, 10); }) == Status::invalid_image);

  std::vector<uint8_t> png = read_bytes(data_dir() + "noise_37x53.png");
  png.resize(png.size() / 2);
  CHECK(status_of([&] { uocr::decode_image(png.data(), png.size()); }) == Status::invalid_image);
  const std::string truncated_msg = message_of([&] { uocr::decode_image(png.data(), png.size()); });
  CHECK(truncated_msg.size() > std::string("cannot decode image: ").size());

  // Headers claiming huge sizes are refused from the header alone. 15000 x 15000 passes stb's
  // own sanity check, so the message names our limit, which only the pre-decode check produces.
  const std::vector<uint8_t> big = png_header(15000, 15000);
  CHECK(status_of([&] { uocr::decode_image(big.data(), big.size()); }) == Status::invalid_image);
  const std::string msg = message_of([&] { uocr::decode_image(big.data(), big.size()); });
  CHECK(msg.find("15000x15000") != std::string::npos);
  CHECK(msg.find("100000000") != std::string::npos);
  const std::vector<uint8_t> huge = png_header(100000, 100000);
  CHECK(status_of([&] { uocr::decode_image(huge.data(), huge.size()); }) == Status::invalid_image);
  // The limit is configurable, and applies to real files too.
  const std::vector<uint8_t> ok = read_bytes(data_dir() + "noise_37x53.png");
  CHECK(status_of([&] { uocr::decode_image(ok.data(), ok.size(), uocr::DecodeLimits{37 * 53 - 1}); }) ==
        Status::invalid_image);
  CHECK(uocr::decode_image(ok.data(), ok.size(), uocr::DecodeLimits{37 * 53}).width == 37);
}

TEST_CASE("raw RGB buffers and argument errors") {
  // 2x2 image in rows of 8 bytes (2 bytes padding).
  const uint8_t px[16] = {1, 2, 3, 4, 5, 6, 99, 99, 7, 8, 9, 10, 11, 12, 99, 99};
  const ImageU8 im = uocr::image_from_rgb(px, 2, 2, 8);
  CHECK(im.rgb == std::vector<uint8_t>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  CHECK(status_of([&] { uocr::image_from_rgb(px, 0, 2, 8); }) == Status::invalid_argument);
  CHECK(status_of([&] { uocr::image_from_rgb(px, 2, 0, 8); }) == Status::invalid_argument);
  CHECK(status_of([&] { uocr::image_from_rgb(nullptr, 2, 2, 8); }) == Status::invalid_argument);
  CHECK(status_of([&] { uocr::image_from_rgb(px, 2, 2, 5); }) == Status::invalid_argument);

  CHECK(status_of([&] { uocr::resize_bicubic(im, 0, 3); }) == Status::invalid_argument);
  CHECK(status_of([&] { uocr::crop(im, 1, 0, 3, 2); }) == Status::invalid_argument);
  CHECK(status_of([&] { uocr::crop(im, 1, 1, 1, 2); }) == Status::invalid_argument);
  CHECK(status_of([&] { uocr::pad(im, 0, 0); }) == Status::invalid_argument);
  CHECK(status_of([&] { uocr::prepare_image(im, {0, 640, true}); }) == Status::invalid_argument);
  const float f[4] = {0, 1, 2, 3};
  CHECK(status_of([&] { uocr::interpolate_linear(f, 1, 4, 0); }) == Status::invalid_argument);
  CHECK(status_of([&] { uocr::interpolate_bicubic_aa(f, 1, 2, 2, 0, 1); }) == Status::invalid_argument);
}

namespace {

// A w x h 8-bit palette PNG of the given PLTE entries and pixel indices (rows unfiltered, stored
// in an uncompressed deflate block).
std::vector<uint8_t> palette_png(uint32_t w, uint32_t h, const std::vector<uint8_t>& plte, const std::vector<uint8_t>& indices) {
  std::vector<uint8_t> rows;
  for (uint32_t y = 0; y < h; ++y) {
    rows.push_back(0);  // filter: none
    rows.insert(rows.end(), indices.begin() + y * w, indices.begin() + (y + 1) * w);
  }
  REQUIRE(rows.size() < 65536);
  const uint16_t len = uint16_t(rows.size());
  std::vector<uint8_t> zlib = {0x78, 0x01, 0x01, uint8_t(len), uint8_t(len >> 8), uint8_t(~len), uint8_t(~len >> 8)};
  zlib.insert(zlib.end(), rows.begin(), rows.end());
  uint32_t a = 1, b = 0;  // Adler-32
  for (uint8_t v : rows) a = (a + v) % 65521, b = (b + a) % 65521;
  for (int s = 24; s >= 0; s -= 8) zlib.push_back(uint8_t(((b << 16) | a) >> s));
  std::vector<uint8_t> png = png_header(w, h, 3);
  for (const auto& chunk : {uocr::detail::png_chunk("PLTE", plte), uocr::detail::png_chunk("IDAT", zlib),
                            uocr::detail::png_chunk("IEND", {})})
    png.insert(png.end(), chunk.begin(), chunk.end());
  return png;
}

}  // namespace

TEST_CASE("a palette index past the PLTE entries is black, as in Pillow, whatever was decoded before") {
  std::vector<uint8_t> indices(256);
  for (int i = 0; i < 256; ++i) indices[size_t(i)] = uint8_t(i);
  // First a file whose 256 entries are all white: without the padding, what its palette left in
  // stb's memory showed through the short palette below.
  const std::vector<uint8_t> white = palette_png(16, 16, std::vector<uint8_t>(256 * 3, 255), indices);
  CHECK(uocr::decode_image(white.data(), white.size()).rgb == std::vector<uint8_t>(256 * 3, 255));
  const std::vector<uint8_t> png = palette_png(16, 16, {10, 20, 30, 40, 50, 60}, indices);
  // Pillow 13: open(...).convert("RGB") gives the two entries, then (0, 0, 0) for indices 2..255.
  std::vector<uint8_t> want(256 * 3, 0);
  for (size_t i = 0; i < 6; ++i) want[i] = uint8_t(10 * (i + 1));
  for (int run = 0; run < 2; ++run) {
    const ImageU8 got = uocr::decode_image(png.data(), png.size());
    REQUIRE(got.width == 16);
    REQUIRE(got.height == 16);
    CHECK(got.rgb == want);
  }
}

namespace {

// A w x h palette BMP of `bits` (1, 4, 8) per pixel: the palette entries (R, G, B) after a 40-byte
// header (biClrUsed = `colors`) or a 12-byte OS/2 one, then the indices' rows (top row first),
// stored bottom-up.
std::vector<uint8_t> palette_bmp(int bits, int w, int h, const std::vector<std::array<uint8_t, 3>>& palette,
                                 const std::vector<uint8_t>& indices, uint32_t colors, bool os2 = false) {
  const size_t hsz = os2 ? 12 : 40, entry = os2 ? 3 : 4, row = size_t((w * bits + 31) / 32 * 4);
  const size_t offset = 14 + hsz + entry * palette.size();
  std::vector<uint8_t> b(offset + row * size_t(h), 0);
  auto put = [&](size_t at, uint32_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) b[at + size_t(i)] = uint8_t(v >> (8 * i));
  };
  b[0] = 'B';
  b[1] = 'M';
  put(2, uint32_t(b.size()), 4);
  put(10, uint32_t(offset), 4);
  put(14, uint32_t(hsz), 4);
  put(18, uint32_t(w), os2 ? 2 : 4);
  put(os2 ? 20 : 22, uint32_t(h), os2 ? 2 : 4);
  put(os2 ? 22 : 26, 1, 2);  // planes
  put(os2 ? 24 : 28, uint32_t(bits), 2);
  if (!os2) put(46, colors, 4);
  for (size_t i = 0; i < palette.size(); ++i)
    for (size_t c = 0; c < 3; ++c) b[14 + hsz + entry * i + c] = palette[i][2 - c];  // B, G, R
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      const size_t bit = size_t(x * bits), at = offset + size_t(h - 1 - y) * row + bit / 8;
      b[at] = uint8_t(b[at] | indices[size_t(y * w + x)] << (8 - bits - int(bit % 8)));
    }
  return b;
}

// A 35-byte GIF claiming w x h: a 2-colour global palette and one LZW code; stb_image decodes it
// to a page of w x h pixels, all but the first background.
std::vector<uint8_t> tiny_gif(uint16_t w, uint16_t h) {
  std::vector<uint8_t> b = {'G', 'I', 'F', '8', '9', 'a', uint8_t(w), uint8_t(w >> 8), uint8_t(h), uint8_t(h >> 8), 0x80, 0, 0};
  for (uint8_t v : {0, 0, 0, 255, 255, 255}) b.push_back(v);  // global palette
  for (uint8_t v : {uint8_t(','), uint8_t(0), uint8_t(0), uint8_t(0), uint8_t(0), uint8_t(w), uint8_t(w >> 8), uint8_t(h),
                    uint8_t(h >> 8), uint8_t(0), uint8_t(2), uint8_t(2), uint8_t(0x44), uint8_t(0x01), uint8_t(0), uint8_t(';')})
    b.push_back(v);
  return b;
}

// A 24-bit BMP of w x h pixels (RGB rows top to bottom), stored bottom-up (positive height) or
// top-down (negative height).
std::vector<uint8_t> bmp24(int w, int h, const std::vector<uint8_t>& rgb, bool top_down) {
  const int row = (3 * w + 3) & ~3;
  std::vector<uint8_t> b(54 + size_t(row) * size_t(h), 0);
  auto put32 = [&](size_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i) b[at + size_t(i)] = uint8_t(v >> (8 * i));
  };
  b[0] = 'B';
  b[1] = 'M';
  put32(2, uint32_t(b.size()));
  put32(10, 54);
  put32(14, 40);
  put32(18, uint32_t(w));
  put32(22, uint32_t(top_down ? -h : h));
  b[26] = 1;   // planes
  b[28] = 24;  // bits per pixel
  for (int y = 0; y < h; ++y) {
    const size_t stored = size_t(top_down ? y : h - 1 - y);
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) b[54 + stored * size_t(row) + size_t(3 * x + c)] = rgb[size_t(3 * (y * w + x) + 2 - c)];  // BGR
  }
  return b;
}

// Seconds `f` takes.
template <class F>
double seconds_of(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST_CASE("the decode budget: pixels and decoded bytes, from the header, before any decoding") {
  // A 35-byte GIF declaring 60000 x 60000: refused at once, the message naming the limit and how
  // to raise it.
  const std::vector<uint8_t> gif = tiny_gif(60000, 60000);
  REQUIRE(gif.size() == 35);
  std::string msg;
  CHECK(seconds_of([&] { msg = message_of([&] { uocr::decode_image(gif.data(), gif.size()); }); }) < 1.0);
  CHECK(status_of([&] { uocr::decode_image(gif.data(), gif.size()); }) == Status::invalid_image);
  CHECK(msg.find("60000x60000") != std::string::npos);
  CHECK(msg.find("above the limit of 100000000 pixels") != std::string::npos);
  CHECK(msg.find("--max-image-pixels") != std::string::npos);
  CHECK(msg.find("max_image_pixels") != std::string::npos);
  // 12000 x 12000 is under Pillow's limit, which stb_image would decode: above ours.
  const std::vector<uint8_t> gif12k = tiny_gif(12000, 12000);
  CHECK(seconds_of([&] { msg = message_of([&] { uocr::decode_image(gif12k.data(), gif12k.size()); }); }) < 1.0);
  CHECK(msg.find("144000000 pixels, above the limit") != std::string::npos);
  // Within the pixels, over the bytes: a GIF decodes to 4 channels.
  uocr::DecodeLimits limits;
  limits.max_bytes = 4 * 5000 * 5000 - 1;
  const std::vector<uint8_t> gif5k = tiny_gif(5000, 5000);
  msg = message_of([&] { uocr::decode_image(gif5k.data(), gif5k.size(), limits); });
  CHECK(msg.find("5000x5000 pixels of 4 channel(s) of 1 byte(s), above the limit of 99999999 bytes decoded") != std::string::npos);
  CHECK(msg.find("--max-image-bytes") != std::string::npos);
  // The small GIF itself decodes, within the budget.
  const std::vector<uint8_t> small = tiny_gif(7, 5);
  CHECK(uocr::decode_image(small.data(), small.size()).width == 7);

  // Bytes count the real sample size: 16-bit PNG samples are 2 bytes (a real file), HDR's 4.
  const std::vector<uint8_t> g16 = read_bytes(data_dir() + "gray16_9x7.png");
  limits.max_bytes = 9 * 7 * 2 - 1;
  msg = message_of([&] { uocr::decode_image(g16.data(), g16.size(), limits); });
  CHECK(msg.find("9x7 pixels of 1 channel(s) of 2 byte(s)") != std::string::npos);
  limits.max_bytes = 9 * 7 * 2;
  CHECK(uocr::decode_image(g16.data(), g16.size(), limits).width == 9);
  const std::vector<uint8_t> rgba16 = png_header(20000, 20000, 6, 16);
  msg = message_of([&] { uocr::decode_image(rgba16.data(), rgba16.size(), uocr::DecodeLimits{uint64_t(1) << 40}); });
  CHECK(msg.find("20000x20000 pixels of 4 channel(s) of 2 byte(s), above the limit of 1073741824 bytes") != std::string::npos);
  const std::string hdr_text = "#?RADIANCE\nFORMAT=32-bit_rle_rgbe\n\n-Y 200 +X 300\n";
  const std::vector<uint8_t> hdr(hdr_text.begin(), hdr_text.end());
  limits.max_bytes = 300 * 200 * 3 * 4 - 1;
  msg = message_of([&] { uocr::decode_image(hdr.data(), hdr.size(), limits); });
  CHECK(msg.find("300x200 pixels of 3 channel(s) of 4 byte(s)") != std::string::npos);
  limits.max_bytes += 1;  // within the budget (stb_image reads the missing pixels as black)
  CHECK(uocr::decode_image(hdr.data(), hdr.size(), limits).width == 300);
}

TEST_CASE("a PNG stb_image refuses as too large says so, not \"unknown image type\"") {
  const std::vector<uint8_t> png = png_header(100000, 100000);
  const std::string ours = message_of([&] { uocr::decode_image(png.data(), png.size()); });
  CHECK(ours.find("100000x100000 = 10000000000 pixels, above the limit") != std::string::npos);
  // Past our budget, stb's own limit (2^30 bytes of samples) is the reason given.
  const uocr::DecodeLimits unlimited{UINT64_MAX, UINT64_MAX};
  const std::string stb = message_of([&] { uocr::decode_image(png.data(), png.size(), unlimited); });
  CHECK(stb.find("too large") != std::string::npos);
  CHECK(stb.find("unknown image type") == std::string::npos);
}

TEST_CASE("a PNG chunk that claims more bytes than the file has is refused before stb grows a buffer for it") {
  // A 4x4 PNG whose IDAT says 2^30 bytes follow (stb would reserve that, then find the data
  // missing), then the same with a chunk that fits but a second one that does not.
  std::vector<uint8_t> png = png_header(4, 4);
  std::vector<uint8_t> idat = {0x40, 0x00, 0x00, 0x00, 'I', 'D', 'A', 'T', 0x78, 0x9c, 0x01, 0x02};
  png.insert(png.end(), idat.begin(), idat.end());
  std::string msg = message_of([&] { uocr::decode_image(png.data(), png.size()); });
  CHECK(msg.find("PNG chunk 'IDAT' at byte 33 claims 1073741824 bytes but the file has 0 left") != std::string::npos);
  std::vector<uint8_t> two = png_header(4, 4);
  const std::vector<uint8_t> text = uocr::detail::png_chunk("tEXt", {'a', 0, 'b'});
  two.insert(two.end(), text.begin(), text.end());
  two.insert(two.end(), idat.begin(), idat.end());
  msg = message_of([&] { uocr::decode_image(two.data(), two.size()); });
  CHECK(msg.find("PNG chunk 'IDAT' at byte 48 claims 1073741824 bytes") != std::string::npos);
  // What the fuzzer found: 681 bytes whose second IDAT claimed enough to make stb allocate 2 GiB.
  const std::vector<uint8_t> found =
      read_bytes(uocr_test::source_dir() + "/tests/fuzz/regressions/image/png_chunk_claims_a_gigabyte");
  msg = message_of([&] { uocr::decode_image(found.data(), found.size()); });
  CHECK(msg.find("claims") != std::string::npos);
  // And 675 bytes whose last chunk header, cut off before its CRC, claimed 2 GiB.
  const std::vector<uint8_t> cut =
      read_bytes(uocr_test::source_dir() + "/tests/fuzz/regressions/image/png_last_chunk_header_claims_two_gigabytes");
  msg = message_of([&] { uocr::decode_image(cut.data(), cut.size()); });
  CHECK(msg.find("PNG chunk 'IDAT' at byte 664 claims 2048852046 bytes but the file has 0 left") != std::string::npos);
  // Bytes after IEND are nobody's business: such a file still decodes.
  const std::vector<uint8_t> good = read_bytes(uocr_test::golden("page.png"));
  std::vector<uint8_t> trailing = good;
  trailing.insert(trailing.end(), {0x7f, 0xff, 0xff, 0xff, 'J', 'U', 'N', 'K'});
  CHECK(uocr::decode_image(trailing.data(), trailing.size()).rgb == uocr::decode_image(good.data(), good.size()).rgb);
}

TEST_CASE("a top-down BMP (negative height) decodes like the same pixels stored bottom-up") {
  const ImageU8 want = procedural(5, 3, 11);
  const std::vector<uint8_t> up = bmp24(5, 3, want.rgb, false), down = bmp24(5, 3, want.rgb, true);
  const ImageU8 a = uocr::decode_image(up.data(), up.size());
  CHECK(count_diff(a, want) == 0);
  const ImageU8 b = uocr::decode_image(down.data(), down.size());
  CHECK(count_diff(b, want) == 0);
  // Its size counts against the limit as a positive height.
  const std::string msg = message_of([&] { uocr::decode_image(down.data(), down.size(), uocr::DecodeLimits{14}); });
  CHECK(msg.find("5x3 = 15 pixels, above the limit of 14 pixels") != std::string::npos);
}

TEST_CASE("a BMP palette index past the palette reads as in Pillow, whatever was decoded before") {
  using RGB = std::array<uint8_t, 3>;
  std::vector<uint8_t> indices(256);
  for (int i = 0; i < 256; ++i) indices[size_t(i)] = uint8_t(i);
  // First a file whose 256 entries are all white: without the rewrite, what its palette left in
  // stb's memory showed through the short palettes below.
  const std::vector<uint8_t> white = palette_bmp(8, 16, 16, std::vector<RGB>(256, RGB{255, 255, 255}), indices, 256);
  CHECK(uocr::decode_image(white.data(), white.size()).rgb == std::vector<uint8_t>(256 * 3, 255));
  const RGB red{255, 0, 0}, green{0, 255, 0}, k{0, 0, 0}, a{10, 20, 30}, b{40, 50, 60}, c{70, 80, 90}, o{200, 100, 50};
  struct Case {
    const char* what;
    std::vector<uint8_t> bmp;
    int w, h;
    std::vector<RGB> want;  // Pillow 13's open(...).convert("RGB")
  };
  const std::vector<Case> cases = {
      {"8-bit, 2 entries: black past them", palette_bmp(8, 4, 2, {red, green}, {0, 1, 2, 200, 255, 1, 0, 3}, 2), 4, 2,
       {red, green, k, k, k, green, red, k}},
      {"4-bit, 3 entries", palette_bmp(4, 5, 2, {a, b, c}, {0, 1, 2, 3, 15, 14, 2, 1, 0, 9}, 3), 5, 2,
       {a, b, c, k, k, k, c, b, a, k}},
      {"1-bit, 1 entry", palette_bmp(1, 9, 2, {o}, {0, 1, 0, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1}, 1), 9, 2,
       {o, k, o, k, k, o, o, k, k, k, k, k, k, o, o, o, o, k}},
      {"8-bit grey ramp of 4 entries: Pillow reads grey levels", palette_bmp(8, 4, 1, {{0, 0, 0}, {1, 1, 1}, {2, 2, 2}, {3, 3, 3}}, {0, 3, 4, 200}, 4),
       4, 1, {{0, 0, 0}, {3, 3, 3}, {4, 4, 4}, {200, 200, 200}}},
      // No colour count: Pillow reads 2^8 entries from after the header, the pixels' bytes among them.
      {"8-bit, 2 entries, biClrUsed 0", palette_bmp(8, 4, 1, {red, green}, {0, 1, 2, 3}, 0), 4, 1, {red, green, {2, 1, 0}, k}},
      {"8-bit, 2 entries, OS/2 header", palette_bmp(8, 4, 1, {red, green}, {0, 1, 2, 200}, 0, true), 4, 1, {red, green, {2, 1, 0}, k}},
  };
  for (const Case& t : cases) {
    INFO(t.what);
    std::vector<uint8_t> want;
    for (const RGB& p : t.want) want.insert(want.end(), p.begin(), p.end());
    for (int run = 0; run < 2; ++run) {
      const ImageU8 got = uocr::decode_image(t.bmp.data(), t.bmp.size());
      REQUIRE(got.width == t.w);
      REQUIRE(got.height == t.h);
      CHECK(got.rgb == want);
    }
  }
}

TEST_CASE("raw RGB rows: a stride that reaches past the end of memory is refused, not read") {
  const uint8_t px[12] = {};
  CHECK(status_of([&] { uocr::image_from_rgb(px, 2, 2, SIZE_MAX / 2); }) == Status::invalid_argument);
  CHECK(message_of([&] { uocr::image_from_rgb(px, 2, 2, SIZE_MAX / 2); }).find("stride") != std::string::npos);
  CHECK(status_of([&] { uocr::image_from_rgb(px, 2, 3, SIZE_MAX / 3); }) == Status::invalid_argument);
  CHECK(uocr::image_from_rgb(px, 2, 2, 6).width == 2);
}

#ifdef UOCR_HAVE_LIBJPEG
namespace {

// Segments of a JPEG as [start, end) byte ranges: each marker with its payload, a scan (SOS) with
// its entropy-coded data.
std::vector<std::pair<size_t, size_t>> jpeg_segments(const std::vector<uint8_t>& j) {
  std::vector<std::pair<size_t, size_t>> out{{0, 2}};  // SOI
  size_t at = 2;
  while (at + 4 <= j.size() && j[at] == 0xFF && j[at + 1] != 0xD9) {
    size_t end = at + 2 + (size_t(j[at + 2]) << 8 | j[at + 3]);
    if (j[at + 1] == 0xDA)  // entropy data runs to the next marker other than a stuffed 0 or RSTn
      while (end + 1 < j.size() && !(j[end] == 0xFF && j[end + 1] != 0 && (j[end + 1] < 0xD0 || j[end + 1] > 0xD7))) ++end;
    out.emplace_back(at, end);
    at = end;
  }
  out.emplace_back(at, j.size());  // EOI
  return out;
}

// The JPEG with its last scan (and the tables just before it) repeated `copies` more times.
std::vector<uint8_t> repeat_last_scan(const std::vector<uint8_t>& j, int copies) {
  const auto seg = jpeg_segments(j);
  size_t first = seg.size() - 2;  // the last SOS
  while (first > 0 && j[seg[first - 1].first + 1] == 0xC4) --first;  // its DHT
  const std::vector<uint8_t> scan(j.begin() + std::ptrdiff_t(seg[first].first), j.begin() + std::ptrdiff_t(seg[seg.size() - 2].second));
  std::vector<uint8_t> out(j.begin(), j.begin() + std::ptrdiff_t(seg.back().first));
  for (int i = 0; i < copies; ++i) out.insert(out.end(), scan.begin(), scan.end());
  out.insert(out.end(), j.begin() + std::ptrdiff_t(seg.back().first), j.end());
  return out;
}

}  // namespace

TEST_CASE("JPEG scans are limited: a progressive file repeating a scan fails fast, naming the limit") {
  const std::vector<uint8_t> prog = read_bytes(data_dir() + "jprog_35x27.jpg");
  int scans = 0;
  for (const auto& s : jpeg_segments(prog)) scans += prog[s.first + 1] == 0xDA;
  REQUIRE(scans > 2);
  uocr::DecodeLimits limits;
  limits.max_jpeg_scans = scans;
  const ImageU8 want = uocr::decode_image(prog.data(), prog.size(), limits);
  limits.max_jpeg_scans = scans - 1;
  CHECK(status_of([&] { uocr::decode_image(prog.data(), prog.size(), limits); }) == Status::invalid_image);
  const std::string low = message_of([&] { uocr::decode_image(prog.data(), prog.size(), limits); });
  CHECK(low.find("more than " + std::to_string(scans - 1) + " scans") != std::string::npos);
  CHECK(low.find("--max-jpeg-scans") != std::string::npos);

  // 5000 more copies of the last scan: over the default limit, refused within a second.
  const std::vector<uint8_t> bomb = repeat_last_scan(prog, 5000);
  std::string msg;
  CHECK(seconds_of([&] { msg = message_of([&] { uocr::decode_image(bomb.data(), bomb.size()); }); }) < 1.0);
  CHECK(msg.find("more than 100 scans") != std::string::npos);
  // A few copies stay within it (libjpeg warns about the repeated refinement and goes on).
  const std::vector<uint8_t> few = repeat_last_scan(prog, 3);
  CHECK(uocr::decode_image(few.data(), few.size()).width == want.width);
}

namespace {

// A `side` x `side` progressive JPEG of a noisy gradient, encoded by libjpeg.
std::vector<uint8_t> progressive_jpeg(int side) {
  jpeg_compress_struct c{};
  jpeg_error_mgr err{};
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = JDIMENSION(side);
  c.image_height = JDIMENSION(side);
  c.input_components = 3;
  c.in_color_space = JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_simple_progression(&c);
  jpeg_start_compress(&c, TRUE);
  std::vector<uint8_t> row(size_t(side) * 3);
  uint32_t noise = 1;
  for (int y = 0; y < side; ++y) {
    for (int x = 0; x < side * 3; ++x) {
      noise = noise * 1664525u + 1013904223u;
      row[size_t(x)] = uint8_t((x / 3 + y) / 16 + (noise >> 27));
    }
    JSAMPROW r = row.data();
    jpeg_write_scanlines(&c, &r, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  std::vector<uint8_t> out(buf, buf + size);
  std::free(buf);
  return out;
}

}  // namespace

TEST_CASE("a JPEG's decoding stops between two rows of a scan once its deadline passes") {
  const std::vector<uint8_t> jpeg = repeat_last_scan(progressive_jpeg(1024), 40);
  int scans = 0;
  for (const auto& s : jpeg_segments(jpeg)) scans += jpeg[s.first + 1] == 0xDA;
  const double whole = seconds_of([&] { CHECK(uocr::decode_image(jpeg.data(), jpeg.size()).width == 1024); });
  INFO("a whole decode: " << whole << " s, " << scans << " scans");

  // Given a tenth of that, the decode stops inside libjpeg, scans before its last.
  uocr::Deadline deadline = uocr::Deadline::after(std::chrono::steady_clock::now(), whole / 10);
  std::string msg;
  const double cut = seconds_of([&] {
    try {
      uocr::decode_image(jpeg.data(), jpeg.size(), {}, deadline);
    } catch (const uocr::DeadlinePassed& e) {
      msg = e.what();
    }
  });
  INFO(msg);
  REQUIRE(msg.find("of a JPEG ran past the run's time budget") != std::string::npos);
  const int stopped_at = std::atoi(msg.c_str() + msg.find("scan ") + 5);
  CHECK(stopped_at >= 1);
  CHECK(stopped_at < scans);
  CHECK(cut < whole / 2);
  // A deadline that has passed: nothing is decoded, and load_image passes the stop on as it is.
  deadline = uocr::Deadline::after(std::chrono::steady_clock::now() - std::chrono::seconds(1), 0.5);
  CHECK_THROWS_AS(uocr::decode_image(jpeg.data(), jpeg.size(), {}, deadline), uocr::DeadlinePassed);
}

TEST_CASE("JPEG scans counted without decoding (the budget of builds where stb decodes JPEG) agree with the file's segments") {
  auto segment_scans = [](const std::vector<uint8_t>& j) {
    int64_t n = 0;
    for (const auto& s : jpeg_segments(j)) n += j[s.first + 1] == 0xDA;
    return n;
  };
  const std::vector<uint8_t> prog = read_bytes(data_dir() + "jprog_35x27.jpg");
  const std::vector<uint8_t> big = progressive_jpeg(64);
  for (const std::vector<uint8_t>* j : {&prog, &big}) {
    const int64_t n = segment_scans(*j);
    REQUIRE(n > 2);
    CHECK(uocr::detail::jpeg_scan_count(j->data(), j->size()) == n);
    const std::vector<uint8_t> bomb = repeat_last_scan(*j, 5000);
    CHECK(uocr::detail::jpeg_scan_count(bomb.data(), bomb.size()) == n + 5000);
    // Data after the end of the image is not read; a cut-off file counts the scans it has begun.
    std::vector<uint8_t> trailer = *j;
    for (int i = 0; i < 3; ++i) trailer.insert(trailer.end(), {0xFF, 0xDA, 0x00, 0x02});
    CHECK(uocr::detail::jpeg_scan_count(trailer.data(), trailer.size()) == n);
    const auto seg = jpeg_segments(*j);
    CHECK(uocr::detail::jpeg_scan_count(j->data(), seg[seg.size() - 2].first + 10) == n);
  }
  const std::vector<uint8_t> baseline = read_bytes(data_dir() + "j420_33x17.jpg");
  CHECK(uocr::detail::jpeg_scan_count(baseline.data(), baseline.size()) == 1);
}
#endif

TEST_CASE("other formats check the deadline before and after stb decodes them; none is no limit") {
  const std::string png = uocr_test::golden("page.png");
  uocr::Deadline deadline = uocr::Deadline::after(std::chrono::steady_clock::now() - std::chrono::seconds(1), 0.5);
  CHECK(deadline.passed());
  CHECK_THROWS_AS(uocr::load_image(png, {}, deadline), uocr::DeadlinePassed);
  CHECK(uocr::Deadline::after(std::chrono::steady_clock::now(), 0).none());
  CHECK(uocr::Deadline::after(std::chrono::steady_clock::now(), 1e300).none());
  deadline = uocr::Deadline::after(std::chrono::steady_clock::now(), 3600);
  CHECK(uocr::load_image(png, {}, deadline).width > 0);
}

TEST_CASE("image files: only a regular file of at most max_bytes is read; directories, FIFOs and devices fail at once") {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("uocr_image_files_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);

  CHECK(status_of([&] { uocr::load_image(dir.string()); }) == Status::io);
  CHECK(message_of([&] { uocr::load_image(dir.string()); }) ==
        "cannot read image file " + dir.string() + ": it is a directory");
  // /dev/zero would be read until memory runs out.
  CHECK(status_of([] { uocr::load_image("/dev/zero"); }) == Status::io);
  CHECK(message_of([] { uocr::load_image("/dev/zero"); }).find("/dev/zero: it is a character device") != std::string::npos);

  // A FIFO without a writer would block the open forever. Guard: if the load has not returned
  // after 10 s, open the write end, which lets it return, and fail.
  const std::string fifo = (dir / "pipe.png").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  auto pending = std::async(std::launch::async, [&] { return message_of([&] { uocr::load_image(fifo); }); });
  if (pending.wait_for(std::chrono::seconds(10)) != std::future_status::ready) {
    FAIL_CHECK("load_image blocked on a FIFO");
    const int w = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (w >= 0) ::close(w);
  }
  CHECK(pending.get() == "cannot read image file " + fifo + ": it is a FIFO");

  // Larger than the budget's bytes: refused before reading, naming the limit.
  const std::vector<uint8_t> png = read_bytes(data_dir() + "noise_37x53.png");
  uocr::DecodeLimits limits;
  limits.max_bytes = png.size() - 1;
  const std::string path = data_dir() + "noise_37x53.png";
  CHECK(status_of([&] { uocr::load_image(path, limits); }) == Status::invalid_image);
  CHECK(message_of([&] { uocr::load_image(path, limits); }) ==
        "cannot read image file " + path + ": " + std::to_string(png.size()) + " bytes, more than the limit of " +
            std::to_string(png.size() - 1) +
            " bytes (raise it with DecodeLimits::max_bytes, the C ABI's max_image_bytes or uocr --max-image-bytes)");
  limits.max_bytes = png.size();  // the file fits, and so do its 37 x 53 x 3 samples
  CHECK(uocr::load_image(path, limits).width == 37);
  fs::remove_all(dir);
}
