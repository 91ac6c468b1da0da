// uocr::cuda::Context: device choice, the stream and cuBLAS handle, the caching allocator and
// the copies (see backends/cuda/context.hpp for the contract).
#include "backends/cuda/context.hpp"
#include "uocr/version.hpp"

#include <algorithm>
#include <unordered_map>

#include "check.hpp"

UOCR_NAMESPACE_BEGIN
namespace cuda {

using detail::check;

namespace {

// Small blocks round to 512 bytes, large ones to 2 MiB, so a few size classes serve the
// per-step temporaries and the free lists stay short.
size_t block_size(size_t bytes) {
  constexpr size_t small = 512, large = size_t(2) << 20;
  const size_t unit = bytes < (size_t(1) << 20) ? small : large;
  return std::max(unit, (bytes + unit - 1) / unit * unit);
}

std::string mib(size_t bytes) { return std::to_string((bytes + (size_t(1) << 19)) >> 20) + " MiB"; }

int device_count() {
  int n = 0;
  check(cudaGetDeviceCount(&n), "cudaGetDeviceCount");
  require(n > 0, Status::unsupported, "no CUDA device: the driver reports 0 devices");
  return n;
}

DeviceInfo info_of(int index) {
  cudaDeviceProp p{};
  check(cudaGetDeviceProperties(&p, index), "cudaGetDeviceProperties");
  DeviceInfo d;
  d.index = index;
  d.name = p.name;
  d.major = p.major;
  d.minor = p.minor;
  d.multiprocessors = p.multiProcessorCount;
  d.total_bytes = p.totalGlobalMem;
  int driver = 0;
  check(cudaDriverGetVersion(&driver), "cudaDriverGetVersion");
  d.driver = std::to_string(driver / 1000) + "." + std::to_string(driver % 1000 / 10);
  return d;
}

}  // namespace

std::vector<DeviceInfo> list_devices() {
  std::vector<DeviceInfo> out;
  const int n = device_count();
  for (int i = 0; i < n; ++i) out.push_back(info_of(i));
  return out;
}

struct Context::Impl {
  DeviceInfo info;
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  Precision precision = Precision::f32;
  std::unordered_map<size_t, std::vector<void*>> free_blocks;  // block size -> cached blocks
  MemoryStats stats;
  std::vector<Buffer> scratch;
  uint64_t scratch_generation = 0;
  bool capturing = false;        // inside capture(): the stream records instead of running
  bool refused_alloc = false;    // alloc was asked for during the capture

  void drop_cache() {
    for (auto& [size, blocks] : free_blocks)
      for (void* p : blocks) {
        cudaFree(p);  // nothing useful to do on failure while releasing
        stats.reserved -= size;
      }
    free_blocks.clear();
  }
};

Context::Context(int device) : impl_(std::make_unique<Impl>()) {
  const int n = device_count();
  require(device >= 0 && device < n, Status::invalid_argument, [&] {
    return "CUDA device index " + std::to_string(device) + " does not exist (" + std::to_string(n) + " device" +
           (n == 1 ? "" : "s") + ")";
  });
  check(cudaSetDevice(device), "cudaSetDevice");
  impl_->info = info_of(device);
  check(cudaStreamCreateWithFlags(&impl_->stream, cudaStreamNonBlocking), "cudaStreamCreate");
  try {
    check(cublasCreate(&impl_->blas), "cublasCreate");
    check(cublasSetStream(impl_->blas, impl_->stream), "cublasSetStream");
  } catch (...) {
    if (impl_->blas) cublasDestroy(impl_->blas);
    cudaStreamDestroy(impl_->stream);
    throw;
  }
}

Context::~Context() {
  cudaStreamSynchronize(impl_->stream);
  impl_->scratch.clear();
  impl_->drop_cache();
  cublasDestroy(impl_->blas);
  cudaStreamDestroy(impl_->stream);
}

const DeviceInfo& Context::info() const { return impl_->info; }
void Context::make_current() const { check(cudaSetDevice(impl_->info.index), "cudaSetDevice"); }
void* Context::stream() const { return impl_->stream; }
void* Context::blas() const { return impl_->blas; }
Precision Context::gemm_precision() const { return impl_->precision; }
void Context::set_gemm_precision(Precision p) { impl_->precision = p; }

// What a capture must not contain: an allocation (it is not recorded, so the graph would hold
// a block sized for this step only; capture() sees refused_alloc and lets the caller run
// eagerly), host copies (replays would read or write the host buffer of the capture's call) and
// waits (nothing runs during a capture). Refused here with a clear error rather than left to
// CUDA's invalidation of the capture.
void Context::refuse_during_capture(const char* what) {
  if (!impl_->capturing) return;
  throw Error(Status::internal, std::string("CUDA: ") + what + " during graph capture");
}

Buffer Context::alloc(size_t bytes, const char* what) {
  if (impl_->capturing) {
    impl_->refused_alloc = true;
    refuse_during_capture((std::string("allocation of ") + what).c_str());
  }
  make_current();
  const size_t block = block_size(std::max<size_t>(bytes, 1));
  MemoryStats& s = impl_->stats;
  void* p = nullptr;
  auto cached = impl_->free_blocks.find(block);
  if (cached != impl_->free_blocks.end() && !cached->second.empty()) {
    p = cached->second.back();
    cached->second.pop_back();
  } else {
    cudaError_t e = cudaMalloc(&p, block);
    if (e == cudaErrorMemoryAllocation) {  // give the cache back to CUDA and try once more
      cudaGetLastError();
      impl_->drop_cache();
      e = cudaMalloc(&p, block);
    }
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      throw Error(Status::out_of_memory, "CUDA: out of device memory allocating " + mib(block) + " for " + what + " (" +
                                             mib(s.live) + " in use by uocr, device total " +
                                             mib(impl_->info.total_bytes) + ")");
    }
    check(e, std::string("cudaMalloc for ") + what);
    s.reserved += block;
    s.peak_reserved = std::max(s.peak_reserved, s.reserved);
  }
  s.live += block;
  s.peak_live = std::max(s.peak_live, s.live);
  return Buffer(this, p, bytes, block);
}

