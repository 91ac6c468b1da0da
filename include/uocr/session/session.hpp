// uocr::Session: a transcription of a document of any length (page groups, see
// uocr/decoder/page_groups.hpp). This is the one generation loop of uocr: the CLI and the C ABI
// run it on page sources, and the OneShotSession helper (uocr/session/one_shot.hpp) with every
// page in one group (one-shot R-SWA, or full attention with window 0). Pages come from a PageSource and are encoded just in time.
//
//   uocr::FilePages pages(paths);
//   uocr::Session s(model, session_params, {});          // G = 4 pages held, O = 3 kept per slide
//   uocr::RunSummary sum = s.run(pages, on_event);
//
// The prompt, sampling, n-gram rule, loop guard, stop reasons, events and text are the same for
// every group size: with group_pages >= the page count it is exactly one-shot R-SWA. With fewer,
// the group slides when the output passes a page boundary:
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
//  - in a session whose group slides (pages outside it at the start), a marker begun ("<P") before
//    the last page's marker is completed, when complete_page_markers: only tokens that continue
//    "<PAGE>" can follow (marker_completion.hpp). The last group's markers count too: a page left
//    without one loses its page event and boundary.
// Event page numbers come from the markers in the text (forced boundaries do not renumber them).
//
// Crash-safe resume (CheckpointOptions): the state is constant-size, so it is saved after the
// prefill, at every page boundary and every `every_tokens` tokens, to a checksummed file written
// atomically (uocr/session/checkpoint.hpp): the KV of the held group and of the R-SWA window,
// positions and page clock, the next token's logits, n-gram history, sampler RNG, loop guard,
// output parser and UTF-8 stream state, the bytes of token text emitted, the caller's own state
// (e.g. how much output it has written), and an identity of the model (config, tokenizer, weight
// fingerprints), of the parameters and of the input pages. run() with `resume` reads it, refuses
// a mismatch (Status::invalid_argument) or a damaged or forged file (Status::io: a value no run
// can write, the field named) with a clear uocr::Error, skips the pages already encoded and
// goes on: the tokens and events after the checkpoint are exactly those of an uninterrupted run.
// After a resume, RunSummary::text and the timings cover only the part generated since the
// checkpoint; generated_tokens and memory cover the whole document (scratch_bytes: what the
// resumed engines hold now; the peaks: the largest before or after the checkpoint).
//
// Memory: bounded by the group (RunSummary::memory: reference KV of head + G pages + tail, the
// R-SWA window, and the engines' scratch: vision and decoder workspaces sized by the largest page
// and group), one page's image and embeddings at a time, SR-SWA summaries of G pages. Not
// bounded: RunSummary::text (keep_text = false leaves it empty: stream the events instead) and
// 8 bytes per page of page sizes (also in checkpoints). Positions grow with the page count unless
// PageGroupParams::group_positions (see also allow_position_extrapolation).
//
// Thread-safety: a session is used by one thread at a time; the Model may be shared.
#pragma once
#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "uocr/decoder/page_groups.hpp"
#include "uocr/engine/open.hpp"
#include "uocr/image/preprocess.hpp"
#include "uocr/model/model.hpp"
#include "uocr/session/checkpoint.hpp"
#include "uocr/session/draft.hpp"
#include "uocr/session/generation_state.hpp"
#include "uocr/session/logit_chain.hpp"
#include "uocr/session/loop_guard.hpp"
#include "uocr/session/marker_completion.hpp"
#include "uocr/session/ngram.hpp"
#include "uocr/session/output_parser.hpp"
#include "uocr/session/page_clock.hpp"
#include "uocr/session/page_source.hpp"
#include "uocr/session/params.hpp"
#include "uocr/session/prompt.hpp"
#include "uocr/session/sampler.hpp"
#include "uocr/tokenizer/utf8.hpp"
#include "uocr/version.hpp"
#include "uocr/vision/encoder.hpp"

UOCR_NAMESPACE_BEGIN

