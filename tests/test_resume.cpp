// Crash-safe resume (uocr/session/session.hpp, checkpoint.hpp):
//  - in process: a sampled 3-page run with sliding page groups is cancelled mid-document, resumed
//    from its last checkpoint, and the tokens after the checkpoint are those of an uninterrupted
//    run (KV, positions, page clock, n-gram history, sampler RNG, parser and UTF-8 state restored);
//  - damaged checkpoints (flipped byte, truncated, not a checkpoint, missing), mismatched ones
//    (other parameters, other pages) and forged ones (right checksum, token ids outside the
//    vocabulary; in process and through `uocr run --resume`) are refused with a clear error;
//  - for real: `uocr run --checkpoint` is SIGKILLed mid-document, `--resume` finishes it, and the
//    output file is byte-identical to an uninterrupted run's.
#include <doctest/doctest.h>

#include <array>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include "support/cli_process.hpp"
#include "support/event_recorder.hpp"
#include "support/golden_model.hpp"
#include "support/resume_case.hpp"
#include "support/test_support.hpp"
#include "uocr/session/checkpoint.hpp"
#include "uocr/session/session.hpp"
#include "uocr/session/page_source.hpp"
#include "uocr/session/prompt.hpp"

using uocr_test::recorder;
using uocr_test::Recorded;
using uocr_test::resume_groups;
using uocr_test::resume_params;

extern char** environ;

namespace {

using uocr_test::golden_model;
using uocr_test::golden_pages;

namespace fs = std::filesystem;

std::string scratch_file(const std::string& name) { return (fs::temp_directory_path() / ("uocr_resume_" + name)).string(); }

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

// The prompt ids of the 3-page document (its n-gram history at the prefill: shorter than the
// 1024-token window of several pages).
std::vector<int32_t> document_prompt(int64_t visual_tokens) {
  return uocr::build_prompt(*golden_model(), uocr::kMultiPagePrompt, visual_tokens).ids;
}

// Checkpoint file `file` of the document's prefill with every entry of its n-gram history
// (`prompt`, after its u64 count) set to `id`, and the checksum made right again: forged, not
// damaged. The rule then bans `id` at the next step.
std::string with_ngram_history(std::string file, const std::vector<int32_t>& prompt, int32_t id) {
  const std::string ids(reinterpret_cast<const char*>(prompt.data()), prompt.size() * sizeof(int32_t));
  const size_t at = file.find(ids);
  REQUIRE(at != std::string::npos);
  REQUIRE(file.find(ids, at + 1) == std::string::npos);
  uint64_t count = 0;
  std::memcpy(&count, file.data() + at - sizeof count, sizeof count);
  REQUIRE(count == prompt.size());
  for (size_t i = 0; i < prompt.size(); ++i) std::memcpy(&file[at + i * sizeof id], &id, sizeof id);
  const uint64_t sum = uocr::Fnv64().add(file.data() + 32, file.size() - 32).value();  // header: magic, version, size, sum
  std::memcpy(&file[24], &sum, sizeof sum);
  return file;
}

// Token ids a forged checkpoint may hold: one past the vocabulary, far past it, negative.
std::vector<int32_t> forged_ids() { return {int32_t(golden_model()->config().decoder.vocab), 2147483000, -7}; }

}  // namespace

