// What the vision encoder tests of the backends share (tests/test_vision_golden.cpp,
// backends/vulkan/tests/test_vulkan.cpp, backends/cuda/tests/test_cuda_vision.cpp): captures as CHW
// like the upstream ones, a backend's stage against the upstream capture and the CPU encoder's (one
// stage, or every stage of the golden 1024 view), and the 640 tile cut from the golden 1024 view.
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "logit_agreement.hpp"
#include "test_support.hpp"
#include "uocr/vision/encoder.hpp"

namespace uocr_test {

// A channels-last feature map as [c, h, w], the layout of the upstream captures.
inline std::vector<float> to_chw(const uocr::vision::FeatureMap& m) {
  return uocr::vision::detail::transposed(m.data.data(), m.tokens(), m.c);
}

// `backend`'s stage `name` against the upstream capture (relative and max abs error <= 1e-3, the
// CPU test's bounds) and against the CPU encoder's (relative <= 1e-5).
inline void check_stage(const std::string& backend, const std::string& name, const std::vector<float>& ours,
                        const std::vector<float>& upstream, const std::vector<float>& cpu) {
  const RowError u = row_error(ours, upstream), c = row_error(ours, cpu);
  MESSAGE(backend << " " << name << ": vs upstream rel " << u.rel << ", max abs " << u.max_abs << "; vs cpu rel " << c.rel);
  CHECK(u.rel <= 1e-3);
  CHECK(u.max_abs <= 1e-3);
  CHECK(c.rel <= 1e-5);
}

// A device encoder's stages on the golden (tiny-b) 1024 view `image` (SAM neck, SAM out, CLIP,
// projector) against the upstream captures and the CPU encoder's; the projected features of both.
struct GoldenView {
  std::vector<float> device, cpu;
};
template <class Encoder>
GoldenView check_golden_view(const std::string& backend, Encoder& enc, const uocr::VisionEncoder& cpu,
                             const std::vector<float>& image) {
  uocr::VisionCaptures dc, cc;
  GoldenView v{enc.encode_view(image.data(), 1024, &dc), cpu.encode_view(image.data(), 1024, &cc)};
  REQUIRE(dc.sam_neck.h == 64);
  REQUIRE(dc.sam_out.h == 16);
  check_stage(backend, "sam_neck", to_chw(dc.sam_neck), golden_f32("sam_neck.npy"), to_chw(cc.sam_neck));
  check_stage(backend, "sam_out", to_chw(dc.sam_out), golden_f32("sam_out.npy"), to_chw(cc.sam_out));
  check_stage(backend, "clip_out", dc.clip_out, golden_f32("clip_out.npy"), cc.clip_out);
  check_stage(backend, "projector_out", v.device, golden_f32("projector_out.npy"), v.cpu);
  return v;
}

// The top-left 640 x 640 crop of a [3, 1024, 1024] view.
inline std::vector<float> crop_640(const std::vector<float>& image) {
  std::vector<float> tile(size_t(3) * 640 * 640);
  for (int c = 0; c < 3; ++c)
    for (int y = 0; y < 640; ++y)
      std::copy_n(image.data() + (size_t(c) * 1024 + y) * 1024, 640, tile.data() + (size_t(c) * 640 + y) * 640);
  return tile;
}

}  // namespace uocr_test
