// Status mapping of CUDA runtime and cuBLAS results (private to backends/cuda/). Every call into
// CUDA goes through check(...), and every kernel launch is followed by check_launch(...), so a
// failure surfaces as a uocr::Error naming the call instead of a crash or a silent wrong result.
#pragma once
#include <string>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "uocr/core/error.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN
namespace cuda::detail {

// No driver, a driver older than the runtime, no device, or no code for this GPU: the machine
// cannot run the backend at all.
inline bool is_unavailable(cudaError_t e) {
  return e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver || e == cudaErrorSystemDriverMismatch ||
         e == cudaErrorCompatNotSupportedOnDevice || e == cudaErrorNoKernelImageForDevice ||
         e == cudaErrorUnsupportedPtxVersion || e == cudaErrorDevicesUnavailable || e == cudaErrorSystemNotReady ||
         e == cudaErrorStubLibrary;
}

inline Status status_of(cudaError_t e) {
  if (is_unavailable(e)) return Status::unsupported;
  if (e == cudaErrorMemoryAllocation) return Status::out_of_memory;
  if (e == cudaErrorInvalidDevice) return Status::invalid_argument;
  return Status::internal;
}

inline std::string message_of(cudaError_t e, const std::string& what) {
  const std::string text = std::string(cudaGetErrorString(e)) + " (" + cudaGetErrorName(e) + ")";
  if (is_unavailable(e)) return "no CUDA device: " + text + " [" + what + "]";
  return "CUDA: " + what + ": " + text;
}

inline void check(cudaError_t e, const std::string& what) {
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later calls are not blamed for it
    throw Error(status_of(e), message_of(e, what));
  }
}

// After a <<<...>>> launch: configuration errors show up here, execution errors at the next sync.
inline void check_launch(const char* kernel) { check(cudaGetLastError(), std::string("launch of ") + kernel); }

inline void check(cublasStatus_t s, const std::string& what) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  const Status st = s == CUBLAS_STATUS_ALLOC_FAILED       ? Status::out_of_memory
                    : s == CUBLAS_STATUS_NOT_INITIALIZED  ? Status::unsupported
                    : s == CUBLAS_STATUS_ARCH_MISMATCH     ? Status::unsupported
                    : s == CUBLAS_STATUS_NOT_SUPPORTED     ? Status::unsupported
                    : s == CUBLAS_STATUS_INVALID_VALUE     ? Status::invalid_argument
                                                           : Status::internal;
  throw Error(st, "cuBLAS: " + what + ": " + cublasGetStatusString(s) + " (" + cublasGetStatusName(s) + ")");
}

inline cudaStream_t stream_of(const void* s) { return static_cast<cudaStream_t>(const_cast<void*>(s)); }

}  // namespace cuda::detail
UOCR_NAMESPACE_END

UOCR_NAMESPACE_BEGIN
namespace cuda::detail {
// Context::scratch slots of the ops (each op owns one, so nested use never aliases).
enum ScratchSlot : int { kScratchGemmWeights = 0, kScratchGemmActivations = 1, kScratchAttention = 2, kScratchSamRel = 3 };
}  // namespace cuda::detail
UOCR_NAMESPACE_END