TEST_CASE("a run cancelled mid-document resumes from its checkpoint exactly as if never stopped") {
  Recorded full;
  uocr::Session ref(golden_model(), resume_params(), resume_groups());
  uocr::FilePages ref_pages(golden_pages());
  const uocr::RunSummary a = ref.run(ref_pages, recorder(full));
  REQUIRE(a.generated_tokens == 40);
  REQUIRE(ref.stats().slides == 1);

  const std::string ck = scratch_file("inproc.ckpt");
  fs::remove(ck);
  uocr::CheckpointOptions opt;
  opt.path = ck;
  opt.every_tokens = 5;
  int saves = 0;
  opt.save_caller_state = [&] { return "caller state " + std::to_string(++saves); };

  // Stopped at token 23: the last checkpoint is the one of token 20 (after the slide at 16).
  uocr::Session first(golden_model(), resume_params(), resume_groups());
  uocr::FilePages first_pages(golden_pages());
  int64_t seen = 0;
  const uocr::RunSummary b = first.run(
      first_pages, [&](const uocr::Event& e) { return e.type != uocr::Event::Type::token || ++seen < 23; }, opt);
  CHECK(b.stop == uocr::StopReason::cancelled);
  CHECK(first.stats().checkpoints_written == 1 + 4 + 2);  // prefill, tokens 5..20, boundaries at 8 and 16
  REQUIRE(fs::exists(ck));

  opt.resume = true;
  std::string caller;
  opt.restore_caller_state = [&](const std::string& s) { caller = s; };
  Recorded rest;
  uocr::Session second(golden_model(), resume_params(), resume_groups());
  uocr::FilePages second_pages(golden_pages());
  const uocr::RunSummary c = second.run(second_pages, recorder(rest), opt);
  CHECK(caller == "caller state 7");  // the token-20 checkpoint's (written after the one of boundary 16)
  CHECK(second.stats().resumed_at_token == 20);
  CHECK(second.stats().pages_encoded == 3);
  CHECK(rest.tokens == std::vector<int32_t>(full.tokens.begin() + 20, full.tokens.end()));
  CHECK(c.stop == a.stop);
  CHECK(c.generated_tokens == a.generated_tokens);
  CHECK(c.memory.reference_kv_bytes == a.memory.reference_kv_bytes);
  CHECK(c.memory.peak_kv_bytes == a.memory.peak_kv_bytes);
  CHECK(c.memory.kv_allocated_bytes == a.memory.kv_allocated_bytes);
  CHECK(c.memory.peak_scratch_bytes == a.memory.peak_scratch_bytes);
  CHECK(c.memory.peak_bytes == a.memory.peak_bytes);
  CHECK(second.stats().slides == 1);
  CHECK(second.stats().forced_boundaries == ref.stats().forced_boundaries);
  CHECK(full.text.size() > rest.text.size());
  CHECK(full.text.compare(full.text.size() - rest.text.size(), rest.text.size(), rest.text) == 0);

  {  // a checkpoint of other parameters or other pages is refused, saying which
    auto mismatch = [&](uocr::SessionParams sp, uocr::DocumentParams ip, std::vector<std::string> files) {
      uocr::Session s(golden_model(), sp, ip);
      uocr::FilePages p(files);
      uocr::CheckpointOptions o;
      o.path = ck;
      o.resume = true;
      CHECK(uocr_test::status_of([&] { s.run(p, {}, o); }) == uocr::Status::invalid_argument);
      return uocr_test::message_of([&] { s.run(p, {}, o); });
    };
    uocr::SessionParams other = resume_params();
    other.sampling.seed = 8;
    const std::string m1 = mismatch(other, resume_groups(), golden_pages());
    CHECK(m1.find("other parameters") != std::string::npos);
    CHECK(m1.find("seed=7") != std::string::npos);
    uocr::DocumentParams bigger = resume_groups();
    bigger.groups.group_pages = 3;
    CHECK(mismatch(resume_params(), bigger, golden_pages()).find("other parameters") != std::string::npos);
    std::vector<std::string> swapped = golden_pages();
    std::swap(swapped[1], swapped[2]);
    CHECK(mismatch(resume_params(), resume_groups(), swapped).find("other input pages") != std::string::npos);
  }
  {  // damaged checkpoints are refused, saying why
    const std::string good = uocr_test::read_file(ck);
    auto resume_error = [&](const std::string& bytes) {
      write_file(ck, bytes);
      uocr::Session s(golden_model(), resume_params(), resume_groups());
      uocr::FilePages p(golden_pages());
      uocr::CheckpointOptions o;
      o.path = ck;
      o.resume = true;
      CHECK(uocr_test::status_of([&] { s.run(p, {}, o); }) == uocr::Status::io);
      return uocr_test::message_of([&] { s.run(p, {}, o); });
    };
    std::string flipped = good;
    flipped[flipped.size() / 2] ^= 0x10;
    CHECK(resume_error(flipped).find("checksum") != std::string::npos);
    CHECK(resume_error(good.substr(0, good.size() - 100)).find("truncated") != std::string::npos);
    CHECK(resume_error("not a checkpoint at all, just some text that is long enough").find("not a uocr checkpoint") !=
          std::string::npos);
    std::string future = good;
    future[8] = 99;  // format version
    CHECK(resume_error(future).find("version 99") != std::string::npos);
    fs::remove(ck);
    CHECK(resume_error("").find("not a uocr checkpoint") != std::string::npos);
    fs::remove(ck);
    uocr::Session s(golden_model(), resume_params(), resume_groups());
    uocr::FilePages p(golden_pages());
    uocr::CheckpointOptions o;
    o.path = ck;
    o.resume = true;
    CHECK(uocr_test::message_of([&] { s.run(p, {}, o); }).find("cannot read checkpoint") != std::string::npos);
    // Not a regular file: refused by what it is, without reading (a FIFO would block, /dev/zero never end).
    fs::create_directories(ck);
    CHECK(uocr_test::message_of([&] { s.run(p, {}, o); }).find("it is a directory") != std::string::npos);
    fs::remove(ck);
    o.path = "/dev/zero";
    CHECK(uocr_test::message_of([&] { s.run(p, {}, o); }).find("it is a character device") != std::string::npos);
  }
}

