// From a decoded page to the vision encoder's input tensors, exactly as upstream
// DeepseekOCRForCausalLM.infer() / infer_multi() build `images` (MODEL-SPEC §3.2-§3.4).
//
// Basic usage:
//   uocr::ImageU8 page = uocr::load_image("page.png");
//   uocr::PreparedImage in = uocr::prepare_image(page, uocr::preset_gundam());
//   // in.global_chw: [3, 1024, 1024]; in.tiles_chw: tiles_x * tiles_y tensors [3, 640, 640]
//   size_t n = uocr::visual_token_count(in);  // <image> placeholders for this image
//
// What infer() does with the arguments (base_size, image_size, crop_mode):
//   crop_mode (gundam): global view = ImageOps.pad(original, base_size). Unless the image fits
//     in 640 x 640, it is also resized (bicubic, aspect ratio not kept) to a grid of 640-pixel
//     tiles chosen by dynamic_preprocess() and cut row-major. dynamic_preprocess is called with
//     its defaults (tile 640, 2..32 tiles) whatever image_size is, and the 640 threshold is
//     hard-coded too; no pre-resize happens in this mode.
//   otherwise: if image_size <= 640 the image is first squashed to image_size x image_size
//     (bicubic, aspect ratio not kept), then ImageOps.pad(image, image_size); base_size is
//     unused. infer_multi() treats every page this way.
// Then per view: ToTensor (u8 / 255 in float32), Normalize(0.5, 0.5), cast to bfloat16.
//
// All functions are pure and thread-safe.
#pragma once
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "uocr/core/dtype.hpp"
#include "uocr/core/error.hpp"
#include "uocr/image/image.hpp"
#include "uocr/image/resample.hpp"
#include "uocr/version.hpp"
#include "uocr/vision/token_layout.hpp"

UOCR_NAMESPACE_BEGIN

// The infer() arguments that shape the image input.
struct PreprocessConfig {
  int base_size = 1024;   // global view side in crop mode
  int image_size = 640;   // view side without crop mode
  bool crop_mode = true;  // global view plus tiles ("gundam")
};

// Upstream / SGLang presets (MODEL-SPEC §3.4).
inline PreprocessConfig preset_tiny() { return {512, 512, false}; }
inline PreprocessConfig preset_small() { return {640, 640, false}; }
inline PreprocessConfig preset_base() { return {1024, 1024, false}; }
inline PreprocessConfig preset_large() { return {1280, 1280, false}; }
inline PreprocessConfig preset_gundam() { return {1024, 640, true}; }

// dynamic_preprocess() defaults, which infer() never overrides.
constexpr int kGundamTileSize = 640;
constexpr int kGundamMinTiles = 2;
constexpr int kGundamMaxTiles = 32;

// Grid of tiles: x across, y down (upstream crop_ratio / images_spatial_crop = [x, y]).
struct TileGrid {
  int x = 0;
  int y = 0;
};

namespace detail {

// The candidate grids (i, j) with 2 <= i*j <= 32 in the order upstream iterates them:
// sorted(set(...), key=i*j), i.e. by tile count, ties in CPython's set iteration order
// (MODEL-SPEC §3.4; identical on CPython 3.11 and 3.12). Only the order among grids of equal
// ratio difference matters, through the tie rule in choose_tile_grid.
constexpr int kGridCandidates[][2] = {
    {1, 2},  {2, 1},  {3, 1},  {1, 3},  {2, 2},  {4, 1},  {1, 4},  {5, 1},  {1, 5},  {6, 1},  {3, 2},  {2, 3},
    {1, 6},  {7, 1},  {1, 7},  {4, 2},  {2, 4},  {1, 8},  {8, 1},  {9, 1},  {3, 3},  {1, 9},  {1, 10}, {5, 2},
    {10, 1}, {2, 5},  {1, 11}, {11, 1}, {6, 2},  {1, 12}, {2, 6},  {12, 1}, {3, 4},  {4, 3},  {13, 1}, {1, 13},
    {14, 1}, {1, 14}, {7, 2},  {2, 7},  {1, 15}, {5, 3},  {3, 5},  {15, 1}, {8, 2},  {16, 1}, {4, 4},  {1, 16},
    {2, 8},  {1, 17}, {17, 1}, {18, 1}, {3, 6},  {9, 2},  {1, 18}, {6, 3},  {2, 9},  {1, 19}, {19, 1}, {20, 1},
    {5, 4},  {2, 10}, {1, 20}, {4, 5},  {10, 2}, {7, 3},  {1, 21}, {3, 7},  {21, 1}, {2, 11}, {11, 2}, {22, 1},
    {1, 22}, {1, 23}, {23, 1}, {1, 24}, {24, 1}, {6, 4},  {3, 8},  {4, 6},  {2, 12}, {8, 3},  {12, 2}, {5, 5},
    {1, 25}, {25, 1}, {1, 26}, {2, 13}, {13, 2}, {26, 1}, {9, 3},  {27, 1}, {3, 9},  {1, 27}, {1, 28}, {7, 4},
    {14, 2}, {2, 14}, {4, 7},  {28, 1}, {29, 1}, {1, 29}, {3, 10}, {15, 2}, {1, 30}, {2, 15}, {10, 3}, {5, 6},
    {30, 1}, {6, 5},  {1, 31}, {31, 1}, {8, 4},  {1, 32}, {4, 8},  {32, 1}, {16, 2}, {2, 16},
};

// float32 ToTensor + Normalize(0.5, 0.5), then bfloat16 (round to nearest even), per u8 value.
inline const std::array<float, 256>& normalized_u8_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int v = 0; v < 256; ++v) {
      const float x = float(v) / 255.0f;  // CPU true division, as torch's div(255)
      t[size_t(v)] = round_to_bf16((x - 0.5f) / 0.5f);
    }
    return t;
  }();
  return table;
}

}  // namespace detail

