// OneShotSession: pages in, events out. Output parsing of <PAGE> markers and <|det|> blocks, and real
// runs of the golden model (tiny-b) (random weights: the text is gibberish, but deterministic).
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <new>
#include <random>

#include <nlohmann/json.hpp>

#include "support/damaged_model.hpp"
#include "support/event_recorder.hpp"
#include "support/golden_model.hpp"
#include "support/test_support.hpp"
#include "uocr/session/markdown.hpp"
#include "uocr/session/marker_completion.hpp"
#include "uocr/session/output_parser.hpp"
#include "uocr/session/one_shot.hpp"
#include "uocr/decoder/decoder.hpp"
#include "uocr/image/preprocess.hpp"
#include "uocr/session/prompt.hpp"
#include "uocr/vision/encoder.hpp"

namespace {

using uocr_test::golden_model;

struct Parsed {
  std::vector<int> pages;
  std::vector<uocr::LayoutBlock> blocks;
};

// Feeds `text` in random-sized chunks, as tokens would arrive.
Parsed parse_chunked(const std::string& text, unsigned seed) {
  Parsed out;
  uocr::OutputParser p;
  p.on_page = [&](int page) { out.pages.push_back(page); };
  p.on_block = [&](const uocr::LayoutBlock& b) { out.blocks.push_back(b); };
  std::mt19937 rng(seed);
  for (size_t i = 0; i < text.size();) {
    const size_t n = 1 + rng() % 5;
    p.feed(text.substr(i, n));
    i += n;
  }
  return out;
}

}  // namespace

TEST_CASE("output parser finds page markers and layout blocks however the text is split") {
  const std::string text =
      "<PAGE><|det|>title [10, 20, 990, 80]<|/det|># Report\n<|det|>text [0,0,999,999]<|/det|>Body < not a tag\n"
      "<PAGE><|det|> table  [ 1 , 2 , 3 , 4 ] <|/det|><table></table>\n<|det|>bad [1, 2, 3]<|/det|>x";
  for (unsigned seed = 0; seed < 20; ++seed) {
    const Parsed p = parse_chunked(text, seed);
    REQUIRE(p.pages == std::vector<int>{0, 1});
    REQUIRE(p.blocks.size() == 3);  // the 3-coordinate box is not a block
    CHECK(p.blocks[0].label == "title");
    CHECK(p.blocks[0].page == 0);
    CHECK(p.blocks[0].box[2] == 990);
    CHECK(p.blocks[1].label == "text");
    CHECK(p.blocks[1].box[3] == 999);
    CHECK(p.blocks[2].label == "table");
    CHECK(p.blocks[2].page == 1);
    CHECK(p.blocks[2].box[0] == 1);
    CHECK(p.blocks[2].box[3] == 4);
  }
  CHECK(uocr::box_to_pixels(999, 1700) == 1700);
  CHECK(uocr::box_to_pixels(500, 1000) == 500);
}

