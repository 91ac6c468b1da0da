// `uocr run`: images or PDFs -> Markdown, streamed as it decodes, with a progress line on a
// terminal and the session's statistics on request.
//
// Documents of any length: pages are pulled one at a time (image files decoded, PDF pages
// rendered, only when the session needs them) into page groups of --pages-per-group pages
// (default 4; a document of at most that many pages is decoded exactly as one-shot R-SWA).
//
// Crash-safe resume: with --checkpoint FILE the session state is saved after the prefill, at
// every page boundary and every --checkpoint-every tokens. After a crash (or a kill), the same
// command with --resume continues from the last checkpoint. Output already written: with -o
// OUT, the file is cut back to the length it had when the checkpoint was written (the output is
// flushed and fsync'ed before each checkpoint) and the rest is appended, so OUT ends up
// byte-identical to an uninterrupted run. On stdout, only the text after the checkpoint is
// written (what the killed run printed after it is printed again). The checkpoint is deleted
// when the run ends by itself; it is kept after Ctrl-C and when --page-time-budget runs out, so
// that --resume continues.
//
// Exit codes: 0 complete (the model ended the text), 1 error, 2 usage, 3 truncated (token or
// context limit), 4 stopped by the loop guard or because every token was banned, 5 empty
// output, 124 --page-time-budget ran out, 130 interrupted (Ctrl-C); after 124 and 130 the text so
// far and the checkpoint are kept.
#pragma once
#include <cctype>
#include <cerrno>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "args.hpp"
#include "decode_limits.hpp"
#include "inputs.hpp"
#include "model_dir.hpp"
#include "output.hpp"
#include "pdf.hpp"
#include "same_file.hpp"
#include "uocr/io/read_file.hpp"
#include "uocr/session/checkpoint.hpp"
#include "uocr/session/session.hpp"
#include "uocr/session/markdown.hpp"
#include "uocr/session/page_group_choice.hpp"
#include "uocr/session/page_source.hpp"

