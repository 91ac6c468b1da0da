// Element-wise activations over float buffers whose result does not depend on the buffer's address.
//
// Eigen vectorises an expression over an unaligned Map by peeling the elements before the first
// aligned address into scalar code, and its scalar exp/erf differ from the packet versions in
// the last bits. A std::vector's data is only 16-byte aligned, so with AVX-512 (64-byte packets)
// the same input gave different outputs depending on where malloc placed the buffer: the first
// page of a process encoded differently from later ones. Here every element goes through the
// packet path, sixteen at a time through an aligned block.
#pragma once
#include <algorithm>
#include <cstdint>

#include <Eigen/Core>

#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN
namespace cpu {

// Applies `f(Eigen::Map<Eigen::Array<float, 16, 1>, Eigen::Aligned64>&)`, which updates its
// argument in place, to x[0, n).
template <class F>
inline void apply_packets(float* x, int64_t n, F f) {
  constexpr int64_t w = 16;
  alignas(64) float block[w];
  for (int64_t i = 0; i < n; i += w) {
    const int64_t c = std::min(w, n - i);
    std::copy(x + i, x + i + c, block);
    std::fill(block + c, block + w, 0.f);
    Eigen::Map<Eigen::Array<float, w, 1>, Eigen::Aligned64> a(block);
    f(a);
    std::copy(block, block + c, x + i);
  }
}

}  // namespace cpu
UOCR_NAMESPACE_END
