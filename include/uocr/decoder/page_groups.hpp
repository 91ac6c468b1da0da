// Page groups ("infinite decoding"): R-SWA over a document of any length with the reference KV of
// only G pages held at a time. Decoder-side engine; uocr/session/session.hpp drives it from pages.
//
//   PageGroupDecoder eng(cfg.decoder, weights.decoder, /*window*/ 128, {/*G*/ 4, /*O*/ 3});
//   std::vector<float> logits = eng.start(layout, pages);      // pages: PageEmbeddingSource
//   for (;;) { int32_t t = pick(logits); if (crossed_into_next_page(t)) eng.next_page(); logits = eng.step(t); }
//
// The document is the one-shot multi-page prompt: head (BOS + text before <image>), N pages of T
// visual tokens, tail (text after <image>), then the generated tokens. Every token keeps its
// one-shot position: page i at head + i·T .. head + (i+1)·T - 1, the tail right after page N-1,
// generated token k at P + k - 1 (P = one-shot prompt length), so relative positions are those the
// model saw in training (up to its context length, see "Positions" below).
//
// Reference held: head + G page slots of T rows + tail, fixed once started. The generated window
// (R-SWA ring of n tokens) is untouched by anything below.
//  - start(): the first min(G, N) pages are pulled from the source (just in time: never more) and
//    prefilled with the head and the tail. G >= N is exactly the one-shot prompt (one prefill of
//    the same rows at the same positions), so outputs and logits are identical to one-shot R-SWA.
//    G < N: head + pages 0..G-1 are one causal prefill, then the tail is prefilled against them.
//  - next_page(): the generated text crossed into the next page (the model's <PAGE> marker, or a
//    caller's fallback). Pages are counted from 0; the current page c advances by one. When c is
//    the last page of the group [s, s+G) and pages remain, the group slides to
//    s' = min(c + 1 - O, N - G): pages < s' are released (their slots become free), the O
//    overlap pages [s', s+G) keep their KV (reused, not recomputed), and pages s+G .. s'+G-1 are
//    pulled from the source one at a time and prefilled into the free slots, each attending to
//    the head and every page held (all earlier in the document) and causally to itself, exactly
//    as in the one-shot prefill minus the released pages. The tail keeps its KV unless
//    refresh_tail, which recomputes it against the new group. With the default G = 4, O = 3 the
//    group slides by one page per boundary and holds pages c-2 .. c+1: two behind, one ahead (the
//    model must see the next page to end the current one: with none ahead it tends to emit EOS).
//
//  - recompute_on_slide: a slide rebuilds the held state as a fresh G-page document would hold
//    it instead of reusing it: every held page is prefilled again in document order (slot s =
//    page s' + s, attending to the head and the held pages before it), then the tail, then the
//    R-SWA window's tokens are fed again, oldest first, against the new group (the CPU decoder
//    in one batched pass, decode_tokens; device decoders step them). Reused KV
//    carries its history (a kept page's rows attended to pages since released, the window's text
//    was written while another page group was held); a model trained only on whole documents
//    reads a long one best this way (docs/ACCURACY.md). Costs per slide: G pages' prefill and up
//    to n tokens' decode, instead of the entering pages' prefill; holds the G pages' embeddings and
//    the window's token ids. Needs an R-SWA window or group_positions (the window re-stepped is
//    then bounded).
//
// Bounded (constant after start, whatever N): reference KV = (head + G·T + tail) rows, allocated
// once; the generated ring; the embeddings of one page at a time and start()'s input (head + G
// pages + tail); SR-SWA summaries of G slots; the decoder's scratch (scratch_bytes()). Not
// bounded: positions grow with N (below); the caller's page source.
//
// Positions. The one-shot prompt of N pages needs positions up to head + N·T + tail + generated,
// past max_position_embeddings (32,768) from ~120 pages of 273 tokens. Default: start() rejects
// such a document (Status::invalid_argument) and steps stop at the limit, as upstream does.
// group_positions = true instead makes every group a G-page one-shot document: the head at 0,
// the held page first + j at head + j·T, the tail after the G-th page, and as generated text
// only that of pages first .. current, right after the tail. A slide re-bases: RoPE is a
// rotation, so the kept pages' stored keys are rotated by -(pages slid)·T and the window's by
// -(text generated since the old group's first page began), every relative position then being
// what a fresh G-page prefill would give; the window forgets the text of the released pages (it
// would sit before the tail, where no document puts text). Positions stay below one group's
// prompt + its text, whatever N: the model sees only documents of G pages (those it was trained
// on), never the gaps of a long book. Not upstream's (one-shot) numbering: for G >= N the two
// are identical.
// allow_position_extrapolation = true lifts the limit to 2^24 (float32 positions stay exact
// integers; RoPE angles pos·inv_freq are float32 products as upstream computes them, so their
// rounding grows with pos: ulp 0.06 rad at 1M). RISK: the model never saw relative distances
// beyond its context; with one-shot positions the generated tokens sit N·T positions after the
// first page, so on a long book every step attends to pages hundreds of thousands of positions
// back. Quality there is unmeasured (see the bench's deviation table for what is measurable).
//
// Backends: BasicPageGroupDecoder<Dec, Cache> runs this over any decoder + KV cache pair with
// uocr::Decoder's prefill / prefill_segment / decode_step and uocr::KvCache's reference API
// (VulkanDecoder + VulkanKvCache, CudaDecoder + CudaKvCache); PageGroupDecoder is the CPU one.
// SR-SWA summarizes keys on the host: in place on the CPU, read back a page at a time by a device
// cache (summarize_page). Checkpoints go through the cache's visit_rows: in place on the CPU,
// through a host copy on a device (ReservedKvRing's).
//
// Thread-safety: one PageGroupDecoder per document, used by one thread at a time.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "uocr/core/error.hpp"
#include "uocr/decoder/backend_contract.hpp"
#include "uocr/decoder/decoder.hpp"
#include "uocr/decoder/kv_cache.hpp"
#include "uocr/decoder/rope.hpp"
#include "uocr/decoder/sparse_reference.hpp"
#include "uocr/model/config.hpp"
#include "uocr/model/weights.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

