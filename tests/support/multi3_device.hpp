// The upstream multi_3 case (tests/support/multi3_case.hpp: tiny-b, 3 pages) through page groups on the
// GPU, shared by the CUDA tests that run it (test_cuda_sparse.cpp, test_cuda_resume.cpp): one
// Context with tiny-b's decoder weights, made by the first GPU case; CudaPageGroups over it; the
// teacher-forced run; CUDA logits rows against the CPU's.
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "backends/cuda/engine.hpp"
#include "support/logit_agreement.hpp"
#include "support/multi3_case.hpp"
#include "support/test_support.hpp"
#include "uocr/decoder/page_groups.hpp"

namespace uocr_test {

struct Multi3Device {
  uocr::cuda::Context ctx;
  std::shared_ptr<const uocr::cuda::DecoderDeviceWeights> weights =
      uocr::cuda::DecoderDeviceWeights::upload(ctx, Multi3::get().cfg.decoder, Multi3::get().w.decoder);
  static Multi3Device& get() {
    static Multi3Device d;
    return d;
  }
};

inline uocr::cuda::CudaPageGroups multi3_page_groups(const uocr::PageGroupParams& pp) {
  Multi3Device& dev = Multi3Device::get();
  const Multi3& f = Multi3::get();
  return uocr::cuda::CudaPageGroups(uocr::cuda::CudaDecoder(dev.ctx, f.cfg.decoder, f.w.decoder, dev.weights),
                                    uocr::cuda::CudaKvCache(dev.ctx, f.cfg.decoder, f.window()), pp);
}

// multi_3's generated tokens [from, to) fed to a started (or resumed) page group, the page
// boundary passed before tokens 12 and 26; the logits after each.
template <class PG>
std::vector<std::vector<float>> multi3_steps(PG& eng, size_t from, size_t to) {
  const Multi3& f = Multi3::get();
  std::vector<std::vector<float>> rows;
  for (size_t k = from; k < to; ++k) {
    if (k == 12 || k == 26) eng.next_page();
    rows.push_back(eng.step(f.gen[k]));
  }
  return rows;
}

// Every logits row of a page-group run over multi_3: the prefill's, then one per generated token.
template <class PG>
std::vector<std::vector<float>> multi3_rows(PG& eng) {
  const Multi3& f = Multi3::get();
  uocr::FunctionPageEmbeddings src = f.source();
  std::vector<std::vector<float>> rows{eng.start(f.layout, src)};
  for (std::vector<float>& r : multi3_steps(eng, 0, f.gen.size())) rows.push_back(std::move(r));
  return rows;
}

// CUDA logits rows against the CPU's: the same argmax in every row, relative error within the
// CUDA decoder budget (test_cuda.cpp's page groups); returns the worst.
inline double compare_cuda_rows(const std::vector<std::vector<float>>& got, const std::vector<std::vector<float>>& ref) {
  REQUIRE(got.size() == ref.size());
  double worst = 0;
  for (size_t r = 0; r < ref.size(); ++r) {
    worst = std::max(worst, rel_err(got[r], ref[r]));
    CHECK(argmax(got[r]) == argmax(ref[r]));
  }
  CHECK(worst <= 1e-5);
  return worst;
}

}  // namespace uocr_test