// find_closest_aspect_ratio over the candidates: smallest |w/h - i/j|; on an exact tie a later
// (larger) grid wins if w*h > 0.5 * 640^2 * i*j.
inline TileGrid choose_tile_grid(int width, int height) {
  require(width > 0 && height > 0, Status::invalid_argument, "choose_tile_grid: size must be positive");
  const double aspect = double(width) / double(height);
  const double area = double(width) * double(height);  // exact: below 2^53
  double best_diff = HUGE_VAL;
  TileGrid best{1, 1};
  for (const auto& c : detail::kGridCandidates) {
    const double diff = std::fabs(aspect - double(c[0]) / double(c[1]));
    if (diff < best_diff) {
      best_diff = diff;
      best = {c[0], c[1]};
    } else if (diff == best_diff && area > 0.5 * kGundamTileSize * kGundamTileSize * c[0] * c[1]) {
      best = {c[0], c[1]};
    }
  }
  return best;
}

// The preprocessed 8-bit views of one image, before normalisation.
struct ImageViews {
  ImageU8 global;              // square
  TileGrid grid;               // {0, 0} when there are no tiles
  std::vector<ImageU8> tiles;  // row-major, grid.x * grid.y squares of kGundamTileSize
};

// Throws invalid_argument for non-positive sizes in `cfg`.
inline ImageViews make_views(const ImageU8& image, const PreprocessConfig& cfg) {
  require(cfg.base_size > 0 && cfg.image_size > 0, Status::invalid_argument,
          "preprocess: base_size and image_size must be positive");
  ImageViews v;
  if (!cfg.crop_mode) {
    // Upstream squashes when image_size <= 640; the squashed image already fills the box, so
    // its pad is then a plain copy.
    const int s = cfg.image_size;
    v.global = s <= 640 ? resize_bicubic(image, s, s) : pad(image, s, s);
    return v;
  }
  v.global = pad(image, cfg.base_size, cfg.base_size);
  if (image.width <= kGundamTileSize && image.height <= kGundamTileSize) return v;
  v.grid = choose_tile_grid(image.width, image.height);
  const ImageU8 resized = resize_bicubic(image, kGundamTileSize * v.grid.x, kGundamTileSize * v.grid.y);
  for (int t = 0; t < v.grid.x * v.grid.y; ++t) {
    const int col = t % v.grid.x, row = t / v.grid.x;
    v.tiles.push_back(crop(resized, col * kGundamTileSize, row * kGundamTileSize, (col + 1) * kGundamTileSize,
                           (row + 1) * kGundamTileSize));
  }
  return v;
}

// An RGB image as the float32 [3, H, W] tensor upstream feeds the encoder (values are exact
// bfloat16 numbers: ((u8 / 255) - 0.5) / 0.5 rounded to bf16).
inline std::vector<float> normalize_chw(const ImageU8& image) {
  const auto& lut = detail::normalized_u8_table();
  const size_t plane = size_t(image.width) * size_t(image.height);
  std::vector<float> out(3 * plane);
  for (size_t i = 0; i < plane; ++i) {
    for (size_t c = 0; c < 3; ++c) out[c * plane + i] = lut[image.rgb[3 * i + c]];
  }
  return out;
}

// Encoder input for one image.
struct PreparedImage {
  int global_size = 0;                         // side of the global view
  std::vector<float> global_chw;               // [3, global_size, global_size]
  int tile_size = 0;                           // side of each tile; 0 without tiles
  int tiles_x = 0, tiles_y = 0;                // tile grid; 0 x 0 without tiles
  std::vector<std::vector<float>> tiles_chw;   // row-major, each [3, tile_size, tile_size]
};

inline PreparedImage prepare_image(const ImageU8& image, const PreprocessConfig& cfg = preset_gundam()) {
  const ImageViews v = make_views(image, cfg);
  PreparedImage p;
  p.global_size = v.global.width;
  p.global_chw = normalize_chw(v.global);
  if (!v.tiles.empty()) {
    p.tile_size = kGundamTileSize;
    p.tiles_x = v.grid.x;
    p.tiles_y = v.grid.y;
    for (const ImageU8& t : v.tiles) p.tiles_chw.push_back(normalize_chw(t));
  }
  return p;
}

// infer_multi(): every page on its own without tiles, at image_size (1024 in the upstream
// README's multi-page call).
inline std::vector<PreparedImage> prepare_pages(const std::vector<ImageU8>& pages, int image_size = 1024) {
  std::vector<PreparedImage> out;
  out.reserve(pages.size());
  for (const ImageU8& page : pages) out.push_back(prepare_image(page, {image_size, image_size, false}));
  return out;
}

// Number of visual embeddings (= <image> placeholders) for a prepared image.
inline size_t visual_token_count(const PreparedImage& p) {
  return p.tiles_chw.empty() ? visual_token_count(p.global_size, 0, 0, 0)
                             : visual_token_count(p.global_size, p.tile_size, p.tiles_x, p.tiles_y);
}

UOCR_NAMESPACE_END