// Visual embeddings of a document's pages, in order, one page per call (pulled just in time).
class PageEmbeddingSource {
 public:
  virtual ~PageEmbeddingSource() = default;
  // Pages this source delivers; -1 when unknown (then the layout's page count is trusted).
  virtual int64_t count() const = 0;
  // The next page's embeddings [tokens, hidden] into `out`; false when there are no more pages.
  virtual bool next(std::vector<float>& out) = 0;
};

// Embeddings made on demand by a function of the page index (tests, callers that encode elsewhere).
class FunctionPageEmbeddings final : public PageEmbeddingSource {
 public:
  FunctionPageEmbeddings(int64_t count, std::function<void(int64_t page, std::vector<float>& out)> make)
      : count_(count), make_(std::move(make)) {
    require(count_ >= 0 && make_ != nullptr, Status::invalid_argument, "page function source needs a count and a function");
  }
  int64_t count() const override { return count_; }
  bool next(std::vector<float>& out) override {
    if (next_ >= count_) return false;
    make_(next_++, out);
    return true;
  }
  int64_t delivered() const { return next_; }

 private:
  int64_t count_, next_ = 0;
  std::function<void(int64_t, std::vector<float>&)> make_;
};

// The one-shot prompt's shape: head ids, N pages of T visual tokens, tail ids.
struct DocumentLayout {
  std::vector<int32_t> head;  // BOS + prompt text before <image>
  std::vector<int32_t> tail;  // prompt text after <image>
  int64_t pages = 0;          // N
  int64_t page_tokens = 0;    // T (every page: multi-page input uses base views only)

  int64_t page_position(int64_t page) const { return int64_t(head.size()) + page * page_tokens; }
  int64_t tail_position() const { return page_position(pages); }
  int64_t prompt_length() const { return tail_position() + int64_t(tail.size()); }  // P
};

struct PageGroupParams {
  int group_pages = 4;    // G >= 2: pages whose visual KV is held at once
  int overlap_pages = 3;  // O, 1 <= O < G: pages of the old group kept (KV reused) when it slides
  bool refresh_tail = false;                  // recompute the prompt text after <image> at each slide
  bool recompute_on_slide = false;            // rebuild the held pages, tail and window at each slide (see above)
  bool allow_position_extrapolation = false;  // positions past max_position_embeddings (see above)
  bool group_positions = false;               // every group at a G-page document's positions (see above)
  bool sparse = false;                        // SR-SWA on the held reference (uocr/decoder/sparse_reference.hpp)
  SparseParams sparse_params;
};

// Largest position allowed with allow_position_extrapolation (float32 integers are exact below).
inline constexpr int64_t kMaxExtrapolatedPosition = int64_t(1) << 24;

// A document's decoder memory in bytes, as held now.
struct DecoderMemory {
  size_t reference_kv_bytes = 0;  // the reference's KV rows (head, the held pages, tail)
  size_t window_kv_bytes = 0;     // the generated window's KV rows
  size_t kv_allocated_bytes = 0;  // KV storage reserved (ring slots not yet filled included)
  size_t peak_kv_bytes = 0;       // the most reference + window rows held so far
  // One page's embeddings (with recompute_on_slide, the G held pages' as well).
  size_t page_buffer_bytes = 0;
  size_t sparse_summary_bytes = 0;  // SR-SWA's key summaries of the held pages
  // Working memory besides the KV cache: the decoder's scratch, start()'s input rows, the page
  // buffer, SR-SWA's summaries and selection buffers. Every buffer is kept and reused once
  // grown, so this never drops during a run.
  size_t scratch_bytes = 0;
};

// Where a document's decoder time went, in seconds.
struct DecoderTimings {
  double prefill_seconds = 0;  // start() and every page prefilled in a slide
  double source_seconds = 0;   // waiting for pages (vision, when the source encodes)
  double slide_seconds = 0;    // next_page() calls that slid (source + prefill)
};

// Where a document stands between two steps, besides the KV rows (see visit_kv()); the same
// for every backend.
struct PageGroupState {
  std::vector<int64_t> slot_pages;
  int64_t first = 0, current = 0, loaded = 0, generated = 0, slides = 0, extra_boundaries = 0;
  uint64_t peak_total_bytes = 0;
  // group_positions: tokens generated before the text of pages first .. current began, and
  // before that of page `first` when the positions were last re-based.
  std::vector<int64_t> text_starts;
  int64_t position_base = 0;
  int64_t ring_tokens = 0;  // the KV cache's generated_tokens()
  std::vector<int32_t> window_ids;  // recompute_on_slide: the tokens of the window's rows, oldest first
};

