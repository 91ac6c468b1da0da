// Page sources: where a document's pages come from, one page at a time and in order, so that a
// session never needs every page at once (uocr/session/session.hpp pulls them just in time).
//
//   uocr::FilePages pages({"p1.png", "p2.png"});            // decoded when pulled
//   uocr::ImagePages pages(std::move(images));              // already in memory (handed over)
//   uocr::ImageListPages pages(images);                     // already in memory (borrowed, copied per page)
//   uocr::CallbackPages pages(n, [](int64_t i, uocr::ImageU8& out) { ...; return true; });  // C ABI
//   uocr::ChainedPages pages(std::move(sources));          // several sources, one document
//
// The page count must be known up front (count() >= 0): the one-shot positions of the prompt
// text and of every generated token depend on it. The CLI's PDF source (tools/cli/pdf.hpp)
// renders page i inside next(), one page at a time.
//
// For crash-safe resume (uocr/session/session.hpp) a source also skips pages cheaply (skip())
// and names its content (identity()), so that a checkpoint of other inputs is refused.
//
// EncodedPages turns a PageSource into the visual embeddings the decoder's page groups pull
// (uocr/decoder/page_groups.hpp): preprocess + DeepEncoder, per page, when asked.
//
// Thread-safety: a source is used by one session at a time.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "uocr/core/deadline.hpp"
#include "uocr/core/error.hpp"
#include "uocr/decoder/page_groups.hpp"
#include "uocr/engine/engine.hpp"
#include "uocr/image/image.hpp"
#include "uocr/image/preprocess.hpp"
#include "uocr/io/fingerprint.hpp"
#include "uocr/version.hpp"
#include "uocr/vision/encoder.hpp"

UOCR_NAMESPACE_BEGIN

class PageSource {
 public:
  virtual ~PageSource() = default;
  // Pages this source delivers (>= 0; sessions reject an unknown count, see above).
  virtual int64_t count() const = 0;
  // The next page into `page`; false when there are no more. Errors throw uocr::Error.
  virtual bool next(ImageU8& page) = 0;
  // Passes over the next `n` pages (a resumed run has them in its checkpoint). The default
  // pulls and drops them; sources that can seek override it.
  virtual void skip(int64_t n) {
    ImageU8 dropped;
    for (int64_t i = 0; i < n; ++i)
      require(next(dropped), Status::invalid_argument, "page source ended while skipping pages already transcribed");
  }
  // A fingerprint of every page this source will deliver (stored in checkpoints and compared on
  // resume); "" when the source cannot know (then only the page count is compared).
  virtual std::string identity() const = 0;
  // Page `page`'s text (from 0) as another reader has it: a PDF's text layer, an earlier OCR
  // pass. A session verifies it as a draft of its output (uocr/session/draft.hpp), which is
  // faster where the text is right and never changes what is decoded. "" when there is none.
  virtual std::string draft_text(int64_t page) const {
    (void)page;
    return {};
  }
  // When the run must stop (SessionParams::page_time_budget_seconds; none: no limit), set by the
  // session for each run: a source that decodes or renders pages stops that work with
  // DeadlinePassed once it passes (uocr/core/deadline.hpp). Sources of decoded pages ignore it.
  virtual void set_deadline(const Deadline& deadline) { (void)deadline; }
};

// Another source's pages as they are, for a source that changes one thing about them: every call
// is passed on, so whatever such a source does not override (a draft text, a deadline) still
// reaches the pages underneath.
class ForwardedPages : public PageSource {
 public:
  int64_t count() const override { return pages_.count(); }
  bool next(ImageU8& page) override { return pages_.next(page); }
  void skip(int64_t n) override { pages_.skip(n); }
  std::string identity() const override { return pages_.identity(); }
  std::string draft_text(int64_t page) const override { return pages_.draft_text(page); }
  void set_deadline(const Deadline& deadline) override { pages_.set_deadline(deadline); }

 protected:
  explicit ForwardedPages(PageSource& pages) : pages_(pages) {}
  explicit ForwardedPages(std::unique_ptr<PageSource> pages) : owned_(std::move(pages)), pages_(*owned_) {}

