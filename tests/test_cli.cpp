// The `uocr` command-line tool, run as a user would: inspect outputs against the golden
// reference, and clear errors with a non-zero exit for bad input.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support/cli_process.hpp"
#include "support/test_support.hpp"
#include "uocr/backends/cpu/gemm_bf16.hpp"
#include "uocr/io/npy.hpp"

namespace fs = std::filesystem;

namespace {

using uocr_test::golden_model_dir;

using uocr_test::run_cli;
using Run = uocr_test::CliRun;

std::string tmp(const std::string& name) { return (fs::temp_directory_path() / ("uocr_cli_" + name)).string(); }
std::string file_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += double(a[i] - b[i]) * double(a[i] - b[i]);
    den += double(b[i]) * double(b[i]);
  }
  return std::sqrt(num / den);
}

}  // namespace

TEST_CASE("inspect vision writes exactly the golden visual tokens") {
  const std::string out = tmp("vision.npy");
  const Run r = run_cli("inspect vision --model '" + golden_model_dir() + "' --image '" + uocr_test::golden("page.png") + "' -o '" + out + "'");
  INFO(r.output);
  REQUIRE(r.status == 0);
  const auto ours = uocr::read_npy(out);
  const auto ref = uocr::read_npy(uocr_test::golden("vision_tokens.npy"));
  REQUIRE(ours.shape == ref.shape);
  CHECK(rel_error(ours.to_f32(), ref.to_f32()) < 1e-3);
  fs::remove(out);
}

TEST_CASE("inspect logits: prefill row and R-SWA n=8 teacher-forced rows match the reference") {
  // The first 10 generated ids: the reference row at gen index 9 is past the n=8 window.
  const auto gen = uocr::read_npy(uocr_test::golden("gen_ids.npy")).to_i64();
  const std::vector<int64_t> first(gen.begin(), gen.begin() + 10);
  const std::string gen_path = tmp("gen10.npy"), out = tmp("logits.npy");
  uocr::write_npy(gen_path, "<i8", {10}, first.data(), 8);
  const Run r = run_cli("inspect logits --model '" + golden_model_dir() + "' --image '" + uocr_test::golden("page.png") + "' --input-ids '" +
                        uocr_test::golden("input_ids.npy") + "' --generated '" + gen_path + "' --attention rswa --window 8 -o '" + out + "'");
  INFO(r.output);
  REQUIRE(r.status == 0);
  const auto ours = uocr::read_npy(out);
  REQUIRE(ours.shape == std::vector<int64_t>{11, 129280});
  const std::vector<float> all = ours.to_f32();
  const size_t vocab = 129280;
  const std::vector<float> prefill(all.begin(), all.begin() + vocab);
  CHECK(rel_error(prefill, uocr::read_npy(uocr_test::golden("prefill_logits.npy")).to_f32()) < 1e-3);
  const std::vector<float> ref_rows = uocr::read_npy(uocr_test::golden("rswa_n8_logits_rows.npy")).to_f32();
  const std::vector<int64_t> ref_index = uocr::read_npy(uocr_test::golden("logits_rows_gen_index.npy")).to_i64();
  int compared = 0;
  for (size_t k = 0; k < ref_index.size(); ++k) {
    const int64_t g = ref_index[k];
    if (g >= 10) continue;
    // Row 1 + g of ours is the output after feeding gen_ids[g].
    const std::vector<float> row(all.begin() + (1 + g) * vocab, all.begin() + (2 + g) * vocab);
    const std::vector<float> ref(ref_rows.begin() + k * vocab, ref_rows.begin() + (k + 1) * vocab);
    CHECK(rel_error(row, ref) < 1e-3);
    ++compared;
  }
  CHECK(compared == 1);  // gen index 9, past the n = 8 ring's first wrap
  fs::remove(gen_path);
  fs::remove(out);
}

TEST_CASE("inspect model and tokenize describe the folder") {
  const Run m = run_cli("inspect model --model '" + golden_model_dir() + "'");
  INFO(m.output);
  REQUIRE(m.status == 0);
  CHECK(m.output.find("tensors 154") != std::string::npos);
  CHECK(m.output.find("parameters 4576032") != std::string::npos);
  CHECK(m.output.find("decode_defaults pages_per_group=- overlap_pages=- positions=- slide_kv=-") != std::string::npos);
  const Run t = run_cli("inspect tokenize --model '" + golden_model_dir() + "' --text 'document parsing.'");
  CHECK(t.status == 0);
  CHECK(t.output.find("34030 76466 16") != std::string::npos);
}

TEST_CASE("bad input gives a clear error and a non-zero exit") {
  // `inspect logits` on the tiny page with these input ids (written to a temporary file).
  auto logits_with_ids = [](const std::string& name, const std::vector<int64_t>& ids) {
    const std::string path = tmp(name);
    uocr::write_npy(path, "<i8", {int64_t(ids.size())}, ids.data(), 8);
    const Run r = run_cli("inspect logits --model '" + golden_model_dir() + "' --image '" + uocr_test::golden("page.png") + "' --input-ids '" + path +
                          "' -o /tmp/x.npy");
    fs::remove(path);
    return r;
  };
  SUBCASE("missing model folder") {
    const Run r = run_cli("inspect vision --model /nonexistent --image x.png -o /tmp/x.npy");
    CHECK(r.status != 0);
    CHECK(r.output.find("/nonexistent") != std::string::npos);
  }
  SUBCASE("image that is not an image") {
    const Run r = run_cli("inspect vision --model '" + golden_model_dir() + "' --image '" + golden_model_dir() + "/config.json' -o /tmp/x.npy");
    CHECK(r.status != 0);
    CHECK(r.output.find("invalid image") != std::string::npos);
  }
  SUBCASE("missing image file") {
    const Run r = run_cli("inspect vision --model '" + golden_model_dir() + "' --image /nonexistent.png -o /tmp/x.npy");
    CHECK(r.status != 0);
    CHECK(r.output.find("/nonexistent.png") != std::string::npos);
  }
  SUBCASE("input ids that are not token ids") {
    const Run r = logits_with_ids("bad_ids.npy", {0, 999999999});
    CHECK(r.status != 0);
    CHECK(r.output.find("999999999") != std::string::npos);
  }
  SUBCASE("placeholder count that does not match the image") {
    const Run r = logits_with_ids("few_ids.npy", {0, 128815, 128815, 16});
    CHECK(r.status != 0);
    CHECK(r.output.find("273") != std::string::npos);
  }
  SUBCASE("unknown command and missing option; --help anywhere prints the usage") {
    CHECK(run_cli("frobnicate").status != 0);
    for (const char* help : {"--help", "run --help", "run --model x --help", "inspect vision --help"}) {
      const Run h = run_cli(help);
      CHECK(h.status == 0);
      CHECK(h.output.find("usage: uocr") != std::string::npos);
    }
    const Run r = run_cli("inspect vision --model '" + golden_model_dir() + "' -o /tmp/x.npy");
    CHECK(r.status != 0);
    CHECK(r.output.find("--image") != std::string::npos);
  }
}