namespace {

// Image files of which page `late` (from 0) arrives only once the run's deadline has passed (a
// slow upload, a slow renderer); the deadline reaches the files' own decoding too.
class LatePages final : public uocr::PageSource {
 public:
  LatePages(std::vector<std::string> files, int64_t late) : files_(std::move(files)), late_(late) {}
  int64_t count() const override { return files_.count(); }
  bool next(uocr::ImageU8& page) override {
    if (pulled_++ == late_) {
      REQUIRE_FALSE(deadline_.none());
      std::this_thread::sleep_until(deadline_.at + std::chrono::milliseconds(1));
    }
    return files_.next(page);
  }
  void skip(int64_t n) override {
    pulled_ += n;
    files_.skip(n);
  }
  std::string identity() const override { return files_.identity(); }
  void set_deadline(const uocr::Deadline& deadline) override {
    deadline_ = deadline;
    files_.set_deadline(deadline);
  }

 private:
  uocr::FilePages files_;
  int64_t late_, pulled_ = 0;
  uocr::Deadline deadline_;
};

}  // namespace

TEST_CASE("the time budget stops a page that comes late before the next token; the run resumes exactly") {
  Recorded full;
  uocr::Session ref(golden_model(), resume_params(), resume_groups());
  uocr::FilePages ref_pages(golden_pages());
  REQUIRE(ref.run(ref_pages, recorder(full)).generated_tokens == 40);

  // Page 3, pulled by the slide at the boundary after token 8, comes after the budget (3 s a page,
  // 9 s for the run, which takes well under a second until then even on a loaded machine): the
  // run stops there, without encoding it or generating the next token.
  const std::string ck = scratch_file("late.ckpt");
  fs::remove(ck);
  uocr::CheckpointOptions opt;
  opt.path = ck;
  opt.every_tokens = 5;
  uocr::SessionParams budget = resume_params();
  budget.page_time_budget_seconds = 3;
  Recorded cut;
  uocr::Session first(golden_model(), budget, resume_groups());
  LatePages late(golden_pages(), 2);
  const uocr::RunSummary b = first.run(late, recorder(cut), opt);
  CHECK(b.stop == uocr::StopReason::time_budget);
  CHECK(b.generated_tokens == 8);
  CHECK(first.stats().pages_encoded == 2);
  CHECK(cut.tokens == std::vector<int32_t>(full.tokens.begin(), full.tokens.begin() + 8));
  REQUIRE(fs::exists(ck));

  // Resumed from the checkpoint of token 5: the tokens of the uninterrupted run.
  opt.resume = true;
  Recorded rest;
  uocr::Session second(golden_model(), resume_params(), resume_groups());
  uocr::FilePages pages(golden_pages());
  const uocr::RunSummary c = second.run(pages, recorder(rest), opt);
  CHECK(second.stats().resumed_at_token == 5);
  CHECK(uocr::stop_reason_name(c.stop) == std::string("max_tokens"));
  CHECK(c.generated_tokens == 40);
  CHECK(rest.tokens == std::vector<int32_t>(full.tokens.begin() + 5, full.tokens.end()));
  fs::remove(ck);

  // The first page late: the run stops before its first token and writes no checkpoint.
  budget.page_time_budget_seconds = 0.2;
  opt.resume = false;
  uocr::Session third(golden_model(), budget, resume_groups());
  LatePages first_late(golden_pages(), 0);
  const uocr::RunSummary d = third.run(first_late, {}, opt);
  CHECK(d.stop == uocr::StopReason::time_budget);
  CHECK(d.generated_tokens == 0);
  CHECK(third.stats().pages_encoded == 0);
  CHECK_FALSE(fs::exists(ck));
}