template <class Dec, class Cache>
class BasicPageGroupDecoder {
 public:
  // Checked here, for every backend: uocr/decoder/backend_contract.hpp.
  static constexpr BackendCapabilities capabilities = check_backend_contract<Dec, Cache>();
  using decoder_type = Dec;
  using cache_type = Cache;

  BasicPageGroupDecoder(Dec decoder, Cache cache, PageGroupParams params = {})
      : dec_(std::move(decoder)), cache_(std::move(cache)), p_(params), rope_(dec_.config().head_dim, dec_.config().rope_theta) {
    validate(p_);
    if (p_.allow_position_extrapolation) dec_.set_position_limit(kMaxExtrapolatedPosition);
  }

  static void validate(const PageGroupParams& p) {
    require(p.group_pages >= 2, Status::invalid_argument, [&] {
      return "page groups need group_pages >= 2 (the page being read and the next), got " + std::to_string(p.group_pages);
    });
    require(p.overlap_pages >= 1 && p.overlap_pages < p.group_pages, Status::invalid_argument, [&] {
      return "overlap_pages must be in [1, group_pages), got " + std::to_string(p.overlap_pages);
    });
    require(!p.sparse || (p.sparse_params.block_tokens > 0 && p.sparse_params.page_budget >= 0 && p.sparse_params.block_budget >= 0),
            Status::invalid_argument, "SR-SWA needs block_tokens > 0 and budgets >= 0");
  }

  // Prefills the reference (head, the first min(G, N) pages, tail) and returns the logits of the
  // first generated token. `pages` must outlive the run: later pages are pulled on next_page().
  std::vector<float> start(const DocumentLayout& layout, PageEmbeddingSource& pages) {
    const DecoderConfig& c = dec_.config();
    require(layout.pages >= 1 && layout.page_tokens >= 1 && !layout.head.empty(), Status::invalid_argument,
            "a document needs a head (BOS), at least one page and page_tokens >= 1");
    require(pages.count() < 0 || pages.count() == layout.pages, Status::invalid_argument, [&] {
      return "page source has " + std::to_string(pages.count()) + " pages but the layout " + std::to_string(layout.pages);
    });
    g_ = std::min<int64_t>(p_.group_pages, layout.pages);
    layout_ = layout;
    require(prompt_positions() <= dec_.position_limit(), Status::invalid_argument, [&] {
      return "a " + std::to_string(layout.pages) + "-page document needs positions up to " +
             std::to_string(prompt_positions()) + " but the limit is " + std::to_string(dec_.position_limit()) +
             (p_.allow_position_extrapolation ? "" : " (max_position_embeddings; allow_position_extrapolation or group_positions lifts it)");
    });
    require(!p_.recompute_on_slide || cache_.window() > 0 || p_.group_positions, Status::invalid_argument,
            "recompute_on_slide needs an R-SWA window or group_positions (it steps the window again at each slide)");
    src_ = &pages;
    const int64_t hidden = c.hidden, t = layout.page_tokens;
    head_rows_ = int64_t(layout.head.size());
    tail_rows_ = int64_t(layout.tail.size());
    slot_page_.assign(size_t(g_), -1);
    first_ = 0;
    current_ = 0;
    loaded_ = 0;
    generated_ = 0;
    slides_ = 0;
    extra_boundaries_ = 0;
    text_starts_.assign(1, 0);
    position_base_ = 0;
    window_ids_.clear();
    spec_rows_ = 0;
    held_embeddings_.clear();
    prefill_seconds_ = source_seconds_ = slide_seconds_ = 0;
    peak_total_bytes_ = 0;

    // Head, the first group's pages and (when the group is the whole document) the tail, in one
    // causal prefill at positions 0.. : the one-shot prompt when G >= N.
    const bool whole = g_ == layout.pages;
    std::vector<float>& x = input_;
    x = dec_.embed(layout.head);
    x.reserve(size_t((head_rows_ + g_ * t + tail_rows_) * hidden));
    for (int64_t p = 0; p < g_; ++p) {
      fetch(p);
      x.insert(x.end(), page_.begin(), page_.end());
      slot_page_[size_t(p)] = p;
    }
    if (whole) {
      const std::vector<float> tail = dec_.embed(layout.tail);
      x.insert(x.end(), tail.begin(), tail.end());
    }
    const int64_t total_rows = head_rows_ + g_ * t + tail_rows_;
    const auto t0 = std::chrono::steady_clock::now();
    cache_.resize_reference(total_rows);  // storage for the whole reference, allocated once
    std::vector<float> logits = dec_.prefill(x, 0, cache_);
    cache_.resize_reference(total_rows);
    if (!whole && tail_rows_ > 0) logits = prefill_tail();
    prefill_seconds_ += seconds_since(t0);
    attach_sparse();
    track();
    return logits;
  }

