// The C ABI over the header-only C++ core. Every exported function body runs inside c_call or
// session_call (or is otherwise sealed): whatever the core throws (uocr::Error, std::bad_alloc,
// any std::exception, or anything else) becomes a status code plus a message here, and nothing
// unwinds into the caller. See uocr.h for the contract of each function and README.md for the
// overview.
#include "uocr.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <memory>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "uocr/core/error.hpp"
#include "uocr/image/image.hpp"
#include "uocr/model/model.hpp"
#include "uocr/session/page_group_choice.hpp"
#include "uocr/session/page_source.hpp"
#include "uocr/session/session.hpp"
#include "uocr/version.hpp"

#if defined(_OPENMP)
#include <omp.h>
#endif

// ---- layout and numbering pins --------------------------------------------------------------
// Shipped structs are append-only: these pins fail the build when a field moves.

#define UOCR_PIN(type, field, off) static_assert(offsetof(type, field) == (off), #type "." #field " moved")

UOCR_PIN(uocr_model_params, struct_size, 0);
UOCR_PIN(uocr_model_params, api_version, 4);
UOCR_PIN(uocr_model_params, flags, 8);
UOCR_PIN(uocr_model_params, reserved0, 12);
static_assert(sizeof(uocr_model_params) == 16, "uocr_model_params size changed");

UOCR_PIN(uocr_model_info, struct_size, 0);
UOCR_PIN(uocr_model_info, image_token_id, 36);
static_assert(sizeof(uocr_model_info) == 40, "uocr_model_info size changed");

UOCR_PIN(uocr_engine_params, reserved0, 28);
static_assert(sizeof(uocr_engine_params) == 32, "uocr_engine_params size changed");
UOCR_PIN(uocr_engine_info, device, 16);
UOCR_PIN(uocr_engine_info, driver, 144);
static_assert(sizeof(uocr_engine_info) == 208, "uocr_engine_info size changed");

UOCR_PIN(uocr_session_params, struct_size, 0);
UOCR_PIN(uocr_session_params, image_mode, 4);
UOCR_PIN(uocr_session_params, max_new_tokens, 8);
UOCR_PIN(uocr_session_params, prompt, 16);
UOCR_PIN(uocr_session_params, window, 16 + sizeof(void*));
UOCR_PIN(uocr_session_params, temperature, 20 + sizeof(void*));
UOCR_PIN(uocr_session_params, top_p, 24 + sizeof(void*));
UOCR_PIN(uocr_session_params, ngram_size, 28 + sizeof(void*));
static_assert(sizeof(void*) != 8 || offsetof(uocr_session_params, seed) == 40, "seed moved");
static_assert(sizeof(void*) != 8 || offsetof(uocr_session_params, ngram_window) == 48, "ngram_window moved");
static_assert(sizeof(void*) != 8 || offsetof(uocr_session_params, loop_guard) == 52, "loop_guard moved");
static_assert(sizeof(void*) != 8 || offsetof(uocr_session_params, max_image_pixels) == 56, "max_image_pixels moved");
static_assert(sizeof(void*) != 8 || offsetof(uocr_session_params, backend) == 64, "backend moved");
static_assert(sizeof(void*) != 8 || offsetof(uocr_session_params, device_index) == 68, "device_index moved");
static_assert(sizeof(void*) != 8 || offsetof(uocr_session_params, pages_per_group) == 72, "pages_per_group moved");
static_assert(sizeof(void*) != 8 || offsetof(uocr_session_params, positions) == 100, "positions moved");
static_assert(sizeof(void*) != 8 || offsetof(uocr_session_params, checkpoint_path) == 104, "checkpoint_path moved");
static_assert(sizeof(void*) != 8 || offsetof(uocr_session_params, resume) == 116, "resume moved");
static_assert(sizeof(void*) != 8 || offsetof(uocr_session_params, max_batch) == 120, "max_batch moved");
static_assert(sizeof(void*) != 8 || offsetof(uocr_session_params, max_batch_wait_us) == 124, "max_batch_wait_us moved");
static_assert(sizeof(void*) != 8 || offsetof(uocr_session_params, reference_gate_fan_out) == 128, "reference_gate_fan_out moved");
static_assert(sizeof(void*) != 8 || offsetof(uocr_session_params, reference_gate_beam) == 132, "reference_gate_beam moved");
static_assert(sizeof(void*) != 8 || offsetof(uocr_session_params, cuda_graphs) == 136, "cuda_graphs moved");
static_assert(sizeof(void*) != 8 || offsetof(uocr_session_params, model_defaults) == 140, "model_defaults moved");
static_assert(sizeof(void*) != 8 || offsetof(uocr_session_params, slide_kv) == 144, "slide_kv moved");
static_assert(sizeof(void*) != 8 || offsetof(uocr_session_params, max_image_bytes) == 152, "max_image_bytes moved");
static_assert(sizeof(void*) != 8 || offsetof(uocr_session_params, max_jpeg_scans) == 160, "max_jpeg_scans moved");
static_assert(sizeof(void*) != 8 || offsetof(uocr_session_params, page_time_budget_seconds) == 168, "page_time_budget_seconds moved");
static_assert(sizeof(void*) != 8 || offsetof(uocr_session_params, precision) == 176, "precision moved");
static_assert(sizeof(void*) != 8 || offsetof(uocr_session_params, draft) == 180, "draft moved");
static_assert(sizeof(void*) != 8 || offsetof(uocr_session_params, draft_max_tokens) == 184, "draft_max_tokens moved");
static_assert(sizeof(void*) != 8 || sizeof(uocr_session_params) == 192, "uocr_session_params size changed");
static_assert(sizeof(void*) != 8 || UOCR_SESSION_PARAMS_MIN_SIZE == 56, "min size changed");

UOCR_PIN(uocr_event, struct_size, 0);
UOCR_PIN(uocr_event, type, 4);
UOCR_PIN(uocr_event, token_id, 8);
UOCR_PIN(uocr_event, page, 12);
UOCR_PIN(uocr_event, text, 16);
static_assert(sizeof(void*) != 8 || offsetof(uocr_event, text_len) == 24, "text_len moved");
static_assert(sizeof(void*) != 8 || offsetof(uocr_event, label) == 32, "label moved");
static_assert(sizeof(void*) != 8 || offsetof(uocr_event, box) == 40, "box moved");
static_assert(sizeof(void*) != 8 || offsetof(uocr_event, box_px) == 56, "box_px moved");
static_assert(sizeof(void*) != 8 || sizeof(uocr_event) == 72, "uocr_event size changed");

UOCR_PIN(uocr_run_summary, struct_size, 0);
UOCR_PIN(uocr_run_summary, stop_reason, 4);
UOCR_PIN(uocr_run_summary, empty, 8);
UOCR_PIN(uocr_run_summary, pages, 16);
UOCR_PIN(uocr_run_summary, generated_tokens, 40);
UOCR_PIN(uocr_run_summary, vision_seconds, 48);
UOCR_PIN(uocr_run_summary, decode_seconds, 64);
UOCR_PIN(uocr_run_summary, reference_kv_bytes, 72);
UOCR_PIN(uocr_run_summary, peak_kv_bytes, 96);
UOCR_PIN(uocr_run_summary, text_len, 104);
UOCR_PIN(uocr_run_summary, scratch_bytes, 112);
UOCR_PIN(uocr_run_summary, peak_scratch_bytes, 120);
UOCR_PIN(uocr_run_summary, peak_bytes, 128);
UOCR_PIN(uocr_run_summary, precision, 136);
UOCR_PIN(uocr_run_summary, decode_passes, 144);
UOCR_PIN(uocr_run_summary, accepted_tokens, 160);
static_assert(sizeof(uocr_run_summary) == 168, "uocr_run_summary size changed");
static_assert(UOCR_RUN_SUMMARY_MIN_SIZE == 112, "min size changed: API 2 callers pass 112 bytes");

