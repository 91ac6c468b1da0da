// What a transcription is asked to do and what it reports: SessionParams in; Event (streamed)
// and RunSummary out. Shared by uocr::OneShotSession (session.hpp) and uocr::Session
// (infinite.hpp), which run the same generation loop.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "uocr/core/error.hpp"
#include "uocr/engine/backend.hpp"
#include "uocr/engine/registry.hpp"
#include "uocr/model/model.hpp"
#include "uocr/session/loop_guard.hpp"
#include "uocr/session/output_parser.hpp"
#include "uocr/session/sampler.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

enum class ImageMode { base, gundam };

// time_budget: SessionParams::page_time_budget_seconds ran out.
enum class StopReason { eos, max_tokens, context_limit, loop, cancelled, no_token, time_budget };

inline const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::eos: return "eos";
    case StopReason::max_tokens: return "max_tokens";
    case StopReason::context_limit: return "context_limit";
    case StopReason::loop: return "loop";
    case StopReason::cancelled: return "cancelled";
    case StopReason::no_token: return "no_token";
    case StopReason::time_budget: return "time_budget";
  }
  return "?";
}

struct SessionParams {
  ImageMode mode = ImageMode::base;  // single page; several pages always use base views
  std::string prompt;                // empty: upstream's prompt for one page / several pages
  int window = -1;                   // R-SWA window n; -1: the config's (128 if it has none); 0: full attention
  int64_t max_new_tokens = 0;        // 0: until EOS or the context limit
  int64_t min_new_tokens = 0;        // EOS is suppressed until this many tokens (as Hugging Face generate's)
  SamplingParams sampling;
  int ngram_size = 35;               // upstream README; 0 disables the rule
  int ngram_window = -1;             // -1: 128 for one page, 1024 for several (upstream README)
  bool loop_guard = true;
  LoopGuardParams loop_guard_params;
  Backend backend = Backend::cpu;    // where vision and decoder run (uocr/engine/open.hpp)
  int device_index = 0;              // the backend's device (Vulkan: Context::list_devices() order)
  BatchParams batching;              // continuous batching with the model's other sessions (open_engine); off by default
  bool cuda_graphs = true;           // CUDA backend: decode steps replay CUDA graphs (same logits; backends/cuda/README.md)
  // The vision encoder's and the prefill's large products (uocr/core/precision.hpp): f32, the
  // default and the reference, or bf16, upstream's own arithmetic, which runs on the cpu backend
  // of CPUs with bf16 dot products (f32 elsewhere): faster where float32 FMAs are single-ported,
  // slower where they are not (docs/PERFORMANCE.md). Changes the tokens: part of a checkpoint's
  // identity (as it ran: EngineInfo::precision).
  Precision precision = Precision::f32;
  // Seconds a run may take per page of its document (decoding, encoding, prefill and generation;
  // a run of N pages stops after N times this with StopReason::time_budget, between two tokens
  // or while pages are prepared, encoded or prefilled: uocr/core/deadline.hpp; the text so far
  // and the last checkpoint are kept, a resumed run gets the budget afresh). 0: none.
  double page_time_budget_seconds = 0;
};

// The engine a session opens (uocr/engine/open.hpp) besides its backend.
inline EngineOptions engine_options(const SessionParams& p) {
  EngineOptions o;
  o.device_index = p.device_index;
  o.batching = p.batching;
  o.cuda_graphs = p.cuda_graphs;
  o.precision = p.precision;
  return o;
}

// Whether p's engine fields (backend, device_index, batching, cuda_graphs, precision) ask for
// backend b opened with options o.
inline bool asks_for_engine(const SessionParams& p, Backend b, const EngineOptions& o) {
  const EngineOptions mine = engine_options(p);
  return p.backend == b && mine.device_index == o.device_index && mine.batching.max_batch == o.batching.max_batch &&
         mine.batching.max_wait_us == o.batching.max_wait_us && mine.cuda_graphs == o.cuda_graphs &&
         mine.precision == o.precision;
}

// "cuda device 1, batching 4 (wait 1000 us), CUDA graphs off, bf16": an engine choice in words.
inline std::string describe_engine_choice(Backend b, const EngineOptions& o) {
  std::string s = std::string(backend_name(b)) + " device " + std::to_string(o.device_index);
  if (o.batching.max_batch > 1)
    s += ", batching " + std::to_string(o.batching.max_batch) + " (wait " + std::to_string(o.batching.max_wait_us) + " us)";
  if (!o.cuda_graphs) s += ", CUDA graphs off";
  return s + ", " + precision_name(o.precision);
}