  using State = PageGroupState;
  State state() const {
    require_settled("state()");
    return {slot_page_,   first_,        current_,       loaded_,
            generated_,   slides_,       extra_boundaries_, uint64_t(peak_total_bytes_),
            text_starts_, position_base_, cache_.generated_tokens(), window_ids_};
  }

  // Calls f(data, floats) on every KV array the state depends on, in a fixed order: per layer
  // the reference keys and values, then the filled window rows' keys and values; with
  // recompute_on_slide then the held pages' embeddings. A checkpoint reads them with it; resume()
  // writes them back with it. Every backend's cache has the same row layout, so a checkpoint of
  // one resumes on any other.
  void visit_kv(const std::function<void(float* data, size_t floats)>& f) {
    require_settled("visit_kv()");
    const int64_t ref = cache_.reference_rows(), gen = cache_.generated_rows();
    for (int l = 0; l < cache_.layers(); ++l) {
      cache_.visit_rows(cache_.reference_k(l), ref, f);
      cache_.visit_rows(cache_.reference_v(l), ref, f);
      cache_.visit_rows(cache_.generated_k(l), gen, f);
      cache_.visit_rows(cache_.generated_v(l), gen, f);
    }
    if (p_.recompute_on_slide) f(held_embeddings_.data(), held_embeddings_.size());
  }

  // Continues a document from a saved State instead of start(): `pages` must already be past
  // the state's loaded pages; `fill_kv` receives visit_kv()'s arrays to write the saved rows.
  // Every field is checked against the layout, the parameters and the model (a state that
  // start() and the calls after it cannot reach is refused, naming the field).
  void resume(const DocumentLayout& layout, PageEmbeddingSource& pages, const State& st,
              const std::function<void(float* data, size_t floats)>& fill_kv) {
    require(layout.pages >= 1 && layout.page_tokens >= 1 && layout.page_tokens <= dec_.position_limit() && !layout.head.empty(),
            Status::invalid_argument, "a document needs a head (BOS), at least one page and page_tokens in [1, position limit]");
    g_ = std::min<int64_t>(p_.group_pages, layout.pages);
    auto check = [](bool ok, const std::string& field, int64_t value, const std::string& should) {
      require(ok, Status::invalid_argument,
              [&] { return "page group state: " + field + " = " + std::to_string(value) + ", it should be " + should; });
    };
    check(int64_t(st.slot_pages.size()) == g_, "the size of slot_pages", int64_t(st.slot_pages.size()),
          "the group size " + std::to_string(g_));
    check(st.first >= 0 && st.first <= layout.pages - g_, "first", st.first, "in [0, pages - group size]");
    check(st.loaded == st.first + g_, "loaded", st.loaded, "first + group size (" + std::to_string(st.first + g_) + ")");
    check(st.current >= st.first && st.current < st.first + g_, "current", st.current, "a page of the group");
    for (size_t s = 0; s < st.slot_pages.size(); ++s)
      check(st.slot_pages[s] >= st.first && st.slot_pages[s] < st.first + g_ &&
                std::count(st.slot_pages.begin(), st.slot_pages.end(), st.slot_pages[s]) == 1,
            "slot_pages[" + std::to_string(s) + "]", st.slot_pages[s], "a page of the group held in no other slot");
    check(st.generated >= 0, "generated", st.generated, ">= 0");
    check(st.slides >= 0, "slides", st.slides, ">= 0");
    check(st.extra_boundaries >= 0, "extra_boundaries", st.extra_boundaries, ">= 0");
    check(st.position_base >= 0 && st.position_base <= st.generated && (p_.group_positions || st.position_base == 0), "position_base",
          st.position_base, p_.group_positions ? "in [0, generated]" : "0 (no group positions)");
    check(int64_t(st.text_starts.size()) == st.current - st.first + 1, "the size of text_starts", int64_t(st.text_starts.size()),
          "current - first + 1");
    for (size_t i = 0; i < st.text_starts.size(); ++i)
      check(st.text_starts[i] >= (i ? st.text_starts[i - 1] : st.position_base) && st.text_starts[i] <= st.generated,
            "text_starts[" + std::to_string(i) + "]", st.text_starts[i], "in [position_base, generated], not below the one before");
    check(st.ring_tokens >= 0 && st.ring_tokens <= st.generated - st.position_base, "ring_tokens", st.ring_tokens,
          "in [0, generated - position_base]");
    layout_ = layout;
    check(st.generated - st.position_base <= dec_.position_limit() - prompt_positions(), "generated", st.generated,
          "within the position limit " + std::to_string(dec_.position_limit()));
    check(p_.recompute_on_slide || st.window_ids.empty(), "the size of window_ids", int64_t(st.window_ids.size()),
          "0 (no recompute_on_slide)");
    for (size_t i = 0; i < st.window_ids.size(); ++i)
      check(st.window_ids[i] >= 0 && st.window_ids[i] < dec_.config().vocab, "window_ids[" + std::to_string(i) + "]", st.window_ids[i],
            "a token id (vocabulary " + std::to_string(dec_.config().vocab) + ")");
    src_ = &pages;
    head_rows_ = int64_t(layout.head.size());
    tail_rows_ = int64_t(layout.tail.size());
    slot_page_ = st.slot_pages;
    first_ = st.first;
    current_ = st.current;
    loaded_ = st.loaded;
    generated_ = st.generated;
    slides_ = st.slides;
    extra_boundaries_ = st.extra_boundaries;
    text_starts_ = st.text_starts;
    position_base_ = st.position_base;
    window_ids_ = st.window_ids;
    spec_rows_ = 0;
    held_embeddings_.assign(p_.recompute_on_slide ? size_t(g_ * layout.page_tokens * dec_.config().hidden) : 0, 0.0f);
    peak_total_bytes_ = size_t(st.peak_total_bytes);
    prefill_seconds_ = source_seconds_ = slide_seconds_ = 0;
    const int64_t rows = head_rows_ + g_ * layout.page_tokens + tail_rows_;
    cache_.resize_reference(rows);
    cache_.reset(rows);
    // The cache keeps its ring index and full-mode growth to itself: claiming the slots again
    // replays that bookkeeping exactly (same slot order, same allocation).
    for (int64_t i = 0; i < st.ring_tokens; ++i) cache_.claim_slot();
    check(!p_.recompute_on_slide || int64_t(window_ids_.size()) == cache_.generated_rows(), "the size of window_ids",
          int64_t(window_ids_.size()), "the window's rows " + std::to_string(cache_.generated_rows()));
    visit_kv(fill_kv);
    attach_sparse();
  }