TEST_CASE("uocr run defaults OpenMP's wait to passive with a short spin and keeps the user's settings") {
  const std::string args = "run --model '" + golden_model_dir() + "' --max-tokens 1 --stats json --quiet '" + uocr_test::golden("page.png") + "'";
  struct Case {
    std::string env, policy, spin;
  };
  for (const Case& c : {Case{"env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT ", "passive", "10000"},
                        Case{"env -u OMP_WAIT_POLICY GOMP_SPINCOUNT=500 ", "passive", "500"},
                        Case{"env -u GOMP_SPINCOUNT OMP_WAIT_POLICY=active ", "active", "default"}}) {
    const std::string out = run_cli(args, c.env).output;
    INFO(c.env);
    INFO(out);
    CHECK(out.find("\"openmp_wait_policy\": \"" + c.policy + "\"") != std::string::npos);
    CHECK(out.find("\"openmp_spin_count\": \"" + c.spin + "\"") != std::string::npos);
  }
}

TEST_CASE("uocr run streams text, reports statistics and exits with a meaningful code") {
  const std::string out = tmp("run.md");
  const Run r = run_cli("run --model '" + golden_model_dir() + "' --max-tokens 12 --stats json --format raw -o '" + out + "' '" +
                        uocr_test::golden("page.png") + "'");
  INFO(r.output);
  CHECK(r.status == 3);  // truncated by --max-tokens
  CHECK(r.output.find("\"generated_tokens\": 12") != std::string::npos);
  CHECK(r.output.find("\"stop\": \"max_tokens\"") != std::string::npos);
  CHECK(r.output.find("\"visual_tokens\": 273") != std::string::npos);
  for (const char* key : {"\"scratch_bytes\": ", "\"peak_scratch_bytes\": ", "\"peak_bytes\": "}) {
    const size_t at = r.output.find(key);
    REQUIRE_MESSAGE(at != std::string::npos, key);
    CHECK(std::stoull(r.output.substr(at + std::strlen(key))) > 0);
  }
  std::ifstream f(out);
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  CHECK(text.size() > 1);
  fs::remove(out);
}

TEST_CASE("uocr run renders every page of a PDF, one page at a time") {
  const std::string pdf = uocr_test::source_dir() + "/tests/data/cli/two_pages.pdf";
  const Run r = run_cli("run --model '" + golden_model_dir() + "' --max-tokens 2 --stats json --dpi 72 '" + pdf + "'");
  INFO(r.output);
  CHECK(r.status == 3);
  CHECK(r.output.find("\"pages\": 2") != std::string::npos);
  CHECK(r.output.find("\"visual_tokens\": 546") != std::string::npos);
  CHECK(r.output.find("\"pages_encoded\": 2") != std::string::npos);
  CHECK(r.output.find("\"group_pages\": 2") != std::string::npos);  // G = 4 >= 2 pages: one-shot

  // An image and the PDF as one 3-page document, two pages held: the third page is rendered only
  // when the group slides (the fallback after 3 tokens without <PAGE>), with SR-SWA on.
  const Run g = run_cli("run --model '" + golden_model_dir() + "' --max-tokens 8 --stats json --dpi 72 --pages-per-group 2 "
                        "--page-fallback-tokens 3 --reference-budget 1,4,16 '" + uocr_test::golden("page.png") + "' '" + pdf + "'");
  INFO(g.output);
  CHECK(g.status == 3);
  CHECK(g.output.find("\"pages\": 3") != std::string::npos);
  CHECK(g.output.find("\"group_pages\": 2") != std::string::npos);
  CHECK(g.output.find("\"slides\": 1") != std::string::npos);
  CHECK(g.output.find("\"pages_encoded\": 3") != std::string::npos);
  // SR-SWA statistics: the reference rows its steps attended, fewer than dense would.
  const auto stat = [](const std::string& out, const std::string& key) {
    const size_t at = out.find("\"" + key + "\": ");
    REQUIRE(at != std::string::npos);
    return std::stoll(out.substr(at + key.size() + 4));
  };
  CHECK(stat(g.output, "reference_rows_attended") > 0);
  CHECK(stat(g.output, "reference_rows_attended") < stat(g.output, "reference_rows_dense"));
  // The page clock's counts: the slide came from the fallback (random weights write no marker).
  CHECK(stat(g.output, "forced_boundaries") >= 1);
  CHECK(stat(g.output, "marker_boundaries") == 0);
  CHECK(stat(g.output, "markers_completed") == 0);
  // The same with a gate of fan-out 2 keeping 1 node per level: as many steps, rows within budget.
  const Run gate = run_cli("run --model '" + golden_model_dir() + "' --max-tokens 8 --stats json --dpi 72 --pages-per-group 2 "
                           "--page-fallback-tokens 3 --reference-budget 1,4,16 --reference-gate 2,1 '" +
                           uocr_test::golden("page.png") + "' '" + pdf + "'");
  INFO(gate.output);
  CHECK(gate.status == 3);
  CHECK(stat(gate.output, "reference_rows_dense") == stat(g.output, "reference_rows_dense"));
  CHECK(stat(gate.output, "reference_rows_attended") < stat(gate.output, "reference_rows_dense"));
  // Dense runs attend every reference row: both counts 0 (no SR-SWA).
  CHECK(stat(r.output, "reference_rows_attended") == 0);
}

