// uocr::InfiniteSession: a transcription of a document of any length (page groups, see
// uocr/decoder/page_groups.hpp). Same events and summary as uocr::Session, so the CLI and the
// C ABI drive both; pages come from a PageSource and are encoded just in time.
//
//   uocr::FilePages pages(paths);
//   uocr::InfiniteSession s(model, session_params, {});          // G = 4 pages held, O = 3 kept per slide
//   uocr::RunSummary sum = s.run(pages, on_event);
//
// The prompt, sampling, n-gram rule, loop guard, stop reasons, events and text are Session's:
// with group_pages >= the page count it produces the same tokens and logits as Session (one-shot
// R-SWA). With fewer, the group slides when the output passes a page boundary:
//  - marker: the model writes "<PAGE>" at the start of every page (upstream multi-page format).
//    Marker m (0-based; m = 0 opens page 0) moves the page clock to page m if it is ahead of it.
//  - fallback, no marker: after `page_fallback_tokens` generated tokens without a marker the clock
//    advances one page anyway (0 disables). A marker that arrives later for a page the clock has
//    already reached does not advance it again. Set it well above the longest page's output
//    (a dense page is ~1-3k tokens); the default 4096 only rescues outputs that lack markers.
//  - early EOS: EOS while pages remain outside the group (the model has not seen them yet) is
//    replaced, when force_page_on_early_eos, by the tokens of "<PAGE>": the clock advances one
//    page and the model goes on. At most one replacement per page, so this ends. EOS with every
//    remaining page in the group stops the run as usual.
// Event page numbers come from the markers in the text, as in Session (forced boundaries do not
// renumber them).
//
// Memory: bounded by the group (RunSummary::memory: reference KV of head + G pages + tail, the
// R-SWA window), one page's image and embeddings at a time, SR-SWA summaries of G pages. Not
// bounded: RunSummary::text (keep_text = false leaves it empty: stream the events instead) and
// 8 bytes per page of page sizes. Positions grow with the page count: see
// PageGroupParams::allow_position_extrapolation.
//
// Thread-safety: a session is used by one thread at a time; the Model may be shared.
#pragma once
#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "uocr/decoder/page_groups.hpp"
#include "uocr/model/model.hpp"
#include "uocr/session/loop_guard.hpp"
#include "uocr/session/ngram.hpp"
#include "uocr/session/output_parser.hpp"
#include "uocr/session/page_source.hpp"
#include "uocr/session/prompt.hpp"
#include "uocr/session/sampler.hpp"
#include "uocr/session/session.hpp"
#include "uocr/tokenizer/utf8.hpp"
#include "uocr/vision/encoder.hpp"

namespace uocr {

// Decides when generated text has passed a page boundary (the policy described above).
class PageClock {
 public:
  explicit PageClock(int64_t fallback_tokens = 4096) : fallback_(fallback_tokens) {
    require(fallback_ >= 0, Status::invalid_argument, "page fallback tokens must be >= 0");
    parser_.on_page = [this](int m) {
      since_marker_ = 0;
      if (m > page_) {
        pending_ += m - page_;
        markers_ += m - page_;
        page_ = m;
      }
    };
  }

  // Feeds one generated token's text; returns the page boundaries it passed (usually 0 or 1).
  int64_t feed(const std::string& text) {
    pending_ = 0;
    ++since_marker_;
    parser_.feed(text);
    if (fallback_ > 0 && since_marker_ >= fallback_) force();
    const int64_t n = pending_;
    pending_ = 0;
    return n;
  }
  // Advances one page now (fallback, early EOS); returns 1.
  int64_t force() {
    ++page_;
    ++forced_;
    ++pending_;
    since_marker_ = 0;
    return 1;
  }

  int64_t page() const { return page_; }
  int64_t marker_boundaries() const { return markers_; }
  int64_t forced_boundaries() const { return forced_; }

