// Device helpers shared by the kernels of backends/cuda/: weight loads widened to float32,
// fixed-order warp and block reductions, the softmax pass of the attention kernels, and
// launch-size arithmetic.
//
// Reductions are deterministic: a warp reduces with a xor butterfly (the same pairing every
// run), a block first reduces each warp, then warp 0 reduces the per-warp partials in warp
// order. Nothing uses atomics on floats, so a result never depends on scheduling.
#pragma once
#include <algorithm>
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backends/cuda/ops.hpp"
#include "check.hpp"
#include "uocr/core/dtype.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN
namespace cuda::detail {

constexpr int kWarp = 32;

template <class T>
struct Weight;
template <>
struct Weight<float> {
  static __device__ __forceinline__ float load(const float* p, int64_t i) { return p[i]; }
};
template <>
struct Weight<__nv_bfloat16> {
  static __device__ __forceinline__ float load(const __nv_bfloat16* p, int64_t i) { return __bfloat162float(p[i]); }
};
template <>
struct Weight<__half> {
  static __device__ __forceinline__ float load(const __half* p, int64_t i) { return __half2float(p[i]); }
};

// 8 consecutive weights starting at p[i] (i a multiple of 8, p 16-byte aligned) as float32.
template <class T>
__device__ __forceinline__ void load8(const T* p, int64_t i, float out[8]) {
  if constexpr (sizeof(T) == 2) {
    const uint4 raw = *reinterpret_cast<const uint4*>(p + i);
    const T* h = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int j = 0; j < 8; ++j) out[j] = Weight<T>::load(h, j);
  } else {
    const float4 a = *reinterpret_cast<const float4*>(p + i), b = *reinterpret_cast<const float4*>(p + i + 4);
    out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w, out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
  }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = kWarp / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// a·b over n floats by one warp: lane l takes elements l, l+32, ...; every lane gets the sum.
__device__ __forceinline__ float warp_dot(const float* a, const float* b, int n) {
  float dot = 0.f;
  for (int e = threadIdx.x % kWarp; e < n; e += kWarp) dot += a[e] * b[e];
  return warp_sum(dot);
}

// Sum / max over the whole block (blockDim.x a multiple of 32, at most 1024); every thread gets
// the result. `shared` holds 32 floats; the call synchronises the block.
__device__ __forceinline__ float block_sum(float v, float* shared) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  v = warp_sum(v);
  __syncthreads();  // `shared` may still be read by a previous reduction
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : 0.f;
  return warp_sum(v);
}
__device__ __forceinline__ float block_max(float v, float* shared) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, warps = blockDim.x / kWarp;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : -INFINITY;
  return warp_max(v);
}

struct SoftmaxStats {
  float max, sum;
};

// The softmax numerators of one block's scores in place: s[j] = expf(s[j] − max) for j < n
// (thread t takes j ≡ t mod Threads, Threads = blockDim.x); returns the max and their sum
// (block_sum's fixed order). `red` holds 32 floats; on return every s[j] is visible to the whole block.
template <int Threads>
__device__ __forceinline__ SoftmaxStats block_softmax_numerators(float* s, int64_t n, float* red) {
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < n; j += Threads) mx = fmaxf(mx, s[j]);
  mx = block_max(mx, red);
  float sum = 0.f;
  for (int64_t j = threadIdx.x; j < n; j += Threads) {
    const float e = expf(s[j] - mx);
    s[j] = e;
    sum += e;
  }
  return {mx, block_sum(sum, red)};  // block_sum synchronises the block
}

inline unsigned blocks_for(int64_t n, int threads) { return unsigned((n + threads - 1) / threads); }
// Blocks of a grid-stride loop over n elements: one per `threads` elements, at most 65536 (each
// thread then takes several).
inline unsigned grid_stride_blocks(int64_t n, int threads) {
  return unsigned(std::min<int64_t>(blocks_for(n, threads), 65536));
}
// Query rows per launch of an attention kernel whose scratch takes `per_row` floats a row: the
// scratch stays within 2^25 floats (128 MiB) and the grid's y within 65535.
inline int64_t score_chunk_rows(int64_t per_row) {
  return std::max<int64_t>(1, std::min<int64_t>(65535, (int64_t(1) << 25) / per_row));
}

// Grid x is limited to 2^31 - 1 blocks; y and z to 65535.
inline void require_grid_y(int64_t n, const char* op) {
  require(n >= 0 && n <= 65535, Status::unsupported, [&] { return std::string("CUDA ") + op + ": " + std::to_string(n) + " rows exceed one launch (65535)"; });
}

inline cudaStream_t stream(const Context& c) { return stream_of(c.stream()); }

}  // namespace cuda::detail
UOCR_NAMESPACE_END