#define UOCR_PIN_STATUS(c, core) static_assert((c) == int(uocr::Status::core), #c " must equal uocr::Status::" #core)
UOCR_PIN_STATUS(UOCR_OK, ok);
UOCR_PIN_STATUS(UOCR_E_INVALID_ARGUMENT, invalid_argument);
UOCR_PIN_STATUS(UOCR_E_IO, io);
UOCR_PIN_STATUS(UOCR_E_INVALID_MODEL, invalid_model);
UOCR_PIN_STATUS(UOCR_E_INVALID_IMAGE, invalid_image);
UOCR_PIN_STATUS(UOCR_E_UNSUPPORTED, unsupported);
UOCR_PIN_STATUS(UOCR_E_OUT_OF_MEMORY, out_of_memory);
UOCR_PIN_STATUS(UOCR_E_TOKENIZER, tokenizer);
UOCR_PIN_STATUS(UOCR_E_CANCELLED, cancelled);
UOCR_PIN_STATUS(UOCR_E_INTERNAL, internal);

#define UOCR_PIN_STOP(c, core) static_assert((c) == int(uocr::StopReason::core), #c " must equal uocr::StopReason::" #core)
static_assert(UOCR_PRECISION_F32 == int(uocr::Precision::f32) && UOCR_PRECISION_BF16 == int(uocr::Precision::bf16),
              "UOCR_PRECISION_* must follow uocr::Precision");
UOCR_PIN_STOP(UOCR_STOP_EOS, eos);
UOCR_PIN_STOP(UOCR_STOP_MAX_TOKENS, max_tokens);
UOCR_PIN_STOP(UOCR_STOP_CONTEXT_LIMIT, context_limit);
UOCR_PIN_STOP(UOCR_STOP_LOOP, loop);
UOCR_PIN_STOP(UOCR_STOP_CANCELLED, cancelled);
UOCR_PIN_STOP(UOCR_STOP_NO_TOKEN, no_token);
UOCR_PIN_STOP(UOCR_STOP_TIME_BUDGET, time_budget);

// The header's version must match the meson project version (passed by c_api/meson.build).
#if defined(UOCR_MESON_VERSION_MAJOR)
static_assert(UOCR_VERSION_MAJOR == UOCR_MESON_VERSION_MAJOR && UOCR_VERSION_MINOR == UOCR_MESON_VERSION_MINOR &&
                  UOCR_VERSION_PATCH == UOCR_MESON_VERSION_PATCH,
              "c_api/uocr.h UOCR_VERSION_* differs from the meson project version");
#endif

// ---- handles ------------------------------------------------------------------------------

namespace {

constexpr uint32_t kModelMagic = 0x4d52434fu;    // "OCRM"
constexpr uint32_t kSessionMagic = 0x53524346u;  // "FCRS"
constexpr uint32_t kPageMagic = 0x45474150u;     // "PAGE"
constexpr uint32_t kEngineMagic = 0x4e474e45u;   // "ENGN"
constexpr uint32_t kDeadMagic = 0xdeadf7eeu;

}  // namespace

struct uocr_model {
  uint32_t magic = kModelMagic;
  std::shared_ptr<const uocr::Model> model;
  // The engines uocr_session_create opened for sessions of this handle, one per distinct engine
  // choice in their params, so that those sessions share a device's weights and batcher.
  mutable std::mutex engines_mutex;
  mutable std::vector<std::shared_ptr<uocr::Engine>> engines;
};

struct uocr_engine {
  uint32_t magic = kEngineMagic;
  std::shared_ptr<uocr::Engine> engine;
};

// A page being handed over by a uocr_page_callback (lives on the stack of the page source).
struct uocr_page {
  uint32_t magic = kPageMagic;
  const uocr::DecodeLimits* limits = nullptr;
  const uocr::Deadline* deadline = nullptr;  // the run's
  uocr::ImageU8 image;
  bool set = false;
  uocr_status error = UOCR_OK;  // of the last uocr_page_set_* call, when it failed
  std::string message;
  std::string draft;  // uocr_page_set_draft
};

struct uocr_session {
  uint32_t magic = kSessionMagic;
  std::shared_ptr<const uocr::Model> model;
  uocr::SessionParams params;
  uocr::DecodeLimits limits;
  std::unique_ptr<uocr::Session> core;  // validated at creation; runs every transcription
  uocr::CheckpointOptions checkpoint;
  std::vector<uocr::ImageU8> pages;  // added with uocr_session_add_image_*
  std::vector<std::string> drafts;   // their draft texts (uocr_session_set_page_draft), "" for none
  std::string text;  // transcript of the last run
  // Message of the last call on this session (mutable: const functions report too).
  mutable std::string error;
  mutable uocr_status error_status = UOCR_OK;
  mutable std::atomic<int> busy{0};
};

namespace {

// Live handles by address -> magic. Lets a freed or foreign pointer be rejected without reading
// the memory it points to (the magic field is the second line of defence). Both objects are
// deliberately never destroyed: garbage-collected bindings may free handles from finalizers
// that run after this library's static destructors.
std::mutex& registry_mutex() {
  static std::mutex* m = new std::mutex;
  return *m;
}
std::unordered_map<const void*, uint32_t>& registry() {
  static auto* r = new std::unordered_map<const void*, uint32_t>;
  return *r;
}
void register_handle(const void* h, uint32_t magic) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry().emplace(h, magic);
}
void unregister_handle(const void* h) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry().erase(h);
}
bool is_live(const void* h, uint32_t magic) {
  if (h == nullptr) return false;
  {
    std::lock_guard<std::mutex> lock(registry_mutex());
    const auto it = registry().find(h);
    if (it == registry().end() || it->second != magic) return false;
  }
  return *static_cast<const uint32_t*>(h) == magic;  // every handle type starts with `magic`
}

// ---- error plumbing -----------------------------------------------------------------------

struct ThreadError {
  std::string message;
  uocr_status status = UOCR_OK;
};
thread_local ThreadError t_error;

// Assigns without ever throwing: on allocation failure the message is left empty, and readers
// fall back to uocr_status_string(status).
void assign_noexcept(std::string& dst, const char* src) noexcept {
  try {
    dst.assign(src);
  } catch (...) {
    dst.clear();
  }
}

// Thrown internally for failures detected by this layer; carries a C status.
struct CError {
  uocr_status status;
  std::string message;
};

[[noreturn]] void fail(uocr_status status, std::string message) { throw CError{status, std::move(message)}; }

// Converts the exception in flight into a status and message. Never throws. `what` is the call's
// work, for a bare std::bad_alloc ("out of memory while <what>"); what the core knows it names.
uocr_status current_exception_status(std::string& message, const char* what) noexcept {
  try {
    try {
      throw;
    } catch (const CError& e) {
      message = e.message;
      return e.status;
    } catch (const uocr::Error& e) {
      message = e.what();
      return static_cast<uocr_status>(e.status());
    } catch (const std::bad_alloc&) {
      message = std::string("out of memory while ") + what;
      return UOCR_E_OUT_OF_MEMORY;
    } catch (const std::exception& e) {
      message = std::string("internal error: ") + e.what();
      return UOCR_E_INTERNAL;
    } catch (...) {
      message = "internal error: unknown exception";
      return UOCR_E_INTERNAL;
    }
  } catch (...) {  // building the message itself failed
    message.clear();
    return UOCR_E_OUT_OF_MEMORY;
  }
}

// Records the outcome of a status-returning call in the thread-local slot and, when given, in
// the session's slot.
uocr_status record(uocr_status status, const char* message, const uocr_session* s) noexcept {
  t_error.status = status;
  assign_noexcept(t_error.message, message);
  if (s) {
    s->error_status = status;
    assign_noexcept(s->error, message);
  }
  return status;
}