namespace uocr_cli {

inline CommandOptions run_options() {
  CommandOptions o{"run",
                   {"--model", "--mode", "--prompt", "--max-tokens", "--attention", "--window", "--ngram", "--ngram-window",
                    "--loop-guard", "--temperature", "--top-p", "--seed", "--backend", "--device", "--cuda-graphs", "--precision", "--dpi",
                    "--format", "--stats", "-o", "--pages-per-group", "--overlap", "--reference-budget", "--reference-gate",
                    "--page-fallback-tokens", "--positions", "--slide-kv", "--checkpoint", "--checkpoint-every", "--page-timeout", "--page-time-budget", "--draft", "--draft-cost"},
                   {"--quiet", "--resume", "--separate-pages"},
                   true,
                   {}};
  for (const std::string& limit : decode_limit_options()) o.values.push_back(limit);
  return o;
}

inline volatile std::sig_atomic_t g_interrupted = 0;

// An OpenMP setting as the process runs with it (main() chooses OMP_WAIT_POLICY and
// GOMP_SPINCOUNT when the user did not), JSON-safe.
inline const char* openmp_setting(const char* variable) {
  const char* v = std::getenv(variable);
  if (v == nullptr) return "default";
  for (const char* c = v; *c; ++c)
    if (!std::isalnum(static_cast<unsigned char>(*c))) return "other";
  return v;
}

inline void write_json_stats(FILE* f, const uocr::RunSummary& s, const uocr::SessionStats& st, const uocr::PageGroupParams& g,
                             int window, const uocr::EngineInfo& engine) {
  auto json_string = [](const std::string& v) { return nlohmann::json(v).dump(); };
  const int64_t decoded = s.generated_tokens - std::max<int64_t>(0, st.resumed_at_token);  // by this run
  const double tps = s.decode_seconds > 0 ? double(decoded) / s.decode_seconds : 0.0;
  const double acceptance = st.draft.drafted > 0 ? double(st.draft.accepted) / double(st.draft.drafted) : 0.0;
  const double tokens_per_pass = st.draft.passes > 0 ? double(decoded) / double(st.draft.passes) : 0.0;
  std::fprintf(f,
               "{\"stop\": \"%s\", \"empty\": %s, \"pages\": %lld, \"visual_tokens\": %lld, \"prompt_tokens\": %lld, "
               "\"generated_tokens\": %lld, \"window\": %d, \"vision_seconds\": %.3f, \"prefill_seconds\": %.3f, "
               "\"decode_seconds\": %.3f, \"decode_tokens_per_second\": %.2f, \"reference_kv_bytes\": %zu, "
               "\"window_kv_bytes\": %zu, \"kv_allocated_bytes\": %zu, \"peak_kv_bytes\": %zu, \"scratch_bytes\": %zu, "
               "\"peak_scratch_bytes\": %zu, \"peak_bytes\": %zu, \"group_pages\": %lld, \"overlap_pages\": %d, \"positions\": \"%s\", "
               "\"slide_kv\": \"%s\", \"slides\": %lld, \"marker_boundaries\": %lld, \"forced_boundaries\": %lld, "
               "\"markers_completed\": %lld, \"pages_encoded\": %lld, \"reference_rows_attended\": %lld, \"reference_rows_dense\": %lld, "
               "\"checkpoints\": %lld, \"resumed_at_token\": %lld, \"openmp_wait_policy\": \"%s\", \"openmp_spin_count\": \"%s\", "
               "\"backend\": \"%s\", "
               "\"device\": %s, \"driver\": %s, \"precision\": \"%s\", \"drafting\": %s, \"decode_passes\": %lld, "
               "\"verify_passes\": %lld, \"drafted_tokens\": %lld, \"accepted_tokens\": %lld, \"acceptance_rate\": %.3f, "
               "\"tokens_per_pass\": %.2f}\n",
               uocr::stop_reason_name(s.stop), s.empty ? "true" : "false", (long long)s.pages, (long long)s.visual_tokens,
               (long long)s.prompt_tokens, (long long)s.generated_tokens, window, s.vision_seconds, s.prefill_seconds,
               s.decode_seconds, tps, s.memory.reference_kv_bytes, s.memory.window_kv_bytes, s.memory.kv_allocated_bytes,
               s.memory.peak_kv_bytes, s.memory.scratch_bytes, s.memory.peak_scratch_bytes, s.memory.peak_bytes,
               (long long)st.group_pages, g.overlap_pages, uocr::position_policy_name(uocr::position_policy(g)),
               uocr::slide_kv_name(uocr::slide_kv(g)), (long long)st.slides, (long long)st.marker_boundaries,
               (long long)st.forced_boundaries, (long long)st.markers_completed, (long long)st.pages_encoded,
               (long long)st.sparse_rows_attended, (long long)st.sparse_rows_dense, (long long)st.checkpoints_written, (long long)st.resumed_at_token,
               openmp_setting("OMP_WAIT_POLICY"), openmp_setting("GOMP_SPINCOUNT"), uocr::backend_name(engine.backend), json_string(engine.device).c_str(),
               engine.driver.empty() ? "null" : json_string(engine.driver).c_str(), uocr::precision_name(engine.precision),
               st.drafting ? "true" : "false", (long long)st.draft.passes, (long long)st.draft.verify_passes,
               (long long)st.draft.drafted, (long long)st.draft.accepted, acceptance, tokens_per_pass);
}

inline int exit_code_for(const uocr::RunSummary& s) {
  switch (s.stop) {
    case uocr::StopReason::cancelled: return 130;
    case uocr::StopReason::time_budget: return 124;
    case uocr::StopReason::max_tokens:
    case uocr::StopReason::context_limit: return 3;
    case uocr::StopReason::loop:
    case uocr::StopReason::no_token: return 4;
    case uocr::StopReason::eos: break;
  }
  return s.empty ? 5 : 0;
}

// A comma-separated list of 2 to `most` counts, the value of `option` (usage: its form).
inline std::vector<int> parse_counts(const std::string& v, const char* option, const char* usage, size_t most) {
  std::vector<int> n;
  size_t at = 0;
  auto bad = [&] { return std::string(option) + " takes " + usage + ", got '" + v + "'"; };
  while (at <= v.size()) {
    const size_t comma = std::min(v.find(',', at), v.size());
    const std::string part = v.substr(at, comma - at);
    uocr::require(!part.empty() && part.find_first_not_of("0123456789") == std::string::npos && part.size() < 9,
                  uocr::Status::invalid_argument, bad);
    n.push_back(parse_number<int>(part, option));
    at = comma + 1;
  }
  uocr::require(n.size() >= 2 && n.size() <= most, uocr::Status::invalid_argument, bad);
  return n;
}

// --reference-budget PAGES,BLOCKS[,BLOCK_TOKENS] turns SR-SWA on ("off": dense, the default);
// 0 for PAGES or BLOCKS means all of them. --reference-gate FAN_OUT,BEAM shapes its page gate
// (uocr::SparseParams: pages per gate-tree node, nodes kept per level; BEAM 0 = twice PAGES).
inline void parse_reference_budget(const std::string& budget, const std::string& gate, uocr::PageGroupParams& g) {
  if (budget == "off") {
    uocr::require(gate.empty(), uocr::Status::invalid_argument, "--reference-gate needs --reference-budget");
    return;
  }
  const std::vector<int> n = parse_counts(budget, "--reference-budget", "PAGES,BLOCKS[,BLOCK_TOKENS] (numbers, 0 = all) or off", 3);
  g.sparse = true;
  g.sparse_params.page_budget = n[0];
  g.sparse_params.block_budget = n[1];
  if (n.size() == 3) g.sparse_params.block_tokens = n[2];
  if (gate.empty()) return;
  const std::vector<int> f = parse_counts(gate, "--reference-gate", "FAN_OUT,BEAM (numbers, FAN_OUT >= 2, BEAM 0 = 2 x PAGES)", 2);
  uocr::require(f[0] >= 2, uocr::Status::invalid_argument, "--reference-gate: FAN_OUT (the gate tree's fan-out) must be >= 2");
  g.sparse_params.gate_fan_out = f[0];
  g.sparse_params.gate_beam = f[1];
}

// One page of a shared source as a document of its own (--separate-pages): pulls the source's
// next page, so the pages are still read one at a time and in order.
class NextPageOf final : public uocr::ForwardedPages {
 public:
  NextPageOf(uocr::PageSource& source, int64_t index) : ForwardedPages(source), index_(index) {}
  int64_t count() const override { return 1; }
  std::string identity() const override { return pages_.identity() + "#" + std::to_string(index_); }
  std::string draft_text(int64_t page) const override { return page == 0 ? pages_.draft_text(index_) : std::string(); }

