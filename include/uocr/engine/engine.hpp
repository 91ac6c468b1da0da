// Compute engines: what the generation loop needs from a backend (CPU, Vulkan, CUDA), so that
// sessions pick one at run time and stay backend-agnostic.
//
//   std::shared_ptr<Engine> e = open_engine(model, Backend::vulkan);     // uocr/engine/open.hpp
//   uocr::Session a(e, params), b(e, params);                            // share e's device and weights
//   std::unique_ptr<VisionEngine> vision = e->vision();                  // page views -> visual tokens
//   std::unique_ptr<DecoderEngine> dec = e->decoder(window, groups);     // one document's decoder
//   std::vector<float> logits = dec->start(layout, pages);               // prefill the reference
//   for (;;) { ...; if (page boundary) dec->next_page(); logits = dec->step(token); }
//
// A backend provides an Engine (opened once for a model on a device; the sessions opened on it
// share its copy of the weights), a VisionEngine and a DecoderEngine. The decoder side is page
// groups (uocr/decoder/page_groups.hpp) over the backend's decoder + KV cache pair, which keeps
// the backend contract (uocr/decoder/backend_contract.hpp); a backend wraps
// BasicPageGroupDecoder<ItsDecoder, ItsCache> in PageGroupEngine below.
// What a backend cannot do (a head_dim beyond its attention kernel's, say) is Status::unsupported,
// never a silent fallback to another backend.
//
// Thread-safety: an Engine may be shared by threads; each VisionEngine / DecoderEngine is used by
// one thread at a time.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "uocr/core/deadline.hpp"
#include "uocr/core/error.hpp"
#include "uocr/core/precision.hpp"
#include "uocr/decoder/page_groups.hpp"
#include "uocr/decoder/sparse_reference.hpp"
#include "uocr/decoder/step_batcher.hpp"
#include "uocr/engine/backend.hpp"
#include "uocr/engine/engine_options.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

// The DeepEncoder on some device: one page's prepared views -> visual tokens [n, hidden], laid
// out as uocr::VisionEncoder::visual_tokens.
class VisionEngine {
 public:
  virtual ~VisionEngine() = default;
  virtual int hidden() const = 0;
  virtual std::vector<float> visual_tokens(const std::vector<float>& global_view,
                                           const std::vector<std::vector<float>>& tiles, int tiles_x, int tiles_y) = 0;
  // When encoding must stop (EncodedPages sets the run's deadline; none: never): past it,
  // visual_tokens() throws DeadlinePassed before a view and, on the CPU, between two blocks.
  virtual void set_deadline(const Deadline& deadline) = 0;
  // Bytes of working memory (activations) held for the pages encoded so far: a workspace kept
  // and reused page after page, or (buffers allocated per page) the most one page needed.
  virtual size_t scratch_bytes() const = 0;
};

// One document's decoder on some device: the surface of uocr::PageGroupDecoder (see
// uocr/decoder/page_groups.hpp for the meaning of every call and number).
class DecoderEngine {
 public:
  virtual ~DecoderEngine() = default;

  // Prefills the reference (head, the first pages, tail); returns the first token's logits.
  // `pages` must outlive the run (later pages are pulled by next_page()).
  virtual std::vector<float> start(const DocumentLayout& layout, PageEmbeddingSource& pages) = 0;
  // Feeds a generated token at next_position(); returns the logits of the one after it.
  virtual const std::vector<float>& step(int32_t token) = 0;
  // The output moved on to the next page (slides the group when needed); pages that entered.
  // marker_tokens: tokens already fed that begin the new page (its marker's first tokens).
  virtual int64_t next_page(int64_t marker_tokens = 0) = 0;

  // Draft verification (uocr/session/draft.hpp), as BasicPageGroupDecoder's: the most tokens
  // verify() takes now (0: never on this engine: a backend without multi-token steps); verify()
  // feeds them as that many step() calls would and returns their logits [n, vocab]; settle(kept)
  // keeps the first `kept` and forgets the rest, and must follow before any other call.
  virtual int64_t verify_limit() const = 0;
  virtual const std::vector<float>& verify(const int32_t* tokens, int64_t n) = 0;
  virtual void settle(int64_t kept) = 0;

