// uocr::Session: one transcription over a shared, immutable Model. Pages in, events out:
// the pages are encoded, the prompt (BOS + visual tokens + prompt text) is prefilled as the
// R-SWA reference, then tokens are generated with the reference kept and only the last n
// generated tokens' keys/values in a ring, so memory stays constant however long the output.
//
// Thread-safety: a Session is used by one thread at a time; the Model may be shared by many.
#pragma once
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "uocr/decoder/decoder.hpp"
#include "uocr/decoder/kv_cache.hpp"
#include "uocr/image/image.hpp"
#include "uocr/image/preprocess.hpp"
#include "uocr/model/model.hpp"
#include "uocr/session/loop_guard.hpp"
#include "uocr/session/ngram.hpp"
#include "uocr/session/output_parser.hpp"
#include "uocr/session/prompt.hpp"
#include "uocr/session/sampler.hpp"
#include "uocr/tokenizer/utf8.hpp"
#include "uocr/vision/encoder.hpp"

namespace uocr {

enum class ImageMode { base, gundam };

enum class StopReason { eos, max_tokens, context_limit, loop, cancelled, no_token };

inline const char* stop_reason_name(StopReason r) {
  switch (r) {
    case StopReason::eos: return "eos";
    case StopReason::max_tokens: return "max_tokens";
    case StopReason::context_limit: return "context_limit";
    case StopReason::loop: return "loop";
    case StopReason::cancelled: return "cancelled";
    case StopReason::no_token: return "no_token";
  }
  return "?";
}

struct SessionParams {
  ImageMode mode = ImageMode::base;  // single page; several pages always use base views
  std::string prompt;                // empty: upstream's prompt for one page / several pages
  int window = -1;                   // R-SWA window n; -1: the config's (128 if it has none); 0: full attention
  int64_t max_new_tokens = 0;        // 0: until EOS or the context limit
  SamplingParams sampling;
  int ngram_size = 35;               // upstream README; 0 disables the rule
  int ngram_window = -1;             // -1: 128 for one page, 1024 for several (upstream README)
  bool loop_guard = true;
  LoopGuardParams loop_guard_params;
};

struct Event {
  enum class Type { token, page, block };
  Type type = Type::token;
  int32_t token = -1;   // token: the id (-1 for the final flush of an incomplete character)
  std::string text;     // token: the UTF-8 text it completes (may be empty mid-character)
  int page = 0;         // page and block: page index
  LayoutBlock block;    // block: label and 0..999 box
  int box_px[4] = {0, 0, 0, 0};  // block: box in the page image's pixels
};

struct MemoryStats {
  size_t reference_kv_bytes = 0;  // the prompt's keys/values (visual tokens included)
  size_t window_kv_bytes = 0;     // generated tokens' keys/values held now
  size_t kv_allocated_bytes = 0;  // storage reserved for both
  size_t peak_kv_bytes = 0;       // largest reference + window seen during the run
};

struct RunSummary {
  StopReason stop = StopReason::eos;
  std::string text;  // the transcript, whitespace-trimmed as upstream does
  bool empty = true;
  int64_t pages = 0, visual_tokens = 0, prompt_tokens = 0, generated_tokens = 0;
  double vision_seconds = 0, prefill_seconds = 0, decode_seconds = 0;
  MemoryStats memory;
};

class Session {
 public:
  Session(std::shared_ptr<const Model> model, SessionParams params)
      : model_(std::move(model)), params_(std::move(params)) {
    require(model_ != nullptr, Status::invalid_argument, "session needs a model");
    require(params_.window >= -1, Status::invalid_argument, "window must be -1, 0 or positive");
    require(params_.max_new_tokens >= 0, Status::invalid_argument, "max_new_tokens must be >= 0");
    // Everything is validated here, not seconds later after the vision encoder has run.
    require(params_.ngram_size >= 0, Status::invalid_argument, "ngram_size must be >= 0");
    require(params_.ngram_window == -1 || params_.ngram_window > 0 || params_.ngram_size == 0, Status::invalid_argument,
            "ngram_window must be -1 (upstream default) or positive when the n-gram rule is on");
    require(params_.loop_guard_params.check_every > 0 && params_.loop_guard_params.min_repeats > 1 &&
                params_.loop_guard_params.max_period > 0,
            Status::invalid_argument, "loop guard needs check_every > 0, min_repeats > 1 and max_period > 0");
    require(params_.mode == ImageMode::base || model_->config().sam.image_size == 1024, Status::unsupported,
            "gundam mode needs a model whose page size is 1024");
    Sampler check(params_.sampling);  // throws on bad sampling parameters
    (void)check;
  }

  const Model& model() const { return *model_; }

  void add_page(ImageU8 image) {
    require(image.width > 0 && image.height > 0, Status::invalid_argument, "page image is empty");
    pages_.push_back(std::move(image));
  }
  size_t page_count() const { return pages_.size(); }

  // Window the run uses: params override, else config's sliding window, else upstream's 128.
  int effective_window() const {
    if (params_.window >= 0) return params_.window;
    return model_->config().decoder.sliding_window > 0 ? model_->config().decoder.sliding_window : 128;
  }