  // Feeds generated token `token` at the next position; returns the logits of the one after it.
  // Throws Status::invalid_argument at the position limit (check next_position() first).
  const std::vector<float>& step(int32_t token) {
    return step(token, [](int32_t t, int64_t position, Dec& dec, Cache& cache) -> const std::vector<float>& {
      return dec.decode_step(t, position, cache);
    });
  }
  // As step(), the decoding done by decode(token, position, decoder, cache) -> logits (a
  // StepBatcher running it in one batch with other documents' steps: uocr/decoder/step_batcher.hpp).
  template <class Decode>
  const std::vector<float>& step(int32_t token, Decode&& decode) {
    require(src_ != nullptr, Status::invalid_argument, "page groups: step() before start()");
    require_settled("step()");
    const std::vector<float>& logits = decode(token, next_position(), dec_, cache_);
    remember_window(&token, 1);
    ++generated_;
    track();
    return logits;
  }

  // --- Draft verification (uocr/session/draft.hpp) ---
  // A backend whose decoder runs several tokens of one document in one pass verifies drafts.
  static constexpr bool kVerifiesDrafts = capabilities.multi_token_decode;

  // The most tokens one verify() takes now (0: this backend cannot): up to the position limit
  // and, with an R-SWA ring, at most its size (each token then takes a slot of its own, which a
  // rejected one gives back).
  int64_t verify_limit() const {
    if (!kVerifiesDrafts || src_ == nullptr) return 0;
    int64_t n = position_limit() - next_position();
    if (cache_.window() > 0) n = std::min<int64_t>(n, cache_.window());
    return std::max<int64_t>(n, 0);
  }

  // Feeds tokens[0 .. n) at the next positions exactly as n step() calls would (cache rows, ring
  // slots, SR-SWA attention, the window's ids) and returns their logits [n, vocab]: row i holds
  // the bits step(tokens[i]) would return. settle() must follow before any other call.
  const std::vector<float>& verify(const int32_t* tokens, int64_t n) {
    require(src_ != nullptr, Status::invalid_argument, "page groups: verify() before start()");
    require_settled("verify()");
    require(n >= 1 && n <= verify_limit(), Status::invalid_argument, [&] {
      return "page groups: verify() of " + std::to_string(n) + " tokens, the limit now is " + std::to_string(verify_limit());
    });
    if constexpr (kVerifiesDrafts) {
      // The ring slots these tokens take, as they are now: a rejected token's slot gets its row back.
      cache_.save_next_slots(n, spec_saved_);
      spec_window_ids_ = window_ids_;
      spec_tokens_.assign(tokens, tokens + n);
      spec_logits_.resize(size_t(n * dec_.config().vocab));
      dec_.decode_tokens(tokens, n, next_position(), cache_, spec_logits_.data());
      remember_window(tokens, n);
      generated_ += n;
      spec_rows_ = n;
    }
    return spec_logits_;
  }

  // Ends a verify(): its first `kept` tokens stay, as if stepped; the others are forgotten (their
  // ring slots hold again what they held, the window's ids and the counts are as before them).
  // SR-SWA's counters keep the work the forgotten tokens cost.
  void settle(int64_t kept) {
    require(spec_rows_ > 0, Status::invalid_argument, "page groups: settle() without a verify()");
    require(kept >= 0 && kept <= spec_rows_, Status::invalid_argument, [&] {
      return "page groups: settle() keeps " + std::to_string(kept) + " of " + std::to_string(spec_rows_) + " verified tokens";
    });
    const int64_t drop = spec_rows_ - kept;
    if constexpr (kVerifiesDrafts) {
      if (drop > 0) {
        cache_.restore_slots(spec_rows_, kept, spec_saved_);
        cache_.unclaim(drop);
        generated_ -= drop;
        window_ids_ = spec_window_ids_;
        remember_window(spec_tokens_.data(), kept);
      }
    }
    spec_rows_ = 0;
    track();
  }