TEST_CASE("in bf16 precision a cancelled run resumes exactly, and its checkpoint is not resumed in f32") {
  uocr::SessionParams bf16 = resume_params();
  bf16.precision = uocr::Precision::bf16;
  Recorded full;
  uocr::Session ref(golden_model(), bf16, resume_groups());
  const bool runs_bf16 = ref.engine_info().precision == uocr::Precision::bf16;
  CHECK(runs_bf16 == uocr::cpu::bf16_compute_available());
  uocr::FilePages ref_pages(golden_pages());
  const uocr::RunSummary a = ref.run(ref_pages, recorder(full));
  REQUIRE(a.generated_tokens == 40);

  const std::string ck = scratch_file("bf16.ckpt");
  fs::remove(ck);
  uocr::CheckpointOptions opt;
  opt.path = ck;
  opt.every_tokens = 5;
  uocr::Session first(golden_model(), bf16, resume_groups());
  uocr::FilePages first_pages(golden_pages());
  int64_t seen = 0;
  first.run(first_pages, [&](const uocr::Event& e) { return e.type != uocr::Event::Type::token || ++seen < 23; }, opt);
  REQUIRE(fs::exists(ck));

  opt.resume = true;
  Recorded rest;
  uocr::Session second(golden_model(), bf16, resume_groups());
  uocr::FilePages second_pages(golden_pages());
  second.run(second_pages, recorder(rest), opt);
  CHECK(rest.tokens == std::vector<int32_t>(full.tokens.begin() + 20, full.tokens.end()));

  if (runs_bf16) {
    uocr::Session f32(golden_model(), resume_params(), resume_groups());
    uocr::FilePages f32_pages(golden_pages());
    const std::string msg = uocr_test::message_of([&] { f32.run(f32_pages, {}, opt); });
    CHECK(msg.find("other parameters") != std::string::npos);
    CHECK(msg.find("precision=bf16") != std::string::npos);
  }
  fs::remove(ck);
}

TEST_CASE("a checkpoint with a right checksum and token ids outside the vocabulary is refused, naming the field") {
  const std::string ck = scratch_file("forged.ckpt");
  fs::remove(ck);
  // Cancelled at its first token: the last checkpoint is the prefill's.
  const uocr_test::ResumeRun first = uocr_test::resume_run(golden_model(), uocr::Backend::cpu, golden_pages(), ck, 1);
  REQUIRE(first.summary.stop == uocr::StopReason::cancelled);
  const std::string good = uocr_test::read_file(ck);
  const std::vector<int32_t> prompt = document_prompt(first.summary.visual_tokens);
  for (const int32_t id : forged_ids()) {
    CAPTURE(id);
    write_file(ck, with_ngram_history(good, prompt, id));
    std::string message;
    CHECK(uocr_test::status_of([&] { uocr_test::resume_run(golden_model(), uocr::Backend::cpu, golden_pages(), ck); }, &message) ==
          uocr::Status::io);
    CHECK(message.find("n-gram history") != std::string::npos);
    CHECK(message.find(std::to_string(id)) != std::string::npos);
  }
  write_file(ck, good);
  CHECK(uocr_test::resume_run(golden_model(), uocr::Backend::cpu, golden_pages(), ck).resumed_at == 0);
  fs::remove(ck);
}

TEST_CASE("with group positions (the window restarting at every slide) a cancelled run resumes exactly") {
  const uocr::DocumentParams groups = resume_groups(true);
  const uocr_test::ResumeRun full = uocr_test::resume_run(golden_model(), uocr::Backend::cpu, golden_pages(), "", 0, groups);
  REQUIRE(full.summary.generated_tokens == 40);
  REQUIRE(full.slides == 1);
  // Another run than the one-shot numbering's (the same document without group positions).
  CHECK(uocr_test::resume_run(golden_model(), uocr::Backend::cpu, golden_pages()).tokens != full.tokens);
  const std::string ck = scratch_file("group.ckpt");
  fs::remove(ck);
  CHECK(uocr_test::resume_run(golden_model(), uocr::Backend::cpu, golden_pages(), ck, 23, groups).summary.stop ==
        uocr::StopReason::cancelled);
  const uocr_test::ResumeRun rest = uocr_test::resume_run(golden_model(), uocr::Backend::cpu, golden_pages(), ck, 0, groups);
  CHECK(rest.resumed_at == 20);  // after the slide at token 16, which restarted the window
  CHECK(rest.tokens == std::vector<int32_t>(full.tokens.begin() + 20, full.tokens.end()));
  CHECK(rest.summary.memory.peak_kv_bytes == full.summary.memory.peak_kv_bytes);
  fs::remove(ck);
}