// The library's defaults (upstream's); PageGroupChoice{}.apply(model.decode_defaults(), groups)
// takes the model folder's page-group settings instead, as uocr run and the C API do
// (session/page_group_choice.hpp).
struct DocumentParams {
  PageGroupParams groups;               // G, O, SR-SWA, position policy
  int64_t page_fallback_tokens = 4096;  // slide after this many tokens without "<PAGE>"; 0 = never
  bool force_page_on_early_eos = true;  // EOS before the last pages were seen: write "<PAGE>" instead
  bool complete_page_markers = true;    // "<P" before the last page's marker, groups sliding: only "<PAGE>" can follow
  bool keep_text = true;                // accumulate RunSummary::text (grows with the output)
  DraftParams draft;                    // verify the pages' draft texts (PageSource::draft_text), greedy only
};

// Checkpointing of one run (see the top of this file). Empty path: none.
struct CheckpointOptions {
  std::string path;
  int64_t every_tokens = 0;  // also every N generated tokens; 0: after the prefill and at page boundaries only
  bool resume = false;       // continue from `path` instead of starting afresh
  // Called right before each write; what it returns is stored in the checkpoint. Flush your
  // output here, so that what the checkpoint says was written is on disk.
  std::function<std::string()> save_caller_state;
  // On resume, before any event: receives what save_caller_state returned for this checkpoint.
  std::function<void(const std::string&)> restore_caller_state;
  // Called right after each checkpoint is complete at `path`: to copy it elsewhere (a fleet
  // worker stores it where another machine can resume from it). What it throws ends the run.
  std::function<void()> on_saved;
};

// What a run did beyond RunSummary.
struct SessionStats {
  int64_t pages_encoded = 0;       // pages pulled from the source and encoded (a resumed run counts the checkpoint's)
  int64_t group_pages = 0;         // min(G, N)
  int64_t slides = 0;
  int64_t marker_boundaries = 0;   // boundaries from "<PAGE>" markers
  int64_t forced_boundaries = 0;   // from the fallback or an early EOS
  int64_t early_eos_replaced = 0;
  int64_t markers_completed = 0;   // steps where greedy decoding under the n-gram rule would have left a begun marker
  int64_t last_position = 0;       // largest position fed to the decoder
  size_t page_buffer_bytes = 0;    // one page's embeddings
  size_t sparse_summary_bytes = 0;
  int64_t sparse_rows_attended = 0, sparse_rows_dense = 0;  // SR-SWA reference rows, summed over steps, layers, heads
  double slide_seconds = 0;        // sliding: encoding + prefilling entering pages
  int64_t checkpoints_written = 0;
  int64_t resumed_at_token = -1;   // generated tokens in the checkpoint resumed from; -1: not resumed
  bool drafting = false;           // draft texts were verified (DraftParams; greedy, an engine that verifies)
  DraftStats draft;                // the generation loop's passes, drafted and accepted tokens
};

// Fingerprint of a model folder's files (config, tokenizer, sampled weights: checkpoint.hpp).
inline std::string model_identity(const Model& model) {
  namespace fs = std::filesystem;
  std::vector<std::string> files = {model.dir() + "/config.json", model.dir() + "/tokenizer.json"};
  std::vector<std::string> shards;
  for (const auto& e : fs::directory_iterator(model.dir()))
    if (e.path().extension() == ".safetensors") shards.push_back(e.path().string());
  std::sort(shards.begin(), shards.end());
  files.insert(files.end(), shards.begin(), shards.end());
  Fnv64 h;
  for (const std::string& f : files) fingerprint_file(h, f);
  return h.hex();
}

// The engine a session on `model` opens for itself, as `p` says (p checked first, before any
// device is opened).
inline std::shared_ptr<Engine> open_session_engine(const std::shared_ptr<const Model>& model, const SessionParams& p) {
  require(model != nullptr, Status::invalid_argument, "session needs a model");
  validate(*model, p);
  return open_engine(model, p.backend, engine_options(p));
}

// A session's params on `engine`: engine fields (backend, device_index, batching, cuda_graphs,
// precision) all at their defaults take the engine's; otherwise they must be the engine's
// (Status::invalid_argument naming both).
inline void adopt_engine_choice(const Engine& engine, SessionParams& p) {
  const Backend b = engine.backend();
  const EngineOptions& o = engine.options();
  if (asks_for_engine(p, Backend::cpu, EngineOptions{})) {
    p.backend = b;
    p.device_index = o.device_index;
    p.batching = o.batching;
    p.cuda_graphs = o.cuda_graphs;
    p.precision = o.precision;
  }
  require(asks_for_engine(p, b, o), Status::invalid_argument, [&] {
    return "the session's parameters ask for " + describe_engine_choice(p.backend, engine_options(p)) +
           " but its engine runs " + describe_engine_choice(b, o) + "; leave those parameters at their defaults to run on the engine";
  });
}

