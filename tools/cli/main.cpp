// uocr command-line tool: `uocr inspect ...` exposes the engine's intermediate results as .npy
// files so that parity can be checked from outside; `uocr run` transcribes documents.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <sstream>
#include <string>
#include <vector>

#include "uocr/core/error.hpp"
#include "args.hpp"
#include "cmd_inspect.hpp"
#include "cmd_quantize.hpp"
#include "cmd_run.hpp"
#include "cmd_tokenize.hpp"
#ifdef UOCR_CLI_SERVE
#include "../serve/cmd_serve.hpp"
#include "../serve/cmd_worker.hpp"
#endif

namespace {

int usage(FILE* out) {
  std::fprintf(out,
               "usage: uocr <command> [options]\n"
               "commands:\n"
               "  run [--model DIR] [--mode base|gundam] [--prompt STR] [--max-tokens N] [--attention rswa|full]\n"
               "      [--window N] [--ngram N] [--ngram-window N] [--loop-guard on|off] [--temperature T --top-p P\n"
               "      --seed S] [--backend cpu|vulkan|cuda [--device N]] [--cuda-graphs on|off] [--dpi N] [--page-timeout S]\n"
               "      [--page-time-budget S] [--precision f32|bf16] [--draft pdf-text|off [--draft-cost measured|ignored]]\n"
               "      [--format markdown|raw] [--stats json] [-o OUT.md] [--quiet]\n"
               "      [--pages-per-group G] [--overlap O]\n"
               "      [--reference-budget PAGES,BLOCKS[,BLOCK_TOKENS] [--reference-gate FAN_OUT,BEAM] | off]\n"
               "      [--page-fallback-tokens N] [--positions limit|extrapolate|group] [--slide-kv reuse|recompute]\n"
               "      [--checkpoint FILE [--checkpoint-every N] [--resume]] [--separate-pages]\n"
               "      [--max-image-pixels N] [--max-image-bytes N] [--max-jpeg-scans N] IMAGE|PDF...\n"
               "      unset --pages-per-group, --overlap, --positions, --slide-kv: the model folder's uocr_decode.json,\n"
               "      else 4, G-1, limit, reuse\n"
               "      --dpi: PDF pages' resolution (default 300); --page-timeout: the seconds each PDF page may take to\n"
               "      render (default 120, 0 = no limit); --page-time-budget: the seconds the run may take per page of the\n"
               "      document (default 0 = none; it also stops decoding, rendering and encoding pages); when it runs out the\n"
               "      text so far and the checkpoint are kept\n"
               "      --precision: the vision encoder's and the prefill's matrix products, f32 (default, the reference) or bf16\n"
               "      (cpu backend on CPUs with AVX-512 BF16: bf16 inputs, f32 sums, as upstream runs; elsewhere f32 runs)\n"
               "      --draft: a PDF page's text layer proposes the next tokens and one pass verifies them (default\n"
               "      pdf-text; the same output, fewer passes; greedy decoding on the cpu backend; off: one pass a token);\n"
               "      it rests where its passes cost more time per token than steps (--draft-cost ignored: never)\n"
               "      exit: 0 complete, 1 error, 2 usage, 3 truncated, 4 loop stopped, 5 empty, 124 time budget spent,\n"
               "      130 interrupted\n"
               "  serve [--config FILE.json] [--model DIR] [--backend cpu|vulkan|cuda] [--device N] [--precision f32|bf16]\n"
               "      [--host ADDR] [--port N] [--served-model-name NAME[,NAME...]] [--max-concurrency N] [--max-pages-per-request N]\n"
               "      [--request-timeout-seconds S] [--visual-cache-bytes N] [--queue-max-size N] [--long-document-pages N]\n"
               "      [--max-long-running N] [--max-body-bytes N] [--max-streams N] [--api-keys-file FILE]\n"
               "      [--rate-limit-per-minute N] [--data-dir DIR] [--result-ttl-seconds S] [--checkpoint-every-tokens N]\n"
               "      [--page-render-timeout-seconds S] [--max-image-pixels N] [--max-image-bytes N] [--max-jpeg-scans N]\n"
               "      [--callback-secret-file FILE] [--log-level debug|info|warning|error]\n"
               "      the OCR service: OpenAI-compatible POST /v1/chat/completions (streamed or not), GET /v1/models,\n"
               "      /health, /healthz, /readyz, /metrics, document jobs POST /v1/jobs (durable: DIR/jobs), a web page at /\n"
               "      (docs/SERVING.md); defaults: 127.0.0.1:8000, 16 documents at once, 300 pages, 300 s per page,\n"
               "      8 GiB of KV, 64 waiting per pool (short, long: over 16 pages), no rate limit;\n"
               "      --config: a JSON object of these settings (names with underscores); the options override it\n"
               "      [--queue redis://HOST:PORT[/DB] --storage file:///PATH|s3://BUCKET/PREFIX]\n"
               "      a fleet's API node: jobs are stored there and decoded by `uocr worker`s (docs/SCALING.md)\n"
               "  worker --queue redis://HOST:PORT[/DB] --storage file:///PATH|s3://BUCKET/PREFIX [--pools short,long]\n"
               "      [--lease-seconds S] [--max-deliveries N] [--worker-name NAME] [--host ADDR] [--port N] and serve's\n"
               "      decoding options: a fleet worker; takes jobs from Redis, checkpoints them to storage, resumes\n"
               "      those whose worker died; /metrics on --port; SIGTERM drains (docs/SCALING.md); defaults: 30 s\n"
               "      leases, dead-letter after 3 deliveries\n"
               "  quantize IN_DIR OUT_DIR [--quiet]\n"
               "      writes OUT_DIR, a copy of model folder IN_DIR whose decoder linear layers and lm_head are int8\n"
               "      (one scale per row; compressed-tensors' int-quantized layout); it runs on the CPU backend\n"
               "  inspect model    [--model DIR] [--verify [--checksums SHA256SUMS|JSON]]\n"
               "                   --verify: shards complete, tensors and tokenizer load, checksums match; exit 1 if not\n"
               "  inspect tokenize [--model DIR] (--text STR | --ids ID,ID,...)\n"
               "  inspect vision   [--model DIR] --image IMG [--image IMG2 ...] [--mode base|gundam] -o OUT.npy\n"
               "  inspect logits   [--model DIR] --image IMG [--image ...] --input-ids IDS.npy [--generated GEN.npy]\n"
               "                   [--attention full|rswa] [--window N] -o OUT.npy\n"
               "                   inspect runs on the CPU (no --backend); vision and logits also take the three below\n"
               "--max-image-pixels, --max-image-bytes (width x height x channels x bytes per sample, and file size),\n"
               "--max-jpeg-scans: each page image's decode budget, default 100000000, 1073741824, 100 (an A3 page at\n"
               "600 dpi fits; raise them for larger images, e.g. PDF pages rendered above 600 dpi)\n"
               "unset --model: $UOCR_MODEL, else the installed demo model (" UOCR_DEMO_MODEL_INSTALLED "),\n"
               "else the source tree's (" UOCR_DEMO_MODEL_SOURCE ")\n"
               "an option a command does not take is an error (exit 2)\n");
  return out == stdout ? 0 : 2;
}

// libgomp spins at every barrier for milliseconds by default; where the cores are shared with
// other work (desktops, CI, busy servers) that costs 1.3-5x per step, while a policy that sleeps
// at once pays a futex wake-up at each of a decode step's ~60 parallel regions. So the CLI sets
// "passive" with a short spin (GOMP_SPINCOUNT 10000, about 0.1 ms): long enough to catch a
// decode step's next region, short enough to yield the core to other work (docs/PERFORMANCE.md,
// "Decode at the roofline"). libgomp reads both once, when it loads, so the CLI sets them and
// re-executes itself once; values the user chose are kept, and a failed exec just goes on with
// libgomp's defaults.
void choose_openmp_wait(char** argv) {
#ifdef _OPENMP
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0) return;
  if (std::getenv("GOMP_SPINCOUNT") == nullptr && setenv("GOMP_SPINCOUNT", "10000", 1) != 0) return;
  execv("/proc/self/exe", argv);
#else
  (void)argv;
#endif
}

}  // namespace

