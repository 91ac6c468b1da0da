// The bundled demo model (models/uocr-demo) and its sample pages, for tests that decode real
// text; random rows for tests that feed the decoder embeddings of their own.
#pragma once
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "support/test_support.hpp"
#include "uocr/model/model.hpp"

namespace uocr_test {

// Loaded once per test program.
inline std::shared_ptr<const uocr::Model> demo_model() {
  static const std::shared_ptr<const uocr::Model> m = uocr::Model::load(source_dir() + "/models/uocr-demo");
  return m;
}

// samples/data/demo-page<page>.png, page 1..3.
inline std::string demo_sample(int page) { return source_dir() + "/samples/data/demo-page" + std::to_string(page) + ".png"; }

// rows x width N(0, 1) floats from `seed`.
inline std::vector<float> random_rows(int64_t rows, int64_t width, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> v(size_t(rows * width));
  for (float& x : v) x = nd(rng);
  return v;
}

}  // namespace uocr_test
