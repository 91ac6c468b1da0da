// `uocr run`: images or a PDF -> Markdown, streamed as it decodes, with a progress line on a
// terminal and the session's statistics on request.
//
// Exit codes: 0 complete (the model ended the text), 1 error, 2 usage, 3 truncated (token or
// context limit), 4 stopped by the loop guard or because every token was banned, 5 empty
// output, 130 interrupted (Ctrl-C; the text so far is kept).
#pragma once
#include <csignal>
#include <cstdio>
#include <string>
#include <vector>

#include <unistd.h>

#include "args.hpp"
#include "pdf.hpp"
#include "uocr/session/markdown.hpp"
#include "uocr/session/session.hpp"

namespace uocr_cli {

inline volatile std::sig_atomic_t g_interrupted = 0;

inline void write_json_stats(FILE* f, const uocr::RunSummary& s, int window) {
  const double tps = s.decode_seconds > 0 ? double(s.generated_tokens) / s.decode_seconds : 0.0;
  std::fprintf(f,
               "{\"stop\": \"%s\", \"empty\": %s, \"pages\": %lld, \"visual_tokens\": %lld, \"prompt_tokens\": %lld, "
               "\"generated_tokens\": %lld, \"window\": %d, \"vision_seconds\": %.3f, \"prefill_seconds\": %.3f, "
               "\"decode_seconds\": %.3f, \"decode_tokens_per_second\": %.2f, \"reference_kv_bytes\": %zu, "
               "\"window_kv_bytes\": %zu, \"kv_allocated_bytes\": %zu, \"peak_kv_bytes\": %zu}\n",
               uocr::stop_reason_name(s.stop), s.empty ? "true" : "false", (long long)s.pages, (long long)s.visual_tokens,
               (long long)s.prompt_tokens, (long long)s.generated_tokens, window, s.vision_seconds, s.prefill_seconds,
               s.decode_seconds, tps, s.memory.reference_kv_bytes, s.memory.window_kv_bytes, s.memory.kv_allocated_bytes,
               s.memory.peak_kv_bytes);
}

inline int exit_code_for(const uocr::RunSummary& s) {
  switch (s.stop) {
    case uocr::StopReason::cancelled: return 130;
    case uocr::StopReason::max_tokens:
    case uocr::StopReason::context_limit: return 3;
    case uocr::StopReason::loop:
    case uocr::StopReason::no_token: return 4;
    case uocr::StopReason::eos: break;
  }
  return s.empty ? 5 : 0;
}

inline int cmd_run(const Args& args) {
  const std::vector<std::string>& inputs = args.positional();
  uocr::require(!inputs.empty(), uocr::Status::invalid_argument, "uocr run needs at least one image or PDF");
  const std::string format = args.get("--format", "markdown");
  uocr::require(format == "markdown" || format == "raw", uocr::Status::invalid_argument, "--format must be markdown or raw");
  const std::string stats = args.get("--stats", "");
  uocr::require(stats.empty() || stats == "json", uocr::Status::invalid_argument, "--stats takes 'json'");

  uocr::SessionParams params;
  const std::string mode = args.get("--mode", "base");
  uocr::require(mode == "base" || mode == "gundam", uocr::Status::invalid_argument, "--mode must be base or gundam");
  params.mode = mode == "gundam" ? uocr::ImageMode::gundam : uocr::ImageMode::base;
  params.prompt = args.get("--prompt", "");
  params.max_new_tokens = args.integer("--max-tokens", 0);
  params.window = args.get("--attention", "rswa") == "full" ? 0 : args.integer("--window", -1);
  params.ngram_size = args.integer("--ngram", 35);
  params.ngram_window = args.integer("--ngram-window", -1);
  params.loop_guard = !args.has("--loop-guard") || args.get("--loop-guard", "") != "off";
  if (args.has("--temperature")) params.sampling.temperature = std::stof(args.get("--temperature", "0"));
  if (args.has("--top-p")) params.sampling.top_p = std::stof(args.get("--top-p", "1"));
  params.sampling.seed = uint64_t(args.integer("--seed", 0));

  const auto model = uocr::Model::load(args.get("--model", "models/uocr-demo"));
  uocr::Session session(model, params);
  for (const std::string& in : inputs) {
    if (is_pdf(in)) {
      for (uocr::ImageU8& page : render_pdf(in, args.integer("--dpi", 300))) session.add_page(std::move(page));
    } else {
      session.add_page(uocr::load_image(in));
    }
  }

  const std::string out_path = args.get("-o", "");
  FILE* out = out_path.empty() ? stdout : std::fopen(out_path.c_str(), "wb");
  uocr::require(out != nullptr, uocr::Status::io, [&] { return "cannot write " + out_path; });
  const bool progress = !args.has("--quiet") && ::isatty(STDERR_FILENO) && (out != stdout || !::isatty(STDOUT_FILENO));
  g_interrupted = 0;
  std::signal(SIGINT, [](int) { g_interrupted = 1; });

  uocr::MarkdownFilter filter;
  int64_t tokens = 0;
  int page = 0;
  const auto t0 = std::chrono::steady_clock::now();
  const uocr::RunSummary sum = session.run([&](const uocr::Event& e) {
    if (e.type == uocr::Event::Type::page) page = e.page;
    if (e.type != uocr::Event::Type::token) return g_interrupted == 0;
    const std::string text = format == "raw" ? e.text : filter.feed(e.text);
    std::fwrite(text.data(), 1, text.size(), out);
    std::fflush(out);
    ++tokens;
    if (progress && tokens % 16 == 0) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::fprintf(stderr, "\r\033[Kpage %d/%zu  %lld tokens  %.1f tok/s", page + 1, session.page_count(),
                   (long long)tokens, s > 0 ? double(tokens) / s : 0.0);
    }
    return g_interrupted == 0;
  });
  if (format != "raw") {
    const std::string rest = filter.flush();
    std::fwrite(rest.data(), 1, rest.size(), out);
  }
  std::fputc('\n', out);
  if (out != stdout) std::fclose(out);
  std::signal(SIGINT, SIG_DFL);
  if (progress) std::fprintf(stderr, "\r\033[K");
  if (stats == "json") write_json_stats(stderr, sum, session.effective_window());
  if (sum.stop != uocr::StopReason::eos)
    std::fprintf(stderr, "uocr: stopped: %s after %lld tokens\n", uocr::stop_reason_name(sum.stop),
                 (long long)sum.generated_tokens);
  else if (sum.empty)
    std::fprintf(stderr, "uocr: the model produced no text\n");
  return exit_code_for(sum);
}

}  // namespace uocr_cli
