// The page-group settings of one run: what the caller set, else what the model folder suggests
// (uocr_decode.json, model/decode_defaults.hpp), else the library's defaults (upstream's).
#pragma once
#include <algorithm>
#include <optional>

#include "uocr/decoder/page_groups.hpp"
#include "uocr/model/decode_defaults.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

inline void set_position_policy(PageGroupParams& g, PositionPolicy p) {
  g.allow_position_extrapolation = p == PositionPolicy::extrapolate;
  g.group_positions = p == PositionPolicy::group;
}

inline PositionPolicy position_policy(const PageGroupParams& g) {
  return g.group_positions ? PositionPolicy::group
         : g.allow_position_extrapolation ? PositionPolicy::extrapolate
                                          : PositionPolicy::limit;
}

inline SlideKv slide_kv(const PageGroupParams& g) { return g.recompute_on_slide ? SlideKv::recompute : SlideKv::reuse; }

struct PageGroupChoice {
  std::optional<int> pages_per_group, overlap_pages;
  std::optional<PositionPolicy> positions;
  std::optional<SlideKv> slide_kv;

  // Sets g's group size, overlap, positions and slide KV. The folder's overlap belongs to its group size:
  // a caller who sets only pages_per_group gets the library's overlap for it (G - 1).
  void apply(const DecodeDefaults& folder, PageGroupParams& g) const {
    const bool folder_size = !pages_per_group && folder.pages_per_group > 0;
    if (pages_per_group) g.group_pages = *pages_per_group;
    else if (folder_size) g.group_pages = folder.pages_per_group;
    if (overlap_pages) g.overlap_pages = *overlap_pages;
    else if (folder_size && folder.overlap_pages > 0) g.overlap_pages = folder.overlap_pages;
    else g.overlap_pages = std::max(g.group_pages, 1) - 1;  // a bad group size is refused later, by name
    if (positions) set_position_policy(g, *positions);
    else if (folder.positions) set_position_policy(g, *folder.positions);
    if (slide_kv) g.recompute_on_slide = *slide_kv == SlideKv::recompute;
    else if (folder.slide_kv) g.recompute_on_slide = *folder.slide_kv == SlideKv::recompute;
  }
};

UOCR_NAMESPACE_END
