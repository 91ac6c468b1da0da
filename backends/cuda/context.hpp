// The CUDA runtime of the uocr CUDA backend, as plain C++ (no CUDA header needed to include it;
// the implementation is compiled into libuocr_cuda, backends/cuda/context.cpp):
//  - device discovery and choice by index; one stream and one cuBLAS handle per Context, on which
//    every op of this backend runs in order;
//  - a caching device allocator: freed blocks go back to a per-size free list of the Context and
//    are reused by later allocations of the same rounded size. Reuse is safe without events
//    because every kernel of a Context runs on its one stream, in the order the host issued it.
//  - CUDA graphs of the stream (capture / launch; CudaDecoder replays its decode steps with them);
//  - every CUDA / cuBLAS failure becomes a uocr::Error: no driver or no device (or a driver too
//    old, or no kernel image for this GPU) -> Status::unsupported with the message
//    "no CUDA device: <cuda error string>", out of device memory -> Status::out_of_memory,
//    anything else -> Status::internal naming the failing call.
//
// Thread-safety: a Context is used by one thread at a time; Buffers must be released before their
// Context is destroyed. Contexts on the same device share its memory (CUDA's primary context):
// device pointers from one are valid in another once the producing stream has been synchronised.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "uocr/core/error.hpp"
#include "uocr/core/precision.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN
namespace cuda {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int major = 0, minor = 0;  // compute capability
  int multiprocessors = 0;
  size_t total_bytes = 0;
  std::string driver;  // the CUDA version the installed driver supports, e.g. "12.4"
};

// Every CUDA device of this machine. Throws Status::unsupported ("no CUDA device: ...") when
// there is no driver or no device.
std::vector<DeviceInfo> list_devices();

class Context;

// A block of device memory from a Context's caching allocator; move-only, returned to the cache
// when destroyed.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Buffer&& o) noexcept { swap(o); }
  Buffer& operator=(Buffer&& o) noexcept {
    Buffer(std::move(o)).swap(*this);
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer();

  void* data() const { return ptr_; }
  template <class T>
  T* as() const { return static_cast<T*>(ptr_); }
  float* f32() const { return as<float>(); }
  size_t bytes() const { return bytes_; }
  bool empty() const { return ptr_ == nullptr; }

 private:
  friend class Context;
  Buffer(Context* c, void* p, size_t bytes, size_t block) : ctx_(c), ptr_(p), bytes_(bytes), block_(block) {}
  void swap(Buffer& o) noexcept {
    std::swap(ctx_, o.ctx_);
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    std::swap(block_, o.block_);
  }
  Context* ctx_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0, block_ = 0;
};

// An executable CUDA graph (cudaGraphExec_t) made by Context::capture; move-only. Destroying
// one that is still running is safe (CUDA frees it when it completes).
class Graph {
 public:
  Graph() = default;
  Graph(Graph&& o) noexcept { std::swap(exec_, o.exec_); }
  Graph& operator=(Graph&& o) noexcept {
    std::swap(exec_, o.exec_);  // o's destructor destroys what this held
    return *this;
  }
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  ~Graph();
  bool empty() const { return exec_ == nullptr; }

 private:
  friend class Context;
  void* exec_ = nullptr;
};

struct MemoryStats {
  size_t live = 0;           // bytes in Buffers now
  size_t reserved = 0;       // live + cached free blocks (what the allocator holds from CUDA)
  size_t peak_live = 0;      // since construction or reset_peak()
  size_t peak_reserved = 0;
};

class Context {
 public:
  // Picks device `device` (0-based); Status::unsupported without a driver/device, or
  // Status::invalid_argument for an index that does not exist.
  explicit Context(int device = 0);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const DeviceInfo& info() const;
  // Makes this Context's device current for the calling thread (the ops and allocations of a
  // Context used from another thread than its creator need it; cheap when already current).
  void make_current() const;
  void* stream() const;  // cudaStream_t
  void* blas() const;    // cublasHandle_t

  // How GEMMs with more rows than the mat-vec path takes (prefill, large batches) multiply:
  //  f32:  bf16/f16 weights are widened to float32 tile by tile and multiplied by cuBLAS in
  //        float32 (no TF32): the CPU backend's numerics, the default;
  //  bf16: activations are rounded to bf16 and cuBLAS multiplies bf16 x bf16 on tensor cores with
  //        float32 accumulation and output (upstream's bf16 autocast numerics, much faster).
  Precision gemm_precision() const;
  void set_gemm_precision(Precision p);

  // `what` names the allocation in an out-of-memory message.
  Buffer alloc(size_t bytes, const char* what);
  void upload(const Buffer& dst, size_t offset, const void* src, size_t bytes);
  void upload(void* dst, const void* src, size_t bytes);  // any device address
  void download(const Buffer& src, size_t offset, void* dst, size_t bytes);  // waits for the stream
  void download(const void* src, void* dst, size_t bytes);
  void zero(void* dst, size_t bytes);
  void copy(void* dst, const void* src, size_t bytes);  // device to device, on the stream
  void synchronize();

  // Float scratch of at least `floats` elements for ops that need a temporary (GEMM widening,
  // attention scores); valid until the next call asking for scratch in the same slot.
  float* scratch(int slot, size_t floats);

  // Changes whenever a scratch slot gets a new block: a graph captured before holds the old
  // address (CudaDecoder recaptures its step graphs when it changes).
  uint64_t scratch_generation() const;

  // Records what `work` enqueues on the stream into `g` instead of running it, then brings g's
  // executable up to date: cudaGraphExecUpdate when g has one (same kernels, other arguments),
  // a fresh instantiation when there is none or the update is refused. Nothing runs; launch(g)
  // runs it. The capture is thread-local (cudaStreamCaptureModeThreadLocal): CUDA refuses
  // unsafe calls (cudaMalloc, synchronous copies) from this thread while it lasts, not from the
  // other threads' Contexts. While it lasts this Context refuses alloc, upload, download and
  // synchronize itself: when `work` asks for an allocation, capture() returns false (g as it
  // was, nothing enqueued) and the caller runs the work eagerly, which sizes the buffers. Any
  // other failure (an error thrown by `work`, CUDA refusing a call, end of capture or
  // instantiation failing) throws uocr::Error "CUDA graph capture: ..." after the capture was
  // ended and the stream left usable; g is then empty.
  bool capture(Graph& g, const std::function<void()>& work);
  void launch(const Graph& g);  // enqueues g on the stream

  MemoryStats memory() const;
  void reset_peak();
  void release_cached();  // returns the cached free blocks to CUDA

 private:
  friend class Buffer;
  void give_back(void* p, size_t block, size_t bytes) noexcept;
  void refuse_during_capture(const char* what);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

inline Buffer::~Buffer() {
  if (ctx_ && ptr_) ctx_->give_back(ptr_, block_, bytes_);
}

}  // namespace cuda
UOCR_NAMESPACE_END
