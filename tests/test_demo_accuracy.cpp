// What the bundled demo model reads: `uocr run` on rendered sample pages, scored by character
// error rate against their ground-truth Markdown, the way python/uocr_dev/eval.py scores
// (docs/ACCURACY.md). The bound is the shipped model's measured accuracy plus a margin, so a
// regression anywhere between the image decoder and the text stream fails here.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

#include "support/cli_process.hpp"
#include "support/test_support.hpp"
#include "uocr/session/session.hpp"

namespace {

// The shipped model (docs/TRAINING.md §7) reads these two pages with 1 error in ~88 characters
// (0.011) page by page and 2 (0.023) as one session; both bounds are the 0.05, whose
// margin covers greedy choices that flip between CPUs of other SIMD widths; a pipeline that no
// longer reads scores ~1.
constexpr double kPageCerBound = 0.05;
constexpr double kSessionCerBound = 0.05;
// Six pages in page groups of 2 with group positions and recomputed slides (the model folder's
// settings): the shipped model scores 0.053 (reusing the kept KV: 0.25; one-shot positions: 0.65;
// without completing the page marker that the n-gram rule breaks: 0.16); a guard of those paths
// on a real model.
constexpr double kSixPageGroupCerBound = 0.08;

// Code points of UTF-8 text with "<PAGE>" markers removed and every whitespace run made one
// space (eval.py's normalise), so the score is about characters read, not line breaks.
std::u32string normalised(const std::string& text) {
  std::string flat = text;
  for (size_t at; (at = flat.find("<PAGE>")) != std::string::npos;) flat.replace(at, 6, " ");
  std::u32string out;
  for (size_t i = 0; i < flat.size();) {
    const unsigned char c = static_cast<unsigned char>(flat[i]);
    const int n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    char32_t cp = n == 1 ? c : c & (0x3F >> (n - 1));
    for (int k = 1; k < n && i + size_t(k) < flat.size(); ++k) cp = (cp << 6) | (flat[i + size_t(k)] & 0x3F);
    i += size_t(n);
    const bool space = cp == U' ' || cp == U'\n' || cp == U'\t' || cp == U'\r';
    if (space) {
      if (!out.empty() && out.back() != U' ') out.push_back(U' ');
    } else {
      out.push_back(cp);
    }
  }
  if (!out.empty() && out.back() == U' ') out.pop_back();
  return out;
}

size_t edit_distance(const std::u32string& a, const std::u32string& b) {
  std::vector<size_t> row(b.size() + 1), next(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    next[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      next[j] = std::min({row[j] + 1, next[j - 1] + 1, row[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(row, next);
  }
  return row[b.size()];
}

double cer(const std::string& hypothesis, const std::string& reference) {
  const std::u32string h = normalised(hypothesis), r = normalised(reference);
  return double(edit_distance(h, r)) / double(std::max<size_t>(1, r.size()));
}

std::string sample(const std::string& name) { return uocr_test::source_dir() + "/samples/data/" + name; }

std::string demo_model_dir() { return uocr_test::source_dir() + "/models/uocr-demo"; }

// stdout of `uocr run --format raw [options]` on `pages` with the bundled model, or `model`
// (stderr to a log file).
std::string transcribe(const std::vector<std::string>& pages, const std::string& log_name,
                       const std::vector<std::string>& options = {}, const std::string& model = demo_model_dir()) {
  const std::string log = log_name + "." + std::to_string(::getpid());  // runs of the suite may overlap
  const std::string out = log + ".out";
  std::vector<std::string> args{"run", "--model", model, "--format", "raw", "-o", out, "--quiet"};
  args.insert(args.end(), options.begin(), options.end());
  args.insert(args.end(), pages.begin(), pages.end());
  REQUIRE(uocr_test::wait_exit(uocr_test::spawn_cli(args, log)) == 0);  // a failed run keeps its log
  const std::string text = uocr_test::read_file(out);
  std::filesystem::remove(out);
  std::filesystem::remove(log);
  return text;
}

}  // namespace

TEST_CASE("the CER measure: normalisation and edit distance") {
  CHECK(cer("<PAGE>a  b\n\nc", "a b c") == 0.0);
  CHECK(cer("kitten", "sitting") == doctest::Approx(3.0 / 7));
  CHECK(cer("", "abcd") == 1.0);
  CHECK(cer("äöü", "aöü") == doctest::Approx(1.0 / 3));  // code points, not bytes
}

const char* const kPages[] = {"demo-page1", "demo-page2"};

std::string reference_text() {
  std::string reference;
  for (const char* page : kPages) reference += uocr_test::read_file(sample(std::string(page) + ".md")) + "\n";
  return reference;
}

TEST_CASE("the demo model reads two short sample pages, each its own run") {
  std::string text;
  for (const char* page : kPages)
    text += transcribe({sample(std::string(page) + ".png")}, std::string("/tmp/uocr_demo_accuracy_") + page + ".log") + "\n";
  const double score = cer(text, reference_text());
  INFO("transcript: " << text);
  MESSAGE("demo model CER on two sample pages: " << score);
  CHECK(score <= kPageCerBound);
}

// The gate for int8 weights: within 0.005 CER of the shipped (bf16) weights, here on the
// two pages each in its own run and in one session (docs/ACCURACY.md has the full evaluation).
TEST_CASE("an int8 copy of the demo model (uocr quantize) reads the two sample pages within 0.005 CER of the shipped one") {
  const std::string dir = "/tmp/uocr_demo_int8." + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  REQUIRE(uocr_test::wait_exit(uocr_test::spawn_cli({"quantize", demo_model_dir(), dir, "--quiet"}, dir + ".log")) == 0);
  std::filesystem::remove(dir + ".log");
  std::vector<std::string> pages;
  for (const char* page : kPages) pages.push_back(sample(std::string(page) + ".png"));
  const std::string reference = reference_text();
  std::string shipped, int8;
  for (const std::string& page : pages) {
    shipped += transcribe({page}, "/tmp/uocr_demo_accuracy_page") + "\n";
    int8 += transcribe({page}, "/tmp/uocr_demo_accuracy_int8_page", {}, dir) + "\n";
  }
  const std::string shipped_session = transcribe(pages, "/tmp/uocr_demo_accuracy_session");
  const std::string int8_session = transcribe(pages, "/tmp/uocr_demo_accuracy_int8_session", {}, dir);
  std::filesystem::remove_all(dir);
  INFO("int8 transcripts: " << int8 << " / " << int8_session);
  MESSAGE("demo model CER, shipped vs int8: pages " << cer(shipped, reference) << " / " << cer(int8, reference)
                                                    << ", session " << cer(shipped_session, reference) << " / "
                                                    << cer(int8_session, reference));
  CHECK(cer(int8, reference) <= cer(shipped, reference) + 0.005);
  CHECK(cer(int8_session, reference) <= cer(shipped_session, reference) + 0.005);
}

// One multi-page prompt (the model was trained on 2-3-page documents; longer ones in one session
// are docs/ACCURACY.md's multi-page rows).
TEST_CASE("the demo model reads two short sample pages in one session") {
  std::vector<std::string> pages;
  for (const char* page : kPages) pages.push_back(sample(std::string(page) + ".png"));
  const std::string text = transcribe(pages, "/tmp/uocr_demo_accuracy_session.log");
  const double score = cer(text, reference_text());
  INFO("transcript: " << text);
  MESSAGE("demo model CER on two sample pages in one session: " << score);
  CHECK(score <= kSessionCerBound);
}

// Six pages: the three sample pages twice.
std::vector<std::string> six_pages(std::string* reference = nullptr) {
  std::vector<std::string> pages;
  for (int round = 0; round < 2; ++round)
    for (const char* page : {"demo-page1", "demo-page2", "demo-page3"}) {
      pages.push_back(sample(std::string(page) + ".png"));
      if (reference) *reference += uocr_test::read_file(sample(std::string(page) + ".md")) + "\n";
    }
  return pages;
}

// The six pages in one session of page groups of 2: with group positions every group is a 2-page
// document, a length the model was trained on; with upstream's one-shot numbering the text sits
// ever further from the pages it reads; recomputing each group at a slide gives the model the
// fresh documents it was trained on (docs/ACCURACY.md).
TEST_CASE("the demo model reads a six-page session of page groups better with group positions and recomputed slides") {
  std::string reference;
  const std::vector<std::string> pages = six_pages(&reference);
  std::string grouped_text;
  auto score = [&](const std::string& positions, const std::string& slide_kv) {
    const std::string text = transcribe(pages, "/tmp/uocr_demo_accuracy_six_" + positions + "_" + slide_kv + ".log",
                                        {"--pages-per-group", "2", "--overlap", "1", "--positions", positions,
                                         "--slide-kv", slide_kv});
    INFO("--positions " << positions << " --slide-kv " << slide_kv << " transcript: " << text);
    if (positions == "group" && slide_kv == "recompute") grouped_text = text;
    return cer(text, reference);
  };
  const double grouped = score("group", "recompute"), reused = score("group", "reuse"), one_shot = score("limit", "recompute");
  MESSAGE("demo model CER on six sample pages, G = 2: group positions " << grouped << " (kept KV reused: " << reused
                                                                        << "), one-shot positions " << one_shot);
  CHECK(grouped <= kSixPageGroupCerBound);
  CHECK(grouped < reused);
  CHECK(grouped < one_shot);
  // These are the settings the model folder names (uocr_decode.json): a run without options reads the same.
  CHECK(transcribe(pages, "/tmp/uocr_demo_accuracy_six_default.log") == grouped_text);
}

// The second round repeats the first one's text, so upstream's no-repeat n-gram rule bans the
// letter that would complete the "<PAGE>" after the repeated page 4: the model writes "<PACE>",
// the group stays a page behind and page 5 is read twice. A begun marker is completed
// (DocumentParams::complete_page_markers, session/marker_completion.hpp).
TEST_CASE("the demo model's six-page session keeps its page markers that the n-gram rule would break") {
  std::string reference;
  const std::vector<std::string> files = six_pages(&reference);
  const auto model = uocr::Model::load(demo_model_dir());
  auto run = [&](bool complete) {
    uocr::DocumentParams ip;
    ip.groups.group_pages = 2;
    ip.groups.overlap_pages = 1;
    ip.groups.group_positions = true;
    ip.groups.recompute_on_slide = true;
    ip.complete_page_markers = complete;
    uocr::Session s(model, {}, ip);
    uocr::FilePages pages(files);
    const uocr::RunSummary sum = s.run(pages);
    return std::make_pair(sum.text, s.stats());
  };
  const auto [text, stats] = run(true);
  const auto [broken_text, broken_stats] = run(false);
  INFO("completed: " << text << "\nnot completed: " << broken_text);
  MESSAGE("six pages, G = 2: CER " << cer(text, reference) << " with page markers completed (" << stats.markers_completed
                                   << " letters), " << cer(broken_text, reference) << " without");
  CHECK(stats.marker_boundaries == 5);
  CHECK(stats.forced_boundaries == 0);
  CHECK(stats.markers_completed >= 1);
  CHECK(broken_stats.markers_completed == 0);
  CHECK(broken_stats.marker_boundaries < 5);
  CHECK(cer(text, reference) < cer(broken_text, reference));
}
