// Page groups ("infinite decoding", uocr/decoder/page_groups.hpp) and Session:
//  - exactness anchor: group >= page count gives the one-shot R-SWA logits bit for bit, on the
//    3-page tiny-b reference case teacher-forced with "<PAGE>" markers in the stream;
//  - group < page count: the group slides at the markers, the overlap page's KV is reused
//    byte for byte, left pages are released, and every logits row matches an independent oracle
//    (the same document in one-shot rows, with the visible rows chosen explicitly);
//  - 200 synthetic pages (random visual embeddings, the golden tiny-b decoder): reference KV bytes and
//    allocation flat after the first group, pages pulled just in time, the position policy;
//  - the page-boundary policy (markers, fallback, forced pages) and Session vs Session.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "support/event_recorder.hpp"
#include "support/golden_model.hpp"
#include "support/logit_agreement.hpp"
#include "support/multi3_case.hpp"
#include "support/test_support.hpp"
#include "uocr/decoder/decoder.hpp"
#include "uocr/decoder/page_groups.hpp"
#include "uocr/decoder/sparse_reference.hpp"
#include "uocr/model/checkpoint.hpp"
#include "uocr/model/config.hpp"
#include "uocr/model/model.hpp"
#include "uocr/model/weights.hpp"
#include "uocr/session/session.hpp"
#include "uocr/session/page_source.hpp"
#include "uocr/session/one_shot.hpp"
#include "uocr/tokenizer/tokenizer.hpp"

using uocr::Status;
using uocr_test::bit_identical;
using uocr_test::Multi3;
using uocr_test::recorder;
using uocr_test::Recorded;
using uocr_test::rel_err;
using uocr_test::status_of;

namespace {

using uocr_test::golden_model;
using uocr_test::golden_pages;

// A decoder-only model: config + mapped weights.
struct DecoderModel {
  uocr::ModelConfig cfg;
  uocr::Checkpoint ck;
  uocr::ModelWeights w;
  DecoderModel(const std::string& config, const std::string& dir)
      : cfg(uocr::ModelConfig::load(config)), ck(uocr::Checkpoint::open(dir)), w(uocr::ModelWeights::bind(ck, cfg)) {}
};

const uocr::Tokenizer& tokenizer() {
  static uocr::Tokenizer t = uocr::Tokenizer::load(uocr_test::golden_model_dir() + "/tokenizer.json");
  return t;
}

// The reference generated ids with "<PAGE>" written before each page's share: page 0 opens the
// output, pages 1 and 2 start at known steps. Returns the stream and the steps (indices into it)
// whose token completes the marker of page 1 and page 2.
struct Stream {
  std::vector<int32_t> ids;
  std::vector<size_t> marker_end;  // marker_end[p] = index of the token completing page p's marker
};
Stream paged_stream(const std::vector<int32_t>& gen) {
  const std::vector<int32_t> marker = tokenizer().encode("<PAGE>");
  REQUIRE(!marker.empty());
  Stream s;
  const size_t cuts[4] = {0, 12, 26, gen.size()};
  for (int p = 0; p < 3; ++p) {
    s.ids.insert(s.ids.end(), marker.begin(), marker.end());
    s.marker_end.push_back(s.ids.size() - 1);
    s.ids.insert(s.ids.end(), gen.begin() + std::ptrdiff_t(cuts[p]), gen.begin() + std::ptrdiff_t(cuts[p + 1]));
  }
  return s;
}

// Page groups of G pages sliding with O kept.
uocr::PageGroupParams groups_of(int g, int o) {
  uocr::PageGroupParams p;
  p.group_pages = g;
  p.overlap_pages = o;
  return p;
}

// One-shot R-SWA logits of the whole stream: prefill logits, then one row per fed token.
std::vector<std::vector<float>> one_shot(const Multi3& f, const std::vector<int32_t>& stream) {
  uocr::Decoder dec(f.dc(), f.w.decoder);
  uocr::KvCache cache(f.dc(), f.window());
  std::vector<std::vector<float>> rows{dec.prefill(dec.embed_prompt(f.ids, f.vision), 0, cache)};
  const int64_t p = int64_t(f.ids.size());
  for (size_t k = 0; k < stream.size(); ++k) rows.push_back(dec.decode_step(stream[k], p + int64_t(k), cache));
  return rows;
}

// Feeds `stream` through the engine, calling next_page() wherever the page clock (the session's
// policy, markers only here) says a boundary passed; on_row(k, logits) per row as one_shot().
template <class OnRow>
void run_engine(uocr::PageGroupDecoder& eng, const uocr::DocumentLayout& layout, uocr::PageEmbeddingSource& src,
                const std::vector<int32_t>& stream, OnRow on_row, int64_t fallback = 0) {
  on_row(-1, eng.start(layout, src));
  uocr::PageClock clock(fallback);
  for (size_t k = 0; k < stream.size(); ++k) {
    for (int64_t b = clock.feed(tokenizer().token_bytes(stream[k])); b > 0; --b) eng.next_page();
    on_row(int64_t(k), eng.step(stream[k]));
  }
}

}  // namespace