TEST_CASE("a begun page marker: the parser reports its prefix, only its continuations stay possible") {
  uocr::OutputParser p;
  CHECK(p.page_marker_prefix() == 0);
  for (const auto& [text, prefix] : std::vector<std::pair<std::string, size_t>>{
           {"text <", 1}, {"P", 2}, {"AG", 4}, {"E", 5}, {">", 0}, {"x <td>", 0}, {"<P", 2}, {"AC", 0}}) {
    p.feed(text);
    INFO(text);
    CHECK(p.page_marker_prefix() == prefix);
  }
  // The published tokenizer writes the marker as "<P" "AGE" ">" (">\n" before a newline); the demo
  // model's one letter at a time.
  const uocr::Tokenizer published = uocr::Tokenizer::load(uocr_test::published_dir() + "/tokenizer.json");
  const uocr::Tokenizer demo = uocr::Tokenizer::load(uocr_test::source_dir() + "/models/uocr-demo/tokenizer.json");
  const uocr::MarkerCompletion pc(published), dc(demo);
  const auto id = [](const uocr::Tokenizer& t, const std::string& text) {
    const std::vector<int32_t> ids = t.encode(text);
    REQUIRE(ids.size() == 1);
    return ids[0];
  };
  CHECK(!pc.writing(0));
  CHECK(!pc.writing(1));  // "<" begins table tags too
  CHECK(pc.writing(2));
  CHECK(!pc.writing(6));
  CHECK(pc.continues(2, id(published, "AGE")));
  CHECK(!pc.continues(2, id(published, "ACE")));
  CHECK(pc.continues(2, id(published, "A")));
  CHECK(pc.continues(5, id(published, ">")));
  CHECK(pc.continues(5, published.encode(">\n")[0]));
  CHECK(!pc.continues(5, id(published, ".")));
  CHECK(!pc.continues(2, int32_t(published.eos_id())));
  CHECK(dc.continues(3, id(demo, "G")));
  CHECK(!dc.continues(3, id(demo, "C")));
  std::vector<float> logits(demo.id_limit(), 1.0f);
  logits[size_t(id(demo, "C"))] = 9.0f;
  dc.restrict(3, logits);
  CHECK(std::count_if(logits.begin(), logits.end(), [](float v) { return v == 1.0f; }) == 1);
  CHECK(logits[size_t(id(demo, "G"))] == 1.0f);
}

TEST_CASE("a session streams tokens whose text adds up to the transcript, deterministically") {
  uocr::SessionParams params;
  params.max_new_tokens = 24;
  uocr::OneShotSession s(golden_model(), params);
  s.add_page(uocr::load_image(uocr_test::golden("page.png")));
  uocr_test::Recorded streamed;
  const uocr::RunSummary a = s.run(uocr_test::recorder(streamed));
  CHECK(a.stop == uocr::StopReason::max_tokens);
  CHECK(a.generated_tokens == 24);
  CHECK(streamed.tokens.size() == 24);
  CHECK(a.visual_tokens == 273);
  CHECK(a.prompt_tokens == 277);  // BOS + 273 + "document parsing."
  CHECK(streamed.text.find(a.text) != std::string::npos);
  CHECK_FALSE(a.empty);
  // R-SWA with the config's window (8): after 23 fed-back tokens (the last one is not) the
  // window holds 8 rows.
  const size_t per_token = 2 * 2 * 4 * 4 * 3;  // K+V, 2 KV heads of 4, float32, 3 layers
  CHECK(a.memory.reference_kv_bytes == 277 * per_token);
  CHECK(a.memory.window_kv_bytes == 8 * per_token);
  CHECK(a.memory.peak_kv_bytes == a.memory.reference_kv_bytes + a.memory.window_kv_bytes);
  const uocr::RunSummary b = s.run();
  CHECK(b.text == a.text);
}

namespace {

// The one-shot decode written out by hand (vision, prompt, one prefill, greedy steps): what
// Session must still be now that it runs the page-group loop with every page held.
std::vector<int32_t> decode_by_hand(const uocr::ImageU8& page, const uocr::PreprocessConfig& views, int window, int steps) {
  const uocr::Model& m = *golden_model();
  uocr::VisionEncoder enc(m.config(), m.weights());
  const uocr::PreparedImage p = uocr::prepare_image(page, views);
  const std::vector<float> visual = enc.visual_tokens(p.global_chw, p.tiles_chw, p.tiles_x, p.tiles_y);
  const uocr::Prompt prompt = uocr::build_prompt(m, uocr::kSinglePagePrompt, int64_t(visual.size()) / m.config().decoder.hidden);
  uocr::Decoder dec(m.config().decoder, m.weights().decoder);
  uocr::KvCache cache(m.config().decoder, window);
  std::vector<float> logits = dec.prefill(dec.embed_prompt(prompt.ids, visual, m.image_token_id()), 0, cache);
  std::vector<int32_t> out;
  for (int64_t pos = int64_t(prompt.ids.size()); int(out.size()) < steps; ++pos) {
    out.push_back(uocr::Sampler::argmax(logits.data(), m.config().decoder.vocab));
    logits = dec.decode_step(out.back(), pos, cache);
  }
  return out;
}

}  // namespace