 private:
  OutputParser parser_;
  int64_t fallback_;
  int64_t page_ = 0, pending_ = 0, since_marker_ = 0, markers_ = 0, forced_ = 0;
};

struct InfiniteParams {
  PageGroupParams groups;               // G, O, SR-SWA, position policy
  int64_t page_fallback_tokens = 4096;  // slide after this many tokens without "<PAGE>"; 0 = never
  bool force_page_on_early_eos = true;  // EOS before the last pages were seen: write "<PAGE>" instead
  bool keep_text = true;                // accumulate RunSummary::text (grows with the output)
};

// What a run did beyond RunSummary.
struct InfiniteStats {
  int64_t pages_encoded = 0;       // pages pulled from the source and encoded
  int64_t group_pages = 0;         // min(G, N)
  int64_t slides = 0;
  int64_t marker_boundaries = 0;   // boundaries from "<PAGE>" markers
  int64_t forced_boundaries = 0;   // from the fallback or an early EOS
  int64_t early_eos_replaced = 0;
  int64_t last_position = 0;       // largest position fed to the decoder
  size_t page_buffer_bytes = 0;    // one page's embeddings
  size_t sparse_summary_bytes = 0;
  int64_t sparse_rows_attended = 0, sparse_rows_dense = 0;  // SR-SWA reference rows, summed over steps, layers, heads
  double slide_seconds = 0;        // sliding: encoding + prefilling entering pages
};

class InfiniteSession {
 public:
  InfiniteSession(std::shared_ptr<const Model> model, SessionParams params = {}, InfiniteParams infinite = {})
      : model_(std::move(model)), params_(std::move(params)), inf_(infinite) {
    require(model_ != nullptr, Status::invalid_argument, "session needs a model");
    // The same checks as Session, up front.
    Session check(model_, params_);
    (void)check;
    require(inf_.page_fallback_tokens >= 0, Status::invalid_argument, "page_fallback_tokens must be >= 0");
    PageGroupDecoder::validate(inf_.groups);
  }

  const Model& model() const { return *model_; }
  const InfiniteStats& stats() const { return stats_; }

  int effective_window() const {
    if (params_.window >= 0) return params_.window;
    return model_->config().decoder.sliding_window > 0 ? model_->config().decoder.sliding_window : 128;
  }

  // Transcribes the pages of `pages` (count() >= 1 required). `on_event` returning false cancels.
  RunSummary run(PageSource& pages, const std::function<bool(const Event&)>& on_event = {}) {
    const int64_t n_pages = pages.count();
    require(n_pages >= 1, Status::invalid_argument,
            "an infinite session needs a page source with a known page count >= 1 (positions depend on it)");
    const ModelConfig& cfg = model_->config();
    const bool multi = n_pages > 1;
    stats_ = InfiniteStats{};
    RunSummary sum;
    sum.pages = n_pages;

    VisionEncoder encoder(cfg, model_->weights());
    const int s = cfg.sam.image_size;
    EncodedPages visual(pages, encoder, multi || params_.mode == ImageMode::base ? PreprocessConfig{s, s, false} : preset_gundam());
    const int64_t page_tokens = visual.first_page_tokens();

    const std::string prompt_text = !params_.prompt.empty() ? params_.prompt : multi ? kMultiPagePrompt : kSinglePagePrompt;
    const Prompt one = build_prompt(*model_, prompt_text, 1);  // split around a single placeholder
    DocumentLayout layout;
    layout.head.assign(one.ids.begin(), one.ids.begin() + one.image_offset);
    layout.tail.assign(one.ids.begin() + one.image_offset + 1, one.ids.end());
    layout.pages = n_pages;
    layout.page_tokens = page_tokens;
    sum.visual_tokens = n_pages * page_tokens;
    sum.prompt_tokens = layout.prompt_length();

    PageGroupDecoder engine(cfg.decoder, model_->weights().decoder, effective_window(), inf_.groups);
    std::vector<float> logits = engine.start(layout, visual);

    const int ngram_window = params_.ngram_window >= 0 ? params_.ngram_window : multi ? 1024 : 128;
    NoRepeatNgram ngram(params_.ngram_size, params_.ngram_size ? ngram_window : 0);
    ngram.push(layout.head.begin(), layout.head.end());
    for (int64_t i = 0; i < sum.visual_tokens; ++i) ngram.push(model_->image_token_id());  // keeps only its window
    ngram.push(layout.tail.begin(), layout.tail.end());

    Sampler sampler(params_.sampling);
    LoopGuard guard(params_.loop_guard_params);
    utf8::StreamDecoder stream;
    OutputParser parser;
    PageClock clock(inf_.page_fallback_tokens);
    const Tokenizer& tok = model_->tokenizer();
    const std::vector<int32_t> marker_ids = tok.encode("<PAGE>");
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
      const std::pair<int, int> wh = visual.size_of(std::min<int64_t>(b.page, visual.encoded() - 1));
      for (int k = 0; k < 4; ++k) e.box_px[k] = box_to_pixels(b.box[k], k % 2 ? wh.second : wh.first);
      emit(e);
    };
    auto track_memory = [&] {
      sum.memory.reference_kv_bytes = engine.reference_bytes();
      sum.memory.window_kv_bytes = engine.window_bytes();
      sum.memory.kv_allocated_bytes = engine.kv_allocated_bytes();
      sum.memory.peak_kv_bytes = engine.peak_kv_bytes();
    };
    track_memory();