class Session {
 public:
  // A session on `engine`: the engine's model on its device, sharing the weights there (and, with
  // batching, the decode steps) with the engine's other sessions. The params' engine fields
  // (backend, device_index, batching, cuda_graphs, precision) are left at their defaults or are
  // the engine's; another choice is Status::invalid_argument.
  Session(std::shared_ptr<Engine> engine, SessionParams params = {}, DocumentParams document = {})
      : params_(std::move(params)), inf_(std::move(document)), backend_(std::move(engine)) {
    require(backend_ != nullptr, Status::invalid_argument, "session needs an engine");
    model_ = backend_->model();
    adopt_engine_choice(*backend_, params_);
    validate(*model_, params_);
    require(inf_.page_fallback_tokens >= 0, Status::invalid_argument, "page_fallback_tokens must be >= 0");
    PageGroupDecoder::validate(inf_.groups);
    validate(inf_.draft);
  }

  // A session on an engine of its own, opened as `params` says (its backend is opened now, so one
  // that is not built in or a missing device is reported here). Sessions opened this way share
  // nothing: to share a device's copy of the weights, open one engine and the sessions on it.
  Session(std::shared_ptr<const Model> model, SessionParams params = {}, DocumentParams document = {})
      : Session(open_session_engine(model, params), params, std::move(document)) {}

  const Model& model() const { return *model_; }
  // The engine that runs this session, and its backend and device.
  const std::shared_ptr<Engine>& engine() const { return backend_; }
  EngineInfo engine_info() const { return backend_->info(); }
  const SessionStats& stats() const { return stats_; }
  int effective_window() const { return uocr::effective_window(*model_, params_); }
  // What checkpoint `path` was written for when this session cannot resume it: another model or
  // other parameters, including the precision that runs here ("" when it can; the pages are
  // compared when a run reads the file). Status::io when the file is no sound checkpoint.
  std::string resume_mismatch(const std::string& path) const {
    const std::string payload = read_checkpoint(path);
    StateReader r(payload, path);
    return identity_mismatch(read_identity(r), {model_identity(*model_), describe_params(), ""});
  }
  // Memory (KV and scratch) of the run in progress as of the last token fed back (at the k-th token event,
  // read from the callback, it counts k - 1 generated tokens), or of the last run.
  const MemoryStats& memory() const { return memory_; }

  // Transcribes the pages of `pages` (count() >= 1 required). `on_event` returning false cancels.
  // An allocation failure is an Error(out_of_memory) saying how far the run got.
  RunSummary run(PageSource& pages, const std::function<bool(const Event&)>& on_event = {},
                 const CheckpointOptions& checkpoint = {}) {
    token_in_progress_ = 0;
    try {
      return run_document(pages, on_event, checkpoint);
    } catch (const std::bad_alloc&) {
      const std::string where = token_in_progress_ > 0 ? "generating token " + std::to_string(token_in_progress_)
                                : checkpoint.resume    ? "resuming from the checkpoint"
                                                       : "starting the run (encoding and prefilling the first pages)";
      throw Error(Status::out_of_memory, "out of memory while " + where);
    }
  }