 private:
  std::unique_ptr<PageSource> owned_;  // before pages_, which may refer to it

 protected:
  PageSource& pages_;
};

// Another source's pages with a draft text for each (uocr/session/draft.hpp): the text of an
// earlier OCR pass, a previous revision. Texts past the last one given are "".
class DraftedPages final : public ForwardedPages {
 public:
  DraftedPages(PageSource& pages, std::vector<std::string> drafts) : ForwardedPages(pages), drafts_(std::move(drafts)) {}
  std::string draft_text(int64_t page) const override {
    return page >= 0 && page < int64_t(drafts_.size()) ? drafts_[size_t(page)] : std::string();
  }

 private:
  std::vector<std::string> drafts_;
};

// Fingerprint of decoded pixels.
inline void fingerprint_image(Fnv64& h, const ImageU8& img) {
  const int64_t dims[2] = {img.width, img.height};
  h.add(dims, sizeof dims);
  h.add(img.rgb.data(), img.rgb.size());
}

// Pages already decoded, handed over (moved) at construction; each is released once pulled.
class ImagePages final : public PageSource {
 public:
  explicit ImagePages(std::vector<ImageU8> pages) : pages_(std::move(pages)) {}
  int64_t count() const override { return int64_t(pages_.size()); }
  bool next(ImageU8& page) override {
    if (next_ >= pages_.size()) return false;
    page = std::move(pages_[next_]);
    pages_[next_++] = ImageU8{};
    return true;
  }
  std::string identity() const override {
    Fnv64 h;
    for (const ImageU8& img : pages_) fingerprint_image(h, img);
    return "images:" + h.hex();
  }

 private:
  std::vector<ImageU8> pages_;
  size_t next_ = 0;
};

// Pages the caller keeps (uocr::OneShotSession's): each is copied when pulled, so one page at a time.
class ImageListPages final : public PageSource {
 public:
  explicit ImageListPages(const std::vector<ImageU8>& pages) : pages_(pages) {}
  int64_t count() const override { return int64_t(pages_.size()); }
  bool next(ImageU8& page) override {
    if (next_ >= pages_.size()) return false;
    page = pages_[next_++];
    return true;
  }
  void skip(int64_t n) override { next_ = std::min(pages_.size(), next_ + size_t(n)); }
  std::string identity() const override {
    Fnv64 h;
    for (const ImageU8& img : pages_) fingerprint_image(h, img);
    return "images:" + h.hex();
  }

 private:
  const std::vector<ImageU8>& pages_;
  size_t next_ = 0;
};

// Image files, decoded (uocr::load_image: EXIF orientation, pixel limit) when pulled.
class FilePages final : public PageSource {
 public:
  explicit FilePages(std::vector<std::string> paths, DecodeLimits limits = {})
      : paths_(std::move(paths)), limits_(limits) {}
  int64_t count() const override { return int64_t(paths_.size()); }
  bool next(ImageU8& page) override {
    if (next_ >= paths_.size()) return false;
    page = load_image(paths_[next_++], limits_, deadline_);
    return true;
  }
  void skip(int64_t n) override { next_ = std::min(paths_.size(), next_ + size_t(n)); }
  std::string identity() const override {
    Fnv64 h;
    for (const std::string& p : paths_) fingerprint_file(h, p);
    return "files:" + h.hex();
  }
  void set_deadline(const Deadline& deadline) override { deadline_ = deadline; }

 private:
  std::vector<std::string> paths_;
  DecodeLimits limits_;
  Deadline deadline_;
  size_t next_ = 0;
};

