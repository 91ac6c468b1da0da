// uocr command-line tool: `uocr inspect ...` exposes the engine's intermediate results as .npy
// files so that parity can be checked from outside; `uocr run` transcribes documents.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "uocr/core/error.hpp"
#include "args.hpp"
#include "cmd_inspect.hpp"
#include "cmd_run.hpp"
#include "cmd_tokenize.hpp"

namespace {

int usage(FILE* out) {
  std::fprintf(out,
               "usage: uocr <command> [options]\n"
               "commands:\n"
               "  run [--model DIR] [--mode base|gundam] [--prompt STR] [--max-tokens N] [--attention rswa|full]\n"
               "      [--window N] [--ngram N] [--ngram-window N] [--loop-guard on|off] [--temperature T --top-p P\n"
               "      --seed S] [--backend cpu|vulkan|cuda [--device N]] [--cuda-graphs on|off] [--dpi N]\n"
               "      [--format markdown|raw] [--stats json] [-o OUT.md] [--quiet]\n"
               "      [--pages-per-group G] [--overlap O]\n"
               "      [--reference-budget PAGES,BLOCKS[,BLOCK_TOKENS] [--reference-gate FAN_OUT,BEAM] | off]\n"
               "      [--page-fallback-tokens N] [--positions limit|extrapolate|group] [--slide-kv reuse|recompute]\n"
               "      [--checkpoint FILE [--checkpoint-every N] [--resume]] [--separate-pages] IMAGE|PDF...\n"
               "      unset --pages-per-group, --overlap, --positions, --slide-kv: the model folder's uocr_decode.json,\n"
               "      else 4, G-1, limit, reuse\n"
               "      exit: 0 complete, 1 error, 2 usage, 3 truncated, 4 loop stopped, 5 empty, 130 interrupted\n"
               "  inspect model    --model DIR\n"
               "  inspect tokenize --model DIR (--text STR | --ids ID,ID,...)\n"
               "  inspect vision   --model DIR --image IMG [--image IMG2 ...] [--mode base|gundam] -o OUT.npy\n"
               "  inspect logits   --model DIR --image IMG [--image ...] --input-ids IDS.npy [--generated GEN.npy]\n"
               "                   [--attention full|rswa] [--window N] -o OUT.npy\n");
  return out == stdout ? 0 : 2;
}

// libgomp spins at every barrier by default; where the cores are shared with other work (desktops,
// CI, busy servers) that costs 1.3-5x per step (docs/PERFORMANCE.md, "On a shared machine").
// libgomp reads OMP_WAIT_POLICY once, when it loads, so the CLI sets "passive" and re-executes
// itself once; a value the user chose is kept, and a failed exec just goes on with the default.
void prefer_passive_openmp_wait(char** argv) {
#ifdef _OPENMP
  if (std::getenv("OMP_WAIT_POLICY") != nullptr) return;
  if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0) return;
  execv("/proc/self/exe", argv);
#else
  (void)argv;
#endif
}

}  // namespace

int main(int argc, char** argv) {
  prefer_passive_openmp_wait(argv);
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) return usage(stderr);
  if (args[0] == "--help" || args[0] == "-h" || args[0] == "help") return usage(stdout);
  // `uocr run ... --help`: the usage, not "option --help needs a value"
  for (const std::string& a : args)
    if (a == "--help") return usage(stdout);
  try {
    uocr_cli::Args parsed(std::vector<std::string>(args.begin() + 1, args.end()));
    const auto& sub = parsed.positional();
    if (args[0] == "run") return uocr_cli::cmd_run(parsed);
    if (args[0] == "inspect" && !sub.empty()) {
      if (sub[0] == "tokenize") return uocr_cli::cmd_inspect_tokenize(parsed);
      if (sub[0] == "model") return uocr_cli::cmd_inspect_model(parsed);
      if (sub[0] == "vision") return uocr_cli::cmd_inspect_vision(parsed);
      if (sub[0] == "logits") return uocr_cli::cmd_inspect_logits(parsed);
    }
    std::fprintf(stderr, "uocr: unknown command '%s'\n", args[0].c_str());
    return usage(stderr);
  } catch (const uocr::Error& e) {
    std::fprintf(stderr, "uocr: %s: %s\n", uocr::status_name(e.status()), e.what());
    return e.status() == uocr::Status::invalid_argument ? 2 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "uocr: error: %s\n", e.what());
    return 1;
  }
}