  // The generated text moved on to the next page; its text began `marker_tokens` tokens ago (the
  // marker's first tokens, which group_positions keeps with the new page). Slides the group
  // when that page is the last one held and more remain; returns the number of pages that
  // entered (0 without a slide). Boundaries past the last page are counted (extra_boundaries())
  // and otherwise ignored.
  int64_t next_page(int64_t marker_tokens = 0) {
    require(src_ != nullptr, Status::invalid_argument, "page groups: next_page() before start()");
    require_settled("next_page()");
    if (current_ + 1 >= layout_.pages) {
      ++extra_boundaries_;
      return 0;
    }
    ++current_;
    text_starts_.push_back(std::clamp(generated_ - marker_tokens, text_starts_.back(), generated_));
    if (current_ < first_ + g_ - 1 || first_ + g_ >= layout_.pages) return 0;
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t new_first = std::min<int64_t>(current_ + 1 - p_.overlap_pages, layout_.pages - g_);
    for (int64_t& sp : slot_page_)
      if (sp < new_first) sp = -1;  // released: the slot is free for an entering page
    if (p_.group_positions) rebase_positions(new_first);
    text_starts_.erase(text_starts_.begin(), text_starts_.begin() + (new_first - first_));
    const int64_t old_first = first_;
    first_ = new_first;  // entering pages take their positions in the new group
    const int64_t t = layout_.page_tokens;
    std::vector<int64_t> pos(static_cast<size_t>(t));
    int64_t entered = 0;
    if (p_.recompute_on_slide)
      held_embeddings_.erase(held_embeddings_.begin(), held_embeddings_.begin() + (new_first - old_first) * t * dec_.config().hidden);
    for (int64_t p = old_first + g_; p < new_first + g_; ++p) {
      fetch(p);
      if (p_.recompute_on_slide) {
        ++entered;
        continue;  // prefilled with the kept pages below
      }
      const int64_t s = int64_t(std::find(slot_page_.begin(), slot_page_.end(), int64_t(-1)) - slot_page_.begin());
      for (int64_t i = 0; i < t; ++i) pos[size_t(i)] = page_position(p) + i;
      const auto t1 = std::chrono::steady_clock::now();
      dec_.prefill_segment(page_.data(), t, pos.data(), cache_, slot_span(s).begin, held_context());
      slot_page_[size_t(s)] = p;
      if (sparse_) summarize(size_t(s));
      prefill_seconds_ += seconds_since(t1);
      ++entered;
    }
    if (p_.recompute_on_slide) {
      const auto t1 = std::chrono::steady_clock::now();
      recompute_held();
      prefill_seconds_ += seconds_since(t1);
    } else if (p_.refresh_tail && tail_rows_ > 0) {
      const auto t1 = std::chrono::steady_clock::now();
      prefill_tail();
      prefill_seconds_ += seconds_since(t1);
    }
    ++slides_;
    slide_seconds_ += seconds_since(t0);
    track();
    return entered;
  }

  // --- State ---
  const DocumentLayout& layout() const { return layout_; }
  int64_t current_page() const { return current_; }
  int64_t first_page() const { return first_; }           // the group is [first_page, first_page + group_size)
  int64_t group_size() const { return g_; }               // min(G, N)
  int64_t pages_loaded() const { return loaded_; }        // pulled from the source so far
  int64_t slides() const { return slides_; }
  int64_t extra_boundaries() const { return extra_boundaries_; }
  bool pages_pending() const { return first_ + g_ < layout_.pages; }  // pages not yet in the group
  int64_t generated() const { return generated_; }
  int64_t next_position() const { return prompt_positions() + generated_ - position_base_; }
  int64_t position_limit() const { return dec_.position_limit(); }
  // Page held in each slot (slot s = reference rows slot_span(s)); -1 for none.
  const std::vector<int64_t>& slot_pages() const { return slot_page_; }
  RowSpan slot_span(int64_t s) const { return {head_rows_ + s * layout_.page_tokens, layout_.page_tokens}; }
  int64_t tail_row() const { return head_rows_ + g_ * layout_.page_tokens; }

  // --- Memory (bytes) and time ---
  DecoderMemory memory() const {
    DecoderMemory m;
    m.reference_kv_bytes = cache_.reference_bytes();
    // Tokens of an unsettled verify() are not held yet.
    const int64_t ring = cache_.generated_tokens() - spec_rows_;
    m.window_kv_bytes = size_t(cache_.window() > 0 ? std::min<int64_t>(ring, cache_.window()) : ring) * cache_.bytes_per_token();
    m.kv_allocated_bytes = cache_.allocated_bytes();
    m.peak_kv_bytes = peak_total_bytes_;
    m.page_buffer_bytes = (page_.capacity() + held_embeddings_.capacity()) * sizeof(float);
    m.sparse_summary_bytes = sparse_ ? sparse_->summary_bytes() : 0;
    m.scratch_bytes = dec_.scratch_bytes() + input_.capacity() * sizeof(float) + m.page_buffer_bytes +
                      window_ids_.capacity() * sizeof(int32_t) + (sparse_ ? sparse_->scratch_bytes() : 0) +
                      (spec_logits_.capacity() + spec_saved_.capacity()) * sizeof(float) +
                      (spec_window_ids_.capacity() + spec_tokens_.capacity()) * sizeof(int32_t);
    return m;
  }
  DecoderTimings timings() const { return {prefill_seconds_, source_seconds_, slide_seconds_}; }