  // Transcribes the pages added so far. `on_event` returning false cancels the run (the summary
  // then says so). Can be called again after more pages are added: each run starts afresh.
  RunSummary run(const std::function<bool(const Event&)>& on_event = {}) {
    require(!pages_.empty(), Status::invalid_argument, "no pages were added to the session");
    const ModelConfig& cfg = model_->config();
    const bool multi = pages_.size() > 1;
    RunSummary sum;
    sum.pages = int64_t(pages_.size());

    auto t0 = std::chrono::steady_clock::now();
    VisionEncoder encoder(cfg, model_->weights());
    std::vector<float> visual;
    for (const ImageU8& page : pages_) {
      const PreparedImage p = prepare_image(page, views_for(multi));
      const std::vector<float> v = encoder.visual_tokens(p.global_chw, p.tiles_chw, p.tiles_x, p.tiles_y);
      visual.insert(visual.end(), v.begin(), v.end());
    }
    sum.visual_tokens = int64_t(visual.size()) / cfg.decoder.hidden;
    sum.vision_seconds = seconds_since(t0);

    const std::string prompt_text = !params_.prompt.empty() ? params_.prompt : multi ? kMultiPagePrompt : kSinglePagePrompt;
    const Prompt prompt = build_prompt(*model_, prompt_text, sum.visual_tokens);
    sum.prompt_tokens = int64_t(prompt.ids.size());

    t0 = std::chrono::steady_clock::now();
    Decoder decoder(cfg.decoder, model_->weights().decoder);
    KvCache cache(cfg.decoder, effective_window());
    std::vector<float> logits = decoder.prefill(decoder.embed_prompt(prompt.ids, visual, model_->image_token_id()), 0, cache);
    sum.prefill_seconds = seconds_since(t0);

    const int ngram_window = params_.ngram_window >= 0 ? params_.ngram_window : multi ? 1024 : 128;
    NoRepeatNgram ngram(params_.ngram_size, params_.ngram_size ? ngram_window : 0);
    ngram.push(prompt.ids.begin(), prompt.ids.end());
    Sampler sampler(params_.sampling);
    LoopGuard guard(params_.loop_guard_params);
    utf8::StreamDecoder stream;
    OutputParser parser;
    const Tokenizer& tok = model_->tokenizer();
    bool cancelled = false;
    auto emit = [&](const Event& e) {
      if (!cancelled && on_event && !on_event(e)) cancelled = true;
    };
    parser.on_page = [&](int page) {
      Event e;
      e.type = Event::Type::page;
      e.page = page;
      emit(e);
    };
    parser.on_block = [&](const LayoutBlock& b) {
      Event e;
      e.type = Event::Type::block;
      e.page = b.page;
      e.block = b;
      const ImageU8& img = pages_[size_t(std::min<int64_t>(b.page, sum.pages - 1))];
      for (int k = 0; k < 4; ++k) e.box_px[k] = box_to_pixels(b.box[k], k % 2 ? img.height : img.width);
      emit(e);
    };
    auto track_memory = [&] {
      sum.memory.reference_kv_bytes = cache.reference_bytes();
      sum.memory.window_kv_bytes = cache.window_bytes();
      sum.memory.kv_allocated_bytes = cache.allocated_bytes();
      sum.memory.peak_kv_bytes = std::max(sum.memory.peak_kv_bytes, cache.total_bytes());
    };
    track_memory();

    t0 = std::chrono::steady_clock::now();
    const int32_t eos = int32_t(cfg.decoder.eos_id);
    const int64_t vocab = cfg.decoder.vocab;
    int64_t position = sum.prompt_tokens;
    std::string text;
    for (;;) {
      for (int32_t b : ngram.banned()) logits[size_t(b)] = -std::numeric_limits<float>::infinity();
      const int32_t token = sampler.pick(logits.data(), vocab);
      if (token < 0) { sum.stop = StopReason::no_token; break; }
      if (token == eos) { sum.stop = StopReason::eos; break; }
      ++sum.generated_tokens;
      Event e;
      e.token = token;
      e.page = parser.current_page();
      e.text = stream.feed(tok.token_bytes(token));
      text += e.text;
      emit(e);
      parser.feed(e.text);
      if (cancelled) { sum.stop = StopReason::cancelled; break; }
      if (params_.loop_guard && guard.push(e.text)) { sum.stop = StopReason::loop; break; }
      if (params_.max_new_tokens && sum.generated_tokens >= params_.max_new_tokens) { sum.stop = StopReason::max_tokens; break; }
      if (position >= cfg.decoder.max_positions) { sum.stop = StopReason::context_limit; break; }
      logits = decoder.decode_step(token, position++, cache);
      ngram.push(token);
      track_memory();
    }
    // A character cut off by the last token still reaches the stream (as U+FFFD, like upstream's
    // decode), in a final token event without an id, so the events always add up to the text.
    Event tail;
    tail.text = stream.flush();
    if (!tail.text.empty()) {
      tail.page = parser.current_page();
      text += tail.text;
      emit(tail);
    }
    sum.decode_seconds = seconds_since(t0);
    sum.text = trim(text);
    sum.empty = sum.text.empty();
    return sum;
  }

 private:
  PreprocessConfig views_for(bool multi) const {
    const int s = model_->config().sam.image_size;
    return multi || params_.mode == ImageMode::base ? PreprocessConfig{s, s, false} : preset_gundam();
  }

  static double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  // Python's str.strip() for the ASCII whitespace the model emits.
  static std::string trim(const std::string& s) {
    const char* ws = " \t\n\r\f\v";
    const size_t b = s.find_first_not_of(ws);
    if (b == std::string::npos) return "";
    return s.substr(b, s.find_last_not_of(ws) - b + 1);
  }

  std::shared_ptr<const Model> model_;
  SessionParams params_;
  std::vector<ImageU8> pages_;
};

}  // namespace uocr
