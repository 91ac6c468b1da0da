// The bundled demo model (models/uocr-demo) and its sample pages, for tests that decode real
// text; random rows for tests that feed the decoder embeddings of their own.
#pragma once
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "support/test_support.hpp"
#include "uocr/decoder/page_groups.hpp"
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

// A document for page-group tests that feed the decoder without a vision encoder: `pages` pages
// of `page_tokens` random rows (page p from seed 100 + p) between a three-token head and tail.
struct RandomDocument {
  uocr::DocumentLayout layout;
  int64_t hidden = 0;

  RandomDocument(int64_t pages, int64_t page_tokens, int64_t hidden_size) : hidden(hidden_size) {
    layout.head = {0, 5, 6};
    layout.tail = {7, 8, 9};
    layout.pages = pages;
    layout.page_tokens = page_tokens;
  }
  // A fresh source of the pages (each decoder under test reads its own).
  uocr::FunctionPageEmbeddings pages() const {
    return uocr::FunctionPageEmbeddings(layout.pages, [rows = layout.page_tokens, width = hidden](int64_t p, std::vector<float>& out) {
      out = random_rows(rows, width, unsigned(100 + p));
    });
  }
};

}  // namespace uocr_test