    const auto t_decode = std::chrono::steady_clock::now();
    const int32_t eos = int32_t(cfg.decoder.eos_id);
    const int64_t vocab = cfg.decoder.vocab;
    std::deque<int32_t> forced;  // "<PAGE>" tokens written in place of an early EOS
    int64_t boundaries = 0;      // passed since the last step: the group slides before the next one
    std::string text;
    for (;;) {
      int32_t token;
      if (!forced.empty()) {
        token = forced.front();
        forced.pop_front();
      } else {
        for (int32_t b : ngram.banned()) logits[size_t(b)] = -std::numeric_limits<float>::infinity();
        token = sampler.pick(logits.data(), vocab);
        if (token < 0) { sum.stop = StopReason::no_token; break; }
        if (token == eos) {
          if (!(inf_.force_page_on_early_eos && engine.pages_pending() && !marker_ids.empty())) {
            sum.stop = StopReason::eos;
            break;
          }
          ++stats_.early_eos_replaced;
          boundaries += clock.force();
          forced.assign(marker_ids.begin(), marker_ids.end());
          token = forced.front();
          forced.pop_front();
        }
      }
      ++sum.generated_tokens;
      Event e;
      e.token = token;
      e.page = parser.current_page();
      e.text = stream.feed(tok.token_bytes(token));
      if (inf_.keep_text) text += e.text;
      emit(e);
      parser.feed(e.text);
      boundaries += clock.feed(e.text);
      if (cancelled) { sum.stop = StopReason::cancelled; break; }
      if (params_.loop_guard && guard.push(e.text)) { sum.stop = StopReason::loop; break; }
      if (params_.max_new_tokens && sum.generated_tokens >= params_.max_new_tokens) { sum.stop = StopReason::max_tokens; break; }
      if (engine.next_position() >= engine.position_limit()) { sum.stop = StopReason::context_limit; break; }
      for (; boundaries > 0; --boundaries) engine.next_page();
      stats_.last_position = engine.next_position();
      logits = engine.step(token);
      ngram.push(token);
      track_memory();
    }
    Event tail;
    tail.text = stream.flush();
    if (!tail.text.empty()) {
      tail.page = parser.current_page();
      if (inf_.keep_text) text += tail.text;
      emit(tail);
    }
    sum.decode_seconds = seconds_since(t_decode) - engine.slide_seconds();
    sum.vision_seconds = visual.seconds();        // every page, at start and in slides
    sum.prefill_seconds = engine.prefill_seconds();  // start and the pages prefilled in slides
    sum.text = trim(text);
    sum.empty = sum.text.empty();

    stats_.pages_encoded = visual.encoded();
    stats_.group_pages = engine.group_size();
    stats_.slides = engine.slides();
    stats_.marker_boundaries = clock.marker_boundaries();
    stats_.forced_boundaries = clock.forced_boundaries();
    stats_.page_buffer_bytes = engine.page_buffer_bytes();
    stats_.sparse_summary_bytes = engine.sparse_summary_bytes();
    if (engine.sparse()) {
      stats_.sparse_rows_attended = engine.sparse()->rows_attended();
      stats_.sparse_rows_dense = engine.sparse()->rows_dense();
    }
    stats_.slide_seconds = engine.slide_seconds();
    return sum;
  }

 private:
  static double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  static std::string trim(const std::string& s) {
    const char* ws = " \t\n\r\f\v";
    const size_t b = s.find_first_not_of(ws);
    if (b == std::string::npos) return "";
    return s.substr(b, s.find_last_not_of(ws) - b + 1);
  }

  std::shared_ptr<const Model> model_;
  SessionParams params_;
  InfiniteParams inf_;
  InfiniteStats stats_;
};

}  // namespace uocr