  const Cache& cache() const { return cache_; }
  Dec& decoder() { return dec_; }
  SparseReference* sparse() { return sparse_.get(); }

 private:
  static double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  // Pulls page `p` (the next one in order) into page_.
  void fetch(int64_t p) {
    require(p == loaded_, Status::internal, "page groups: pages must be pulled in order");
    const auto t0 = std::chrono::steady_clock::now();
    const bool ok = src_->next(page_);
    source_seconds_ += seconds_since(t0);
    require(ok, Status::invalid_argument, [&] {
      return "page source ended after " + std::to_string(p) + " of " + std::to_string(layout_.pages) + " pages";
    });
    require(int64_t(page_.size()) == layout_.page_tokens * dec_.config().hidden, Status::invalid_argument, [&] {
      return "page " + std::to_string(p) + " has " + std::to_string(page_.size()) + " embedding floats, expected " +
             std::to_string(layout_.page_tokens) + " tokens x " + std::to_string(dec_.config().hidden);
    });
    ++loaded_;
    if (p_.recompute_on_slide) held_embeddings_.insert(held_embeddings_.end(), page_.begin(), page_.end());
  }

  // The head and every occupied slot (all earlier in the document than a page entering now).
  std::vector<RowSpan> held_context() const {
    std::vector<RowSpan> ctx{{0, head_rows_}};
    for (int64_t s = 0; s < g_; ++s)
      if (slot_page_[size_t(s)] >= 0) ctx.push_back(slot_span(s));
    return ctx;
  }

  // (Re)computes the tail rows against the head and the held pages; returns its last logits.
  std::vector<float> prefill_tail() {
    const std::vector<float> x = dec_.embed(layout_.tail);
    std::vector<int64_t> pos(static_cast<size_t>(tail_rows_));
    const int64_t first = p_.group_positions ? head_rows_ + g_ * layout_.page_tokens : layout_.tail_position();
    for (int64_t i = 0; i < tail_rows_; ++i) pos[size_t(i)] = first + i;
    return dec_.prefill_segment(x.data(), tail_rows_, pos.data(), cache_, tail_row(), held_context(), true);
  }

  // recompute_on_slide, after a slide: the held pages (slot s = page first_ + s) in one causal
  // prefill against the head, the tail, the SR-SWA summaries, then the window's tokens again.
  void recompute_held() {
    const int64_t t = layout_.page_tokens, rows = g_ * t;
    std::vector<int64_t> pos(static_cast<size_t>(rows));
    for (int64_t s = 0; s < g_; ++s) {
      slot_page_[size_t(s)] = first_ + s;
      for (int64_t i = 0; i < t; ++i) pos[size_t(s * t + i)] = page_position(first_ + s) + i;
    }
    dec_.prefill_segment(held_embeddings_.data(), rows, pos.data(), cache_, slot_span(0).begin, {{0, head_rows_}});
    if (tail_rows_ > 0) prefill_tail();
    if (sparse_)
      for (int64_t s = 0; s < g_; ++s) summarize(size_t(s));
    const int64_t keep = int64_t(window_ids_.size()), position = next_position() - keep;
    cache_.keep_last_generated(0);
    if constexpr (capabilities.multi_token_decode)
      dec_.decode_tokens(window_ids_.data(), keep, position, cache_);  // the steps' bits, the rows batched
    else
      for (int64_t j = 0; j < keep; ++j) dec_.decode_step(window_ids_[size_t(j)], position + j, cache_);
  }

  void track() { peak_total_bytes_ = std::max(peak_total_bytes_, cache_.total_bytes()); }

  void require_settled(const char* call) const {
    require(spec_rows_ == 0, Status::invalid_argument,
            [&] { return std::string("page groups: ") + call + " while a verify() is not settled"; });
  }

  // recompute_on_slide: the ids of the window's rows, after `n` more tokens were fed.
  void remember_window(const int32_t* tokens, int64_t n) {
    if (!p_.recompute_on_slide) return;
    window_ids_.insert(window_ids_.end(), tokens, tokens + n);
    const int64_t excess = int64_t(window_ids_.size()) - cache_.generated_rows();
    if (excess > 0) window_ids_.erase(window_ids_.begin(), window_ids_.begin() + excess);
  }

  // Position of held page p's first visual token.
  int64_t page_position(int64_t p) const {
    return p_.group_positions ? head_rows_ + (p - first_) * layout_.page_tokens : layout_.page_position(p);
  }
  // The prompt's length in positions: a G-page document's with group_positions, else the one-shot one.
  int64_t prompt_positions() const {
    return p_.group_positions ? int64_t(layout_.head.size() + layout_.tail.size()) + g_ * layout_.page_tokens
                              : layout_.prompt_length();
  }

