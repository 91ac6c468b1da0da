// uocr::OneShotSession, a helper over uocr::Session (uocr/session/session.hpp): pages added in
// memory, then transcribed with every page in one group, which is exactly upstream's one-shot
// prompt (one-shot R-SWA, or full attention with window 0), run by the one generation loop.
// Pages in, events out: the pages are encoded, the prompt (BOS + visual tokens + prompt text) is
// prefilled as the R-SWA reference, then tokens are generated with the reference kept and only
// the last n generated tokens' keys/values in a ring, so memory stays constant however long the
// output. Use Session for documents too long to hold, and for page sources, checkpoints and
// page groups.
//
// Thread-safety: one thread at a time; the Model may be shared by many.
#pragma once
#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "uocr/image/image.hpp"
#include "uocr/model/model.hpp"
#include "uocr/session/session.hpp"
#include "uocr/session/page_source.hpp"
#include "uocr/session/params.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

class OneShotSession {
 public:
  // On `engine` (its model and device; params' engine fields as for uocr::Session's engine
  // constructor).
  OneShotSession(std::shared_ptr<Engine> engine, SessionParams params)
      : params_(std::move(params)), engine_(std::move(engine)) {
    require(engine_ != nullptr, Status::invalid_argument, "session needs an engine");
    model_ = engine_->model();
    adopt_engine_choice(*engine_, params_);
    validate(*model_, params_);
  }

  // On an engine of its own, opened now as `params` says (kept for every later run), so a backend
  // that is not built in or a missing device is reported here, not by run().
  OneShotSession(std::shared_ptr<const Model> model, SessionParams params)
      : OneShotSession(open_session_engine(model, params), params) {}

  const Model& model() const { return *model_; }

  void add_page(ImageU8 image) {
    require(image.width > 0 && image.height > 0, Status::invalid_argument, "page image is empty");
    pages_.push_back(std::move(image));
  }
  size_t page_count() const { return pages_.size(); }

  // Window the run uses: params override, else config's sliding window, else upstream's 128.
  int effective_window() const { return uocr::effective_window(*model_, params_); }

  // KV memory of the run in progress as of the last token fed back (so at the k-th token event,
  // read from the callback, it counts k - 1 generated tokens), or of the last run.
  const MemoryStats& memory() const {
    static const MemoryStats none;
    return runner_ ? runner_->memory() : none;
  }

  // Transcribes the pages added so far. `on_event` returning false cancels the run (the summary
  // then says so). Can be called again after more pages are added: each run starts afresh.
  RunSummary run(const std::function<bool(const Event&)>& on_event = {}) {
    require(!pages_.empty(), Status::invalid_argument, "no pages were added to the session");
    DocumentParams one_shot;
    one_shot.groups.group_pages = std::max<int>(2, int(pages_.size()));  // every page held: no slide ever
    one_shot.groups.overlap_pages = 1;
    one_shot.page_fallback_tokens = 0;
    runner_.emplace(engine_, params_, one_shot);
    ImageListPages source(pages_);
    return runner_->run(source, on_event);
  }

 private:
  SessionParams params_;
  std::shared_ptr<Engine> engine_;
  std::shared_ptr<const Model> model_;  // the engine's
  std::vector<ImageU8> pages_;
  std::optional<Session> runner_;
};

UOCR_NAMESPACE_END