  // When a prefill (start(), the pages a next_page() brings in) must stop: past it, it throws
  // DeadlinePassed between two decoder layers and this engine is not to be used again.
  virtual void set_deadline(const Deadline& deadline) = 0;

  // Checkpoints (uocr/session/session.hpp): the state besides the KV rows, every KV array in a
  // fixed order (one layout on every backend), and continuing from them instead of start().
  using KvVisitor = std::function<void(float* data, size_t floats)>;
  virtual PageGroupState state() const = 0;
  virtual void visit_kv(const KvVisitor& f) = 0;
  virtual void resume(const DocumentLayout& layout, PageEmbeddingSource& pages, const PageGroupState& state,
                      const KvVisitor& fill_kv) = 0;

  virtual bool pages_pending() const = 0;
  virtual int64_t next_position() const = 0;
  virtual int64_t position_limit() const = 0;
  virtual int64_t group_size() const = 0;
  virtual int64_t slides() const = 0;

  virtual DecoderMemory memory() const = 0;
  virtual DecoderTimings timings() const = 0;
  virtual SparseReference* sparse() = 0;  // SR-SWA state, nullptr when off
};

// DecoderEngine over page groups PG (a BasicPageGroupDecoder). `owner` keeps alive what PG
// refers to (the model's weights; a device and its uploaded weights). A backend with
// batched_decode: with batch_steps(), decode steps go through a StepBatcher shared with other
// documents (continuous batching); the document counts as decoding there from the end of
// start()/resume() to its destruction, except while a next_page() prefills entering pages or a
// verify() checks a draft.
template <class PG>
class PageGroupEngine final : public DecoderEngine {
 public:
  static constexpr bool kBatching = PG::capabilities.batched_decode;
  using Batcher = StepBatcher<typename PG::decoder_type, typename PG::cache_type>;

  template <class... Args>
  explicit PageGroupEngine(std::shared_ptr<const void> owner, Args&&... args)
      : owner_(std::move(owner)), pg_(std::forward<Args>(args)...) {}

  // Decode steps through `batcher` from the next start()/resume() on.
  void batch_steps(std::shared_ptr<Batcher> batcher) {
    static_assert(kBatching, "this backend's decoder has no batched step");
    member_.reset();
    batcher_ = std::move(batcher);
    if (batcher_) member_.emplace(*batcher_);
  }

  std::vector<float> start(const DocumentLayout& layout, PageEmbeddingSource& pages) override {
    decoding(false);
    std::vector<float> logits = pg_.start(layout, pages);
    decoding(true);
    return logits;
  }
  const std::vector<float>& step(int32_t token) override {
    if constexpr (kBatching) {
      if (batcher_) return batched_step(token);
    }
    return pg_.step(token);
  }
  int64_t next_page(int64_t marker_tokens = 0) override {
    decoding(false);
    const int64_t entered = pg_.next_page(marker_tokens);
    decoding(true);
    return entered;
  }

  // A verification runs on this document's own decoder, as a prefill does: the document leaves
  // the batch for it, so the others step on meanwhile.
  int64_t verify_limit() const override { return pg_.verify_limit(); }
  const std::vector<float>& verify(const int32_t* tokens, int64_t n) override {
    decoding(false);
    const std::vector<float>& logits = pg_.verify(tokens, n);
    decoding(true);
    return logits;
  }
  void settle(int64_t kept) override { pg_.settle(kept); }
  void set_deadline(const Deadline& deadline) override { pg_.decoder().set_deadline(deadline); }