// Pages handed over by a function of the page index (the C ABI's callback, a PDF rasteriser).
// The function returns false to end the document early (the session then reports an error, as
// the declared count fixed the positions). Skipping does not call it: pages are asked for by
// index. `identity`: the caller's name for the document ("" if it has none).
class CallbackPages final : public PageSource {
 public:
  using Fn = std::function<bool(int64_t index, ImageU8& page)>;
  CallbackPages(int64_t count, Fn fn, std::string identity = "")
      : count_(count), fn_(std::move(fn)), identity_(std::move(identity)) {
    require(count_ >= 1 && fn_ != nullptr, Status::invalid_argument, "callback page source needs a page count >= 1 and a function");
  }
  int64_t count() const override { return count_; }
  bool next(ImageU8& page) override {
    if (next_ >= count_ || !fn_(next_, page)) return false;
    require(page.width > 0 && page.height > 0, Status::invalid_argument,
            [&] { return "page callback returned an empty image for page " + std::to_string(next_); });
    ++next_;
    return true;
  }
  void skip(int64_t n) override { next_ = std::min(count_, next_ + n); }
  std::string identity() const override { return identity_; }

 private:
  int64_t count_, next_ = 0;
  Fn fn_;
  std::string identity_;
};

// Pages first .. first + count - 1 (0-based) of another source, which it skips to when the first
// page is asked for.
class PageRange final : public PageSource {
 public:
  PageRange(std::unique_ptr<PageSource> source, int64_t first, int64_t count)
      : source_(std::move(source)), first_(first), count_(count) {
    require(source_ != nullptr && first_ >= 0 && count_ >= 1 && first_ + count_ <= source_->count(), Status::invalid_argument, [&] {
      return "page range " + std::to_string(first_ + 1) + ".." + std::to_string(first_ + count_) + " is not within the document's " +
             std::to_string(source_ ? source_->count() : 0) + " pages";
    });
  }
  int64_t count() const override { return count_; }
  bool next(ImageU8& page) override {
    reach_first();
    if (taken_ >= count_ || !source_->next(page)) return false;
    ++taken_;
    return true;
  }
  void skip(int64_t n) override {
    reach_first();
    n = std::min(n, count_ - taken_);
    source_->skip(n);
    taken_ += n;
  }
  std::string identity() const override {
    return source_->identity() + "[" + std::to_string(first_ + 1) + ".." + std::to_string(first_ + count_) + "]";
  }
  std::string draft_text(int64_t page) const override {
    return page >= 0 && page < count_ ? source_->draft_text(first_ + page) : std::string();
  }
  void set_deadline(const Deadline& deadline) override { source_->set_deadline(deadline); }

 private:
  void reach_first() {
    if (!at_first_) source_->skip(first_);
    at_first_ = true;
  }
  std::unique_ptr<PageSource> source_;
  int64_t first_, count_, taken_ = 0;
  bool at_first_ = false;
};

// Several sources read one after the other as one document (e.g. `uocr run a.png b.pdf`).
class ChainedPages final : public PageSource {
 public:
  explicit ChainedPages(std::vector<std::unique_ptr<PageSource>> parts) : parts_(std::move(parts)) {
    for (const auto& p : parts_) {
      require(p != nullptr && p->count() >= 0, Status::invalid_argument, "chained page sources need known page counts");
      count_ += p->count();
    }
  }
  int64_t count() const override { return count_; }
  bool next(ImageU8& page) override {
    for (; at_ < parts_.size(); ++at_, taken_ = 0)
      if (taken_ < parts_[at_]->count() && parts_[at_]->next(page)) {
        ++taken_;
        return true;
      }
    return false;
  }
  void skip(int64_t n) override {
    for (; n > 0 && at_ < parts_.size(); ++at_, taken_ = 0) {
      const int64_t step = std::min(n, parts_[at_]->count() - taken_);
      parts_[at_]->skip(step);
      n -= step;
      taken_ += step;
      if (taken_ < parts_[at_]->count()) return;
    }
  }
  std::string identity() const override {
    std::string id;
    for (const auto& p : parts_) id += p->identity() + ";";
    return id;
  }
  std::string draft_text(int64_t page) const override {
    for (const auto& p : parts_) {
      if (page >= 0 && page < p->count()) return p->draft_text(page);
      page -= p->count();
    }
    return {};
  }
  void set_deadline(const Deadline& deadline) override {
    for (const auto& p : parts_) p->set_deadline(deadline);
  }

 private:
  std::vector<std::unique_ptr<PageSource>> parts_;
  size_t at_ = 0;
  int64_t count_ = 0, taken_ = 0;
};