// Checks everything up front, not seconds later after the vision encoder has run.
inline void validate(const Model& model, const SessionParams& p) {
  require(p.window >= -1, Status::invalid_argument, "window must be -1, 0 or positive");
  require(p.max_new_tokens >= 0, Status::invalid_argument, "max_new_tokens must be >= 0");
  require(std::isfinite(p.page_time_budget_seconds) && p.page_time_budget_seconds >= 0, Status::invalid_argument,
          [&] { return "page_time_budget_seconds must be a finite number >= 0 (0: none), got " + std::to_string(p.page_time_budget_seconds); });
  require(p.min_new_tokens >= 0 && (p.max_new_tokens == 0 || p.min_new_tokens <= p.max_new_tokens), Status::invalid_argument,
          "min_new_tokens must be >= 0 and not above max_new_tokens");
  require(p.ngram_size >= 0, Status::invalid_argument, "ngram_size must be >= 0");
  require(p.ngram_window == -1 || p.ngram_window > 0 || p.ngram_size == 0, Status::invalid_argument,
          "ngram_window must be -1 (upstream default) or positive when the n-gram rule is on");
  require(p.loop_guard_params.check_every > 0 && p.loop_guard_params.min_repeats > 1 && p.loop_guard_params.max_period > 0,
          Status::invalid_argument, "loop guard needs check_every > 0, min_repeats > 1 and max_period > 0");
  require(p.mode == ImageMode::base || model.config().sam.image_size == 1024, Status::unsupported,
          "gundam mode needs a model whose page size is 1024");
  validate(p.batching);
  Sampler check(p.sampling);  // throws on bad sampling parameters
  (void)check;
}

// R-SWA window a run uses: the params' override, else the config's sliding window, else upstream's
// 128; at most the model's context (max_position_embeddings), since the ring is allocated at its
// full size up front and a window past the context has no keys the model was trained to reach.
inline int effective_window(const Model& model, const SessionParams& p) {
  const DecoderConfig& d = model.config().decoder;
  const int window = p.window >= 0 ? p.window : d.sliding_window > 0 ? d.sliding_window : 128;
  return std::min(window, d.max_positions);
}

struct Event {
  enum class Type { token, page, block };
  Type type = Type::token;
  int32_t token = -1;   // token: the id (-1 for the final flush of an incomplete character)
  std::string text;     // token: the UTF-8 text it completes (may be empty mid-character)
  int page = 0;         // page and block: page index
  LayoutBlock block;    // block: label and 0..999 box
  int box_px[4] = {0, 0, 0, 0};  // block: box in the page image's pixels
};

// Bytes of memory a run holds, as the engines count their own buffers (not estimates). KV: the
// cache. Scratch: the engines' working memory besides it (vision activations, the decoder's
// hidden states, scores and MoE buffers, the prefill input and one page's embeddings, SR-SWA's
// summaries and selections; on Vulkan / CUDA the device buffers allocated for activations).
struct MemoryStats {
  size_t reference_kv_bytes = 0;  // the prompt's keys/values (visual tokens included)
  size_t window_kv_bytes = 0;     // generated tokens' keys/values held now
  size_t kv_allocated_bytes = 0;  // storage reserved for both
  size_t peak_kv_bytes = 0;       // largest reference + window seen during the run
  size_t scratch_bytes = 0;       // engine working memory held now (vision + decoder)
  size_t peak_scratch_bytes = 0;  // largest scratch_bytes during the run
  size_t peak_bytes = 0;          // largest kv_allocated_bytes + scratch_bytes at one moment of the run
};

struct RunSummary {
  StopReason stop = StopReason::eos;
  std::string text;  // the transcript, whitespace-trimmed as upstream does
  bool empty = true;
  int64_t pages = 0, visual_tokens = 0, prompt_tokens = 0, generated_tokens = 0;
  double vision_seconds = 0, prefill_seconds = 0, decode_seconds = 0;
  MemoryStats memory;
  Precision precision = Precision::f32;  // what the large products ran in (EngineInfo::precision)
};

UOCR_NAMESPACE_END