int main(int argc, char** argv) {
  choose_openmp_wait(argv);
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) return usage(stderr);
  if (args[0] == "--help" || args[0] == "-h" || args[0] == "help") return usage(stdout);
  // `uocr run ... --help`: the usage, not "option --help needs a value"
  for (const std::string& a : args)
    if (a == "--help") return usage(stdout);
  // Each command with the options it takes: anything else on its command line is refused.
  struct Command {
    uocr_cli::CommandOptions options;
    int (*run)(const uocr_cli::Args&);
  };
  const Command commands[] = {
      {uocr_cli::run_options(), uocr_cli::cmd_run},
      {uocr_cli::inspect_model_options(), uocr_cli::cmd_inspect_model},
      {uocr_cli::inspect_tokenize_options(), uocr_cli::cmd_inspect_tokenize},
      {uocr_cli::inspect_vision_options(), uocr_cli::cmd_inspect_vision},
      {uocr_cli::inspect_logits_options(), uocr_cli::cmd_inspect_logits},
      {uocr_cli::quantize_options(), uocr_cli::cmd_quantize},
#ifdef UOCR_CLI_SERVE
      {uocr_serve::serve_options(), uocr_serve::cmd_serve},
      {uocr_serve::worker_options(), uocr_serve::cmd_worker},
#endif
  };
  try {
    for (const Command& c : commands) {
      // "inspect model" matches `uocr inspect model ...`: the command's words, then its options.
      std::istringstream words(c.options.command);
      size_t n = 0;
      bool match = true;
      for (std::string w; words >> w; ++n) match = match && n < args.size() && args[n] == w;
      if (match) return c.run(uocr_cli::Args(std::vector<std::string>(args.begin() + long(n), args.end()), c.options));
    }
#ifndef UOCR_CLI_SERVE
    if (args[0] == "serve" || args[0] == "worker") {
      std::fprintf(stderr, "uocr: this uocr was built without the server (libcpp-httplib-dev or libhiredis-dev was not found when it was configured)\n");
      return 1;
    }
#endif
    const std::string given = args[0] + (args[0] == "inspect" && args.size() > 1 ? " " + args[1] : "");
    std::fprintf(stderr, "uocr: unknown command '%s'\n", given.c_str());
    return usage(stderr);
  } catch (const uocr::Error& e) {
    // A message that starts with its status's name ("out of memory while ...") is not prefixed with it again.
    const char* name = uocr::status_name(e.status());
    if (std::strncmp(e.what(), name, std::strlen(name)) == 0)
      std::fprintf(stderr, "uocr: error: %s\n", e.what());
    else
      std::fprintf(stderr, "uocr: %s: %s\n", name, e.what());
    return e.status() == uocr::Status::invalid_argument ? 2 : 1;
  } catch (const std::bad_alloc&) {  // from a step that does not name its allocations (what() is only "std::bad_alloc")
    std::fprintf(stderr, "uocr: error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "uocr: error: %s\n", e.what());
    return 1;
  }
}