void Context::give_back(void* p, size_t block, size_t) noexcept {
  impl_->free_blocks[block].push_back(p);
  impl_->stats.live -= block;
}

void Context::upload(const Buffer& dst, size_t offset, const void* src, size_t bytes) {
  require(offset + bytes <= dst.bytes(), Status::invalid_argument, "CUDA upload past the end of a buffer");
  upload(static_cast<char*>(dst.data()) + offset, src, bytes);
}

// From pageable host memory the copy returns once the source has been staged, so `src` may be
// reused at once; the device sees the data before any later work on the stream.
void Context::upload(void* dst, const void* src, size_t bytes) {
  refuse_during_capture("upload from host memory");
  if (bytes == 0) return;
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, impl_->stream), "cudaMemcpyAsync (upload)");
}

void Context::download(const Buffer& src, size_t offset, void* dst, size_t bytes) {
  require(offset + bytes <= src.bytes(), Status::invalid_argument, "CUDA download past the end of a buffer");
  download(static_cast<const char*>(src.data()) + offset, dst, bytes);
}

void Context::download(const void* src, void* dst, size_t bytes) {
  refuse_during_capture("download to host memory");
  if (bytes > 0) check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, impl_->stream), "cudaMemcpyAsync (download)");
  synchronize();
}

void Context::zero(void* dst, size_t bytes) {
  if (bytes > 0) check(cudaMemsetAsync(dst, 0, bytes, impl_->stream), "cudaMemsetAsync");
}

void Context::copy(void* dst, const void* src, size_t bytes) {
  if (bytes > 0) check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, impl_->stream), "cudaMemcpyAsync (device)");
}

// Kernel faults are reported here (asynchronously), named by the sync rather than the kernel.
void Context::synchronize() {
  refuse_during_capture("stream synchronize");
  check(cudaStreamSynchronize(impl_->stream), "stream synchronize (an earlier kernel or copy failed)");
}

float* Context::scratch(int slot, size_t floats) {
  require(slot >= 0 && slot < 16, Status::internal, "CUDA scratch slot out of range");
  if (impl_->scratch.size() <= size_t(slot)) impl_->scratch.resize(size_t(slot) + 1);
  Buffer& b = impl_->scratch[size_t(slot)];
  if (b.bytes() < floats * sizeof(float)) {
    ++impl_->scratch_generation;
    b = Buffer();  // stream order makes the old block safe to hand out again
    b = alloc(floats * sizeof(float), "op scratch");
  }
  return b.f32();
}

uint64_t Context::scratch_generation() const { return impl_->scratch_generation; }

Graph::~Graph() {
  if (exec_) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));  // nothing to do on failure here
}

bool Context::capture(Graph& g, const std::function<void()>& work) {
  make_current();
  check(cudaStreamBeginCapture(impl_->stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  impl_->capturing = true;
  impl_->refused_alloc = false;
  // Ends the capture on every path (an exception included), so the stream runs work again; the
  // graph it returns is destroyed with it.
  struct Capture {
    Impl& impl;
    cudaGraph_t graph = nullptr;
    cudaError_t end() {
      if (!impl.capturing) return cudaSuccess;
      impl.capturing = false;
      return cudaStreamEndCapture(impl.stream, &graph);
    }
    ~Capture() {
      end();
      if (graph) cudaGraphDestroy(graph);
    }
  } cap{*impl_};
  auto failure = [&](const std::string& why) {
    cudaGetLastError();  // the error belongs to this failure, not to a later call
    g = Graph();
    return Error(Status::internal, "CUDA graph capture: " + why);
  };
  auto cuda_error = [](cudaError_t e) { return std::string(cudaGetErrorString(e)) + " (" + cudaGetErrorName(e) + ")"; };
  try {
    work();
  } catch (const Error& e) {
    cap.end();
    if (impl_->refused_alloc) {
      cudaGetLastError();
      return false;
    }
    throw failure(e.what());
  }
  const cudaError_t ended = cap.end();
  if (ended != cudaSuccess) throw failure("cudaStreamEndCapture: " + cuda_error(ended));
  if (g.exec_) {
    cudaGraphExecUpdateResultInfo info{};
    if (cudaGraphExecUpdate(static_cast<cudaGraphExec_t>(g.exec_), cap.graph, &info) == cudaSuccess) return true;
    cudaGetLastError();  // refused (another topology, say): instantiate instead
    g = Graph();
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t made = cudaGraphInstantiate(&exec, cap.graph, 0);
  if (made != cudaSuccess) throw failure("cudaGraphInstantiate: " + cuda_error(made));
  g.exec_ = exec;
  return true;
}

void Context::launch(const Graph& g) {
  require(!g.empty(), Status::internal, "CUDA: launch of an empty graph");
  check(cudaGraphLaunch(static_cast<cudaGraphExec_t>(g.exec_), impl_->stream), "cudaGraphLaunch");
}

MemoryStats Context::memory() const { return impl_->stats; }

void Context::reset_peak() {
  impl_->stats.peak_live = impl_->stats.live;
  impl_->stats.peak_reserved = impl_->stats.reserved;
}

void Context::release_cached() {
  synchronize();
  impl_->drop_cache();
}

}  // namespace cuda
UOCR_NAMESPACE_END