 private:
  RunSummary run_document(PageSource& pages, const std::function<bool(const Event&)>& on_event,
                          const CheckpointOptions& checkpoint) {
    const int64_t n_pages = check_run(pages, checkpoint);
    const ModelConfig& cfg = model_->config();
    const bool multi = n_pages > 1;
    const Deadline deadline = Deadline::after(std::chrono::steady_clock::now(), params_.page_time_budget_seconds * double(n_pages));
    stats_ = SessionStats{};
    memory_ = MemoryStats{};
    RunSummary sum;
    sum.pages = n_pages;
    sum.precision = backend_->info().precision;
    CheckpointIdentity id;
    if (!checkpoint.path.empty()) id = {model_identity(*model_), describe_params(), pages.identity()};

    // The engines: the vision encoder behind the page source, the decoder behind the page groups.
    const std::unique_ptr<VisionEngine> encoder = backend_->vision();
    const int s = cfg.sam.image_size;
    EncodedPages visual(pages, *encoder, multi || params_.mode == ImageMode::base ? PreprocessConfig{s, s, false} : preset_gundam(),
                        deadline);
    const std::unique_ptr<DecoderEngine> decoder = backend_->decoder(effective_window(), inf_.groups);
    DecoderEngine& engine = *decoder;
    engine.set_deadline(deadline);  // a prefill that runs out of time ends the run with this engine

    DocumentLayout layout = document_layout(n_pages);
    const int ngram_window = params_.ngram_window >= 0 ? params_.ngram_window : multi ? 1024 : 128;
    GenerationState L(params_, ngram_window, inf_.page_fallback_tokens);
    const Tokenizer& tok = model_->tokenizer();
    const std::vector<int32_t> marker_ids = tok.encode(kPageMarker);
    // The time budget also stops the pages' preparation (DeadlinePassed from `visual`): before
    // the first token, with nothing to checkpoint (a checkpoint being resumed stays as it is).
    const bool ready = within(deadline, [&] {
      if (checkpoint.resume)
        load(checkpoint, id, marker_ids, layout, visual, engine, L);
      else
        start(layout, visual, engine, L);
    });
    if (!ready) sum.stop = StopReason::time_budget;
    sum.visual_tokens = n_pages * layout.page_tokens;
    sum.prompt_tokens = layout.prompt_length();

    const MarkerCompletion* completion = nullptr;
    if (inf_.complete_page_markers && engine.pages_pending()) {
      if (!completion_) completion_ = std::make_unique<const MarkerCompletion>(tok);  // vocabulary x marker prefixes: once per session
      completion = completion_.get();
    }
    // Drafts are verified with greedy decoding only (see draft.hpp).
    stats_.drafting = inf_.draft.enabled && params_.sampling.temperature == 0.f && engine.verify_limit() > 0;
    DraftedSteps steps(engine, inf_.draft, stats_.drafting);
    PageDrafts drafts(pages, tok);
    int64_t draft_page = -1;
    EventSink sink{on_event};
    connect_parser(L.parser, sink, visual);
    track_memory(*encoder, engine);
    if (ready && !checkpoint.path.empty() && !checkpoint.resume) save(checkpoint, id, layout, visual, engine, L);

    const auto t_decode = std::chrono::steady_clock::now();
    const int32_t eos = int32_t(cfg.decoder.eos_id);
    const LogitChain chain(cfg.decoder.vocab, params_.min_new_tokens, eos, completion);
    int64_t boundaries = 0;  // passed since the last step: the group slides before the next one
    std::string text;
    while (ready) {
      token_in_progress_ = L.generated + 1;
      const Choice next = choose_token(L, chain, engine, marker_ids, n_pages, eos);
      if (next.token < 0) {
        sum.stop = next.stop;
        break;
      }
      const int32_t token = next.token;
      boundaries += next.boundaries;
      ++L.generated;
      Event e;
      e.token = token;
      e.page = L.parser.current_page();
      e.text = L.stream.feed(tok.generated_bytes(token));
      L.emitted_bytes += e.text.size();
      L.visible = L.visible || e.text.find_first_not_of(kWhitespace) != std::string::npos;
      if (inf_.keep_text) text += e.text;
      sink.emit(e);
      L.parser.feed(e.text);
      boundaries += L.clock.feed(e.text);
      if (sink.cancelled) { sum.stop = StopReason::cancelled; break; }
      if (deadline.passed()) { sum.stop = StopReason::time_budget; break; }
      if (params_.loop_guard && L.guard.push(e.text)) { sum.stop = StopReason::loop; break; }
      if (params_.max_new_tokens && L.generated >= params_.max_new_tokens) { sum.stop = StopReason::max_tokens; break; }
      if (steps.next_position() >= engine.position_limit()) { sum.stop = StopReason::context_limit; break; }
      const bool boundary = boundaries > 0;
      if (boundary) steps.settle();
      // A slide that runs out of time (encoding the pages it brings in) leaves the state between
      // two checkpoints: the run ends, the last checkpoint is what a resume continues from.
      if (!within(deadline, [&] {
            for (; boundaries > 0; --boundaries) engine.next_page(L.clock.marker_lead());
          })) {
        sum.stop = StopReason::time_budget;
        break;
      }
      if (stats_.drafting && L.clock.page() != draft_page) {
        draft_page = L.clock.page();
        steps.set_draft(drafts.tokens_from(draft_page));
      }
      stats_.last_position = steps.next_position();
      L.logits = steps.step(token);
      L.ngram.push(token);
      track_memory(*encoder, engine);
      if (!checkpoint.path.empty() && (boundary || (checkpoint.every_tokens && L.generated % checkpoint.every_tokens == 0))) {
        steps.settle();
        save(checkpoint, id, layout, visual, engine, L);
      }
    }
    steps.settle();
    stats_.draft = steps.stats();
    // A character cut off by the last token still reaches the stream (as U+FFFD, like upstream's
    // decode), in a final token event without an id, so the events always add up to the text.
    Event tail;
    tail.text = L.stream.flush();
    if (!tail.text.empty()) {
      tail.page = L.parser.current_page();
      if (inf_.keep_text) text += tail.text;
      sink.emit(tail);
    }
    sum.text = trim(text);
    sum.empty = !(L.visible || tail.text.find_first_not_of(kWhitespace) != std::string::npos);
    finish(sum, L, engine, visual, seconds_since(t_decode));
    return sum;
  }