// Records the exception in flight (see current_exception_status) and returns its status.
uocr_status record_exception(const uocr_session* s, const char* what) noexcept {
  std::string msg;
  const uocr_status st = current_exception_status(msg, what);
  return record(st, msg.c_str(), s);
}

const char* message_or_status(const std::string& msg, uocr_status status) noexcept {
  if (!msg.empty() || status == UOCR_OK) return msg.c_str();
  return uocr_status_string(status);
}

// Holds a session's busy flag for the duration of one call.
class BusyGuard {
 public:
  explicit BusyGuard(const uocr_session* s) : s_(s) {
    int expected = 0;
    if (!s_->busy.compare_exchange_strong(expected, 1, std::memory_order_acquire)) {
      s_ = nullptr;
      fail(UOCR_E_BUSY,
           "the session is already in a call (a call from inside its own event callback, or from a second thread)");
    }
  }
  ~BusyGuard() {
    if (s_) s_->busy.store(0, std::memory_order_release);
  }
  BusyGuard(const BusyGuard&) = delete;
  BusyGuard& operator=(const BusyGuard&) = delete;

 private:
  const uocr_session* s_;
};

const uocr_model* check_model(const uocr_model* m) {
  if (m == nullptr) fail(UOCR_E_INVALID_HANDLE, "model handle is NULL");
  if (!is_live(m, kModelMagic)) fail(UOCR_E_INVALID_HANDLE, "not a live model handle (freed, or not a uocr_model)");
  return m;
}

const uocr_engine* check_engine(const uocr_engine* e) {
  if (e == nullptr) fail(UOCR_E_INVALID_HANDLE, "engine handle is NULL");
  if (!is_live(e, kEngineMagic)) fail(UOCR_E_INVALID_HANDLE, "not a live engine handle (freed, or not a uocr_engine)");
  return e;
}

const uocr_session* check_session(const uocr_session* s) {
  if (s == nullptr) fail(UOCR_E_INVALID_HANDLE, "session handle is NULL");
  if (!is_live(s, kSessionMagic))
    fail(UOCR_E_INVALID_HANDLE, "not a live session handle (freed, or not a uocr_session)");
  return s;
}

// Copies a caller's size-tagged input struct over `defaults` (R3): min(struct_size, sizeof)
// bytes; a size below `min_size` is rejected; bytes beyond sizeof(T) must be zero.
template <class T>
T read_params(const T* in, const T& defaults, uint32_t min_size, const char* name) {
  T out = defaults;
  if (in == nullptr) return out;
  const uint32_t size = in->struct_size;
  if (size < min_size)
    fail(UOCR_E_INVALID_ARGUMENT, std::string(name) + ".struct_size is " + std::to_string(size) +
                                      ", below the smallest accepted size " + std::to_string(min_size) +
                                      " (call " + name + "_init first)");
  std::memcpy(&out, in, std::min<size_t>(size, sizeof(T)));
  const auto* bytes = reinterpret_cast<const unsigned char*>(in);
  for (size_t i = sizeof(T); i < size; ++i)
    if (bytes[i] != 0)
      fail(UOCR_E_UNSUPPORTED, std::string(name) + " has a non-zero field at byte offset " + std::to_string(i) +
                                   " that this library (uocr " + uocr_version_string() + ", API version " +
                                   std::to_string(UOCR_API_VERSION) + ") does not know; leave it zero or use a newer library");
  out.struct_size = uint32_t(sizeof(T));
  return out;
}

// Validates the size of a caller's output struct before any work is done.
template <class T>
void check_output(const T* out, uint32_t min_size, const char* name) {
  if (out == nullptr) fail(UOCR_E_INVALID_ARGUMENT, std::string(name) + " is NULL");
  if (out->struct_size < min_size)
    fail(UOCR_E_INVALID_ARGUMENT, std::string(name) + "->struct_size is " + std::to_string(out->struct_size) +
                                      ", below the smallest accepted size " + std::to_string(min_size));
}

// Writes min(out->struct_size, sizeof) bytes of `value`, keeping the caller's struct_size.
template <class T>
void write_output(T* out, T value) {
  value.struct_size = out->struct_size;
  std::memcpy(out, &value, std::min<size_t>(out->struct_size, sizeof(T)));
}

// The _init_sized functions: min(caller_size, sizeof) bytes of `defaults` with struct_size set to
// that count, so an older caller's smaller struct is never overrun.
template <class T>
void write_defaults(T* out, T defaults, uint32_t caller_size) {
  if (out == nullptr) return;
  const uint32_t size = uint32_t(std::min<size_t>(caller_size, sizeof(T)));
  defaults.struct_size = size;
  std::memcpy(out, &defaults, size);
}

// A struct of zeros: the defaults of the structs whose every field defaults to 0.
template <class T>
T zeroed() {
  T t;
  std::memset(&t, 0, sizeof t);
  return t;
}

// Struct sizes of API version 2, written by the unsized _init symbols that binaries built against
// API 1-2 headers call (API 3 headers call the _sized functions). The run summary (API 3) and the
// session params (API 4: batching) have grown since (the size pins at the top of this file catch
// any other struct growing: its API-2 size then belongs here). An API-1 caller's
// uocr_session_params was smaller still: API 2 itself wrote its full size into it, as this does.
struct Api2Sizes {
  uint32_t model_params, model_info, session_params, run_summary;
};
constexpr Api2Sizes kApi2Size{sizeof(uocr_model_params), sizeof(uocr_model_info),
                              uint32_t(offsetof(uocr_session_params, max_batch)), UOCR_RUN_SUMMARY_MIN_SIZE};

uocr_session_params default_session_params() {
  uocr_session_params p;
  std::memset(&p, 0, sizeof p);
  p.struct_size = sizeof p;
  const uocr::SessionParams d;
  p.image_mode = d.mode == uocr::ImageMode::gundam ? UOCR_IMAGE_MODE_GUNDAM : UOCR_IMAGE_MODE_BASE;
  p.max_new_tokens = d.max_new_tokens;
  p.prompt = nullptr;
  p.window = d.window;
  p.temperature = d.sampling.temperature;
  p.top_p = d.sampling.top_p;
  p.seed = d.sampling.seed;
  p.ngram_size = d.ngram_size;
  p.ngram_window = d.ngram_window;
  p.loop_guard = d.loop_guard ? 1 : 0;
  p.max_image_pixels = 0;
  p.backend = UOCR_BACKEND_CPU;
  p.device_index = d.device_index;
  p.precision = int32_t(d.precision);
  return p;
}

// The backend and engine options of uocr_session_params' and uocr_engine_params' fields.
struct EngineChoice {
  uocr::Backend backend = uocr::Backend::cpu;
  uocr::EngineOptions options;
};
EngineChoice to_engine_choice(int32_t backend, int32_t device_index, int32_t max_batch, int32_t max_batch_wait_us,
                              int32_t cuda_graphs, int32_t precision) {
  EngineChoice c;
  if (backend < UOCR_BACKEND_CPU || backend > UOCR_BACKEND_CUDA)
    fail(UOCR_E_INVALID_ARGUMENT, "backend " + std::to_string(backend) + " is not a UOCR_BACKEND_* value");
  c.backend = backend == UOCR_BACKEND_VULKAN ? uocr::Backend::vulkan
              : backend == UOCR_BACKEND_CUDA ? uocr::Backend::cuda
                                             : uocr::Backend::cpu;
  c.options.device_index = device_index;
  if (max_batch < 0) fail(UOCR_E_INVALID_ARGUMENT, "max_batch must be >= 0, got " + std::to_string(max_batch));
  if (max_batch_wait_us < -1)
    fail(UOCR_E_INVALID_ARGUMENT, "max_batch_wait_us must be -1, 0 or positive, got " + std::to_string(max_batch_wait_us));
  if (max_batch) c.options.batching.max_batch = max_batch;
  if (max_batch_wait_us) c.options.batching.max_wait_us = max_batch_wait_us < 0 ? 0 : max_batch_wait_us;
  if (cuda_graphs < UOCR_CUDA_GRAPHS_DEFAULT || cuda_graphs > UOCR_CUDA_GRAPHS_OFF)
    fail(UOCR_E_INVALID_ARGUMENT, "cuda_graphs " + std::to_string(cuda_graphs) + " is not a UOCR_CUDA_GRAPHS_* value");
  if (cuda_graphs != UOCR_CUDA_GRAPHS_DEFAULT) c.options.cuda_graphs = cuda_graphs == UOCR_CUDA_GRAPHS_ON;
  if (precision != UOCR_PRECISION_F32 && precision != UOCR_PRECISION_BF16)
    fail(UOCR_E_INVALID_ARGUMENT, "precision " + std::to_string(precision) + " is not a UOCR_PRECISION_* value");
  c.options.precision = precision == UOCR_PRECISION_BF16 ? uocr::Precision::bf16 : uocr::Precision::f32;
  return c;
}