  PageGroupState state() const override { return pg_.state(); }
  void visit_kv(const KvVisitor& f) override { pg_.visit_kv(f); }
  void resume(const DocumentLayout& layout, PageEmbeddingSource& pages, const PageGroupState& state,
              const KvVisitor& fill_kv) override {
    decoding(false);
    pg_.resume(layout, pages, state, fill_kv);
    decoding(true);
  }

  bool pages_pending() const override { return pg_.pages_pending(); }
  int64_t next_position() const override { return pg_.next_position(); }
  int64_t position_limit() const override { return pg_.position_limit(); }
  int64_t group_size() const override { return pg_.group_size(); }
  int64_t slides() const override { return pg_.slides(); }

  DecoderMemory memory() const override {
    DecoderMemory m = pg_.memory();
    m.scratch_bytes += logits_.capacity() * sizeof(float);  // batching: this document's logits row
    return m;
  }
  DecoderTimings timings() const override { return pg_.timings(); }
  SparseReference* sparse() override { return pg_.sparse(); }

  PG& page_groups() { return pg_; }

 private:
  void decoding(bool on) {
    if (member_) member_->active(on);
  }

  const std::vector<float>& batched_step(int32_t token) {
    using Dec = typename PG::decoder_type;
    using Cache = typename PG::cache_type;
    return pg_.step(token, [this](int32_t t, int64_t position, Dec& dec, Cache& cache) -> const std::vector<float>& {
      dec.check_step(t, position, cache);  // against this document's own limits, before it joins a batch
      batcher_->step(t, position, cache, pg_.sparse(), logits_);
      return logits_;
    });
  }

  std::shared_ptr<const void> owner_;  // declared first: outlives pg_
  PG pg_;
  std::shared_ptr<Batcher> batcher_;
  std::optional<typename Batcher::Member> member_;  // declared after batcher_: leaves before it goes
  std::vector<float> logits_;                        // this document's row of the last batch
};

// What an engine runs on, for reports such as `uocr run --stats json`.
struct EngineInfo {
  Backend backend = Backend::cpu;
  int device_index = 0;
  std::string device;  // the device's own name: the CPU model, the GPU's name
  std::string driver;  // the driver's version; "" where there is no driver (CPU)
  // The arithmetic of the large products as they run: bf16 asked for on a CPU without bf16 dot
  // products runs (and reports) f32.
  Precision precision = Precision::f32;
};

class Model;

// A backend opened for one model on one device (see uocr/engine/open.hpp): it owns what the
// model's sessions on that device share: the device, the weights uploaded to it, the vision
// encoder there and, with batching, the step batcher. Open one and run every session on it
// (uocr::Session's engine constructor); engines opened separately share nothing.
class Engine {
 public:
  virtual ~Engine() = default;
  // The model it runs, and the options it was opened with (info() says what runs).
  const std::shared_ptr<const Model>& model() const { return model_; }
  const EngineOptions& options() const { return options_; }
  virtual EngineInfo info() const = 0;
  Backend backend() const { return info().backend; }
  // The device in words ("CPU: <model>", "Vulkan device 0: <name>", "CUDA device 0: <name>").
  std::string device() const {
    const EngineInfo i = info();
    if (i.backend == Backend::cpu) return "CPU: " + i.device;
    return std::string(i.backend == Backend::vulkan ? "Vulkan" : "CUDA") + " device " + std::to_string(i.device_index) +
           ": " + i.device;
  }
  virtual std::unique_ptr<VisionEngine> vision() = 0;
  // A decoder for one document: R-SWA window (0: full attention) and page-group parameters.
  virtual std::unique_ptr<DecoderEngine> decoder(int window, const PageGroupParams& groups) = 0;
  // Continuous batching (EngineOptions::batching): what the batcher shared by this engine's
  // documents did so far.
  virtual BatchStats batch_stats() const { return {}; }

 protected:
  Engine(std::shared_ptr<const Model> model, const EngineOptions& options) : model_(std::move(model)), options_(options) {}

 private:
  std::shared_ptr<const Model> model_;
  EngineOptions options_;
};

UOCR_NAMESPACE_END