  // The page count of `pages`, checked with the checkpoint options before anything runs.
  static int64_t check_run(PageSource& pages, const CheckpointOptions& checkpoint) {
    const int64_t n_pages = pages.count();
    require(n_pages >= 1 && n_pages <= std::numeric_limits<int32_t>::max(), Status::invalid_argument, [&] {
      return "a session needs a page source with a known page count in [1, 2^31 - 1] (positions depend on it; "
             "events number pages in int), got " + std::to_string(n_pages);
    });
    require(!checkpoint.resume || !checkpoint.path.empty(), Status::invalid_argument, "resuming needs a checkpoint path");
    require(checkpoint.every_tokens >= 0, Status::invalid_argument, "checkpoint every_tokens must be >= 0");
    return n_pages;
  }

  // The prompt around the pages: its tokens before and after the one image placeholder.
  DocumentLayout document_layout(int64_t n_pages) const {
    const std::string prompt_text = !params_.prompt.empty() ? params_.prompt : n_pages > 1 ? kMultiPagePrompt : kSinglePagePrompt;
    const Prompt one = build_prompt(*model_, prompt_text, 1);  // split around a single placeholder
    DocumentLayout layout;
    layout.head.assign(one.ids.begin(), one.ids.begin() + one.image_offset);
    layout.tail.assign(one.ids.begin() + one.image_offset + 1, one.ids.end());
    layout.pages = n_pages;
    return layout;
  }

  // A fresh run: the first group prefilled, the prompt in the n-gram history.
  void start(DocumentLayout& layout, EncodedPages& visual, DecoderEngine& engine, GenerationState& L) const {
    layout.page_tokens = visual.first_page_tokens();
    L.logits = engine.start(layout, visual);
    L.ngram.push(layout.head.begin(), layout.head.end());
    L.ngram.push_repeated(model_->image_token_id(), layout.pages * layout.page_tokens);
    L.ngram.push(layout.tail.begin(), layout.tail.end());
  }

  // The caller's event callback for one run; `cancelled` once it returned false.
  struct EventSink {
    const std::function<bool(const Event&)>& on_event;
    bool cancelled = false;
    void emit(const Event& e) {
      if (!cancelled && on_event && !on_event(e)) cancelled = true;
    }
  };

  // Page and layout-block events from the output parser; a block's box also in its page's pixels.
  static void connect_parser(OutputParser& parser, EventSink& sink, const EncodedPages& visual) {
    parser.on_page = [&sink](int page) {
      Event e;
      e.type = Event::Type::page;
      e.page = page;
      sink.emit(e);
    };
    parser.on_block = [&sink, &visual](const LayoutBlock& b) {
      Event e;
      e.type = Event::Type::block;
      e.page = b.page;
      e.block = b;
      const std::pair<int, int> wh = visual.size_of(std::min<int64_t>(b.page, visual.encoded() - 1));
      for (int k = 0; k < 4; ++k) e.box_px[k] = box_to_pixels(b.box[k], k % 2 ? wh.second : wh.first);
      sink.emit(e);
    };
  }

