// The golden model (tiny-b) as the session tests load it, the pages they run on it, and binding a
// model folder's every tensor as the loader does.
#pragma once
#include <algorithm>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "support/test_support.hpp"
#include "uocr/model/model.hpp"

namespace uocr_test {

// Loaded once per test program.
inline std::shared_ptr<const uocr::Model> golden_model() {
  static const std::shared_ptr<const uocr::Model> m = uocr::Model::load(golden_model_dir());
  return m;
}

// The first `n` (at most 3) of: the golden page, then two reference pages of other sizes.
inline std::vector<std::string> golden_pages(size_t n = 3) {
  const std::string images = reference_dir() + "/images/";
  std::vector<std::string> all = {golden("page.png"), images + "page_a_800x1000.png", images + "page_b_1100x700.png"};
  all.resize(std::min(n, all.size()));
  return all;
}

// Loads the folder's config and checkpoint and binds every tensor (throws what the loader throws).
inline void bind_model_folder(const std::string& dir) {
  const auto config = uocr::ModelConfig::load(dir + "/config.json");
  const auto checkpoint = uocr::Checkpoint::open(dir);
  uocr::ModelWeights::bind(checkpoint, config);
}

}  // namespace uocr_test
