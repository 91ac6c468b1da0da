// uocr::VisionEncoder: DeepEncoder (SAM -> CLIP -> projector) per view, and the visual-token
// sequence one image contributes to the decoder input, laid out exactly as upstream
// (modeling_unlimitedocr.py / modeling_deepseekocr.py).
//
// Basic usage:
//   uocr::VisionEncoder enc(config, weights);             // weights (and their Checkpoint) must outlive enc
//   std::vector<float> emb = enc.visual_tokens(global, tiles, tiles_x, tiles_y);
//   // emb: [count, hidden] row-major, one row per <image> placeholder, in order.
//
// A view is a normalised RGB image, float32 CHW [3, S, S] (S = 1024 global, 640 tiles).
// Per view: feat = projector(cat(clip[1:], sam_flat)) -> [g*g, hidden] with g = S/64; CLIP
// channels come first, SAM second.
// Layout (hidden-size rows):
//   no tiles:   for each of g rows: g features + image_newline; then view_seperator
//               (16*17 + 1 = 273 for the 1024 view);
//   i x j tiles (i across, j down, row-major tile order): the tiles stitched into one
//               (j*g_t) x (i*g_t) grid (tile rows interleaved), one image_newline after each
//               stitched row, FIRST; then the global block; then view_seperator
//               (10j(10i+1) + 273 for 640 tiles).
// Working memory: every activation lives in a vision::Workspace the caller passes (and keeps, to
// reuse it view after view: CpuVisionEngine holds one per session and reports its bytes); the
// calls without one make their own.
// Thread-safety: const methods only; concurrent calls on one encoder are safe with one workspace
// per thread (OpenMP inside).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "uocr/backends/cpu/linear.hpp"
#include "uocr/core/precision.hpp"
#include "uocr/core/error.hpp"
#include "uocr/model/config.hpp"
#include "uocr/model/weights.hpp"
#include "uocr/version.hpp"
#include "uocr/vision/clip.hpp"
#include "uocr/vision/conv.hpp"
#include "uocr/vision/sam.hpp"
#include "uocr/vision/token_layout.hpp"

UOCR_NAMESPACE_BEGIN

// Intermediate tensors of one view, for parity tests and `inspect`. Channels-last maps
// (vision::FeatureMap); PyTorch's NCHW is their transpose.
struct VisionCaptures {
  vision::FeatureMap sam_neck;       // [G, G, out_chans], G = S/16
  vision::FeatureMap sam_out;        // [g, g, net3_chans], g = G/4
  std::vector<float> clip_out;       // [1 + g*g, clip width], row 0 = CLS
  std::vector<float> projector_out;  // [g*g, hidden]
};

// The sizes of one view through SAM and its 16x compressor, checked once for every encoder (CPU,
// Vulkan, CUDA): G = patch grid (N = G*G tokens), G2 after net_2 (3x3, stride 2), g after net_3,
// so t = g*g visual tokens; im2col_floats is the largest im2col buffer of its convolutions.
struct ViewGeometry {
  int G, G2, g;
  int64_t N, t;

  ViewGeometry(const SamConfig& sc, const float* chw, int size) {
    require(chw != nullptr && size > 0 && size % sc.patch == 0, Status::invalid_argument, [&] {
      return "vision view must be a square image whose side is a multiple of " + std::to_string(sc.patch) + ", got " +
             std::to_string(size);
    });
    G = size / sc.patch;
    G2 = (G + 2 - 3) / 2 + 1;
    g = (G2 + 2 - 3) / 2 + 1;
    N = int64_t(G) * G;
    t = int64_t(g) * g;
  }
  int64_t im2col_floats(const SamConfig& sc) const {
    return std::max({N * 3 * sc.patch * sc.patch, N * sc.out_chans * 9, int64_t(G2) * G2 * sc.out_chans * 9, t * sc.net2_chans * 9});
  }
};