TEST_CASE("OneShotSession is exactly the one-shot decode: full attention, and a gundam page with tiles") {
  const uocr::ImageU8 page = uocr::load_image(uocr_test::source_dir() + "/tests/data/reference/images/wide_2000x650.png");
  for (const bool gundam : {false, true}) {
    uocr::SessionParams params;
    params.max_new_tokens = 12;
    params.window = gundam ? 4 : 0;  // a small ring that wraps, or full attention
    params.ngram_size = 0;           // the by-hand decode has no n-gram rule ...
    params.loop_guard = false;       // ... nor a loop guard
    params.mode = gundam ? uocr::ImageMode::gundam : uocr::ImageMode::base;
    uocr::OneShotSession s(golden_model(), params);
    s.add_page(page);
    std::vector<int32_t> ids;
    const uocr::RunSummary r = s.run([&](const uocr::Event& e) {
      if (e.type == uocr::Event::Type::token && e.token >= 0) ids.push_back(e.token);
      return true;
    });
    CAPTURE(gundam);
    const uocr::PreprocessConfig views = gundam ? uocr::preset_gundam() : uocr::PreprocessConfig{1024, 1024, false};
    CHECK(ids == decode_by_hand(page, views, params.window, 12));
    CHECK(r.visual_tokens > (gundam ? 273 : 272));  // gundam adds tiles to the 273 global tokens
    const size_t per_token = 2 * 2 * 4 * 4 * 3;
    CHECK(r.memory.window_kv_bytes == size_t(gundam ? 4 : 11) * per_token);
  }
}

TEST_CASE("a window past the model's context is clamped to it: the ring is not allocated beyond it") {
  uocr::SessionParams params;
  params.max_new_tokens = 4;
  params.window = 1000000;
  uocr::OneShotSession s(golden_model(), params);
  const int context = golden_model()->config().decoder.max_positions;
  CHECK(s.effective_window() == context);
  s.add_page(uocr::load_image(uocr_test::golden("page.png")));
  const uocr::RunSummary r = s.run();
  CHECK(r.generated_tokens == 4);
  const size_t per_token = 2 * 2 * 4 * 4 * 3;  // K+V, 2 KV heads of 4, float32, 3 layers
  CHECK(r.memory.kv_allocated_bytes <= size_t(r.prompt_tokens + context) * per_token);
}

TEST_CASE("cancellation from the callback stops the run and says so") {
  uocr::SessionParams params;
  params.max_new_tokens = 50;
  uocr::OneShotSession s(golden_model(), params);
  s.add_page(uocr::load_image(uocr_test::golden("page.png")));
  int seen = 0;
  const uocr::RunSummary r = s.run([&](const uocr::Event& e) { return e.type != uocr::Event::Type::token || ++seen < 5; });
  CHECK(r.stop == uocr::StopReason::cancelled);
  CHECK(r.generated_tokens == 5);
}

TEST_CASE("weights that give NaN logits fail the run as an invalid model, naming the token (not as 'no token')") {
  const uocr_test::DamagedModel nan_norm(uocr_test::golden_model_dir(), "model.norm.weight", 0x7FC0);  // the decoder's final norm: every logit NaN
  uocr::SessionParams params;
  params.max_new_tokens = 8;
  uocr::OneShotSession s(uocr::Model::load(nan_norm.dir.string()), params);
  s.add_page(uocr::load_image(uocr_test::golden("page.png")));
  std::string message;
  CHECK(uocr_test::status_of([&] { s.run(); }, &message) == uocr::Status::invalid_model);
  CHECK(message == "the model produced non-finite logits (NaN) at generated token 1: its weights may be damaged");
}