uocr::SessionParams to_core(const uocr_session_params& p) {
  uocr::SessionParams c;
  if (p.image_mode != UOCR_IMAGE_MODE_BASE && p.image_mode != UOCR_IMAGE_MODE_GUNDAM)
    fail(UOCR_E_INVALID_ARGUMENT, "image_mode " + std::to_string(p.image_mode) + " is not a UOCR_IMAGE_MODE_* value");
  if (p.loop_guard != 0 && p.loop_guard != 1)
    fail(UOCR_E_INVALID_ARGUMENT, "loop_guard must be 0 or 1, got " + std::to_string(p.loop_guard));
  if (p.ngram_size < 0) fail(UOCR_E_INVALID_ARGUMENT, "ngram_size must be >= 0");
  // The core checks this only when a run starts; report it when the session is created.
  if (p.ngram_size > 0 && p.ngram_window == 0)
    fail(UOCR_E_INVALID_ARGUMENT, "ngram_window must be -1 or > 0 while ngram_size > 0");
  c.mode = p.image_mode == UOCR_IMAGE_MODE_GUNDAM ? uocr::ImageMode::gundam : uocr::ImageMode::base;
  c.prompt = p.prompt ? p.prompt : "";
  c.window = p.window;
  c.max_new_tokens = p.max_new_tokens;
  c.sampling.temperature = p.temperature;
  c.sampling.top_p = p.top_p;
  c.sampling.seed = p.seed;
  c.ngram_size = p.ngram_size;
  c.ngram_window = p.ngram_window;
  c.loop_guard = p.loop_guard != 0;
  const EngineChoice e = to_engine_choice(p.backend, p.device_index, p.max_batch, p.max_batch_wait_us, p.cuda_graphs,
                                          p.precision);
  c.backend = e.backend;
  c.device_index = e.options.device_index;
  c.batching = e.options.batching;
  c.cuda_graphs = e.options.cuda_graphs;
  c.precision = e.options.precision;
  if (p.model_defaults != UOCR_MODEL_DEFAULTS_USE && p.model_defaults != UOCR_MODEL_DEFAULTS_IGNORE)
    fail(UOCR_E_INVALID_ARGUMENT, "model_defaults " + std::to_string(p.model_defaults) + " is not a UOCR_MODEL_DEFAULTS_* value");
  c.page_time_budget_seconds = p.page_time_budget_seconds;  // checked with the rest by the core
  return c;
}

// Page groups and SR-SWA: every field's 0 is the model folder's suggestion (model_defaults) or the
// core's default.
uocr::DocumentParams to_document_params(const uocr_session_params& p, const uocr::DecodeDefaults& folder) {
  uocr::DocumentParams c;
  uocr::PageGroupParams& g = c.groups;
  if (p.pages_per_group < 0 || p.pages_per_group == 1)
    fail(UOCR_E_INVALID_ARGUMENT, "pages_per_group must be 0 (default) or >= 2, got " + std::to_string(p.pages_per_group));
  if (p.positions != UOCR_POSITIONS_LIMIT && p.positions != UOCR_POSITIONS_EXTRAPOLATE && p.positions != UOCR_POSITIONS_GROUP)
    fail(UOCR_E_INVALID_ARGUMENT, "positions " + std::to_string(p.positions) + " is not a UOCR_POSITIONS_* value");
  uocr::PageGroupChoice choice;
  if (p.pages_per_group) choice.pages_per_group = p.pages_per_group;
  if (p.overlap_pages) choice.overlap_pages = p.overlap_pages;
  if (p.positions != UOCR_POSITIONS_LIMIT)
    choice.positions = p.positions == UOCR_POSITIONS_GROUP ? uocr::PositionPolicy::group : uocr::PositionPolicy::extrapolate;
  if (p.slide_kv < UOCR_SLIDE_KV_DEFAULT || p.slide_kv > UOCR_SLIDE_KV_RECOMPUTE)
    fail(UOCR_E_INVALID_ARGUMENT, "slide_kv " + std::to_string(p.slide_kv) + " is not a UOCR_SLIDE_KV_* value");
  if (p.slide_kv != UOCR_SLIDE_KV_DEFAULT)
    choice.slide_kv = p.slide_kv == UOCR_SLIDE_KV_RECOMPUTE ? uocr::SlideKv::recompute : uocr::SlideKv::reuse;
  choice.apply(p.model_defaults == UOCR_MODEL_DEFAULTS_USE ? folder : uocr::DecodeDefaults{}, g);
  if (p.page_fallback_tokens < -1) fail(UOCR_E_INVALID_ARGUMENT, "page_fallback_tokens must be -1, 0 or positive");
  if (p.page_fallback_tokens) c.page_fallback_tokens = p.page_fallback_tokens < 0 ? 0 : p.page_fallback_tokens;
  if (p.reference_mode != UOCR_REFERENCE_DENSE && p.reference_mode != UOCR_REFERENCE_SPARSE)
    fail(UOCR_E_INVALID_ARGUMENT, "reference_mode " + std::to_string(p.reference_mode) + " is not a UOCR_REFERENCE_* value");
  g.sparse = p.reference_mode == UOCR_REFERENCE_SPARSE;
  if (p.reference_pages < -1 || p.reference_blocks < -1 || p.reference_block_tokens < 0)
    fail(UOCR_E_INVALID_ARGUMENT, "reference_pages and reference_blocks must be >= -1, reference_block_tokens >= 0");
  // The core counts "all" as 0; the C ABI keeps 0 for "default".
  if (p.reference_pages) g.sparse_params.page_budget = p.reference_pages < 0 ? 0 : p.reference_pages;
  if (p.reference_blocks) g.sparse_params.block_budget = p.reference_blocks < 0 ? 0 : p.reference_blocks;
  if (p.reference_block_tokens) g.sparse_params.block_tokens = p.reference_block_tokens;
  if (p.reference_gate_fan_out < 0 || p.reference_gate_fan_out == 1 || p.reference_gate_beam < 0)
    fail(UOCR_E_INVALID_ARGUMENT, "reference_gate_fan_out must be 0 (default) or >= 2 and reference_gate_beam >= 0, got " +
                                      std::to_string(p.reference_gate_fan_out) + " and " + std::to_string(p.reference_gate_beam));
  if (p.reference_gate_fan_out) g.sparse_params.gate_fan_out = p.reference_gate_fan_out;
  g.sparse_params.gate_beam = p.reference_gate_beam;
  if (p.draft != UOCR_DRAFT_ON && p.draft != UOCR_DRAFT_OFF)
    fail(UOCR_E_INVALID_ARGUMENT, "draft " + std::to_string(p.draft) + " is not a UOCR_DRAFT_* value");
  c.draft.enabled = p.draft == UOCR_DRAFT_ON;
  if (p.draft_max_tokens < 0 || p.draft_max_tokens > uocr::DraftParams::kMaxTokens)
    fail(UOCR_E_INVALID_ARGUMENT, "draft_max_tokens must be 0 (default) or 1.." + std::to_string(uocr::DraftParams::kMaxTokens) +
                                      ", got " + std::to_string(p.draft_max_tokens));
  if (p.draft_max_tokens) c.draft.max_tokens = p.draft_max_tokens;
  if (p.reserved_api14 != 0) fail(UOCR_E_INVALID_ARGUMENT, "reserved_api14 must be 0");
  c.keep_text = true;
  return c;
}