  // group_positions, before a slide to new_first: moves the kept pages and the window's text of
  // pages >= new_first to the new group's positions by rotating their stored keys (values carry
  // no position) and forgets the window's older text.
  void rebase_positions(int64_t new_first) {
    const int64_t new_base = text_starts_[size_t(new_first - first_)];
    const int64_t held = cache_.generated_rows(), ring_tokens = cache_.generated_tokens();
    const int64_t keep = std::min(held, generated_ - new_base);
    if (p_.recompute_on_slide) {  // recompute_held() computes every kept row again: only forget
      window_ids_.erase(window_ids_.begin(), window_ids_.end() - keep);
      position_base_ = new_base;
      return;
    }
    const int64_t page_shift = -(new_first - first_) * layout_.page_tokens;
    const int64_t text_shift = -(new_base - position_base_);
    const int64_t row = cache_.row_floats(), kv_heads = row / dec_.config().head_dim;
    std::vector<float> kept(size_t(keep * row));
    // Rows of the last `keep` tokens, oldest first, into slots 0 .. keep - 1 (rotated for keys).
    auto compact = [&](float* data, bool keys) {
      for (int64_t j = 0; j < keep; ++j) {
        float* dst = kept.data() + j * row;
        std::copy_n(data + cache_.generated_slot(ring_tokens - keep + j) * row, row, dst);
        if (keys) rope_.apply(dst, kv_heads, text_shift);
      }
      std::copy(kept.begin(), kept.end(), data);
    };
    for (int l = 0; l < cache_.layers(); ++l) {
      cache_.visit_rows(cache_.reference_k(l), cache_.reference_rows(), [&](float* data, size_t) {
        for (int64_t s = 0; s < g_; ++s) {
          if (slot_page_[size_t(s)] < 0) continue;
          float* rows = data + slot_span(s).begin * row;
          for (int64_t r = 0; r < layout_.page_tokens; ++r) rope_.apply(rows + r * row, kv_heads, page_shift);
        }
      });
      if (held == 0) continue;
      cache_.visit_rows(cache_.generated_k(l), held, [&](float* data, size_t) { compact(data, true); });
      cache_.visit_rows(cache_.generated_v(l), held, [&](float* data, size_t) { compact(data, false); });
    }
    cache_.keep_last_generated(keep);
    if (sparse_)
      for (int64_t s = 0; s < g_; ++s)
        if (slot_page_[size_t(s)] >= 0) summarize(size_t(s));
    position_base_ = new_base;
  }

  // SR-SWA summaries of slot s's page (after it was prefilled).
  void summarize(size_t s) {
    if constexpr (capabilities.host_kv)
      sparse_->update_page(cache_, s);
    else
      cache_.summarize_page(*sparse_, s);
  }

  // SR-SWA over the held slots, its key summaries computed from the cache as it is now.
  void attach_sparse() {
    if (p_.sparse) {
      ReferenceLayout rl;
      if (head_rows_) rl.always.push_back({0, head_rows_});
      for (int64_t s = 0; s < g_; ++s) rl.pages.push_back(slot_span(s));
      if (tail_rows_) rl.always.push_back({tail_row(), tail_rows_});
      sparse_ = std::make_unique<SparseReference>(dec_.config(), std::move(rl), p_.sparse_params);
      for (size_t s = 0; s < size_t(g_); ++s) summarize(s);
      dec_.set_decode_attention(sparse_.get());
    } else {
      sparse_.reset();
      dec_.set_decode_attention(nullptr);
    }
  }

  Dec dec_;
  Cache cache_;
  PageGroupParams p_;
  Rope rope_;  // group_positions' key rotations
  DocumentLayout layout_;
  PageEmbeddingSource* src_ = nullptr;
  std::unique_ptr<SparseReference> sparse_;
  std::vector<float> input_;  // start()'s prefill input: head, the first group's pages, tail
  std::vector<float> page_;
  std::vector<int64_t> slot_page_;
  std::vector<float> held_embeddings_;  // recompute_on_slide: pages first_ .. first_ + G - 1, in order
  std::vector<int32_t> window_ids_;     // recompute_on_slide: the window rows' tokens, oldest first
  // An unsettled verify(): its token count, tokens and logits, the ring rows its slots held
  // before it (KvRing::save_next_slots), the window's ids before it.
  int64_t spec_rows_ = 0;
  std::vector<int32_t> spec_tokens_, spec_window_ids_;
  std::vector<float> spec_logits_, spec_saved_;
  int64_t g_ = 0, head_rows_ = 0, tail_rows_ = 0;
  int64_t first_ = 0, current_ = 0, loaded_ = 0, generated_ = 0, slides_ = 0, extra_boundaries_ = 0;
  std::vector<int64_t> text_starts_;  // tokens generated before the text of pages first_ .. current_
  int64_t position_base_ = 0;         // group_positions: text position 0 = this generated count
  double prefill_seconds_ = 0, source_seconds_ = 0, slide_seconds_ = 0;
  size_t peak_total_bytes_ = 0;
};

// The CPU backend's page groups (uocr::Decoder over a host KvCache).
class PageGroupDecoder final : public BasicPageGroupDecoder<Decoder, KvCache> {
 public:
  PageGroupDecoder(const DecoderConfig& config, const DecoderWeights& weights, int window, PageGroupParams params = {},
                   Precision prefill_precision = Precision::f32)
      : BasicPageGroupDecoder(Decoder(config, weights, prefill_precision), KvCache(config, window), params) {}
};

UOCR_NAMESPACE_END