class VisionEncoder {
 public:
  // precision: SAM's, CLIP's and the projector's linear layers (uocr/core/precision.hpp).
  VisionEncoder(const ModelConfig& config, const ModelWeights& weights, Precision precision = Precision::f32)
      : cfg_(config), w_(weights), precision_(precision) {}

  int hidden() const { return cfg_.decoder.hidden; }
  Precision precision() const { return precision_; }

  // Number of embeddings visual_tokens() returns for these view sizes.
  int64_t token_count(int global_size, int tile_size, int tiles_x, int tiles_y) const {
    return int64_t(visual_token_count(global_size, tile_size, tiles_x, tiles_y, cfg_.sam.patch));
  }

  // Projected features of one view: [g*g, hidden] into `out`. chw = [3, size, size]. Every
  // activation lives in `ws`, reused by the next view.
  void encode_view(const float* chw, int size, vision::Workspace& ws, std::vector<float>& out,
                   VisionCaptures* captures = nullptr) const {
    (void)ViewGeometry(cfg_.sam, chw, size);  // the checks
    vision::sam_forward(cfg_.sam, w_.sam, chw, size, ws, precision_);
    const vision::FeatureMap& sam = ws.sam_out;
    const float* clip = vision::clip_forward(cfg_.clip, w_.clip, sam, ws, precision_);
    const int64_t t = sam.tokens(), cw = cfg_.clip.width, sc = sam.c;
    float* const feat = ws.get(vision::Workspace::features, t * (cw + sc));
    for (int64_t r = 0; r < t; ++r) {
      std::copy_n(clip + (r + 1) * cw, cw, feat + r * (cw + sc));
      std::copy_n(sam.data.data() + r * sc, sc, feat + r * (cw + sc) + cw);
    }
    out.resize(size_t(t * w_.glue.projector.out()));
    cpu::linear(feat, t, w_.glue.projector, out.data(), precision_);
    if (captures) {
      captures->sam_neck = ws.neck;
      captures->sam_out = sam;
      captures->clip_out.assign(clip, clip + (t + 1) * cw);
      captures->projector_out = out;
    }
  }

  // The same with a workspace of its own (one-off calls: tests, inspect).
  std::vector<float> encode_view(const float* chw, int size, VisionCaptures* captures = nullptr) const {
    vision::Workspace ws;
    std::vector<float> out;
    encode_view(chw, size, ws, out, captures);
    return out;
  }

  // The embeddings of one image: [token_count, hidden]. Each view is a CHW float32 vector of
  // 3*S*S values. `tiles` is empty (global view only) or holds tiles_x * tiles_y tiles in
  // row-major order. Activations live in `ws` (a session's encoder keeps it for every page).
  // Past `deadline` it throws DeadlinePassed, before a view and between two blocks of one.
  std::vector<float> visual_tokens(const std::vector<float>& global_view, const std::vector<std::vector<float>>& tiles,
                                   int tiles_x, int tiles_y, vision::Workspace& ws, const Deadline& deadline = {}) const {
    check_tile_grid(tiles.size(), tiles_x, tiles_y);
    struct Until {  // the workspace's deadline, for this call only
      vision::Workspace& ws;
      ~Until() { ws.deadline = {}; }
    } until{ws};
    ws.deadline = deadline;
    encode(global_view, ws, ws.global_features);
    ws.tile_features.resize(tiles.size());
    for (size_t i = 0; i < tiles.size(); ++i) encode(tiles[i], ws, ws.tile_features[i]);
    return layout_tokens(ws.global_features, ws.tile_features, tiles_x, tiles_y);
  }

  std::vector<float> visual_tokens(const std::vector<float>& global_view, const std::vector<std::vector<float>>& tiles,
                                   int tiles_x, int tiles_y) const {
    vision::Workspace ws;
    return visual_tokens(global_view, tiles, tiles_x, tiles_y, ws);
  }