uocr::CheckpointOptions to_checkpoint(const uocr_session_params& p) {
  uocr::CheckpointOptions c;
  c.path = p.checkpoint_path ? p.checkpoint_path : "";
  if (p.checkpoint_every_tokens < 0) fail(UOCR_E_INVALID_ARGUMENT, "checkpoint_every_tokens must be >= 0");
  c.every_tokens = p.checkpoint_every_tokens;
  if (p.resume != 0 && p.resume != 1) fail(UOCR_E_INVALID_ARGUMENT, "resume must be 0 or 1, got " + std::to_string(p.resume));
  if (p.resume && c.path.empty()) fail(UOCR_E_INVALID_ARGUMENT, "resume = 1 needs a checkpoint_path");
  c.resume = p.resume == 1;
  return c;
}

uocr_run_summary to_c(const uocr::RunSummary& s) {
  uocr_run_summary o;
  std::memset(&o, 0, sizeof o);
  o.struct_size = sizeof o;
  o.stop_reason = int32_t(s.stop);
  o.empty = s.empty ? 1 : 0;
  o.pages = s.pages;
  o.visual_tokens = s.visual_tokens;
  o.prompt_tokens = s.prompt_tokens;
  o.generated_tokens = s.generated_tokens;
  o.vision_seconds = s.vision_seconds;
  o.prefill_seconds = s.prefill_seconds;
  o.decode_seconds = s.decode_seconds;
  o.reference_kv_bytes = s.memory.reference_kv_bytes;
  o.window_kv_bytes = s.memory.window_kv_bytes;
  o.kv_allocated_bytes = s.memory.kv_allocated_bytes;
  o.peak_kv_bytes = s.memory.peak_kv_bytes;
  o.text_len = s.text.size();
  o.scratch_bytes = s.memory.scratch_bytes;
  o.peak_scratch_bytes = s.memory.peak_scratch_bytes;
  o.peak_bytes = s.memory.peak_bytes;
  o.precision = int32_t(s.precision);
  return o;
}

// A run's summary with what drafting did.
uocr_run_summary to_c(const uocr::RunSummary& s, const uocr::SessionStats& st) {
  uocr_run_summary o = to_c(s);
  o.decode_passes = st.draft.passes;
  o.drafted_tokens = st.draft.drafted;
  o.accepted_tokens = st.draft.accepted;
  return o;
}

// A page callback's pages (uocr::CallbackPages) with the drafts the callback set, kept for the
// pages around the current one only (a session asks for the current page's and the next one's).
// The pages the callback sets are decoded until the run's deadline.
class CallbackDrafts final : public uocr::PageSource {
 public:
  using Pull = std::function<bool(int64_t index, const uocr::Deadline& deadline, uocr::ImageU8& page, std::string& draft)>;
  CallbackDrafts(int64_t count, Pull pull)
      : pages_(count, [this, pull = std::move(pull)](int64_t index, uocr::ImageU8& page) {
          std::string draft;
          const bool ok = pull(index, deadline_, page, draft);
          if (!draft.empty()) drafts_[index] = std::move(draft);
          return ok;
        }) {}
  int64_t count() const override { return pages_.count(); }
  bool next(uocr::ImageU8& page) override { return pages_.next(page); }
  void skip(int64_t n) override { pages_.skip(n); }
  std::string identity() const override { return pages_.identity(); }
  std::string draft_text(int64_t page) const override {
    drafts_.erase(drafts_.begin(), drafts_.lower_bound(page - 1));  // pages well behind are done
    const auto it = drafts_.find(page);
    return it == drafts_.end() ? std::string() : it->second;
  }
  void set_deadline(const uocr::Deadline& deadline) override { deadline_ = deadline; }

 private:
  mutable std::map<int64_t, std::string> drafts_;
  uocr::Deadline deadline_;
  uocr::CallbackPages pages_;
};

void add_page(uocr_session* s, uocr::ImageU8 image) {
  if (image.width <= 0 || image.height <= 0) fail(UOCR_E_INVALID_ARGUMENT, "page image is empty");
  s->pages.push_back(std::move(image));
}

// A page from an image file, from encoded bytes, or from raw RGB rows, checked as the header
// promises (the same for pages added to a session and pages set in a page callback).
uocr::ImageU8 file_image(const char* path, const uocr::DecodeLimits& limits, const uocr::Deadline& deadline = {}) {
  if (path == nullptr) fail(UOCR_E_INVALID_ARGUMENT, "image path is NULL");
  return uocr::load_image(path, limits, deadline);
}

uocr::ImageU8 encoded_image(const void* data, size_t size, const uocr::DecodeLimits& limits, const uocr::Deadline& deadline = {}) {
  if (data == nullptr) fail(UOCR_E_INVALID_ARGUMENT, "image data is NULL");
  if (size == 0) fail(UOCR_E_INVALID_IMAGE, "cannot decode image: 0 bytes");
  return uocr::decode_image(static_cast<const uint8_t*>(data), size, limits, deadline);
}

uocr::ImageU8 rgb_image(const uint8_t* rgb, int32_t width, int32_t height, size_t stride, const uocr::DecodeLimits& limits) {
  if (rgb == nullptr) fail(UOCR_E_INVALID_ARGUMENT, "RGB pixel pointer is NULL");
  if (width <= 0 || height <= 0)
    fail(UOCR_E_INVALID_ARGUMENT,
         "width and height must be positive, got " + std::to_string(width) + "x" + std::to_string(height));
  uocr::check_decode_budget({width, height, 3, 1}, limits);
  return uocr::image_from_rgb(rgb, width, height, stride ? stride : size_t(width) * 3);  // checks the stride
}

// Body of the uocr_page_set_* functions: `make` builds the image; failures are returned and
// remembered by the page (the run reports them if the callback sets no page after all).
template <class Make>
uocr_status set_page(uocr_page* page, const char* what, Make&& make) noexcept {
  try {
    if (page == nullptr) fail(UOCR_E_INVALID_HANDLE, "page handle is NULL");
    if (!is_live(page, kPageMagic))
      fail(UOCR_E_INVALID_HANDLE, "not a live page handle (pages are valid only inside their uocr_page_callback)");
    try {
      page->image = make();
      page->set = true;
    } catch (...) {
      page->set = false;
      page->error = current_exception_status(page->message, what);
      return record(page->error, page->message.c_str(), nullptr);
    }
    return record(UOCR_OK, "", nullptr);
  } catch (...) {
    return record_exception(nullptr, what);
  }
}

// C event for a core event; its strings point into `e`.
uocr_event to_c(const uocr::Event& e) {
  uocr_event ev;
  std::memset(&ev, 0, sizeof ev);
  ev.struct_size = sizeof ev;
  ev.text = "";
  ev.label = "";
  ev.token_id = -1;
  switch (e.type) {
    case uocr::Event::Type::token:
      ev.type = UOCR_EVENT_TOKEN;
      ev.token_id = e.token;
      ev.text = e.text.c_str();
      ev.text_len = e.text.size();
      break;
    case uocr::Event::Type::page:
      ev.type = UOCR_EVENT_PAGE;
      ev.page = e.page;
      break;
    case uocr::Event::Type::block:
      ev.type = UOCR_EVENT_BLOCK;
      ev.page = e.page;
      ev.label = e.block.label.c_str();
      for (int k = 0; k < 4; ++k) {
        ev.box[k] = e.block.box[k];
        ev.box_px[k] = e.box_px[k];
      }
      break;
  }
  return ev;
}