TEST_CASE("uocr run takes unset page-group options from the model folder's uocr_decode.json") {
  // The tiny model's files, plus the settings file.
  const fs::path dir = tmp("decode_defaults_model");
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(golden_model_dir())) fs::create_symlink(e.path(), dir / e.path().filename());
  const auto write_settings = [&](const std::string& json) { std::ofstream(dir / "uocr_decode.json") << json; };
  write_settings(R"({"pages_per_group": 2, "overlap_pages": 1, "positions": "group", "slide_kv": "recompute", "comment": "test"})");
  const std::string pages = " '" + uocr_test::golden("page.png") + "' '" + uocr_test::golden("page.png") + "' '" + uocr_test::golden("page.png") + "'";
  const auto run = [&](const std::string& options) {
    const Run r = run_cli("run --model '" + dir.string() + "' --max-tokens 2 --stats json " + options + pages);
    INFO(r.output);
    CHECK(r.status == 3);
    return r.output;
  };
  const auto has = [](const std::string& out, const std::string& needle) {
    INFO(out);
    CHECK(out.find(needle) != std::string::npos);
  };
  has(run_cli("inspect model --model '" + dir.string() + "'").output,
      "decode_defaults pages_per_group=2 overlap_pages=1 positions=group slide_kv=recompute");
  std::string out = run("");
  has(out, "\"group_pages\": 2, \"overlap_pages\": 1, \"positions\": \"group\", \"slide_kv\": \"recompute\"");
  has(run("--slide-kv reuse"), "\"slide_kv\": \"reuse\"");
  // What the caller sets wins; the folder's overlap belongs to its group size (3 pages: G - 1).
  out = run("--pages-per-group 3 --positions limit");
  has(out, "\"group_pages\": 3, \"overlap_pages\": 2, \"positions\": \"limit\"");
  out = run("--overlap 1 --positions extrapolate");
  has(out, "\"group_pages\": 2, \"overlap_pages\": 1, \"positions\": \"extrapolate\"");
  // A folder without the file: the library's defaults (4 pages, upstream's positions).
  fs::remove(dir / "uocr_decode.json");
  has(run(""), "\"group_pages\": 3, \"overlap_pages\": 3, \"positions\": \"limit\", \"slide_kv\": \"reuse\"");
  // A bad file stops the load with a message that names it.
  for (const auto& [json, needle] : {std::pair<std::string, std::string>{R"({"pages_per_grop": 2})", "unknown key 'pages_per_grop'"},
                                     {R"({"positions": "sliding"})", "positions must be"},
                                     {R"({"slide_kv": "fresh"})", "slide_kv must be"},
                                     {R"({"pages_per_group": 1})", "pages_per_group must be >= 2"},
                                     {R"({"overlap_pages": 1})", "overlap_pages needs pages_per_group"},
                                     {R"({"pages_per_group": 2, "overlap_pages": 2})", "overlap_pages needs pages_per_group"},
                                     {"[2]", "top level must be an object"},
                                     {"{", "not valid JSON"}}) {
    write_settings(json);
    const Run r = run_cli("run --model '" + dir.string() + "' --max-tokens 2" + pages);
    INFO(json << " -> " << r.output);
    CHECK(r.status == 1);
    CHECK(r.output.find("uocr_decode.json") != std::string::npos);
    CHECK(r.output.find(needle) != std::string::npos);
  }
  fs::remove_all(dir);
}

TEST_CASE("uocr run: page group, SR-SWA, checkpoint and --cuda-graphs options are checked") {
  const std::string page = " '" + uocr_test::golden("page.png") + "'";
  auto fails = [&](const std::string& options, const std::string& needle) {
    const Run r = run_cli("run --model '" + golden_model_dir() + "' --max-tokens 2 " + options + page);
    INFO(options << ": " << r.output);
    CHECK(r.status == 2);
    CHECK(r.output.find(needle) != std::string::npos);
  };
  fails("--pages-per-group 1", "group_pages");
  fails("--pages-per-group 4 --overlap 4", "overlap");
  fails("--reference-budget 4", "--reference-budget");
  fails("--reference-budget 4,x", "--reference-budget");
  fails("--reference-budget 4,8,16,2", "--reference-budget");
  fails("--reference-gate 4,2", "--reference-gate needs --reference-budget");
  fails("--reference-budget 1,4 --reference-gate 4", "--reference-gate");
  fails("--reference-budget 1,4 --reference-gate 1,0", "fan-out");
  fails("--positions far", "--positions");
  fails("--slide-kv fresh", "--slide-kv");
  fails("--cuda-graphs yes", "--cuda-graphs must be on or off");
  fails("--resume", "--checkpoint");
  fails("--checkpoint-every -1 --checkpoint /tmp/x.ckpt", "--checkpoint-every");
  fails("--separate-pages --checkpoint /tmp/x.ckpt", "--separate-pages");
}

TEST_CASE("uocr run --separate-pages: every page its own single-page run, each opened by the page marker") {
  const std::string model = " --model '" + uocr_test::source_dir() + "/models/uocr-demo' --format raw --quiet ";
  auto page = [](int i) { return " '" + uocr_test::source_dir() + "/samples/data/demo-page" + std::to_string(i) + ".png'"; };
  const Run one = run_cli("run" + model + page(1));
  const Run two = run_cli("run" + model + page(2));
  REQUIRE(one.status == 0);
  REQUIRE(two.status == 0);
  const Run both = run_cli("run --separate-pages --stats json" + model + page(1) + page(2));
  INFO(both.output);
  REQUIRE(both.status == 0);
  // Each run's text ends with one newline; the stats line (stderr) may come before the final one.
  const std::string text = "<PAGE>" + one.output.substr(0, one.output.size() - 1) + "<PAGE>" +
                           two.output.substr(0, two.output.size() - 1);
  CHECK(both.output.compare(0, text.size(), text) == 0);
  CHECK(both.output.find("\"pages\": 2,") != std::string::npos);
  CHECK(both.output.find("\"pages_encoded\": 2,") != std::string::npos);
  CHECK(both.output.find("\"stop\": \"eos\"") != std::string::npos);
}

TEST_CASE("uocr run: bad input is an error with a message") {
  CHECK(run_cli("run --model '" + golden_model_dir() + "'").status == 2);  // no input
  const Run pdf = run_cli("run --model '" + golden_model_dir() + "' '" + golden_model_dir() + "/config.json.pdf'");
  CHECK(pdf.status == 1);
  const Run bad = run_cli("run --model '" + golden_model_dir() + "' --mode wide '" + uocr_test::golden("page.png") + "'");
  CHECK(bad.status == 2);
  CHECK(bad.output.find("--mode") != std::string::npos);
}

