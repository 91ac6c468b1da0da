// Working buffers that an engine keeps and reuses (so it can count them): per-thread slices of one
// buffer for the OpenMP threads of a parallel region, aligned as Eigen aligns its own matrices.
//
// Eigen's reductions and its vectorised exp peel to an aligned start, so their last bits depend
// on a buffer's address modulo EIGEN_MAX_ALIGN_BYTES; a slice that starts on that alignment
// computes exactly what a freshly allocated Eigen matrix did.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include <Eigen/Core>
#ifdef _OPENMP
#include <omp.h>

#include "uocr/version.hpp"
#endif

UOCR_NAMESPACE_BEGIN
namespace cpu {

using AlignedFloats = std::vector<float, Eigen::aligned_allocator<float>>;

// n floats rounded up to a whole number of alignment units.
inline int64_t aligned_floats(int64_t n) {
  constexpr int64_t unit = std::max<int64_t>(EIGEN_MAX_ALIGN_BYTES, 16) / int64_t(sizeof(float));
  return (n + unit - 1) / unit * unit;
}

// Grows `buffer` (never shrinks it) to one slice of `per_thread` floats for every thread of a
// parallel region started next by this thread; returns the first slice. Inside the region,
// thread_slice() gives each thread its own.
template <class Floats>
inline float* thread_slices(Floats& buffer, int64_t per_thread) {
#ifdef _OPENMP
  const int64_t threads = omp_get_max_threads();
#else
  const int64_t threads = 1;
#endif
  const size_t n = size_t(threads * aligned_floats(per_thread));
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

inline float* thread_slice(float* slices, int64_t per_thread) {
#ifdef _OPENMP
  return slices + int64_t(omp_get_thread_num()) * aligned_floats(per_thread);
#else
  (void)per_thread;
  return slices;
#endif
}

}  // namespace cpu
UOCR_NAMESPACE_END