// The one run of the C ABI: the session's parameters over `pages`, events forwarded to the
// caller's callback, the summary and transcript stored. Throws on failure (session_call reports).
void run_document(uocr_session* session, uocr::PageSource& pages, uocr_event_callback callback, void* user_data,
                  uocr_run_summary* summary) {
  session->text.clear();
  std::function<bool(const uocr::Event&)> on_event;
  if (callback) {
    on_event = [&](const uocr::Event& e) {
      const uocr_event ev = to_c(e);
      return callback(&ev, user_data) == 0;
    };
  }
  const uocr::RunSummary sum = session->core->run(pages, on_event, session->checkpoint);
  session->text = sum.text;
  if (summary) write_output(summary, to_c(sum, session->core->stats()));
  if (sum.stop == uocr::StopReason::cancelled)
    fail(UOCR_E_CANCELLED, "run cancelled by the event callback after " + std::to_string(sum.generated_tokens) +
                               " generated tokens; the partial transcript is available");
}

// Every status-returning entry point runs its body through c_call or session_call: a failure
// becomes the returned status and the thread's message (`what`: the call's work, named when an
// allocation fails). session_call first holds the session (validated and not busy) and sets
// `held`; from then on the outcome also lands in that session's error slot.
template <class Body>
uocr_status sealed_call(const char* what, Body&& body) noexcept {
  const uocr_session* held = nullptr;
  try {
    body(held);
    return record(UOCR_OK, "", held);
  } catch (...) {
    return record_exception(held, what);
  }
}

template <class Body>
uocr_status c_call(const char* what, Body&& body) noexcept {
  return sealed_call(what, [&](const uocr_session*&) { body(); });
}

template <class SessionHandle, class Body>
uocr_status session_call(SessionHandle* session, const char* what, Body&& body) noexcept {
  return sealed_call(what, [&](const uocr_session*& held) {
    check_session(session);
    BusyGuard busy(session);
    held = session;
    body();
  });
}

// Frees a live handle (NULL: nothing); `check` validates it and may refuse, which is recorded as
// the thread's error.
template <class Handle, class Check>
void free_handle(Handle* h, Check&& check) noexcept {
  if (h == nullptr) return;
  try {
    check(h);
    unregister_handle(h);
    h->magic = kDeadMagic;
    delete h;
  } catch (...) {
    record_exception(nullptr, "freeing a handle");
  }
}

// The engine a session created from a model handle runs on: the handle's engine for the same
// choice, opened the first time (under the lock, so racing sessions open it once).
std::shared_ptr<uocr::Engine> model_engine(const uocr_model& m, const uocr::SessionParams& p) {
  std::lock_guard<std::mutex> lock(m.engines_mutex);
  for (const std::shared_ptr<uocr::Engine>& e : m.engines)
    if (uocr::asks_for_engine(p, e->backend(), e->options())) return e;
  m.engines.push_back(uocr::open_engine(m.model, p.backend, uocr::engine_options(p)));
  return m.engines.back();
}

// What uocr_session_create and uocr_session_create_on_engine share: the params read and checked
// (against `model` before any device is opened), then the session made on `engine_for(params)`.
template <class EngineFor>
void create_session(const std::shared_ptr<const uocr::Model>& model, const uocr_session_params* params,
                    uocr_session** out_session, EngineFor&& engine_for) {
  uocr_session_params p = read_params(params, default_session_params(), UOCR_SESSION_PARAMS_MIN_SIZE, "uocr_session_params");
  // A struct from before API 11 has no precision field: its caller got f32 then, and still does.
  if (params != nullptr && params->struct_size <= offsetof(uocr_session_params, precision)) p.precision = UOCR_PRECISION_F32;
  auto s = std::make_unique<uocr_session>();
  s->model = model;
  s->params = to_core(p);
  if (p.max_image_pixels != 0) s->limits.max_pixels = p.max_image_pixels;
  if (p.max_image_bytes != 0) s->limits.max_bytes = p.max_image_bytes;
  if (p.max_jpeg_scans < 0)
    fail(UOCR_E_INVALID_ARGUMENT, "max_jpeg_scans must be 0 (default) or positive, got " + std::to_string(p.max_jpeg_scans));
  if (p.max_jpeg_scans != 0) s->limits.max_jpeg_scans = p.max_jpeg_scans;
  s->checkpoint = to_checkpoint(p);
  const uocr::DocumentParams document = to_document_params(p, model->decode_defaults());
  uocr::validate(*model, s->params);
  s->core = std::make_unique<uocr::Session>(engine_for(s->params), s->params, document);  // validates the rest
  register_handle(s.get(), kSessionMagic);
  *out_session = s.release();
}

// NUL-terminated `text` in dst[capacity], cut at a UTF-8 character boundary when it is longer.
void copy_text(char* dst, size_t capacity, const std::string& text) {
  size_t n = std::min(text.size(), capacity - 1);
  while (n > 0 && n < text.size() && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80) --n;
  std::memcpy(dst, text.data(), n);
  dst[n] = '\0';
}

}  // namespace

// ---- library information --------------------------------------------------------------------