  // memory_ as of now: the KV cache and the engines' scratch, with the peaks.
  void track_memory(const VisionEngine& encoder, const DecoderEngine& engine) {
    const DecoderMemory m = engine.memory();
    memory_.reference_kv_bytes = m.reference_kv_bytes;
    memory_.window_kv_bytes = m.window_kv_bytes;
    memory_.kv_allocated_bytes = m.kv_allocated_bytes;
    memory_.peak_kv_bytes = m.peak_kv_bytes;
    // Engines keep their working memory once grown (vision and decoder workspaces), so what they
    // hold between two steps is their largest so far: sampling here sees every peak.
    memory_.scratch_bytes = encoder.scratch_bytes() + m.scratch_bytes;
    memory_.peak_scratch_bytes = std::max(memory_.peak_scratch_bytes, memory_.scratch_bytes);
    memory_.peak_bytes = std::max(memory_.peak_bytes, memory_.kv_allocated_bytes + memory_.scratch_bytes);
  }

  // The next token (token < 0: the run stops for `stop`). A forced token (the rest of a marker
  // written in place of an early EOS) comes first; else the logit chain picks. EOS while pages
  // wait outside the group becomes "<PAGE>" when force_page_on_early_eos (`boundaries`: the page
  // clock advanced).
  struct Choice {
    int32_t token = -1;
    StopReason stop = StopReason::eos;
    int64_t boundaries = 0;
  };
  Choice choose_token(GenerationState& L, const LogitChain& chain, const DecoderEngine& engine,
                      const std::vector<int32_t>& marker_ids, int64_t n_pages, int32_t eos) const {
    Choice c;
    if (!L.forced.empty()) {
      c.token = L.forced.front();
      L.forced.pop_front();
      return c;
    }
    LogitChain::Step step;
    step.generated = L.generated;
    step.token_number = token_in_progress_;
    step.marker_prefix = L.clock.marker_prefix();
    step.pages_follow = L.clock.page() + 1 < n_pages;
    step.banned = L.ngram.banned();
    const LogitChain::Pick pick = chain.next(L.logits, step, L.sampler);
    L.markers_completed += pick.completed_marker;
    if (pick.token < 0) {
      c.stop = StopReason::no_token;
      return c;
    }
    if (pick.token != eos) {
      c.token = pick.token;
      return c;
    }
    if (!(inf_.force_page_on_early_eos && engine.pages_pending() && !marker_ids.empty())) return c;  // EOS ends the run
    ++L.early_eos_replaced;
    c.boundaries = L.clock.force();
    L.forced.assign(marker_ids.begin(), marker_ids.end());
    c.token = L.forced.front();
    L.forced.pop_front();
    return c;
  }

  // The run's counts, memory and times into `sum` and stats_.
  void finish(RunSummary& sum, const GenerationState& L, DecoderEngine& engine, const EncodedPages& visual,
              double decode_loop_seconds) {
    sum.generated_tokens = L.generated;
    sum.memory = memory_;
    const DecoderTimings timings = engine.timings();
    sum.decode_seconds = decode_loop_seconds - timings.slide_seconds;
    sum.vision_seconds = visual.seconds();          // every page, at start and in slides
    sum.prefill_seconds = timings.prefill_seconds;  // start and the pages prefilled in slides

    stats_.pages_encoded = visual.encoded();
    stats_.group_pages = engine.group_size();
    stats_.slides = engine.slides();
    stats_.marker_boundaries = L.clock.marker_boundaries();
    stats_.forced_boundaries = L.clock.forced_boundaries();
    stats_.early_eos_replaced = L.early_eos_replaced;
    stats_.markers_completed = L.markers_completed;
    const DecoderMemory memory = engine.memory();
    stats_.page_buffer_bytes = memory.page_buffer_bytes;
    stats_.sparse_summary_bytes = memory.sparse_summary_bytes;
    if (const SparseReference* sparse = engine.sparse()) {
      stats_.sparse_rows_attended = sparse->rows_attended();
      stats_.sparse_rows_dense = sparse->rows_dense();
    }
    stats_.slide_seconds = timings.slide_seconds;
  }

