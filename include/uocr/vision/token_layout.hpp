// The DeepEncoder's shape formulas, each written once: the side of a convolution's output (every
// backend's conv), and how many visual embeddings a page's views produce (the prompt builder's
// number of <image> placeholders and the encoders' output size).
#pragma once
#include <cstddef>

#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

// Output rows (or columns) of a convolution over `in` of them: square `kernel`, no dilation.
constexpr int conv_output_size(int in, int kernel, int stride, int pad) { return (in + 2 * pad - kernel) / stride + 1; }

// Tokens per side of a view of `view_size` pixels: 16-pixel patches, then two stride-2 convs
// (upstream: ceil((view_size // patch) / downsample)).
inline int view_token_side(int view_size, int patch = 16, int downsample = 4) {
  return (view_size / patch + downsample - 1) / downsample;
}

// Number of visual embeddings (= <image> placeholders) for a global view of `global_size` and,
// when tiles_x * tiles_y > 0, that grid of `tile_size` tiles: each row of the global grid plus a
// newline, one view separator, and the stitched tile grid with one newline per row:
// q*(q+1) + 1 + (t*tiles_x + 1) * t*tiles_y, e.g. 273 untiled at 1024 and 273 + 10j(10i+1) for
// an i x j grid of 640 tiles.
inline size_t visual_token_count(int global_size, int tile_size, int tiles_x, int tiles_y, int patch = 16) {
  const size_t q = size_t(view_token_side(global_size, patch));
  size_t n = q * (q + 1) + 1;
  if (tiles_x * tiles_y > 0) {
    const size_t t = size_t(view_token_side(tile_size, patch));
    n += (t * size_t(tiles_x) + 1) * t * size_t(tiles_y);
  }
  return n;
}

UOCR_NAMESPACE_END