TEST_CASE("an allocation failure during a run is Status::out_of_memory saying how far the run got") {
  // A std::bad_alloc thrown by the callbacks stands in for one from the engines at the same point.
  uocr::SessionParams params;
  params.max_new_tokens = 8;
  uocr::OneShotSession s(golden_model(), params);
  s.add_page(uocr::load_image(uocr_test::golden("page.png")));
  int seen = 0;
  std::string message;
  CHECK(uocr_test::status_of([&] {
          s.run([&](const uocr::Event& e) {
            if (e.type == uocr::Event::Type::token && ++seen == 3) throw std::bad_alloc();
            return true;
          });
        }, &message) == uocr::Status::out_of_memory);
  CHECK(message == "out of memory while generating token 3");

  uocr::Session runner(golden_model(), params, {});
  uocr::CallbackPages pages(2, [](int64_t, uocr::ImageU8&) -> bool { throw std::bad_alloc(); });
  CHECK(uocr_test::status_of([&] { runner.run(pages); }, &message) == uocr::Status::out_of_memory);
  CHECK(message == "out of memory while starting the run (encoding and prefilling the first pages)");
}

TEST_CASE("session misuse is an error, not a crash") {
  uocr::OneShotSession empty(golden_model(), {});
  CHECK_THROWS_AS(empty.run(), uocr::Error);
  CHECK_THROWS_AS(empty.add_page(uocr::ImageU8{}), uocr::Error);
  uocr::SessionParams bad;
  bad.sampling.top_p = 2.f;
  CHECK_THROWS_AS(uocr::OneShotSession(golden_model(), bad), uocr::Error);
  for (double budget : {-0.5, std::nan("")}) {
    uocr::SessionParams bad_budget;
    bad_budget.page_time_budget_seconds = budget;
    CHECK(uocr_test::message_of([&] { uocr::OneShotSession(golden_model(), bad_budget); }).find("page_time_budget_seconds") !=
          std::string::npos);
  }
  uocr::SessionParams no_image;
  no_image.prompt = "Free OCR.";
  uocr::OneShotSession s(golden_model(), no_image);
  s.add_page(uocr::load_image(uocr_test::golden("page.png")));
  CHECK_THROWS_AS(s.run(), uocr::Error);
}

TEST_CASE("markdown filter drops layout tags and puts page markers on their own lines however the text is split") {
  const std::string raw =
      "<PAGE><|det|>title [1, 2, 3, 4]<|/det|># Title\n<|ref|>cell<|/ref|> a < b <td>x</td>\n<|det|>text [5, 6, 7, 8]<|/det|>end"
      "<PAGE>## Page two <PAG <PAGE>";
  const std::string want = "<PAGE>\n# Title\ncell a < b <td>x</td>\nend\n<PAGE>\n## Page two <PAG \n<PAGE>\n";
  for (unsigned seed = 0; seed < 30; ++seed) {
    uocr::MarkdownFilter f;
    std::mt19937 rng(seed);
    std::string got;
    for (size_t i = 0; i < raw.size();) {
      const size_t n = 1 + rng() % 6;
      got += f.feed(raw.substr(i, n));
      i += n;
    }
    got += f.flush();
    CHECK(got == want);
  }
  // Text before the first marker (upstream drops it; we keep the model's text) and a resumed filter.
  uocr::MarkdownFilter early;
  CHECK(early.feed("x<PAGE>y") == "x\n<PAGE>\ny");
  uocr::MarkdownFilter resumed;
  resumed.restore("<PA", true);
  CHECK(resumed.feed("GE>z") == "\n<PAGE>\nz");
  resumed.restore("<PA", false);
  CHECK(resumed.feed("GE>z") == "<PAGE>\nz");
  uocr::MarkdownFilter unfinished;
  CHECK(unfinished.feed("a <|det|>tab").empty() == false);
  CHECK(unfinished.flush() == "<|det|>tab");  // an unterminated tag is text after all
}