  // Every parameter that changes the tokens, in a stable text form.
  std::string describe_params() const {
    const SessionParams& p = params_;
    const PageGroupParams& g = inf_.groups;
    std::string d;
    auto add = [&](const char* name, const std::string& v) { d += std::string(name) + "=" + v + " "; };
    auto num = [](double v) { return std::to_string(v); };
    add("mode", p.mode == ImageMode::gundam ? "gundam" : "base");
    add("prompt", "'" + p.prompt + "'");
    add("window", std::to_string(effective_window()));
    add("max_new_tokens", std::to_string(p.max_new_tokens));
    add("min_new_tokens", std::to_string(p.min_new_tokens));
    add("temperature", num(p.sampling.temperature));
    add("top_p", num(p.sampling.top_p));
    add("seed", std::to_string(p.sampling.seed));
    add("ngram", std::to_string(p.ngram_size) + "/" + std::to_string(p.ngram_window));
    add("loop_guard", p.loop_guard ? std::to_string(p.loop_guard_params.min_repeats) + "/" + std::to_string(p.loop_guard_params.min_span) +
                                         "/" + std::to_string(p.loop_guard_params.max_period) + "/" +
                                         std::to_string(p.loop_guard_params.check_every)
                                   : "off");
    add("group", std::to_string(g.group_pages) + "/" + std::to_string(g.overlap_pages));
    add("refresh_tail", std::to_string(g.refresh_tail));
    add("recompute_on_slide", std::to_string(g.recompute_on_slide));
    add("extrapolate", std::to_string(g.allow_position_extrapolation));
    add("group_positions", std::to_string(g.group_positions));
    add("sparse", g.sparse ? std::to_string(g.sparse_params.block_tokens) + "/" + std::to_string(g.sparse_params.page_budget) +
                                 "/" + std::to_string(g.sparse_params.block_budget)
                           : "off");
    add("page_fallback", std::to_string(inf_.page_fallback_tokens));
    add("early_eos", std::to_string(inf_.force_page_on_early_eos));
    add("complete_markers", std::to_string(inf_.complete_page_markers));
    // As it runs (bf16 asked for runs f32 on a CPU without bf16 dot products); f32 checkpoints keep
    // the identity they had before there was a choice.
    const Precision runs = backend_->info().precision;
    if (runs != Precision::f32) add("precision", precision_name(runs));
    return d;
  }

  void save(const CheckpointOptions& ck, const CheckpointIdentity& id, const DocumentLayout& layout,
            const EncodedPages& visual, DecoderEngine& engine, const GenerationState& L) {
    const std::string caller = ck.save_caller_state ? ck.save_caller_state() : std::string();
    save_session_checkpoint(ck.path, id, layout, visual, engine, L, memory_, caller);
    ++stats_.checkpoints_written;
    if (ck.on_saved) ck.on_saved();
  }

  void load(const CheckpointOptions& ck, const CheckpointIdentity& id, const std::vector<int32_t>& marker_ids,
            DocumentLayout& layout, EncodedPages& visual, DecoderEngine& engine, GenerationState& L) {
    const std::string caller = load_session_checkpoint(ck.path, id, marker_ids, model_->config().decoder.vocab, layout,
                                                       visual, engine, L, memory_);
    stats_.resumed_at_token = L.generated;
    if (ck.restore_caller_state) ck.restore_caller_state(caller);
  }

  // Runs `work`; false when it stopped because `deadline` passed (DeadlinePassed from the pages).
  template <class Work>
  static bool within(const Deadline& deadline, Work&& work) {
    try {
      work();
      return true;
    } catch (const DeadlinePassed&) {
      if (!deadline.passed()) throw;  // not this run's deadline: a page source's own
      return false;
    }
  }

  static double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  // The ASCII whitespace the model emits, which Python's str.strip() removes.
  static constexpr const char* kWhitespace = " \t\n\r\f\v";
  static std::string trim(const std::string& s) {
    const size_t b = s.find_first_not_of(kWhitespace);
    if (b == std::string::npos) return "";
    return s.substr(b, s.find_last_not_of(kWhitespace) - b + 1);
  }

  std::shared_ptr<const Model> model_;  // the engine's
  SessionParams params_;
  DocumentParams inf_;
  std::shared_ptr<Engine> backend_;  // the compute backend and device
  SessionStats stats_;
  MemoryStats memory_;
  std::unique_ptr<const MarkerCompletion> completion_;  // built by the first run with pages outside the group
  int64_t token_in_progress_ = 0;  // the generated token the run is at (1 for the first), 0 before it: run()'s out-of-memory message
};

UOCR_NAMESPACE_END