// Visual embeddings of the pages of a PageSource, encoded one page at a time when pulled. Keeps
// each page's pixel size (8 bytes a page) for converting layout boxes to pixels. Past `deadline`
// the pages stop (DeadlinePassed): before a page is pulled, inside the source's own decoding or
// rendering, and after a page is encoded.
class EncodedPages final : public PageEmbeddingSource {
 public:
  // views: the preprocessing of every page (multi-page documents use base views: {S, S, false}).
  EncodedPages(PageSource& pages, VisionEngine& encoder, PreprocessConfig views, Deadline deadline = {})
      : pages_(pages), enc_(encoder), views_(views), deadline_(deadline) {
    pages_.set_deadline(deadline_);
    enc_.set_deadline(deadline_);
  }
  ~EncodedPages() override {
    pages_.set_deadline({});
    enc_.set_deadline({});
  }
  EncodedPages(const EncodedPages&) = delete;
  EncodedPages& operator=(const EncodedPages&) = delete;

  int64_t count() const override { return pages_.count(); }

  bool next(std::vector<float>& out) override {
    if (primed_) {
      primed_ = false;
      out.swap(first_);
      first_ = std::vector<float>();
      return true;
    }
    return encode(out);
  }

  // Visual tokens of the first page (encodes it now; next() then returns it without re-encoding).
  int64_t first_page_tokens() {
    if (!primed_ && sizes_.empty()) primed_ = encode(first_);
    require(!sizes_.empty(), Status::invalid_argument, "the page source has no pages");
    return first_tokens_;
  }

  // Resuming: the source skips the first `sizes.size()` pages, which the checkpoint holds (only
  // their pixel sizes are needed again, for layout boxes).
  void skip_encoded(std::vector<std::pair<int, int>> sizes) {
    require(sizes_.empty() && !primed_, Status::internal, "pages were already encoded");
    pages_.skip(int64_t(sizes.size()));
    sizes_ = std::move(sizes);
  }

  // The fewest and most visual tokens a page can have with these views: one view's without
  // tiles; with tiles (crop mode) up to the tallest grid's, 1 x kGundamMaxTiles.
  std::pair<int64_t, int64_t> page_token_range() const {
    const int64_t fewest = int64_t(visual_token_count(views_.crop_mode ? views_.base_size : views_.image_size, 0, 0, 0));
    return {fewest, views_.crop_mode ? int64_t(visual_token_count(views_.base_size, kGundamTileSize, 1, kGundamMaxTiles)) : fewest};
  }

  int64_t encoded() const { return int64_t(sizes_.size()); }
  const std::vector<std::pair<int, int>>& sizes() const { return sizes_; }
  // Pixel size of page i (encoded pages only).
  std::pair<int, int> size_of(int64_t i) const { return sizes_[size_t(i)]; }
  double seconds() const { return seconds_; }

 private:
  bool encode(std::vector<float>& out) {
    const std::string which = "page " + std::to_string(sizes_.size() + 1);
    deadline_.check("waiting for " + which);
    ImageU8 page;
    if (!pages_.next(page)) return false;
    deadline_.check("reading " + which);
    const auto t0 = std::chrono::steady_clock::now();
    require(page.width > 0 && page.height > 0, Status::invalid_argument, "page image is empty");
    sizes_.emplace_back(page.width, page.height);
    const PreparedImage p = prepare_image(page, views_);
    page = ImageU8{};
    out = enc_.visual_tokens(p.global_chw, p.tiles_chw, p.tiles_x, p.tiles_y);
    if (sizes_.size() == 1) first_tokens_ = int64_t(out.size()) / enc_.hidden();
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    deadline_.check("encoding " + which);
    return true;
  }

  PageSource& pages_;
  VisionEngine& enc_;
  PreprocessConfig views_;
  Deadline deadline_;
  std::vector<float> first_;
  bool primed_ = false;
  int64_t first_tokens_ = 0;
  std::vector<std::pair<int, int>> sizes_;
  double seconds_ = 0;
};

UOCR_NAMESPACE_END