TEST_CASE("with slides that recompute the group a cancelled run resumes exactly") {
  // The checkpoint then also holds the window's token ids and the held pages' embeddings, which
  // the slide after the resume (at token 8, the fallback boundary) rebuilds the group from.
  for (const bool group_positions : {true, false}) {
    INFO("group positions " << group_positions);
    uocr::DocumentParams groups = resume_groups(group_positions);
    groups.groups.recompute_on_slide = true;
    const uocr_test::ResumeRun full = uocr_test::resume_run(golden_model(), uocr::Backend::cpu, golden_pages(), "", 0, groups);
    REQUIRE(full.slides == 1);
    CHECK(uocr_test::resume_run(golden_model(), uocr::Backend::cpu, golden_pages(), "", 0, resume_groups(group_positions)).tokens !=
          full.tokens);  // reusing the KV reads otherwise
    const std::string ck = scratch_file("recompute.ckpt");
    fs::remove(ck);
    CHECK(uocr_test::resume_run(golden_model(), uocr::Backend::cpu, golden_pages(), ck, 7, groups).summary.stop ==
          uocr::StopReason::cancelled);
    const uocr_test::ResumeRun rest = uocr_test::resume_run(golden_model(), uocr::Backend::cpu, golden_pages(), ck, 0, groups);
    REQUIRE(rest.resumed_at == 5);  // before the slide
    CHECK(rest.slides == 1);
    CHECK(rest.tokens == std::vector<int32_t>(full.tokens.begin() + rest.resumed_at, full.tokens.end()));
    // Resumed with KV reuse instead: refused (other parameters), not read into the wrong state.
    std::string message;
    CHECK(uocr_test::status_of([&] { uocr_test::resume_run(golden_model(), uocr::Backend::cpu, golden_pages(), ck, 0, resume_groups(group_positions)); },
                               &message) == uocr::Status::invalid_argument);
    CHECK(message.find("recompute_on_slide") != std::string::npos);
    fs::remove(ck);
  }
}

namespace {

int run_cli(const std::vector<std::string>& args, std::string* output = nullptr) {
  const std::string log = scratch_file("cli.log");
  const int rc = uocr_test::wait_exit(uocr_test::spawn_cli(args, log));
  if (output) *output = uocr_test::read_file(log);
  return rc;
}

}  // namespace

