// Reproducing another library's floating-point results bit for bit needs every product rounded
// where that library rounded it. GCC contracts a * b + c into an FMA, across statements too,
// whenever FMA instructions are enabled (-march=native, -mfma), which changes last bits; Pillow's
// generic x86-64 wheels and PyTorch's scalar code paths rounded the product instead.
#pragma once

#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN
namespace detail {

// `v` rounded to T and hidden from the optimiser, so no later add can be fused with the
// operation that produced it.
template <class T>
inline T rounded(T v) {
  volatile T r = v;
  return r;
}

}  // namespace detail
UOCR_NAMESPACE_END