extern "C" {

UOCR_API const char* uocr_version_string(void) { return UOCR_VERSION_STRING; }

UOCR_API int32_t uocr_version_number(void) { return UOCR_VERSION_NUMBER; }

UOCR_API int32_t uocr_api_version(void) { return UOCR_API_VERSION; }

UOCR_API const char* uocr_build_info(void) {
  return "uocr " UOCR_VERSION_STRING " api " UOCR_STRINGIZE(UOCR_API_VERSION) "; backends: cpu"
#if UOCR_HAVE_VULKAN
                          ", vulkan"
#endif
#if UOCR_HAVE_CUDA
                          ", cuda"
#endif
#if defined(_OPENMP)
                          "; openmp: yes"
#else
                          "; openmp: no"
#endif
#if defined(__AVX512F__)
                          "; simd: avx512"
#elif defined(__AVX2__)
                          "; simd: avx2"
#elif defined(__SSE2__) || defined(__aarch64__)
                          "; simd: baseline"
#else
                          "; simd: none"
#endif
#if defined(__clang__)
                          "; compiler: clang " __clang_version__
#elif defined(__GNUC__)
                          "; compiler: gcc " __VERSION__
#endif
      ;
}

UOCR_API const char* uocr_status_string(uocr_status status) {
  switch (status) {
    case UOCR_OK: return "ok";
    case UOCR_E_INVALID_ARGUMENT: return "invalid argument";
    case UOCR_E_IO: return "I/O error";
    case UOCR_E_INVALID_MODEL: return "invalid model";
    case UOCR_E_INVALID_IMAGE: return "invalid image";
    case UOCR_E_UNSUPPORTED: return "unsupported";
    case UOCR_E_OUT_OF_MEMORY: return "out of memory";
    case UOCR_E_TOKENIZER: return "tokenizer error";
    case UOCR_E_CANCELLED: return "cancelled";
    case UOCR_E_INTERNAL: return "internal error";
    case UOCR_E_INVALID_HANDLE: return "invalid handle";
    case UOCR_E_VERSION_MISMATCH: return "version mismatch";
    case UOCR_E_BUSY: return "session busy";
    case UOCR_E_BUFFER_TOO_SMALL: return "buffer too small";
    default: return "unknown status";
  }
}

UOCR_API const char* uocr_last_error(void) { return message_or_status(t_error.message, t_error.status); }

UOCR_API const char* uocr_stop_reason_string(int32_t stop_reason) {
  switch (stop_reason) {
    case UOCR_STOP_EOS:
    case UOCR_STOP_MAX_TOKENS:
    case UOCR_STOP_CONTEXT_LIMIT:
    case UOCR_STOP_LOOP:
    case UOCR_STOP_CANCELLED:
    case UOCR_STOP_NO_TOKEN:
    case UOCR_STOP_TIME_BUDGET: return uocr::stop_reason_name(static_cast<uocr::StopReason>(stop_reason));
    default: return "unknown";
  }
}

// ---- model ----------------------------------------------------------------------------------

UOCR_API void uocr_model_params_init_sized(uocr_model_params* p, uint32_t struct_size) {
  uocr_model_params d;
  std::memset(&d, 0, sizeof d);
  d.api_version = UOCR_API_VERSION;
  write_defaults(p, d, struct_size);
}

UOCR_API void(uocr_model_params_init)(uocr_model_params* p) { uocr_model_params_init_sized(p, kApi2Size.model_params); }

UOCR_API uocr_status uocr_model_load(const char* dir, const uocr_model_params* params, uocr_model** out_model) {
  return c_call("loading the model", [&] {
    if (out_model == nullptr) fail(UOCR_E_INVALID_ARGUMENT, "out_model is NULL");
    *out_model = nullptr;
    if (dir == nullptr) fail(UOCR_E_INVALID_ARGUMENT, "model directory is NULL");
    uocr_model_params defaults;
    uocr_model_params_init(&defaults);
    const uocr_model_params p = read_params(params, defaults, UOCR_MODEL_PARAMS_MIN_SIZE, "uocr_model_params");
    if (p.api_version == 0)
      fail(UOCR_E_INVALID_ARGUMENT, "uocr_model_params.api_version is 0 (call uocr_model_params_init first)");
    if (p.api_version > UOCR_API_VERSION)
      fail(UOCR_E_VERSION_MISMATCH, "the caller was built against uocr.h API version " + std::to_string(p.api_version) +
                                        " but this library (uocr " + uocr_version_string() + ") implements API version " +
                                        std::to_string(UOCR_API_VERSION) + "; use a newer libuocr");
    if (p.flags != 0 || p.reserved0 != 0)
      fail(UOCR_E_INVALID_ARGUMENT, "uocr_model_params.flags and reserved0 must be 0");
    auto handle = std::make_unique<uocr_model>();
    handle->model = uocr::Model::load(dir);
    register_handle(handle.get(), kModelMagic);
    *out_model = handle.release();
  });
}

UOCR_API void uocr_model_free(uocr_model* model) { free_handle(model, check_model); }

UOCR_API void uocr_model_info_init_sized(uocr_model_info* info, uint32_t struct_size) {
  write_defaults(info, zeroed<uocr_model_info>(), struct_size);
}

UOCR_API void(uocr_model_info_init)(uocr_model_info* info) { uocr_model_info_init_sized(info, kApi2Size.model_info); }

UOCR_API uocr_status uocr_model_get_info(const uocr_model* model, uocr_model_info* info) {
  return c_call("reading the model info", [&] {
    check_model(model);
    check_output(info, UOCR_MODEL_INFO_MIN_SIZE, "info");
    const uocr::ModelConfig& c = model->model->config();
    uocr_model_info o;
    uocr_model_info_init(&o);
    o.hidden_size = c.decoder.hidden;
    o.layers = c.decoder.layers;
    o.vocab_size = c.decoder.vocab;
    o.sliding_window = c.decoder.sliding_window;
    o.image_size = c.sam.image_size;
    o.max_positions = c.decoder.max_positions;
    o.bos_id = c.decoder.bos_id;
    o.eos_id = c.decoder.eos_id;
    o.image_token_id = model->model->image_token_id();
    write_output(info, o);
  });
}

// ---- session --------------------------------------------------------------------------------

UOCR_API void uocr_session_params_init_sized(uocr_session_params* p, uint32_t struct_size) {
  uocr_session_params d;
  try {
    d = default_session_params();
  } catch (...) {  // SessionParams' std::string default cannot throw, but stay sealed
    std::memset(&d, 0, sizeof d);
  }
  write_defaults(p, d, struct_size);
}

UOCR_API void(uocr_session_params_init)(uocr_session_params* p) {
  uocr_session_params_init_sized(p, kApi2Size.session_params);
}

UOCR_API uocr_status uocr_session_create(const uocr_model* model, const uocr_session_params* params,
                                         uocr_session** out_session) {
  return c_call("creating the session", [&] {
    if (out_session == nullptr) fail(UOCR_E_INVALID_ARGUMENT, "out_session is NULL");
    *out_session = nullptr;
    check_model(model);
    create_session(model->model, params, out_session, [&](const uocr::SessionParams& p) { return model_engine(*model, p); });
  });
}

UOCR_API uocr_status uocr_session_create_on_engine(uocr_engine* engine, const uocr_session_params* params,
                                                   uocr_session** out_session) {
  return c_call("creating the session", [&] {
    if (out_session == nullptr) fail(UOCR_E_INVALID_ARGUMENT, "out_session is NULL");
    *out_session = nullptr;
    check_engine(engine);
    create_session(engine->engine->model(), params, out_session, [&](const uocr::SessionParams&) { return engine->engine; });
  });
}

// ---- engines --------------------------------------------------------------------------------

UOCR_API void uocr_engine_params_init_sized(uocr_engine_params* p, uint32_t struct_size) {
  write_defaults(p, zeroed<uocr_engine_params>(), struct_size);
}

UOCR_API uocr_status uocr_engine_open(const uocr_model* model, const uocr_engine_params* params, uocr_engine** out_engine) {
  return c_call("opening the engine", [&] {
    if (out_engine == nullptr) fail(UOCR_E_INVALID_ARGUMENT, "out_engine is NULL");
    *out_engine = nullptr;
    check_model(model);
    uocr_engine_params defaults;
    uocr_engine_params_init(&defaults);
    const uocr_engine_params p = read_params(params, defaults, UOCR_ENGINE_PARAMS_MIN_SIZE, "uocr_engine_params");
    if (p.reserved0 != 0) fail(UOCR_E_INVALID_ARGUMENT, "uocr_engine_params.reserved0 must be 0");
    const EngineChoice c = to_engine_choice(p.backend, p.device_index, p.max_batch, p.max_batch_wait_us, p.cuda_graphs, p.precision);
    auto handle = std::make_unique<uocr_engine>();
    handle->engine = uocr::open_engine(model->model, c.backend, c.options);
    register_handle(handle.get(), kEngineMagic);
    *out_engine = handle.release();
  });
}

UOCR_API void uocr_engine_free(uocr_engine* engine) { free_handle(engine, check_engine); }

UOCR_API void uocr_engine_info_init_sized(uocr_engine_info* info, uint32_t struct_size) {
  write_defaults(info, zeroed<uocr_engine_info>(), struct_size);
}

UOCR_API uocr_status uocr_engine_get_info(const uocr_engine* engine, uocr_engine_info* info) {
  return c_call("reading the engine info", [&] {
    check_engine(engine);
    check_output(info, UOCR_ENGINE_INFO_MIN_SIZE, "info");
    const uocr::EngineInfo e = engine->engine->info();
    uocr_engine_info o;
    uocr_engine_info_init(&o);
    o.backend = e.backend == uocr::Backend::vulkan ? UOCR_BACKEND_VULKAN
                : e.backend == uocr::Backend::cuda ? UOCR_BACKEND_CUDA
                                                   : UOCR_BACKEND_CPU;
    o.device_index = e.device_index;
    o.precision = int32_t(e.precision);
    copy_text(o.device, sizeof o.device, e.device);
    copy_text(o.driver, sizeof o.driver, e.driver);
    write_output(info, o);
  });
}

UOCR_API void uocr_session_free(uocr_session* session) {
  free_handle(session, [](uocr_session* s) {
    check_session(s);
    int expected = 0;
    if (!s->busy.compare_exchange_strong(expected, 1, std::memory_order_acquire))
      fail(UOCR_E_BUSY, "uocr_session_free: the session is in a call (from its own event callback?); not freed");
  });
}

UOCR_API const char* uocr_session_last_error(const uocr_session* session) {
  if (session == nullptr) return "session handle is NULL";
  try {
    if (!is_live(session, kSessionMagic)) return "not a live session handle (freed, or not a uocr_session)";
  } catch (...) {  // the registry lock failed
    return "internal error";
  }
  return message_or_status(session->error, session->error_status);
}

UOCR_API uocr_status uocr_session_add_image_file(uocr_session* session, const char* path) {
  return session_call(session, "loading a page image", [&] { add_page(session, file_image(path, session->limits)); });
}

UOCR_API uocr_status uocr_session_add_image_encoded(uocr_session* session, const void* data, size_t size) {
  return session_call(session, "decoding a page image",
                      [&] { add_page(session, encoded_image(data, size, session->limits)); });
}

UOCR_API uocr_status uocr_session_add_image_rgb(uocr_session* session, const uint8_t* rgb, int32_t width,
                                                int32_t height, size_t stride) {
  return session_call(session, "copying a page image",
                      [&] { add_page(session, rgb_image(rgb, width, height, stride, session->limits)); });
}

UOCR_API uocr_status uocr_session_set_page_draft(uocr_session* session, int32_t index, const char* text, size_t size) {
  return session_call(session, "copying a page's draft", [&] {
    if (index < 0 || size_t(index) >= session->pages.size())
      fail(UOCR_E_INVALID_ARGUMENT, "page " + std::to_string(index) + " was not added (the session has " +
                                        std::to_string(session->pages.size()) + " pages)");
    if (text == nullptr && size > 0) fail(UOCR_E_INVALID_ARGUMENT, "draft text is NULL but its size is not 0");
    if (session->drafts.size() < session->pages.size()) session->drafts.resize(session->pages.size());
    session->drafts[size_t(index)].assign(text ? text : "", size);
  });
}

UOCR_API uocr_status uocr_session_clear_pages(uocr_session* session) {
  return session_call(session, "clearing the pages", [&] {
    session->pages.clear();
    session->drafts.clear();
  });
}

UOCR_API uocr_status uocr_session_page_count(const uocr_session* session, int32_t* out_count) {
  return session_call(session, "counting the pages", [&] {
    if (out_count == nullptr) fail(UOCR_E_INVALID_ARGUMENT, "out_count is NULL");
    *out_count = int32_t(session->pages.size());
  });
}

UOCR_API void uocr_run_summary_init_sized(uocr_run_summary* summary, uint32_t struct_size) {
  uocr_run_summary d;
  std::memset(&d, 0, sizeof d);
  write_defaults(summary, d, struct_size);
}

UOCR_API void(uocr_run_summary_init)(uocr_run_summary* summary) {
  uocr_run_summary_init_sized(summary, kApi2Size.run_summary);
}

UOCR_API uocr_status uocr_session_run(uocr_session* session, uocr_event_callback callback, void* user_data,
                                      uocr_run_summary* summary) {
  return session_call(session, "running the session", [&] {
    if (summary) check_output(summary, UOCR_RUN_SUMMARY_MIN_SIZE, "summary");
    if (session->pages.empty()) fail(UOCR_E_INVALID_ARGUMENT, "no pages were added to the session");
    uocr::ImageListPages images(session->pages);
    uocr::DraftedPages pages(images, session->drafts);
    run_document(session, pages, callback, user_data, summary);
  });
}

UOCR_API uocr_status uocr_page_set_file(uocr_page* page, const char* path) {
  return set_page(page, "loading a page image", [&] { return file_image(path, *page->limits, *page->deadline); });
}

UOCR_API uocr_status uocr_page_set_encoded(uocr_page* page, const void* data, size_t size) {
  return set_page(page, "decoding a page image", [&] { return encoded_image(data, size, *page->limits, *page->deadline); });
}

UOCR_API uocr_status uocr_page_set_rgb(uocr_page* page, const uint8_t* rgb, int32_t width, int32_t height, size_t stride) {
  return set_page(page, "copying a page image", [&] { return rgb_image(rgb, width, height, stride, *page->limits); });
}

UOCR_API uocr_status uocr_page_set_draft(uocr_page* page, const char* text, size_t size) {
  return c_call("copying a page's draft", [&] {
    if (page == nullptr || !is_live(page, kPageMagic))
      fail(UOCR_E_INVALID_HANDLE, "not a live page (pages are valid only inside their uocr_page_callback)");
    if (text == nullptr && size > 0) fail(UOCR_E_INVALID_ARGUMENT, "draft text is NULL but its size is not 0");
    page->draft.assign(text ? text : "", size);
  });
}

UOCR_API uocr_status uocr_session_run_pages(uocr_session* session, int64_t page_count, uocr_page_callback pages,
                                            void* pages_user_data, uocr_event_callback callback, void* user_data,
                                            uocr_run_summary* summary) {
  return session_call(session, "running the session", [&] {
    if (summary) check_output(summary, UOCR_RUN_SUMMARY_MIN_SIZE, "summary");
    if (pages == nullptr) fail(UOCR_E_INVALID_ARGUMENT, "page callback is NULL");
    // The events' page numbers are int32_t; within that, the per-page token counts cannot overflow.
    if (page_count < 1 || page_count > INT32_MAX)
      fail(UOCR_E_INVALID_ARGUMENT, "page_count must be in [1, " + std::to_string(INT32_MAX) + "], got " + std::to_string(page_count));
    const uocr::DecodeLimits limits = session->limits;
    CallbackDrafts source(page_count, [&](int64_t index, const uocr::Deadline& deadline, uocr::ImageU8& out, std::string& draft) {
      uocr_page page;
      page.limits = &limits;
      page.deadline = &deadline;
      register_handle(&page, kPageMagic);
      int32_t rc;
      try {
        rc = pages(index, &page, pages_user_data);
      } catch (...) {
        unregister_handle(&page);
        throw;
      }
      unregister_handle(&page);
      page.magic = kDeadMagic;
      if (rc != 0)
        fail(UOCR_E_CANCELLED, "the page callback returned " + std::to_string(rc) + " for page " + std::to_string(index));
      if (!page.set) {
        if (page.error == UOCR_E_CANCELLED) deadline.check("decoding page " + std::to_string(index));  // the run's time is up
        if (page.error != UOCR_OK) fail(page.error, "page " + std::to_string(index) + ": " + page.message);
        fail(UOCR_E_INVALID_ARGUMENT, "the page callback set no page for page " + std::to_string(index) +
                                          " (call uocr_page_set_file, _encoded or _rgb)");
      }
      out = std::move(page.image);
      draft = std::move(page.draft);
      return true;
    });
    run_document(session, source, callback, user_data, summary);
  });
}

UOCR_API uocr_status uocr_session_text(const uocr_session* session, char* buf, size_t capacity, size_t* out_len) {
  return session_call(session, "copying the transcript", [&] {
    const std::string& t = session->text;
    if (out_len) *out_len = t.size();
    if (buf == nullptr && capacity == 0) return;
    if (buf == nullptr) fail(UOCR_E_INVALID_ARGUMENT, "buf is NULL but capacity is not 0");
    if (capacity < t.size() + 1)
      fail(UOCR_E_BUFFER_TOO_SMALL, "the transcript needs " + std::to_string(t.size() + 1) + " bytes (NUL included), buffer has " +
                                        std::to_string(capacity));
    std::memcpy(buf, t.data(), t.size());
    buf[t.size()] = '\0';
  });
}

}  // extern "C"