TEST_CASE("uocr run --resume after SIGKILL mid-document writes byte-identical output") {
  const std::string ref_out = scratch_file("ref.md"), out = scratch_file("killed.md"), ck = scratch_file("cli.ckpt");
  for (const std::string& f : {ref_out, out, ck}) fs::remove(f);
  // Three pages, two held; random weights write no <PAGE>, so the fallback slides at token 80.
  std::vector<std::string> common = {"run", "--model", uocr_test::golden_model_dir(), "--max-tokens", "300",
                                     "--loop-guard", "off", "--pages-per-group", "2", "--overlap", "1",
                                     "--page-fallback-tokens", "80", "--quiet"};
  const std::vector<std::string> pages = golden_pages();
  common.insert(common.end(), pages.begin(), pages.end());
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = common;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };

  std::string log;
  REQUIRE(run_cli(with({"-o", ref_out}), &log) == 3);  // --max-tokens reached
  const std::string expected = uocr_test::read_file(ref_out);
  REQUIRE(expected.size() > 1500);

  // Killed once the output has passed the slide (~8 bytes a token) and a checkpoint exists.
  const auto ckpt = with({"-o", out, "--checkpoint", ck, "--checkpoint-every", "30"});
  const pid_t pid = uocr_test::spawn_cli(ckpt, scratch_file("killed.log"));
  const auto t0 = std::chrono::steady_clock::now();
  bool killed = false;
  while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(120)) {
    std::error_code ec;
    if (fs::exists(ck) && fs::file_size(out, ec) >= 900 && !ec) {
      killed = ::kill(pid, SIGKILL) == 0;
      break;
    }
    int st;
    if (waitpid(pid, &st, WNOHANG) == pid) FAIL("uocr run finished before it could be killed: " << uocr_test::read_file(scratch_file("killed.log")));
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  REQUIRE(killed);
  CHECK(uocr_test::wait_exit(pid) == 128 + SIGKILL);
  const std::string partial = uocr_test::read_file(out);
  INFO("killed after " << partial.size() << " of " << expected.size() << " bytes");
  REQUIRE(partial.size() < expected.size());

  // Refused: other parameters (exit 2, says which), a damaged copy (exit 1), no checkpoint.
  std::vector<std::string> other = with({"-o", out, "--checkpoint", ck, "--resume", "--window", "16"});
  CHECK(run_cli(other, &log) == 2);
  CHECK(log.find("other parameters") != std::string::npos);
  const std::string damaged = scratch_file("damaged.ckpt");
  std::string bytes = uocr_test::read_file(ck);
  bytes[bytes.size() - 3] ^= 0x01;
  write_file(damaged, bytes);
  CHECK(run_cli(with({"-o", out, "--checkpoint", damaged, "--resume"}), &log) == 1);
  CHECK(log.find("checksum") != std::string::npos);
  fs::remove(damaged);
  CHECK(run_cli(with({"-o", out, "--checkpoint", scratch_file("none.ckpt"), "--resume"}), &log) == 2);
  CHECK(log.find("no checkpoint") != std::string::npos);
  CHECK(uocr_test::read_file(out) == partial);  // refused resumes leave the output alone

  std::vector<std::string> resume = ckpt;
  resume.push_back("--resume");
  resume.insert(resume.end(), {"--stats", "json"});
  CHECK(run_cli(resume, &log) == 3);
  INFO(log);
  CHECK(log.find("\"resumed_at_token\": -1") == std::string::npos);
  CHECK(uocr_test::read_file(out) == expected);
  CHECK_FALSE(fs::exists(ck));  // a finished run removes its checkpoint
  for (const std::string& f : {ref_out, out, scratch_file("killed.log"), scratch_file("cli.log")}) fs::remove(f);
}

TEST_CASE("uocr run --resume refuses a forged checkpoint (right checksum, token ids out of range): exit 1, the field named") {
  const std::string out = scratch_file("forged.md"), ck = scratch_file("forged_cli.ckpt"), forged = scratch_file("forged_copy.ckpt"), log = scratch_file("forged.log");
  for (const std::string& f : {out, ck, forged}) fs::remove(f);
  // No boundary (no fallback; random weights write no <PAGE>) and no token interval: the only
  // checkpoint is the prefill's, kept when SIGINT cancels the run.
  std::vector<std::string> args = {"run", "--model", uocr_test::golden_model_dir(), "--max-tokens", "20000", "--loop-guard", "off",
                                   "--pages-per-group", "2", "--overlap", "1", "--page-fallback-tokens", "0", "--quiet", "-o", out};
  const std::vector<std::string> pages = golden_pages();
  args.insert(args.end(), pages.begin(), pages.end());
  std::vector<std::string> first = args;
  first.insert(first.end(), {"--checkpoint", ck});
  const pid_t pid = uocr_test::spawn_cli(first, log);
  const auto t0 = std::chrono::steady_clock::now();
  while (!fs::exists(ck) && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(120))
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  REQUIRE(fs::exists(ck));
  ::kill(pid, SIGINT);
  REQUIRE(uocr_test::wait_exit(pid) == 130);  // cancelled
  const std::string good = uocr_test::read_file(ck);
  const std::vector<int32_t> prompt =
      document_prompt(int64_t(pages.size() * uocr::visual_token_count(golden_model()->config().sam.image_size, 0, 0, 0)));
  std::vector<std::string> resume = args;
  resume.insert(resume.end(), {"--checkpoint", forged, "--resume"});
  for (const int32_t id : forged_ids()) {
    CAPTURE(id);
    write_file(forged, with_ngram_history(good, prompt, id));
    std::string output;
    CHECK(run_cli(resume, &output) == 1);
    INFO(output);
    CHECK(output.find("n-gram history") != std::string::npos);
    CHECK(output.find(std::to_string(id)) != std::string::npos);
  }
  for (const std::string& f : {out, ck, forged, log, scratch_file("cli.log")}) fs::remove(f);
}