TEST_CASE("uocr quantize writes a loadable int8 folder and refuses bad arguments with a message") {
  const std::string out = (std::filesystem::temp_directory_path() / ("uocr_cli_int8_" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(out);
  const Run made = run_cli("quantize '" + golden_model_dir() + "' '" + out + "'");
  INFO(made.output);
  CHECK(made.status == 0);
  CHECK(made.output.find("matrices int8") != std::string::npos);
  const Run inspected = run_cli("inspect model --model '" + out + "'");
  CHECK(inspected.status == 0);
  CHECK(inspected.output.find("int8_matrices 58\n") != std::string::npos);
  CHECK(run_cli("inspect model --model '" + golden_model_dir() + "'").output.find("int8_matrices 0\n") != std::string::npos);
  CHECK(run_cli("quantize '" + golden_model_dir() + "'").status == 2);  // no OUT_DIR
  const Run again = run_cli("quantize '" + out + "' '" + out + "2'");
  CHECK(again.status == 2);
  CHECK(again.output.find("is int8 already") != std::string::npos);
  const Run taken = run_cli("quantize '" + golden_model_dir() + "' '" + out + "'");  // not empty
  CHECK(taken.status == 2);
  CHECK(taken.output.find("is not an empty folder") != std::string::npos);
  const Run missing = run_cli("quantize /nonexistent/model '" + out + "3'");
  CHECK(missing.status == 2);
  CHECK(!std::filesystem::exists(out + "3"));
  std::filesystem::remove_all(out);
}

TEST_CASE("every command refuses an option it does not take, naming it, with a close match as a hint") {
  const std::string model = " --model '" + uocr_test::source_dir() + "/models/uocr-demo'";
  const std::string page = " '" + uocr_test::source_dir() + "/samples/data/demo-page1.png'";
  for (const std::string command : {"run", "inspect model", "inspect tokenize", "inspect vision", "inspect logits"}) {
    for (const std::string bogus : {"--bogus 1", "--frob"}) {
      const Run r = run_cli(command + model + " " + bogus + page);
      INFO(command << " " << bogus << ": " << r.output);
      CHECK(r.status == 2);
      CHECK(r.output.find("does not take option " + bogus.substr(0, bogus.find(' '))) != std::string::npos);
    }
  }
  const Run typo = run_cli("run" + model + " --max-token 3" + page);
  INFO(typo.output);
  CHECK(typo.status == 2);
  CHECK(typo.output.find("--max-token (did you mean --max-tokens?)") != std::string::npos);
  const Run flag = run_cli("inspect model" + model + " --verfy");
  CHECK(flag.output.find("did you mean --verify?") != std::string::npos);
  // Options of other commands: each command knows its own, flags included.
  for (const std::string other : {"inspect model --dpi 72", "inspect model --quiet", "run --verify", "inspect tokenize --image x.png",
                                   "inspect vision --backend vulkan", "inspect logits --device 1"}) {
    const std::string option = other.substr(other.find("--"), other.find(' ', other.find("--")) - other.find("--"));
    const Run r = run_cli(other + model + " --image" + page + " -o /tmp/x.npy");
    INFO(other << ": " << r.output);
    CHECK(r.status == 2);
    CHECK(r.output.find("does not take option " + option) != std::string::npos);
  }
  CHECK(run_cli("inspect vision --backend vulkan" + model + " --image" + page + " -o /tmp/x.npy").output.find("runs on the CPU") !=
        std::string::npos);
  // A stray argument is refused too, and an unknown inspect subcommand is named.
  CHECK(run_cli("inspect model" + model + " extra").status == 2);
  const Run sub = run_cli("inspect weights" + model);
  CHECK(sub.status == 2);
  CHECK(sub.output.find("inspect weights") != std::string::npos);
}

TEST_CASE("uocr run --stats json names the backend, device and precision that ran") {
  const std::string args = "run --model '" + uocr_test::source_dir() + "/models/uocr-demo' --max-tokens 2 --stats json --quiet '" +
                           uocr_test::source_dir() + "/samples/data/demo-page1.png'";
  // bf16 is reported as it runs: f32 on a CPU without bf16 dot products; f32 is the default.
  const std::string bf16_runs = uocr::cpu::bf16_compute_available() ? "bf16" : "f32";
  const Run r = run_cli(args + " --precision bf16");
  INFO(r.output);
  CHECK(r.status == 3);
  CHECK(r.output.find("\"backend\": \"cpu\", \"device\": \"") != std::string::npos);
  CHECK(r.output.find("\"device\": \"\"") == std::string::npos);
  CHECK(r.output.find("\"driver\": null, \"precision\": \"" + bf16_runs + "\",") != std::string::npos);
  for (const std::string& precision : {std::string(), std::string(" --precision f32")}) {
    const Run f = run_cli(args + precision);
    INFO(f.output);
    CHECK(f.status == 3);
    CHECK(f.output.find("\"precision\": \"f32\",") != std::string::npos);
  }
  const Run bad = run_cli(args + " --precision f16");
  CHECK(bad.status == 2);
  CHECK(bad.output.find("--precision") != std::string::npos);
  // Vulkan computes in f32 whatever is asked (and says so), where this CLI has it.
  const Run vulkan = run_cli(args + " --precision bf16 --backend vulkan");
  INFO(vulkan.output);
  if (vulkan.status == 3) CHECK(vulkan.output.find("\"backend\": \"vulkan\"") != std::string::npos);
  if (vulkan.status == 3) CHECK(vulkan.output.find("\"precision\": \"f32\",") != std::string::npos);
  else CHECK(vulkan.output.find("vulkan") != std::string::npos);
}

TEST_CASE("uocr finds the demo model from any working directory; UOCR_MODEL chooses another") {
  const fs::path cwd = tmp("elsewhere");
  fs::create_directories(cwd);
  const std::string page = " '" + fs::absolute(uocr_test::source_dir() + "/samples/data/demo-page1.png").string() + "'";
  const std::string there = "cd '" + cwd.string() + "' && ";
  const Run r = run_cli("run --max-tokens 2 --stats json --quiet" + page, there + "env -u UOCR_MODEL ");
  INFO(r.output);
  CHECK(r.status == 3);
  CHECK(r.output.find("\"visual_tokens\": 73") != std::string::npos);  // the demo model's 512 px view
  const Run tok = run_cli("inspect tokenize --text 'document parsing.'", there + "env -u UOCR_MODEL ");
  CHECK(tok.status == 0);
  // UOCR_MODEL, relative to the working directory like any path: here a folder of the demo
  // model's files with a page-group setting of its own, which the stats show.
  const fs::path demo = fs::absolute(uocr_test::source_dir() + "/models/uocr-demo");
  fs::create_directory(cwd / "mine");
  for (const auto& e : fs::directory_iterator(demo))
    if (e.path().filename() != "uocr_decode.json") fs::create_symlink(e.path(), cwd / "mine" / e.path().filename());
  std::ofstream(cwd / "mine" / "uocr_decode.json") << R"({"pages_per_group": 3})";
  const Run env = run_cli("run --max-tokens 2 --stats json --quiet" + page, there + "env UOCR_MODEL=mine ");
  INFO(env.output);
  CHECK(env.output.find("\"group_pages\": 1, \"overlap_pages\": 2,") != std::string::npos);
  const Run missing = run_cli("run --max-tokens 2" + page, there + "env UOCR_MODEL=/nonexistent/model ");
  INFO(missing.output);
  CHECK(missing.status == 2);
  CHECK(missing.output.find("UOCR_MODEL is /nonexistent/model") != std::string::npos);
  fs::remove_all(cwd);
}

#include "uocr/io/sha256.hpp"  // here rather than at the top: these cases are appended as a unit

TEST_CASE("SHA-256 matches the FIPS 180-4 test vectors, fed whole, in pieces and from a file") {
  const std::string million(1000000, 'a');
  const std::pair<std::string, std::string> vectors[] = {
      {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
      {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
      {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
       "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
      {million, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"}};
  for (const auto& [text, digest] : vectors) {
    uocr::Sha256 whole;
    whole.update(text);
    CHECK(whole.hex() == digest);
    uocr::Sha256 pieces;  // uneven pieces cross every block boundary
    for (size_t at = 0; at < text.size(); at += 7) pieces.update(text.data() + at, std::min<size_t>(7, text.size() - at));
    CHECK(pieces.hex() == digest);
  }
  const std::string path = tmp("million_a");
  std::ofstream(path, std::ios::binary) << million;
  uint64_t last = 0;
  CHECK(uocr::sha256_file(path, [&](uint64_t done) { last = done; }) == vectors[3].second);
  CHECK(last == million.size());
  fs::remove(path);
}

TEST_CASE("inspect model --verify checks a model folder: shards, checksums, tensor shapes") {
  const fs::path dir = tmp("verify_model");
  fs::remove_all(dir);
  fs::copy(uocr_test::source_dir() + "/models/uocr-demo", dir);
  const std::string shard = "model-00001-of-000001.safetensors";
  const uint64_t shard_bytes = fs::file_size(dir / shard);
  // The real digests, from the files as copied.
  const auto sha = [&](const std::string& name) { return uocr::sha256_file((dir / name).string()); };
  const std::string sums = tmp("verify_sums");
  std::ofstream(sums) << sha(shard) << "  " << shard << "\n" << sha("tokenizer.json") << " *./tokenizer.json\n";
  const auto verify = [&](const std::string& extra = "") {
    return run_cli("inspect model --verify --model '" + dir.string() + "'" + extra);
  };
  const auto fails = [](const Run& r, const std::string& needle) {
    INFO(r.output);
    CHECK(r.status == 1);
    CHECK(r.output.find(needle) != std::string::npos);
    CHECK(r.output.find("model verified") == std::string::npos);
  };

  SUBCASE("a good folder passes, with checksums in sha256sum or JSON form") {
    const Run r = verify(" --checksums '" + sums + "'");
    INFO(r.output);
    CHECK(r.status == 0);
    CHECK(r.output.find("ok    sha256 " + shard) != std::string::npos);
    CHECK(r.output.find("ok    sha256 tokenizer.json") != std::string::npos);
    CHECK(r.output.find("model verified") != std::string::npos);
    std::ofstream(sums) << "{\"" << shard << "\": \"sha256:" << sha(shard) << "\"}";
    CHECK(verify(" --checksums '" + sums + "'").status == 0);
    CHECK(run_cli("inspect model --model '" + dir.string() + "' --checksums '" + sums + "'").status == 2);  // needs --verify
  }
  SUBCASE("a truncated shard") {
    fs::resize_file(dir / shard, shard_bytes - 100);
    fails(verify(), "truncated shard " + shard + ": " + std::to_string(shard_bytes - 100) + " bytes, expected " +
                        std::to_string(shard_bytes));
  }
  SUBCASE("a missing shard") {
    fs::remove(dir / shard);
    fails(verify(), "missing shard " + shard);
  }
  SUBCASE("a file that does not match its checksum") {
    std::ofstream(sums) << std::string(64, '0') << "  tokenizer.json\n";
    fails(verify(" --checksums '" + sums + "'"),
          "checksum mismatch tokenizer.json: expected " + std::string(64, '0') + ", actual " + sha("tokenizer.json"));
  }
  SUBCASE("a tensor whose shape is not the one config.json implies") {
    std::string config = uocr_test::read_file((dir / "config.json").string());
    for (size_t at; (at = config.find("\"intermediate_size\": 512")) != std::string::npos;)
      config.replace(at, 24, "\"intermediate_size\": 384");
    std::ofstream(dir / "config.json") << config;
    fails(verify(), "tensor model.layers.0.mlp.gate_proj.weight in " + (dir / shard).string() +
                        " has shape [512, 192], expected [384, 192]");
  }
  fs::remove_all(dir);
  fs::remove(sums);
}

TEST_CASE("uocr run: a transcript that cannot be written is an error, not a normal stop") {
  const std::string run = "run --model '" + uocr_test::source_dir() + "/models/uocr-demo' --max-tokens 2 --quiet ";
  const std::string page = " '" + uocr_test::source_dir() + "/samples/data/demo-page1.png'";
  const Run full = run_cli(run + "-o /dev/full" + page);
  INFO(full.output);
  CHECK(full.status == 1);
  CHECK(full.output.find("cannot write /dev/full: No space left on device") != std::string::npos);
  // Closed stdout (run_cli's own 2>&1 would need it open): stderr to a file.
  const std::string err = tmp("closed_stdout.err");
  const int st = std::system(("'" + uocr_test::cli_path() + "' " + run + page + " >&- 2>'" + err + "'").c_str());
  const std::string message = uocr_test::read_file(err);
  INFO(message);
  CHECK((WIFEXITED(st) && WEXITSTATUS(st) == 1));
  CHECK(message.find("cannot write stdout: Bad file descriptor") != std::string::npos);
  fs::remove(err);
}

TEST_CASE("uocr run refuses an output or checkpoint that is an input page or a model file, however spelled") {
  const fs::path dir = tmp("same_file");
  fs::remove_all(dir);
  fs::create_directories(dir / "sub");
  const fs::path model = dir / "model";
  fs::copy(uocr_test::source_dir() + "/models/uocr-demo", model);
  const std::string source = uocr_test::source_dir() + "/samples/data/demo-page1.png";
  const std::string page = (dir / "page.png").string();
  fs::create_symlink(page, dir / "link.png");
  const std::string bytes = uocr_test::read_file(source);
  const std::string run = "run --model '" + model.string() + "' --max-tokens 2 --quiet ";
  const auto refused = [&](const std::string& option, const std::string& target, const std::string& named) {
    fs::copy_file(source, page, fs::copy_options::overwrite_existing);  // each case on its own
    const Run r = run_cli(run + option + " '" + target + "' '" + page + "'");
    INFO(option << " " << target << ": " << r.output);
    CHECK(r.status == 2);
    CHECK(r.output.find(option + " " + target + " and " + named + " are the same file") != std::string::npos);
    CHECK(uocr_test::read_file(page) == bytes);
  };
  for (const std::string& spelling : {page, (dir / "sub" / ".." / "page.png").string(), (dir / "link.png").string()}) {
    refused("-o", spelling, "the input " + page);
    refused("--checkpoint", spelling, "the input " + page);
  }
  const std::string config = uocr_test::read_file((model / "config.json").string());
  refused("-o", (model / "config.json").string(), "the model file " + (model / "config.json").string());
  refused("--checkpoint", (model / "tokenizer.json").string(), "the model file " + (model / "tokenizer.json").string());
  CHECK(uocr_test::read_file((model / "config.json").string()) == config);
  // -o and --checkpoint on one new path would overwrite each other.
  const std::string both = (dir / "out.md").string();
  const Run same = run_cli(run + "-o '" + both + "' --checkpoint '" + (dir / "sub" / ".." / "out.md").string() + "' '" + page + "'");
  INFO(same.output);
  CHECK(same.status == 2);
  CHECK(same.output.find("are the same file") != std::string::npos);
  CHECK_FALSE(fs::exists(both));
  // inspect writes its .npy over no input either.
  for (const std::string& command : {std::string("inspect vision"), "inspect logits --input-ids '" + page + "'"}) {
    const Run r = run_cli(command + " --model '" + model.string() + "' --image '" + page + "' -o '" + page + "'");
    INFO(command << ": " << r.output);
    CHECK(r.status == 2);
    CHECK(r.output.find("-o " + page + " and the input " + page + " are the same file") != std::string::npos);
    CHECK(uocr_test::read_file(page) == bytes);
  }
  fs::remove_all(dir);
}

TEST_CASE("uocr: a bad number names the option and the value") {
  const std::string run = "run --model '" + golden_model_dir() + "' --quiet ";
  const std::string page = " '" + uocr_test::golden("page.png") + "'";
  const std::pair<std::string, std::string> cases[] = {
      {"--temperature abc", "option --temperature needs a number, got 'abc'"},
      {"--top-p 1e999", "option --top-p needs a number, got '1e999'"},
      {"--top-p nan", "option --top-p needs a number, got 'nan'"},
      {"--max-tokens 99999999999", "option --max-tokens needs an integer from -2147483648 to 2147483647, got '99999999999'"},
      {"--window 12x", "option --window needs an integer from -2147483648 to 2147483647, got '12x'"},
      {"--max-image-bytes -1", "option --max-image-bytes needs an integer from 0 to 18446744073709551615, got '-1'"},
      {"--max-image-pixels 0", "--max-image-pixels, --max-image-bytes and --max-jpeg-scans must be positive"},
  };
  for (const auto& [option, message] : cases) {
    const Run r = run_cli(run + option + page);
    INFO(option << ": " << r.output);
    CHECK(r.status == 2);
    CHECK(r.output.find(message) != std::string::npos);
  }
}

TEST_CASE("uocr: page paths that are no regular file fail at once, naming them; the decode budget options") {
  const fs::path dir = tmp("not_files");
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string page = uocr_test::golden("page.png");
  const Run on_dir = run_cli("run --model '" + golden_model_dir() + "' '" + dir.string() + "'");
  INFO(on_dir.output);
  CHECK((on_dir.status == 1 || on_dir.status == 2));
  CHECK(on_dir.output.find("cannot read image file " + dir.string() + ": it is a directory") != std::string::npos);

  // A FIFO would block the read forever; `timeout` keeps the test from hanging if it does.
  const std::string fifo = (dir / "pipe.png").string();
  REQUIRE(std::system(("mkfifo '" + fifo + "'").c_str()) == 0);
  for (const std::string& command : {"run --model '" + golden_model_dir() + "' '" + fifo + "'",
                                     "inspect vision --model '" + golden_model_dir() + "' --image '" + fifo + "' -o '" + (dir / "v.npy").string() + "'"}) {
    const Run r = run_cli(command, "timeout 60 ");
    INFO(command << ": " << r.output);
    CHECK(r.status == 1);
    CHECK(r.output.find(fifo + ": it is a FIFO") != std::string::npos);
  }

  const Run pixels = run_cli("run --model '" + golden_model_dir() + "' --max-image-pixels 100 '" + page + "'");
  INFO(pixels.output);
  CHECK(pixels.status == 1);
  CHECK(pixels.output.find("pixels, above the limit of 100 pixels") != std::string::npos);
  const Run bytes =
      run_cli("inspect vision --model '" + golden_model_dir() + "' --max-image-bytes 1000 --image '" + page + "' -o '" + (dir / "v.npy").string() + "'");
  INFO(bytes.output);
  CHECK(bytes.status == 1);
  CHECK(bytes.output.find("more than the limit of 1000 bytes") != std::string::npos);
  fs::remove_all(dir);
}

namespace {

// The hostile PDFs of tests/data/cli/make_pdfs.py.
std::string hostile_pdf(const std::string& name) { return uocr_test::source_dir() + "/tests/data/cli/" + name + ".pdf"; }

// Pids of the processes whose command line holds every one of `needles`.
std::vector<pid_t> processes_with(const std::vector<std::string>& needles) {
  std::vector<pid_t> found;
  std::error_code ec;
  for (fs::directory_iterator it("/proc", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmd = uocr_test::read_file((it->path() / "cmdline").string());
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    bool all = !cmd.empty();
    for (const std::string& n : needles) all = all && cmd.find(n) != std::string::npos;
    if (all) found.push_back(pid_t(std::stol(name)));
  }
  return found;
}

// The exit status (128 + signal when one ended it) if the process ends within `seconds`, else -1
// after its group has been killed.
int exit_within(pid_t pid, double seconds) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  int st = 0;
  while (waitpid(pid, &st, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > until) {
      kill(-pid, SIGKILL);
      waitpid(pid, &st, 0);
      return -1;
    }
    usleep(20000);
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1;
}

// Waits (at most 30 s) for a process whose command line holds every one of `needles` while
// process `pid` runs; false (and `pid` ended) when none came.
bool appears_while(pid_t pid, const std::vector<std::string>& needles) {
  for (int i = 0; i < 1500; ++i, usleep(20000)) {
    if (!processes_with(needles).empty()) return true;
    if (waitpid(pid, nullptr, WNOHANG) == pid) return false;
  }
  exit_within(pid, 0);
  return false;
}

}  // namespace

TEST_CASE("uocr run: a PDF that cannot be read as pages says why (hostile input, issue 34 item 9)") {
  const std::string run = "run --model '" + golden_model_dir() + "' --max-tokens 1 ";
  const auto refused = [&](const std::string& options, const std::string& pdf, const std::string& message) {
    const Run r = run_cli(run + options + " '" + hostile_pdf(pdf) + "'", "timeout 60 ");
    INFO(pdf << " " << options << ": " << r.output);
    CHECK(r.status == 1);
    CHECK(r.output.find(message) != std::string::npos);
  };
  // pdftoppm renders a page it cannot allocate as a blank 1 x 1 image: refused before rendering
  // when over the decode budget, and by the size check when the budget is raised.
  refused("", "huge_mediabox", "page 1 is 300000 x 300000 pt (its MediaBox), 1250000 x 1250000 pixels at 300 dpi, above the limit "
                               "of 100000000 pixels; lower --dpi");
  refused("--dpi 72 --max-image-pixels 100000000000", "huge_mediabox",
          "page 1 rendered as 1 x 1 pixels, but it is 300000 x 300000 pt (its MediaBox), 300000 x 300000 pixels at 72 dpi "
          "(pdftoppm: Bogus memory allocation size)");
  refused("", "encrypted", hostile_pdf("encrypted") + " is encrypted (password-protected): uocr cannot read it");
  refused("", "zero_pages", hostile_pdf("zero_pages") + " has no pages");
  // Not a PDF: poppler's own words.
  const std::string json = tmp("config.json.pdf");
  fs::copy_file(golden_model_dir() + "/config.json", json, fs::copy_options::overwrite_existing);
  const Run bad = run_cli(run + "'" + json + "'");
  fs::remove(json);
  INFO(bad.output);
  CHECK(bad.status == 1);
  CHECK(bad.output.find(json + ": pdfinfo failed reading its page count: Syntax Error: Couldn't read xref table") != std::string::npos);
  // Readable: only an owner password (poppler opens it); a crop box smaller than the rendered
  // media box, turned a quarter.
  for (const std::string pdf : {"owner_password", "cropped_rotated"}) {
    const Run r = run_cli(run + "--dpi 100 '" + hostile_pdf(pdf) + "'");
    INFO(pdf << ": " << r.output);
    CHECK(r.status == 3);
  }
}

TEST_CASE("uocr run --page-timeout stops a page that renders too long, naming the page and the limit") {
  const auto t0 = std::chrono::steady_clock::now();
  const Run r = run_cli("run --model '" + golden_model_dir() + "' --page-timeout 1 '" + hostile_pdf("slow_page") + "'", "timeout 60 ");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(r.output);
  CHECK(r.status == 1);
  CHECK(r.output.find(hostile_pdf("slow_page") + ": rendering page 1 at 300 dpi took longer than --page-timeout 1 s and was "
                                                 "stopped; raise --page-timeout (0: no limit) or lower --dpi") != std::string::npos);
  CHECK(seconds < 10);
  for (const std::string bad : {"-1", "86401", "1.5"}) {
    const Run b = run_cli("run --model '" + golden_model_dir() + "' --page-timeout " + bad + " '" + hostile_pdf("slow_page") + "'");
    INFO(bad << ": " << b.output);
    CHECK(b.status == 2);
    CHECK(b.output.find("--page-timeout") != std::string::npos);
  }
}

TEST_CASE("uocr run: a signal during a PDF render leaves no renderer and no temporary folder") {
  const fs::path dir = tmp("pdf_signal");
  fs::remove_all(dir);
  fs::create_directories(dir / "tmp");
  const std::string tmpdir = (dir / "tmp").string(), log = (dir / "log").string();
  const std::string slow = hostile_pdf("slow_page");
  const auto renderer = [&] { return std::vector<std::string>{"pdftoppm", tmpdir, slow}; };
  const auto leftovers = [&] {
    std::vector<std::string> left;
    for (const auto& e : fs::directory_iterator(tmpdir)) left.push_back(e.path().filename().string());
    return left;
  };
  // Also when a check fails: no renderer or folder left by this test.
  struct Clean {
    std::function<void()> run;
    ~Clean() { run(); }
  } clean{[&] {
    for (pid_t p : processes_with(renderer())) kill(p, SIGKILL);
    fs::remove_all(dir);
  }};
  const std::vector<std::string> base{"run", "--model", golden_model_dir()};  // the default --page-timeout, far longer than the test

  SUBCASE("SIGTERM: 143") {
    std::vector<std::string> args = base;
    args.push_back(slow);
    const pid_t pid = uocr_test::spawn_cli(args, log, {tmpdir, true});
    REQUIRE(appears_while(pid, renderer()));
    kill(pid, SIGTERM);
    CHECK(exit_within(pid, 20) == 143);
    CHECK(processes_with(renderer()).empty());
    CHECK(leftovers().empty());
  }
  SUBCASE("Ctrl-C (SIGINT to the job) while a slide renders the next page: 130, text and checkpoint kept") {
    // Pages 1-2 render at the start, page 3 when the group slides after 3 tokens.
    const std::string ck = (dir / "run.ckpt").string(), out = (dir / "out.md").string();
    std::vector<std::string> args = base;
    for (const std::string a : {"--dpi", "72", "--pages-per-group", "2", "--page-fallback-tokens", "3", "--max-tokens", "50",
                                "--checkpoint", ck.c_str(), "-o", out.c_str()})
      args.push_back(a);
    args.push_back(hostile_pdf("two_pages"));
    args.push_back(slow);
    const pid_t pid = uocr_test::spawn_cli(args, log, {tmpdir, true});
    REQUIRE(appears_while(pid, renderer()));
    kill(-pid, SIGINT);
    CHECK(exit_within(pid, 20) == 130);
    const std::string said = uocr_test::read_file(log);
    INFO(said);
    CHECK(said.find(slow + ": interrupted (signal 2) while pdftoppm ran, after 3 tokens") != std::string::npos);
    CHECK(fs::exists(ck));
    CHECK(uocr_test::read_file(out).size() > 1);
    CHECK(processes_with(renderer()).empty());
    CHECK(leftovers().empty());
  }
  SUBCASE("SIGKILL: the renderer dies with it") {
    std::vector<std::string> args = base;
    args.push_back(slow);
    const pid_t pid = uocr_test::spawn_cli(args, log, {tmpdir, true});
    REQUIRE(appears_while(pid, renderer()));
    kill(pid, SIGKILL);
    CHECK(exit_within(pid, 20) == 137);
    bool gone = false;
    for (int i = 0; i < 100 && !gone; ++i, usleep(20000)) gone = processes_with(renderer()).empty();
    CHECK(gone);
  }
}

// (The library's side, a stop between two tokens or at a late page resumed exactly: test_resume.cpp.)
TEST_CASE("uocr run --page-time-budget: spent before the first page is ready, the run stops with no token and says there is no checkpoint") {
  const std::string page = uocr_test::golden("page.png");
  const std::string ck = tmp("budget.ckpt"), cut = tmp("budget_cut.md"), whole = tmp("budget_whole.md");
  fs::remove(ck);
  const std::string run = "run --model '" + golden_model_dir() + "' --max-tokens 24 --format raw --checkpoint '" + ck + "' ";
  const Run r = run_cli(run + "--page-time-budget 0.000001 -o '" + cut + "' '" + page + "' '" + page + "'");
  INFO(r.output);
  CHECK(r.status == 124);
  CHECK(r.output.find("stopped: time_budget after 0 tokens") != std::string::npos);
  CHECK(r.output.find("no checkpoint was written") != std::string::npos);
  CHECK_FALSE(fs::exists(ck));
  CHECK(uocr_test::read_file(cut) == "\n");  // no text: the line end every transcript gets
  const Run resumed = run_cli(run + "--resume -o '" + cut + "' '" + page + "' '" + page + "'");
  CHECK(resumed.status == 2);
  CHECK(resumed.output.find("there is no checkpoint") != std::string::npos);
  // A budget the run stays within changes nothing.
  const Run within = run_cli(run + "--page-time-budget 3600 -o '" + cut + "' '" + page + "' '" + page + "'");
  CHECK(within.status == 3);  // --max-tokens
  const Run plain = run_cli("run --model '" + golden_model_dir() + "' --max-tokens 24 --format raw -o '" + whole + "' '" + page + "' '" + page + "'");
  CHECK(plain.status == 3);
  CHECK(uocr_test::read_file(cut) == uocr_test::read_file(whole));
  for (const std::string bad : {"-1", "nan", "inf", "x"}) {
    const Run b = run_cli("run --model '" + golden_model_dir() + "' --page-time-budget " + bad + " '" + page + "'");
    INFO(bad << ": " << b.output);
    CHECK(b.status == 2);
    CHECK(b.output.find("--page-time-budget") != std::string::npos);
  }
  fs::remove(cut);
  fs::remove(whole);
}

TEST_CASE("uocr run --draft: a PDF's text layer saves decoder passes and never changes the transcript") {
  const std::string demo = " --model '" + uocr_test::source_dir() + "/models/uocr-demo' --dpi 72 --stats json --quiet ";
  const auto stat = [](const std::string& out, const std::string& key) {
    const size_t at = out.find("\"" + key + "\": ");
    REQUIRE(at != std::string::npos);
    return out.substr(at + key.size() + 4, out.find_first_of(",}", at + key.size() + 4) - (at + key.size() + 4));
  };
  const std::string right = uocr_test::source_dir() + "/samples/data/demo-doc-text.pdf";
  const std::string wrong = uocr_test::source_dir() + "/tests/data/cli/wrong_text_layer.pdf";
  for (const std::string& pdf : {right, wrong}) {
    INFO(pdf);
    const std::string plain = tmp("draft_off.md"), drafted = tmp("draft_on.md");
    const Run off = run_cli("run" + demo + "--draft off -o '" + plain + "' '" + pdf + "'");
    INFO(off.output);
    REQUIRE(off.status == 0);
    CHECK(stat(off.output, "drafting") == "false");
    CHECK(stat(off.output, "decode_passes") == stat(off.output, "generated_tokens"));
    const Run on = run_cli("run" + demo + "-o '" + drafted + "' '" + pdf + "'");  // pdf-text: the default
    INFO(on.output);
    REQUIRE(on.status == 0);
    CHECK(stat(on.output, "drafting") == "true");
    CHECK(file_text(drafted) == file_text(plain));
    CHECK(stat(on.output, "generated_tokens") == stat(off.output, "generated_tokens"));
    // Which passes are drafted depends on timing too (drafting rests where it costs more than steps).
    const long long generated = std::stoll(stat(on.output, "generated_tokens"));
    CHECK(std::stoll(stat(on.output, "drafted_tokens")) > 0);
    CHECK(std::stoll(stat(on.output, "decode_passes")) <= generated);
    if (pdf == right) CHECK(std::stoll(stat(on.output, "accepted_tokens")) > 0);  // the layer is what the model reads
    const double drafted_tokens = std::stod(stat(on.output, "drafted_tokens")), passes = std::stod(stat(on.output, "decode_passes"));
    CHECK(std::stod(stat(on.output, "acceptance_rate")) ==
          doctest::Approx(std::stod(stat(on.output, "accepted_tokens")) / drafted_tokens).epsilon(0.002));
    CHECK(std::stod(stat(on.output, "tokens_per_pass")) == doctest::Approx(double(generated) / passes).epsilon(0.01));
    CHECK(stat(off.output, "tokens_per_pass") == "1.00");
    fs::remove(plain);
    fs::remove(drafted);
  }
  const Run sampled = run_cli("run" + demo + "--temperature 0.7 --seed 3 '" + right + "'");
  CHECK(stat(sampled.output, "drafting") == "false");  // drafts are verified with greedy decoding only
  const Run bad = run_cli("run" + demo + "--draft sometimes '" + right + "'");
  CHECK(bad.status == 2);
  CHECK(bad.output.find("--draft") != std::string::npos);
}