TEST_CASE("page groups with G >= pages are one-shot R-SWA, bit for bit (3-page tiny-b stream with <PAGE> markers)") {
  Multi3& f = Multi3::get();
  REQUIRE(f.layout.page_tokens == 273);
  REQUIRE(f.layout.prompt_length() == int64_t(f.ids.size()));
  const Stream s = paged_stream(f.gen);
  const std::vector<std::vector<float>> ref = one_shot(f, s.ids);
  for (int g : {3, 5}) {
    uocr::PageGroupDecoder eng(f.dc(), f.w.decoder, f.window(), groups_of(g, 1));
    uocr::FunctionPageEmbeddings src = f.source();
    int identical = 0, rows = 0;
    run_engine(eng, f.layout, src, s.ids, [&](int64_t k, const std::vector<float>& logits) {
      ++rows;
      identical += bit_identical(logits, ref[size_t(k + 1)]);
      if (k >= 0 && size_t(k) == s.marker_end[2]) CHECK(eng.current_page() == 2);
    });
    INFO("G = " << g);
    CHECK(identical == rows);
    CHECK(rows == int(s.ids.size()) + 1);
    CHECK(eng.slides() == 0);
    CHECK(eng.current_page() == 2);
    CHECK(eng.pages_loaded() == 3);
    CHECK(eng.memory().reference_kv_bytes == size_t(f.ids.size()) * eng.cache().bytes_per_token());
    MESSAGE("G=" << g << ": " << identical << "/" << rows << " logits rows bit-identical to one-shot R-SWA");
  }
}

namespace {

// Oracle for G < N: the document in its one-shot rows (page p at rows head + p·T), pages
// prefilled against explicitly listed rows, decode attending to explicitly listed rows.
struct SpanOracle final : uocr::DecodeAttention {
  std::vector<uocr::RowSpan> visible;
  void attend(int, const float* q, const uocr::KvRows& ref, const uocr::KvRows& gen, const uocr::AttentionShape& s,
              float* out) override {
    uocr::span_attention(q, ref, visible, gen, s, out);
  }
};

}  // namespace

TEST_CASE("page groups with G < pages slide at the <PAGE> markers, reuse overlap KV and match an explicit-rows oracle") {
  Multi3& f = Multi3::get();
  const Stream s = paged_stream(f.gen);
  const uocr::DocumentLayout& L = f.layout;
  const int64_t h = int64_t(L.head.size()), t = L.page_tokens, u = int64_t(L.tail.size()), P = L.prompt_length();
  const uocr::RowSpan head{0, h}, page0{h, t}, page1{h + t, t}, page2{h + 2 * t, t}, tail{h + 3 * t, u};

  for (const bool refresh : {false, true}) {
    INFO("refresh_tail " << refresh);
    // Oracle: one-shot rows; head + pages 0, 1 causal, tail against them; page 2 against head +
    // page 1 (page 0 has left when it enters); decode sees head, the group's pages, tail.
    uocr::Decoder dec(f.dc(), f.w.decoder);
    uocr::KvCache oc(f.dc(), f.window());
    std::vector<float> x = dec.embed(L.head), pg;
    for (int p = 0; p < 2; ++p) {
      f.page(p, pg);
      x.insert(x.end(), pg.begin(), pg.end());
    }
    dec.prefill(x, 0, oc);
    oc.resize_reference(P);
    auto positions = [](int64_t first, int64_t n) {
      std::vector<int64_t> v(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) v[size_t(i)] = first + i;
      return v;
    };
    const std::vector<float> tail_x = dec.embed(L.tail);
    std::vector<std::vector<float>> oracle{
        dec.prefill_segment(tail_x.data(), u, positions(L.tail_position(), u).data(), oc, tail.begin, {head, page0, page1}, true)};
    f.page(2, pg);
    dec.prefill_segment(pg.data(), t, positions(L.page_position(2), t).data(), oc, page2.begin, {head, page1});
    SpanOracle hook;
    hook.visible = {head, page0, page1, tail};
    dec.set_decode_attention(&hook);
    for (size_t k = 0; k < s.ids.size(); ++k) {
      if (k == s.marker_end[1]) {  // the group slides before the marker token is fed back
        hook.visible = {head, page1, page2, tail};
        if (refresh) dec.prefill_segment(tail_x.data(), u, positions(L.tail_position(), u).data(), oc, tail.begin, {head, page1, page2});
      }
      oracle.push_back(dec.decode_step(s.ids[k], P + int64_t(k), oc));
    }

    uocr::PageGroupParams pp = groups_of(2, 1);
    pp.refresh_tail = refresh;
    uocr::PageGroupDecoder eng(f.dc(), f.w.decoder, f.window(), pp);
    uocr::FunctionPageEmbeddings src = f.source();
    const auto& cache = eng.cache();
    const size_t kr = size_t(cache.row_floats());
    std::vector<std::vector<float>> page1_kv;  // page 1's K and V rows in every layer before the slide
    const float* storage = nullptr;
    size_t ref_bytes = 0, allocated = 0;
    double worst = 0;
    run_engine(eng, L, src, s.ids, [&](int64_t k, const std::vector<float>& logits) {
      worst = std::max(worst, rel_err(logits, oracle[size_t(k + 1)]));
      if (k == -1) {  // after start: pages 0, 1 in slots 0, 1; page 2 not pulled yet
        CHECK(eng.slot_pages() == std::vector<int64_t>{0, 1});
        CHECK(eng.pages_loaded() == 2);
        CHECK(src.delivered() == 2);
        storage = cache.reference_k(0);
        ref_bytes = eng.memory().reference_kv_bytes;
        allocated = eng.memory().kv_allocated_bytes;
        CHECK(ref_bytes == size_t(h + 2 * t + u) * cache.bytes_per_token());
      }
      if (k >= 0 && size_t(k) + 1 == s.marker_end[1]) {  // the step before the slide
        CHECK(eng.slides() == 0);
        for (int l = 0; l < cache.layers(); ++l) {
          const float* k0 = cache.reference_k(l) + size_t(eng.slot_span(1).begin) * kr;
          const float* v0 = cache.reference_v(l) + size_t(eng.slot_span(1).begin) * kr;
          page1_kv.emplace_back(k0, k0 + size_t(t) * kr);
          page1_kv.emplace_back(v0, v0 + size_t(t) * kr);
        }
      }
      if (k >= 0 && size_t(k) == s.marker_end[1]) {  // page 1's marker: slid to [1, 3)
        CHECK(eng.slides() == 1);
        CHECK(eng.first_page() == 1);
        CHECK(eng.current_page() == 1);
        CHECK(eng.slot_pages() == std::vector<int64_t>{2, 1});  // page 0 released, page 2 in its slot
        CHECK(src.delivered() == 3);
        for (int l = 0; l < cache.layers(); ++l) {  // the overlap page's KV is reused as it was
          const float* k0 = cache.reference_k(l) + size_t(eng.slot_span(1).begin) * kr;
          const float* v0 = cache.reference_v(l) + size_t(eng.slot_span(1).begin) * kr;
          CHECK(std::memcmp(k0, page1_kv[size_t(2 * l)].data(), size_t(t) * kr * sizeof(float)) == 0);
          CHECK(std::memcmp(v0, page1_kv[size_t(2 * l + 1)].data(), size_t(t) * kr * sizeof(float)) == 0);
        }
      }
      if (k >= 0) {
        CHECK(eng.memory().reference_kv_bytes == ref_bytes);
        CHECK(eng.memory().kv_allocated_bytes == allocated);
        CHECK(cache.reference_k(0) == storage);
      }
    });
    CHECK(eng.slides() == 1);  // page 2's marker: the group already ends at the last page
    CHECK(eng.current_page() == 2);
    MESSAGE("G=2 O=1 refresh_tail=" << refresh << ": " << s.ids.size() + 1 << " logits rows, max rel err vs oracle " << worst);
    CHECK(worst < 1e-5);
    // Sanity: the slide changed the numbers (this is not one-shot any more).
    const std::vector<std::vector<float>> ref = one_shot(f, s.ids);
    CHECK(rel_err(oracle.back(), ref.back()) > 1e-3);
  }
}