 private:
  int64_t index_;
};

// The run of every page as one summary: times and tokens add up, memory is the largest.
inline void add_page_run(uocr::RunSummary& all, const uocr::RunSummary& page) {
  if (all.stop == uocr::StopReason::eos) all.stop = page.stop;
  all.empty = all.empty && page.empty;
  all.pages += page.pages;
  all.visual_tokens += page.visual_tokens;
  all.prompt_tokens += page.prompt_tokens;
  all.generated_tokens += page.generated_tokens;
  all.vision_seconds += page.vision_seconds;
  all.prefill_seconds += page.prefill_seconds;
  all.decode_seconds += page.decode_seconds;
  for (auto field : {&uocr::MemoryStats::reference_kv_bytes, &uocr::MemoryStats::window_kv_bytes,
                     &uocr::MemoryStats::kv_allocated_bytes, &uocr::MemoryStats::peak_kv_bytes,
                     &uocr::MemoryStats::scratch_bytes, &uocr::MemoryStats::peak_scratch_bytes, &uocr::MemoryStats::peak_bytes})
    all.memory.*field = std::max(all.memory.*field, page.memory.*field);
}

// What `uocr run` reads from its options before it opens the model and the inputs (checked here,
// so that a bad option fails before anything is loaded).
struct RunOptions {
  std::string format, stats, output;
  uocr::SessionParams params;
  uocr::PageGroupChoice groups;  // applied over the model folder's suggestions once it is loaded
  uocr::DocumentParams inf;
  uocr::CheckpointOptions ck;
  bool separate = false;
  int page_timeout = 120;
  int dpi = 300;
  uocr::DecodeLimits limits;
};

inline RunOptions parse_run_options(const Args& args) {
  RunOptions o;
  o.format = args.choice("--format", {"markdown", "raw"}, "markdown");
  o.stats = args.get("--stats", "");
  uocr::require(o.stats.empty() || o.stats == "json", uocr::Status::invalid_argument, "--stats takes 'json'");

  const std::string mode = args.choice("--mode", {"base", "gundam"}, "base");
  o.params.mode = mode == "gundam" ? uocr::ImageMode::gundam : uocr::ImageMode::base;
  o.params.prompt = args.get("--prompt", "");
  o.params.max_new_tokens = args.integer("--max-tokens", 0);
  const std::string attention = args.choice("--attention", {"rswa", "full"}, "rswa");
  o.params.window = attention == "full" ? 0 : args.integer("--window", -1);
  o.params.ngram_size = args.integer("--ngram", 35);
  o.params.ngram_window = args.integer("--ngram-window", -1);
  o.params.loop_guard = args.choice("--loop-guard", {"on", "off"}, "on") == "on";
  o.params.sampling.temperature = args.real("--temperature", o.params.sampling.temperature);
  o.params.sampling.top_p = args.real("--top-p", o.params.sampling.top_p);
  o.params.sampling.seed = uint64_t(args.integer("--seed", 0));
  o.params.backend = uocr::parse_backend(args.get("--backend", "cpu"));
  o.params.device_index = args.integer("--device", 0);
  o.params.cuda_graphs = args.choice("--cuda-graphs", {"on", "off"}, "on") == "on";
  uocr::parse_precision(args.choice("--precision", {"f32", "bf16"}, "f32"), o.params.precision);

  // Page groups: options given here, else the model folder's uocr_decode.json, else upstream's.
  if (args.has("--pages-per-group")) o.groups.pages_per_group = args.integer("--pages-per-group", 0);
  if (args.has("--overlap")) o.groups.overlap_pages = args.integer("--overlap", 0);
  if (args.has("--positions")) {
    o.groups.positions = uocr::parse_position_policy(args.get("--positions", ""));
    uocr::require(o.groups.positions.has_value(), uocr::Status::invalid_argument, "--positions must be limit, extrapolate or group");
  }
  if (args.has("--slide-kv")) {
    o.groups.slide_kv = uocr::parse_slide_kv(args.get("--slide-kv", ""));
    uocr::require(o.groups.slide_kv.has_value(), uocr::Status::invalid_argument, "--slide-kv must be reuse or recompute");
  }
  parse_reference_budget(args.get("--reference-budget", "off"), args.get("--reference-gate", ""), o.inf.groups);
  o.inf.page_fallback_tokens = args.integer("--page-fallback-tokens", int(o.inf.page_fallback_tokens));
  o.inf.keep_text = false;  // streamed to the output instead
  // A PDF page's text layer drafts its output (uocr/session/draft.hpp): same text, fewer passes.
  o.inf.draft.enabled = args.choice("--draft", {"pdf-text", "off"}, "pdf-text") == "pdf-text";
  o.inf.draft.measure_cost = args.choice("--draft-cost", {"measured", "ignored"}, "measured") == "measured";

  o.ck.path = args.get("--checkpoint", "");
  o.ck.every_tokens = args.integer("--checkpoint-every", 0);
  o.ck.resume = args.has("--resume");
  uocr::require(!o.ck.resume || !o.ck.path.empty(), uocr::Status::invalid_argument, "--resume needs --checkpoint FILE");
  uocr::require(!o.ck.resume || std::filesystem::exists(o.ck.path), uocr::Status::invalid_argument,
                [&] { return "--resume: there is no checkpoint " + o.ck.path + " (run without --resume to start)"; });
  uocr::require(o.ck.every_tokens >= 0, uocr::Status::invalid_argument, "--checkpoint-every must be >= 0");
  // Each page its own document (single-page prompt, fresh KV): for models trained on single pages,
  // such as DeepSeek-OCR's weights and the bundled demo model.
  o.separate = args.has("--separate-pages");
  uocr::require(!o.separate || o.ck.path.empty(), uocr::Status::invalid_argument,
                "--separate-pages runs each page on its own; it takes no --checkpoint");
  // Seconds each PDF page may take to render (pdf.hpp); 0: no limit.
  o.page_timeout = args.integer("--page-timeout", 120);
  uocr::require(o.page_timeout >= 0 && o.page_timeout <= 86400, uocr::Status::invalid_argument,
                [&] { return "--page-timeout must be in 0..86400 seconds (0: no limit), got " + std::to_string(o.page_timeout); });
  // Seconds the run may take per page of the document (SessionParams::page_time_budget_seconds).
  o.params.page_time_budget_seconds = args.real("--page-time-budget", 0);
  uocr::require(std::isfinite(o.params.page_time_budget_seconds) && o.params.page_time_budget_seconds >= 0,
                uocr::Status::invalid_argument, "--page-time-budget must be a number of seconds >= 0 (0: none)");

  o.output = args.get("-o", "");
  o.dpi = args.integer("--dpi", 300);
  o.limits = decode_limits(args);
  return o;
}

inline int cmd_run(const Args& args) {
  const std::vector<std::string>& inputs = args.positional();
  uocr::require(!inputs.empty(), uocr::Status::invalid_argument, "uocr run needs at least one image or PDF");
  RunOptions o = parse_run_options(args);
  uocr::SessionParams& params = o.params;
  uocr::DocumentParams& inf = o.inf;
  uocr::CheckpointOptions& ck = o.ck;
  const bool separate = o.separate;

  Output out;
  out.path = o.output;
  out.raw = o.format == "raw";
  out.check_stdout_open();
  const std::string model_path = model_dir(args);
  refuse_outputs_over_inputs({{"-o", out.path}, {"--checkpoint", ck.path}}, inputs, model_path);

  const auto model = uocr::Model::load(model_path);
  o.groups.apply(model->decode_defaults(), inf.groups);
  uocr::Session session(model, params, inf);  // validates every parameter before any page is read
  const std::unique_ptr<uocr::PageSource> pages = open_inputs(inputs, o.dpi, o.limits, o.page_timeout);

  if (!ck.resume || out.path.empty()) out.open();
  ck.save_caller_state = [&] { return out.state(); };
  ck.restore_caller_state = [&](const std::string& s) { out.restore(s, ck.path); };

  const bool progress = !args.has("--quiet") && ::isatty(STDERR_FILENO) && (!out.path.empty() || !::isatty(STDOUT_FILENO));
  g_interrupted = 0;
  std::signal(SIGINT, [](int) { g_interrupted = 1; });

  int64_t tokens = 0;
  int page = 0;
  const auto t0 = std::chrono::steady_clock::now();
  auto on_event = [&](const uocr::Event& e) {
    if (e.type == uocr::Event::Type::page && !separate) page = e.page;
    if (e.type != uocr::Event::Type::token) return g_interrupted == 0;
    out.write(e.text);
    ++tokens;
    if (progress && tokens % 16 == 0) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::fprintf(stderr, "\r\033[Kpage %d/%lld  %lld tokens  %.1f tok/s", page + 1, (long long)pages->count(),
                   (long long)tokens, s > 0 ? double(tokens) / s : 0.0);
    }
    return g_interrupted == 0;
  };
  uocr::RunSummary sum;
  uocr::SessionStats run_stats;
  try {
    if (separate) {
      // Each page opens with the marker a multi-page transcript has, so both read the same downstream.
      for (int64_t i = 0; i < pages->count() && sum.stop != uocr::StopReason::cancelled; ++i) {
        page = int(i);
        if (pages->count() > 1) out.write(std::string(uocr::kPageMarker));
        NextPageOf one(*pages, i);
        add_page_run(sum, session.run(one, on_event));
        const uocr::SessionStats& st = session.stats();
        run_stats.pages_encoded += st.pages_encoded;
        run_stats.drafting = run_stats.drafting || st.drafting;
        run_stats.draft.passes += st.draft.passes;
        run_stats.draft.verify_passes += st.draft.verify_passes;
        run_stats.draft.drafted += st.draft.drafted;
        run_stats.draft.accepted += st.draft.accepted;
      }
    } else {
      sum = session.run(*pages, on_event, ck);
      run_stats = session.stats();
    }
  } catch (const Interrupted& e) {
    // Ctrl-C while a PDF page rendered (pdf.hpp; SIGTERM ends the process there): stopped as
    // between two tokens, the text so far and the checkpoint kept, but no session summary.
    out.finish();
    std::fprintf(stderr, "%suocr: %s, after %lld tokens\n", progress ? "\r\033[K" : "", e.what(), (long long)tokens);
    return 130;
  }
  out.finish();
  std::signal(SIGINT, SIG_DFL);
  if (progress) std::fprintf(stderr, "\r\033[K");
  if (o.stats == "json") write_json_stats(stderr, sum, run_stats, inf.groups, session.effective_window(), session.engine_info());
  const bool resumable = sum.stop == uocr::StopReason::cancelled || sum.stop == uocr::StopReason::time_budget;
  if (!ck.path.empty() && !resumable) std::filesystem::remove(ck.path);
  if (sum.stop != uocr::StopReason::eos)
    std::fprintf(stderr, "uocr: stopped: %s after %lld tokens\n", uocr::stop_reason_name(sum.stop),
                 (long long)sum.generated_tokens);
  else if (sum.empty)
    std::fprintf(stderr, "uocr: the model produced no text\n");
  if (resumable && !ck.path.empty() && !std::filesystem::exists(ck.path))
    std::fprintf(stderr, "uocr: no checkpoint was written (the run stopped before its first page was ready): run it again without --resume\n");
  return exit_code_for(sum);
}

}  // namespace uocr_cli