  // visual_tokens() with another encoder's `encode(view) -> [g*g, hidden] features` (the Vulkan and
  // CUDA encoders), so the tile checks and the layout are this class's. Past `deadline` it
  // throws DeadlinePassed before a view.
  template <class Encode>
  std::vector<float> visual_tokens_by(const std::vector<float>& global_view, const std::vector<std::vector<float>>& tiles,
                                      int tiles_x, int tiles_y, Encode&& encode, const Deadline& deadline = {}) const {
    check_tile_grid(tiles.size(), tiles_x, tiles_y);
    deadline.check("encoding a page");
    const std::vector<float> global = encode(global_view);
    std::vector<std::vector<float>> local;
    for (const auto& view : tiles) {
      deadline.check("encoding a page's tiles");
      local.push_back(encode(view));
    }
    return layout_tokens(global, local, tiles_x, tiles_y);
  }

  // Lays out already projected features ([g*g, hidden] each) as visual_tokens() does.
  std::vector<float> layout_tokens(const std::vector<float>& global, const std::vector<std::vector<float>>& tiles,
                                   int tiles_x, int tiles_y) const {
    const int64_t d = hidden();
    const std::vector<float> newline = w_.glue.image_newline->to_vector();
    const int64_t g_global = grid_of(global), g_tile = tiles.empty() ? 0 : grid_of(tiles[0]);
    std::vector<float> out;
    out.reserve(size_t((tiles_y * g_tile * (tiles_x * g_tile + 1) + g_global * (g_global + 1) + 1) * d));  // exactly
    auto put = [&](const float* row) { out.insert(out.end(), row, row + d); };
    if (!tiles.empty()) {
      const int64_t g = g_tile;
      for (const auto& t : tiles)
        require(int64_t(t.size()) == g * g * d, Status::invalid_argument, "layout_tokens: tiles differ in size");
      // Stitched row R = tile row R / g, feature row R % g; across it, every tile of that tile row.
      for (int64_t row = 0; row < tiles_y * g; ++row) {
        for (int64_t tx = 0; tx < tiles_x; ++tx)
          for (int64_t x = 0; x < g; ++x) put(tiles[size_t((row / g) * tiles_x + tx)].data() + ((row % g) * g + x) * d);
        put(newline.data());
      }
    }
    const int64_t g = g_global;
    for (int64_t y = 0; y < g; ++y) {
      for (int64_t x = 0; x < g; ++x) put(global.data() + (y * g + x) * d);
      put(newline.data());
    }
    put(w_.glue.view_separator->to_vector().data());
    return out;
  }

 private:
  static void check_tile_grid(size_t tiles, int tiles_x, int tiles_y) {
    require(tiles == 0 || (tiles_x > 0 && tiles_y > 0 && tiles == size_t(tiles_x) * size_t(tiles_y)), Status::invalid_argument,
            [&] {
              return "visual_tokens: " + std::to_string(tiles) + " tiles for a " + std::to_string(tiles_x) + "x" +
                     std::to_string(tiles_y) + " grid";
            });
  }
  void encode(const std::vector<float>& view, vision::Workspace& ws, std::vector<float>& out) const {
    const int size = int(std::lround(std::sqrt(double(view.size()) / 3.0)));
    require(size > 0 && size_t(3) * size_t(size) * size_t(size) == view.size(), Status::invalid_argument,
            [&] { return "vision view of " + std::to_string(view.size()) + " floats is not a 3 x S x S image"; });
    encode_view(view.data(), size, ws, out);
  }

  int64_t grid_of(const std::vector<float>& features) const {
    const int64_t t = int64_t(features.size()) / hidden();
    const int64_t g = int64_t(std::lround(std::sqrt(double(t))));
    require(g > 0 && g * g * hidden() == int64_t(features.size()), Status::invalid_argument,
            "layout_tokens: features are not a square grid of hidden-size rows");
    return g;
  }

  const ModelConfig cfg_;
  const ModelWeights& w_;
  Precision precision_;
};

UOCR_NAMESPACE_END