TEST_CASE("group positions: after a slide the group is a G-page document (rotated keys match a fresh computation)") {
  // G = 2, O = 1 over the 3-page tiny-b stream; the slide at page 1's marker re-bases page 1 to
  // the first slot's positions and keeps only the text of page 1 (its marker's first tokens,
  // `lead` of them). Oracle, without any rotation of pages: RoPE scores depend on position
  // differences only, so every row is computed afresh in one frame F = the engine's + T, in which
  // all positions are >= 0 -- page 1's rows as the one-shot prefill made them (page 1 at h + T,
  // after head and page 0), the head and the tail from a prefill of [head, page 0, page 1, tail]
  // starting at position T, page 2 prefilled at h + 2T against head and page 1.
  Multi3& f = Multi3::get();
  const Stream s = paged_stream(f.gen);
  const uocr::DocumentLayout& L = f.layout;
  const int64_t h = int64_t(L.head.size()), t = L.page_tokens, u = int64_t(L.tail.size());
  const int64_t p2 = h + 2 * t + u;  // a 2-page document's prompt: where the text starts
  const int64_t slide = int64_t(s.marker_end[1]), marker = int64_t(tokenizer().encode("<PAGE>").size());
  REQUIRE(marker >= 2);
  auto positions = [](int64_t first, int64_t n) {
    std::vector<int64_t> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[size_t(i)] = first + i;
    return v;
  };
  auto copy_rows = [](const uocr::KvCache& from, int64_t src, uocr::KvCache& to, int64_t dst, int64_t rows) {
    const int64_t r = from.row_floats();
    for (int l = 0; l < from.layers(); ++l) {
      std::copy_n(from.reference_k(l) + src * r, rows * r, to.reference_k(l) + dst * r);
      std::copy_n(from.reference_v(l) + src * r, rows * r, to.reference_v(l) + dst * r);
    }
  };
  const uocr::Decoder embedder(f.dc(), f.w.decoder);
  const std::vector<float> tail_x = embedder.embed(L.tail);
  std::vector<float> pages01 = embedder.embed(L.head), pg;
  for (int p = 0; p < 2; ++p) {
    f.page(p, pg);
    pages01.insert(pages01.end(), pg.begin(), pg.end());
  }

  for (const int64_t lead : {int64_t(0), marker - 1}) {
    INFO("marker tokens kept " << lead);
    const int64_t base = slide - lead;  // page 1's text starts here
    uocr::Decoder dec(f.dc(), f.w.decoder);
    // Before the slide (engine frame): a 2-page document, the tail right after page 1.
    uocr::KvCache before(f.dc(), f.window());
    dec.prefill(pages01, 0, before);
    before.resize_reference(p2);
    std::vector<std::vector<float>> oracle{
        dec.prefill_segment(tail_x.data(), u, positions(h + 2 * t, u).data(), before, h + 2 * t, {{0, h}, {h, t}, {h + t, t}}, true)};
    for (int64_t k = 0; k < slide; ++k) oracle.push_back(dec.decode_step(s.ids[size_t(k)], p2 + k, before));
    // After: [head | page 1 | page 2 | tail] in frame F.
    uocr::KvCache shifted(f.dc(), f.window()), after(f.dc(), f.window());
    std::vector<float> x = pages01;
    x.insert(x.end(), tail_x.begin(), tail_x.end());
    dec.prefill(x, t, shifted);
    after.reset(p2);
    copy_rows(shifted, 0, after, 0, h);                // head at F positions T ..
    copy_rows(before, h + t, after, h, t);             // page 1 at F position h + T, as prefilled
    copy_rows(shifted, h + 2 * t, after, h + 2 * t, u);  // tail at F position h + 3T
    f.page(2, pg);
    dec.prefill_segment(pg.data(), t, positions(h + 2 * t, t).data(), after, h + t, {{0, h}, {h, t}});
    // The kept marker tokens: their rows as decoded before, keys turned to their F positions.
    const uocr::Rope rope(f.dc().head_dim, f.dc().rope_theta);
    const int64_t r = before.row_floats();
    for (int64_t k = base; k < slide; ++k) {
      const int64_t from = before.generated_slot(k), to = after.claim_slot();
      for (int l = 0; l < before.layers(); ++l) {
        float* key = std::copy_n(before.generated_k(l) + from * r, r, after.generated_k(l) + to * r) - r;
        rope.apply(key, r / f.dc().head_dim, (p2 + (k - base) + t) - (p2 + k));
        std::copy_n(before.generated_v(l) + from * r, r, after.generated_v(l) + to * r);
      }
    }
    for (size_t k = size_t(slide); k < s.ids.size(); ++k)
      oracle.push_back(dec.decode_step(s.ids[k], p2 + (int64_t(k) - base) + t, after));

    uocr::PageGroupParams pp = groups_of(2, 1);
    pp.group_positions = true;
    uocr::PageGroupDecoder eng(f.dc(), f.w.decoder, f.window(), pp);
    uocr::FunctionPageEmbeddings src = f.source();
    double worst = rel_err(eng.start(L, src), oracle[0]);
    CHECK(eng.next_position() == p2);
    for (size_t k = 0; k < s.ids.size(); ++k) {
      if (k == s.marker_end[1] || k == s.marker_end[2]) eng.next_page(lead);
      if (int64_t(k) == slide) {
        CHECK(eng.first_page() == 1);
        CHECK(eng.state().position_base == base);
        CHECK(eng.cache().generated_rows() == lead);
        CHECK(eng.next_position() == p2 + lead);
      }
      worst = std::max(worst, rel_err(eng.step(s.ids[k]), oracle[k + 1]));
    }
    CHECK(eng.slides() == 1);
    CHECK(eng.next_position() == p2 + int64_t(s.ids.size()) - base);  // bounded by the group's text
    MESSAGE("group positions, lead " << lead << ": max rel err vs the fresh-frame oracle " << worst);
    CHECK(worst < 1e-4);
    // Sanity: not the one-shot numbering (which the same slide gives without group positions).
    pp.group_positions = false;
    uocr::PageGroupDecoder plain(f.dc(), f.w.decoder, f.window(), pp);
    uocr::FunctionPageEmbeddings src2 = f.source();
    std::vector<float> last = plain.start(L, src2);
    for (size_t k = 0; k < s.ids.size(); ++k) {
      if (k == s.marker_end[1] || k == s.marker_end[2]) plain.next_page(lead);
      last = plain.step(s.ids[k]);
    }
    CHECK(rel_err(last, oracle.back()) > 1e-3);
  }
}

TEST_CASE("recompute_on_slide: after a slide the state is a fresh G-page document's") {
  // G = 2, O = 1 over the 3-page tiny-b stream: the slide at page 1's marker must leave exactly
  // what a document of pages 1 and 2 alone holds once the window's tokens are fed to it: its
  // prefill (head, page 1, page 2, tail) and the window's tokens decoded again in order. Oracle:
  // that document computed from nothing. Reusing the KV (the default) gives other logits.
  Multi3& f = Multi3::get();
  const Stream s = paged_stream(f.gen);
  const uocr::DocumentLayout& L = f.layout;
  const int64_t h = int64_t(L.head.size()), t = L.page_tokens, u = int64_t(L.tail.size());
  const int64_t slide = int64_t(s.marker_end[1]), marker = int64_t(tokenizer().encode("<PAGE>").size());
  auto positions = [](int64_t first, int64_t n) {
    std::vector<int64_t> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[size_t(i)] = first + i;
    return v;
  };
  const uocr::Decoder embedder(f.dc(), f.w.decoder);
  const std::vector<float> head_x = embedder.embed(L.head), tail_x = embedder.embed(L.tail);
  std::vector<float> pages12, pg;
  for (int p = 1; p < 3; ++p) {
    f.page(p, pg);
    pages12.insert(pages12.end(), pg.begin(), pg.end());
  }

  for (const bool group_positions : {true, false}) {
    INFO("group positions " << group_positions);
    // Text positions: group positions start a 2-page document's text at the text of page 1
    // (its marker's first `lead` tokens kept); one-shot numbering keeps every position.
    const int64_t lead = group_positions ? marker - 1 : 0;
    const int64_t prompt = group_positions ? h + 2 * t + u : L.prompt_length();
    const int64_t text0 = group_positions ? slide - lead : 0;  // generated count at text position 0
    const int64_t kept = group_positions ? lead : std::min<int64_t>(slide, f.window());
    uocr::Decoder dec(f.dc(), f.w.decoder);
    uocr::KvCache fresh(f.dc(), f.window());
    const int64_t page1 = group_positions ? h : h + t;  // page 1's first position
    dec.prefill(head_x, 0, fresh);
    fresh.resize_reference(h + 2 * t + u);
    dec.prefill_segment(pages12.data(), 2 * t, positions(page1, 2 * t).data(), fresh, h, {{0, h}});
    dec.prefill_segment(tail_x.data(), u, positions(page1 + 2 * t, u).data(), fresh, h + 2 * t, {{0, h}, {h, 2 * t}});
    for (int64_t k = slide - kept; k < slide; ++k) dec.decode_step(s.ids[size_t(k)], prompt + k - text0, fresh);
    std::vector<std::vector<float>> oracle;
    for (size_t k = size_t(slide); k < s.ids.size(); ++k) oracle.push_back(dec.decode_step(s.ids[k], prompt + int64_t(k) - text0, fresh));

    double worst = 0, reuse_gap = 0;
    for (const bool recompute : {true, false}) {
      uocr::PageGroupParams pp = groups_of(2, 1);
      pp.group_positions = group_positions;
      pp.recompute_on_slide = recompute;
      uocr::PageGroupDecoder eng(f.dc(), f.w.decoder, f.window(), pp);
      uocr::FunctionPageEmbeddings src = f.source();
      eng.start(L, src);
      for (size_t k = 0; k < s.ids.size(); ++k) {
        if (k == s.marker_end[1] || k == s.marker_end[2]) eng.next_page(lead);
        if (recompute && int64_t(k) == slide) {
          CHECK(eng.slot_pages() == std::vector<int64_t>{1, 2});  // re-laid out in document order
          CHECK(eng.cache().generated_rows() == kept);
          CHECK(eng.state().window_ids == std::vector<int32_t>(s.ids.begin() + (slide - kept), s.ids.begin() + slide));
        }
        const std::vector<float>& logits = eng.step(s.ids[k]);
        if (int64_t(k) < slide) continue;
        const double e = rel_err(logits, oracle[k - size_t(slide)]);
        (recompute ? worst : reuse_gap) = std::max(recompute ? worst : reuse_gap, e);
      }
      CHECK(eng.slides() == 1);
    }
    MESSAGE("recompute_on_slide, group positions " << group_positions << ": max rel err vs a fresh 2-page document "
                                                    << worst << " (reused KV: " << reuse_gap << ")");
    CHECK(worst < 1e-4);
    CHECK(reuse_gap > 1e-3);
  }
}

TEST_CASE("recompute_on_slide needs a bounded window to step again") {
  Multi3& f = Multi3::get();
  uocr::PageGroupParams pp = groups_of(2, 1);
  pp.recompute_on_slide = true;
  uocr::PageGroupDecoder full(f.dc(), f.w.decoder, 0, pp);  // full attention, one-shot numbering
  uocr::FunctionPageEmbeddings src = f.source();
  CHECK(status_of([&] { full.start(f.layout, src); }) == Status::invalid_argument);
  pp.group_positions = true;  // the window then holds only the group's text
  uocr::PageGroupDecoder grouped(f.dc(), f.w.decoder, 0, pp);
  uocr::FunctionPageEmbeddings src2 = f.source();
  CHECK_NOTHROW(grouped.start(f.layout, src2));
}

TEST_CASE("prefill_segment builds the same reference as one causal prefill") {
  // Pages appended one at a time against everything before them = the one-shot prefill.
  Multi3& f = Multi3::get();
  const uocr::DocumentLayout& L = f.layout;
  const int64_t h = int64_t(L.head.size()), t = L.page_tokens, u = int64_t(L.tail.size()), P = L.prompt_length();
  uocr::Decoder dec(f.dc(), f.w.decoder);
  uocr::KvCache one(f.dc(), f.window()), inc(f.dc(), f.window());
  const std::vector<float> x = dec.embed_prompt(f.ids, f.vision);
  const std::vector<float> ref = dec.prefill(x, 0, one);
  dec.prefill(std::vector<float>(x.begin(), x.begin() + h * f.hidden()), 0, inc);
  inc.resize_reference(P);
  std::vector<float> last;
  for (int64_t row = h; row < P;) {
    const int64_t n = row < h + 3 * t ? t : u;
    std::vector<int64_t> pos(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) pos[size_t(i)] = row + i;
    last = dec.prefill_segment(x.data() + row * f.hidden(), n, pos.data(), inc, row, {{0, row}}, true);
    row += n;
  }
  CHECK(rel_err(last, ref) < 1e-5);
  double worst = 0;
  for (int l = 0; l < one.layers(); ++l)
    for (int64_t i = 0; i < P * one.row_floats(); ++i)
      worst = std::max(worst, double(std::abs(one.reference_k(l)[i] - inc.reference_k(l)[i])));
  MESSAGE("incremental vs one-shot prefill: logits rel err " << rel_err(last, ref) << ", max |dK| " << worst);
  CHECK(worst < 1e-4);

  // Misuse: rows outside the reference, context overlapping the segment, positions past the limit.
  std::vector<int64_t> pos(static_cast<size_t>(t));
  for (int64_t i = 0; i < t; ++i) pos[size_t(i)] = h + i;
  CHECK(status_of([&] { dec.prefill_segment(x.data(), t, pos.data(), inc, P - 1, {{0, h}}); }) == Status::invalid_argument);
  CHECK(status_of([&] { dec.prefill_segment(x.data(), t, pos.data(), inc, h, {{0, h + 1}}); }) == Status::invalid_argument);
  pos[0] = f.dc().max_positions;
  CHECK(status_of([&] { dec.prefill_segment(x.data(), t, pos.data(), inc, h, {{0, h}}); }) == Status::invalid_argument);
}

namespace {

struct Golden {
  DecoderModel m{uocr_test::golden_model_dir() + "/config.json", uocr_test::golden_model_dir()};
  static Golden& get() {
    static Golden f;
    return f;
  }
};

// Random visual embeddings of page p (deterministic), the scale of real ones.
void random_page(int64_t p, int64_t tokens, int64_t hidden, std::vector<float>& out) {
  std::mt19937 rng(uint32_t(1000 + p));
  std::normal_distribution<float> nd(0.f, 1.f);
  out.resize(size_t(tokens * hidden));
  for (float& v : out) v = nd(rng);
}

}  // namespace

TEST_CASE("200 synthetic pages: reference KV flat after the first group, pages pulled just in time") {
  Golden& a = Golden::get();
  const uocr::DecoderConfig& dc = a.m.cfg.decoder;
  uocr::DocumentLayout L;
  L.head = {0};
  L.tail = {34030, 76466, 16};
  L.pages = 200;
  L.page_tokens = 273;
  const int64_t per_page_tokens = 3;
  REQUIRE(L.prompt_length() > dc.max_positions);  // 54,604 > 8,192: past the model's positions

  auto make_source = [&] {
    return uocr::FunctionPageEmbeddings(L.pages, [&](int64_t p, std::vector<float>& out) { random_page(p, L.page_tokens, dc.hidden, out); });
  };
  {
    // Default policy: a document whose one-shot positions pass max_position_embeddings is refused.
    uocr::PageGroupDecoder eng(dc, a.m.w.decoder, 128, {});
    uocr::FunctionPageEmbeddings src = make_source();
    try {
      eng.start(L, src);
      FAIL("start() accepted positions past max_position_embeddings");
    } catch (const uocr::Error& e) {
      CHECK(e.status() == Status::invalid_argument);
      CHECK(std::string(e.what()).find("allow_position_extrapolation") != std::string::npos);
    }
    CHECK(src.delivered() == 0);  // refused before any page was pulled
  }

  uocr::PageGroupParams pp;  // G = 4, O = 3
  pp.allow_position_extrapolation = true;
  uocr::PageGroupDecoder eng(dc, a.m.w.decoder, 128, pp);
  uocr::FunctionPageEmbeddings src = make_source();
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<float> logits = eng.start(L, src);
  const size_t per_token = eng.cache().bytes_per_token();
  const size_t ref_bytes = size_t(1 + 4 * 273 + 3) * per_token;
  CHECK(eng.memory().reference_kv_bytes == ref_bytes);
  CHECK(src.delivered() == 4);
  const size_t allocated = eng.memory().kv_allocated_bytes;
  const float* storage = eng.cache().reference_k(0);
  std::mt19937 rng(7);
  int64_t max_loaded_ahead = 0, steps = 0;
  bool flat = true;
  for (int64_t page = 0; page < L.pages; ++page) {
    if (page > 0) eng.next_page();
    REQUIRE(eng.current_page() == page);
    // The group holds the page being read: [c-2, c+2) clamped to the document.
    CHECK(eng.first_page() <= page);
    CHECK(page < eng.first_page() + eng.group_size());
    max_loaded_ahead = std::max(max_loaded_ahead, src.delivered() - page);
    for (int64_t k = 0; k < per_page_tokens; ++k) {
      const int32_t tok = int32_t(100 + rng() % 50000);
      logits = eng.step(tok);
      ++steps;
      flat = flat && eng.memory().reference_kv_bytes == ref_bytes && eng.memory().kv_allocated_bytes == allocated &&
             eng.cache().reference_k(0) == storage;
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  CHECK(flat);
  CHECK(src.delivered() == 200);
  CHECK(eng.pages_loaded() == 200);
  CHECK(eng.slides() == 196);   // at pages 3..198; from page 199 the group ends at the last page
  CHECK(max_loaded_ahead == 4); // pulled at most G pages ahead of the one being read (start: 0..3)
  CHECK(eng.memory().peak_kv_bytes == ref_bytes + 128 * per_token);
  CHECK(eng.next_position() == L.prompt_length() + steps);
  CHECK(eng.next_position() > dc.max_positions);
  CHECK(std::all_of(logits.begin(), logits.end(), [](float v) { return std::isfinite(v); }));
  // Past the document's end: counted, ignored.
  eng.next_page();
  CHECK(eng.extra_boundaries() == 1);
  MESSAGE("200 pages x 273 tokens, G=4 O=3: reference KV " << ref_bytes << " B (= head + 4 pages + tail) at every step, allocated "
                                                        << allocated << " B, " << eng.slides() << " slides, " << steps
                                                        << " decode steps, last position " << eng.next_position() - 1 << ", "
                                                        << secs << " s (prefill " << eng.timings().prefill_seconds << " s)");

  {
    // Group positions: a 40-page document past max_position_embeddings (DeepSeek-OCR's 8192)
    // runs within them, each group at a 4-page document's positions.
    uocr::DecoderConfig dc8k = dc;
    dc8k.max_positions = 8192;
    uocr::DocumentLayout L40 = L;
    L40.pages = 40;
    REQUIRE(L40.prompt_length() > dc8k.max_positions);
    uocr::PageGroupParams gp;
    gp.group_positions = true;
    uocr::PageGroupDecoder g(dc8k, a.m.w.decoder, 128, gp);
    uocr::FunctionPageEmbeddings s40(L40.pages, [&](int64_t p, std::vector<float>& out) { random_page(p, L40.page_tokens, dc.hidden, out); });
    std::vector<float> out = g.start(L40, s40);
    const int64_t group_prompt = 1 + 4 * 273 + 3;
    int64_t highest = g.next_position();
    for (int64_t page = 0; page < L40.pages; ++page) {
      if (page > 0) g.next_page();
      for (int64_t k = 0; k < per_page_tokens; ++k) {
        highest = std::max(highest, g.next_position());
        out = g.step(int32_t(100 + rng() % 50000));
      }
    }
    CHECK(g.slides() == 36);
    CHECK(g.memory().reference_kv_bytes == ref_bytes);
    // The text of the group's pages after its prompt: at most the 3 pages read so far in a
    // group + the current one, 3 tokens each.
    CHECK(highest < group_prompt + 4 * per_page_tokens);
    CHECK(std::all_of(out.begin(), out.end(), [](float v) { return std::isfinite(v); }));
  }

  // A document past 2^24 positions is refused even with extrapolation allowed (float32 positions).
  uocr::DocumentLayout huge = L;
  huge.pages = 70000;
  uocr::PageGroupDecoder eng2(dc, a.m.w.decoder, 128, pp);
  uocr::FunctionPageEmbeddings src2(huge.pages, [&](int64_t, std::vector<float>&) { FAIL("pulled"); });
  CHECK_THROWS_AS(eng2.start(huge, src2), uocr::Error);
}

TEST_CASE("page group parameter and source errors") {
  Golden& a = Golden::get();
  const uocr::DecoderConfig& dc = a.m.cfg.decoder;
  CHECK_THROWS_AS(uocr::PageGroupDecoder(dc, a.m.w.decoder, 8, groups_of(1, 0)), uocr::Error);
  CHECK_THROWS_AS(uocr::PageGroupDecoder(dc, a.m.w.decoder, 8, groups_of(4, 0)), uocr::Error);
  CHECK_THROWS_AS(uocr::PageGroupDecoder(dc, a.m.w.decoder, 8, groups_of(4, 4)), uocr::Error);
  uocr::DocumentLayout L;
  L.head = {0};
  L.tail = {16};
  L.pages = 5;
  L.page_tokens = 10;
  {  // the source ends early: an error at the slide that needs the missing page
    uocr::PageGroupDecoder eng(dc, a.m.w.decoder, 8, groups_of(2, 1));
    int64_t served = 0;
    struct Short final : uocr::PageEmbeddingSource {
      int64_t& served;
      int64_t hidden;
      explicit Short(int64_t& s, int64_t h) : served(s), hidden(h) {}
      int64_t count() const override { return -1; }
      bool next(std::vector<float>& out) override {
        if (served == 2) return false;
        random_page(served++, 10, hidden, out);
        return true;
      }
    } src(served, dc.hidden);
    eng.start(L, src);
    eng.step(5);
    CHECK_THROWS_AS(eng.next_page(), uocr::Error);
  }
  {  // a page of the wrong size
    uocr::PageGroupDecoder eng(dc, a.m.w.decoder, 8, groups_of(2, 1));
    uocr::FunctionPageEmbeddings src(5, [&](int64_t p, std::vector<float>& out) { random_page(p, 9, dc.hidden, out); });
    CHECK_THROWS_AS(eng.start(L, src), uocr::Error);
  }
  {  // a source whose count disagrees with the layout
    uocr::PageGroupDecoder eng(dc, a.m.w.decoder, 8, groups_of(2, 1));
    uocr::FunctionPageEmbeddings src(4, [&](int64_t p, std::vector<float>& out) { random_page(p, 10, dc.hidden, out); });
    CHECK_THROWS_AS(eng.start(L, src), uocr::Error);
  }
  uocr::PageGroupDecoder idle(dc, a.m.w.decoder, 8, groups_of(2, 1));
  CHECK_THROWS_AS(idle.step(5), uocr::Error);
  CHECK_THROWS_AS(idle.next_page(), uocr::Error);
}

TEST_CASE("page clock: <PAGE> markers split across tokens, the no-marker fallback, forced pages") {
  uocr::PageClock c(5);
  CHECK(c.feed("<PA") == 0);
  CHECK(c.feed("GE>") == 0);  // page 0's marker opens the output: no boundary
  CHECK(c.feed("text") == 0);
  CHECK(c.feed("more <") == 0);
  CHECK(c.feed("PAGE>") == 1);  // page 1
  CHECK(c.page() == 1);
  CHECK(c.marker_boundaries() == 1);
  CHECK(c.marker_lead() == 1);  // the marker began one token earlier ("more <")
  // Five tokens without a marker: the fallback moves on one page.
  int64_t passed = 0;
  for (int i = 0; i < 5; ++i) passed += c.feed("x");
  CHECK(passed == 1);
  CHECK(c.page() == 2);
  CHECK(c.forced_boundaries() == 1);
  CHECK(c.feed("<PAGE>") == 0);  // the model's marker for page 2, already reached: absorbed
  CHECK(c.page() == 2);
  CHECK(c.feed("<PAGE><PAGE>") == 2);  // pages 3 and 4 in one token
  CHECK(c.page() == 4);
  CHECK(c.marker_lead() == 0);
  CHECK(c.force() == 1);
  CHECK(c.page() == 5);
  uocr::PageClock chars(0);  // a character-level tokenizer (the demo model's)
  CHECK(chars.feed("<PAGE>") == 0);
  CHECK(chars.feed("x") == 0);
  for (const char* piece : {"<", "P", "A", "G", "E"}) CHECK(chars.feed(piece) == 0);
  CHECK(chars.feed(">") == 1);
  CHECK(chars.marker_lead() == 5);
  CHECK(chars.feed("a < b") == 0);  // a '<' that starts no marker is not held for long
  CHECK(chars.feed("<PAGE>") == 1);
  CHECK(chars.marker_lead() == 0);
  uocr::PageClock off(0);
  for (int i = 0; i < 10000; ++i) REQUIRE(off.feed("y") == 0);
  CHECK_THROWS_AS(uocr::PageClock(-1), uocr::Error);
}

TEST_CASE("Session with G >= pages transcribes exactly as Session; with G < pages it slides at the fallback") {
  uocr::SessionParams sp;
  sp.max_new_tokens = 20;
  const std::vector<std::string> files = golden_pages(2);

  uocr::OneShotSession one(golden_model(), sp);
  for (const std::string& f : files) one.add_page(uocr::load_image(f));
  Recorded r1;
  const uocr::RunSummary a = one.run(recorder(r1));

  uocr::DocumentParams ip;
  ip.groups.group_pages = 2;
  ip.groups.overlap_pages = 1;
  uocr::Session inf(golden_model(), sp, ip);
  uocr::FilePages pages(files);
  Recorded r2;
  const uocr::RunSummary b = inf.run(pages, recorder(r2));
  CHECK(r2.tokens == r1.tokens);
  CHECK(r2.text == r1.text);
  CHECK(b.text == a.text);
  CHECK(b.stop == a.stop);
  CHECK(b.generated_tokens == a.generated_tokens);
  CHECK(b.visual_tokens == a.visual_tokens);
  CHECK(b.prompt_tokens == a.prompt_tokens);
  CHECK(b.memory.reference_kv_bytes == a.memory.reference_kv_bytes);
  CHECK(b.memory.window_kv_bytes == a.memory.window_kv_bytes);
  CHECK(b.memory.peak_kv_bytes == a.memory.peak_kv_bytes);
  CHECK(inf.stats().slides == 0);
  CHECK(inf.stats().pages_encoded == 2);

  // SR-SWA with budgets covering both pages: the same transcription again.
  uocr::DocumentParams ips = ip;
  ips.groups.sparse = true;
  ips.groups.sparse_params.page_budget = 2;
  ips.groups.sparse_params.block_budget = 0;
  uocr::Session infs(golden_model(), sp, ips);
  uocr::FilePages pages_s(files);
  Recorded rs;
  infs.run(pages_s, recorder(rs));
  CHECK(rs.tokens == r1.tokens);
  CHECK(infs.stats().sparse_summary_bytes > 0);
  CHECK(infs.stats().sparse_rows_attended == infs.stats().sparse_rows_dense);

  // Three pages, two held: random weights write no <PAGE>, so the fallback (every 6 tokens)
  // drives the clock: page 1 at token 6 slides the group to [1, 3) and pulls page 2.
  uocr::SessionParams sp3 = sp;
  sp3.max_new_tokens = 16;
  ip.page_fallback_tokens = 6;
  uocr::Session inf3(golden_model(), sp3, ip);
  uocr::FilePages pages3(golden_pages(3));
  Recorded r3;
  const uocr::RunSummary c = inf3.run(pages3, recorder(r3));
  CHECK(c.stop == uocr::StopReason::max_tokens);
  CHECK(c.generated_tokens == 16);
  CHECK(c.pages == 3);
  CHECK(c.visual_tokens == 3 * 273);
  CHECK(c.prompt_tokens == 1 + 3 * 273 + (a.prompt_tokens - 1 - 2 * 273));
  const uocr::SessionStats& st = inf3.stats();
  CHECK(st.pages_encoded == 3);
  CHECK(st.forced_boundaries == 2);  // tokens 6 and 12
  CHECK(st.slides == 1);             // the second boundary reaches the last page: no slide
  const size_t per_token = 2 * 2 * 4 * 4 * 3;  // K+V, 2 KV heads of 4, float32, 3 layers
  CHECK(c.memory.reference_kv_bytes == size_t(1 + 2 * 273 + (a.prompt_tokens - 1 - 2 * 273)) * per_token);
  CHECK(c.memory.peak_kv_bytes == c.memory.reference_kv_bytes + 8 * per_token);  // the config's window
  CHECK(st.last_position == c.prompt_tokens + 14);
  CHECK(r3.tokens.size() == 16);
  MESSAGE("Session 3 pages G=2: vision " << c.vision_seconds << " s, prefill " << c.prefill_seconds << " s, decode "
                                                 << c.decode_seconds << " s, slides " << st.slides << " (" << st.slide_seconds
                                                 << " s)");

  // Misuse.
  uocr::DocumentParams bad;
  bad.groups.group_pages = 1;
  CHECK_THROWS_AS(uocr::Session(golden_model(), sp, bad), uocr::Error);
  uocr::FilePages none(std::vector<std::string>{});
  CHECK_THROWS_AS(inf.run(none), uocr::Error);
}
