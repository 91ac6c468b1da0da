// Model benchmarks on one 1024 page at the REAL model dimensions (random weights are fine: the
// work does not depend on the values, except MoE routing, which random weights spread evenly).
//
//   PYTHONPATH=python python3 -m uocr_dev.make_random --out /tmp/uocr-real   # real dimensions, 6.7 GB
//   meson setup /tmp/build-bench -Dbench=true && ninja -C /tmp/build-bench bench/bench_model
//   OMP_WAIT_POLICY=passive UOCR_BENCH_MODEL=/tmp/uocr-real /tmp/build-bench/bench/bench_model
//
// Cases (the ceilings are measured in the same run, so every ratio comes from one run):
//   BM_GemmPeak       float32 GEMM 2048^3, all threads, best of Eigen's parallel GEMM and the
//                     tiled GEMM cpu::linear uses: the encoder's ceiling
//   BM_ReadBandwidth  read 1 GiB with AVX-512 loads + software prefetch, all threads: the
//                     decode ceiling
//   BM_Encoder1024    VisionEncoder::encode_view on the 1024 global view of a real page image;
//                     FLOPs counted analytically from the config (roofline.hpp)
//   BM_EncoderStages  the same view, sam_forward and clip_forward timed apart
//   BM_Prefill        Decoder::prefill of the base single-page prompt (BOS + 273 visual + text)
//   BM_DecodeStep     Decoder::decode_step with the R-SWA ring full (steady state), against
//                     active weight bytes (as the model stores them: bf16, or int8 + scales) +
//                     float32 KV bytes per token / measured bandwidth
//   BM_MoeLayerDecode one MoE layer's decode FFN as 21 linear() calls vs 2 linear_batch() calls
//   BM_DraftVerify/K  draft verification: one pass over K + 1 tokens (Decoder::decode_tokens with
//                     every row's logits) against one decode_step, interleaved in the same run;
//                     verify_over_step - 1 is the tokens a pass must accept to break even
// Each reports wall time and the calling thread's CPU time (the idle-machine estimate on a
// shared machine; see docs/PERFORMANCE.md), and ratios of like to like.
//
// Environment: UOCR_BENCH_MODEL (model folder, default /tmp/uocr-real), UOCR_BENCH_IMAGE (page
// image, default tests/data/reference/golden/page.png), UOCR_BENCH_ENCODER_ITERS (3),
// UOCR_BENCH_PREFILL_ITERS (3), UOCR_BENCH_DECODE_STEPS (32), UOCR_BENCH_VISUAL=random (N(0,1)
// visual tokens instead of running the encoder, for quick decoder runs). Without the model
// folder the model cases are skipped with a message; the two ceilings still run.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "roofline.hpp"
#include "uocr/decoder/decoder.hpp"
#include "uocr/decoder/kv_cache.hpp"
#include "uocr/image/image.hpp"
#include "uocr/image/preprocess.hpp"
#include "uocr/model/checkpoint.hpp"
#include "uocr/model/config.hpp"
#include "uocr/model/weights.hpp"
#include "uocr/tokenizer/tokenizer.hpp"
#include "uocr/vision/clip.hpp"
#include "uocr/vision/encoder.hpp"
#include "uocr/vision/sam.hpp"

#ifndef UOCR_BENCH_SOURCE_DIR
#define UOCR_BENCH_SOURCE_DIR "."
#endif

namespace {

using Clock = std::chrono::steady_clock;
using uocr_bench::thread_cpu_seconds;
using uocr_bench::seconds_since;

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : fallback;
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::max(1, std::atoi(v)) : fallback;
}

bool file_exists(const std::string& path) { return std::ifstream(path).good(); }

// ---- the ceilings, measured at most once per run unless their own case runs -------------

uocr_bench::Rate g_gemm_peak, g_bandwidth;

const uocr_bench::Rate& gemm_peak() {
  if (g_gemm_peak.wall == 0) g_gemm_peak = uocr_bench::measure_gemm_gflops();
  return g_gemm_peak;
}

const uocr_bench::Rate& bandwidth() {
  if (g_bandwidth.wall == 0) g_bandwidth = uocr_bench::measure_read_bandwidth_gbs();
  return g_bandwidth;
}

// Wall and calling-thread CPU seconds of repeated runs; best = the least disturbed one.
struct Times {
  std::vector<double> wall, cpu;
  template <class F>
  void time(F&& f) {
    const auto t0 = Clock::now();
    const double c0 = thread_cpu_seconds();
    f();
    wall.push_back(seconds_since(t0));
    cpu.push_back(thread_cpu_seconds() - c0);
  }
  static double min(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }
  static double mean(const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x;
    return s / double(v.size());
  }
  static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  }
};

// ---- the model, the page and the visual tokens, loaded once -------------------------------

// The parts of a model folder the cases use (what uocr::Model bundles), built in place: the
// bound weights point into the checkpoint's mapped files.
struct LoadedModel {
  explicit LoadedModel(const std::string& d)
      : dir(d), cfg(uocr::ModelConfig::load(d + "/config.json")), ck(uocr::Checkpoint::open(d)),
        w(uocr::ModelWeights::bind(ck, cfg)), tok(uocr::Tokenizer::load(d + "/tokenizer.json")),
        image_id(tok.token_id("<image>")) {}
  const uocr::ModelConfig& config() const { return cfg; }
  const uocr::ModelWeights& weights() const { return w; }
  std::string dir;
  uocr::ModelConfig cfg;
  uocr::Checkpoint ck;
  uocr::ModelWeights w;
  uocr::Tokenizer tok;
  int32_t image_id;
};

struct Fixture {
  std::string why;  // non-empty: the model cases are skipped with this message
  std::unique_ptr<const LoadedModel> model;
  int view_size = 0;
  std::vector<float> view;    // [3, S, S] normalised global view
  std::vector<float> visual;  // the page's visual tokens, computed on first need
  std::string image;
};

Fixture load_fixture() {
  Fixture f;
  const std::string dir = env_or("UOCR_BENCH_MODEL", "/tmp/uocr-real");
  if (!file_exists(dir + "/config.json")) {
    f.why = "no model folder at " + dir +
            " (set UOCR_BENCH_MODEL; make one with python/uocr_dev/make_random.py at the real dimensions)";
    return f;
  }
  try {
    f.model = std::make_unique<const LoadedModel>(dir);
    f.view_size = f.model->config().sam.image_size;
    f.image = env_or("UOCR_BENCH_IMAGE", std::string(UOCR_BENCH_SOURCE_DIR) + "/tests/data/reference/golden/page.png");
    uocr::ImageU8 img;
    if (file_exists(f.image)) {
      img = uocr::load_image(f.image);
    } else {  // a synthetic page: white with dark text-like bars (the work does not depend on it)
      img = uocr::make_image(850, 1100);
      for (int y = 0; y < img.height; ++y)
        for (int x = 0; x < img.width; ++x) {
          const bool ink = (y / 12) % 3 == 0 && (x / 7) % 5 != 0 && x > 60 && x < 790;
          for (int ch = 0; ch < 3; ++ch) img.rgb[(size_t(y) * img.width + x) * 3 + ch] = ink ? 20 : 245;
        }
      f.image = "(synthetic page)";
    }
    const uocr::PreparedImage p = uocr::prepare_image(img, uocr::PreprocessConfig{f.view_size, f.view_size, false});
    f.view = p.global_chw;
  } catch (const std::exception& e) {
    f.why = std::string("cannot load the benchmark model: ") + e.what();
    f.model.reset();
  }
  return f;
}

Fixture& fixture() {
  static Fixture f = load_fixture();
  return f;
}

bool ready(benchmark::State& st) {
  if (!fixture().why.empty()) {
    st.SkipWithError(fixture().why.c_str());
    return false;
  }
  return true;
}

const std::vector<float>& visual_tokens() {
  Fixture& f = fixture();
  if (f.visual.empty()) {
    uocr::VisionEncoder enc(f.model->config(), f.model->weights());
    if (env_or("UOCR_BENCH_VISUAL", "") == "random") {
      // Quick mode for decoder work: N(0, 1) rows instead of running the encoder (the
      // prefill/decode work is the same; only MoE routing depends on the values).
      f.visual.resize(size_t(enc.token_count(f.view_size, 0, 0, 0) * enc.hidden()));
      std::mt19937 rng(7);
      std::normal_distribution<float> nd;
      for (float& v : f.visual) v = nd(rng);
    } else {
      f.visual = enc.visual_tokens(f.view, {}, 0, 0);
    }
  }
  return f.visual;
}

// Prompt embeddings: token rows with the `<image>` rows replaced by the visual tokens.
std::vector<float> prompt_embeddings(uocr::Decoder& dec, int64_t* tokens) {
  // Upstream's single-page prompt "<image>document parsing.": BOS, the visual block, the text.
  const LoadedModel& m = *fixture().model;
  const std::vector<float>& vis = visual_tokens();
  const int64_t hidden = m.config().decoder.hidden, n_visual = int64_t(vis.size()) / hidden;
  std::vector<int32_t> ids{int32_t(m.config().decoder.bos_id)};
  ids.insert(ids.end(), size_t(n_visual), m.image_id);
  const std::vector<int32_t> text = m.tok.encode("document parsing.");
  ids.insert(ids.end(), text.begin(), text.end());
  std::vector<float> emb = dec.embed(ids);
  std::copy(vis.begin(), vis.end(), emb.begin() + hidden);
  *tokens = int64_t(ids.size());
  return emb;
}

int decode_window() {
  const int w = fixture().model->config().decoder.sliding_window;
  return w > 0 ? w : 128;
}

int32_t argmax(const std::vector<float>& v) {
  return int32_t(std::max_element(v.begin(), v.end()) - v.begin());
}

// Analytic FLOPs of a prefill of t tokens (every token through top-k experts + shared).
double prefill_flops(const uocr::DecoderConfig& d, int64_t t) {
  // 1 byte per element: the parameter count.
  const uocr_bench::DecodeBytes b = uocr_bench::decode_bytes(d, uocr_bench::ElementBytes::uniform(1.0), 0);
  const double per_token = 2 * (b.attention + b.dense_mlp + b.router + b.experts + b.shared);
  const double attn = d.layers * 2.0 * double(t) * double(t + 1) * d.heads * d.head_dim;  // causal q·kᵀ + p·v
  return per_token * double(t) + attn + 2 * b.lm_head;
}

// ---- cases ----------------------------------------------------------------------------------

// A ceiling case: `measure` once per iteration, the best kept in `best` (for the model cases)
// and reported as counter `unit` (wall) and cpu_`unit`.
template <class Measure>
void ceiling_case(benchmark::State& st, uocr_bench::Rate& best, Measure&& measure, const std::string& unit) {
  for (auto _ : st) {
    const uocr_bench::Rate r = measure();
    best.wall = std::max(best.wall, r.wall);
    best.cpu = std::max(best.cpu, r.cpu);
  }
  st.counters[unit] = best.wall;
  st.counters["cpu_" + unit] = best.cpu;
  st.counters["threads"] = uocr_bench::omp_threads();
}

void BM_GemmPeak(benchmark::State& st) {
  ceiling_case(st, g_gemm_peak, [] { return uocr_bench::measure_gemm_gflops(); }, "GFLOPps");
}

void BM_ReadBandwidth(benchmark::State& st) {
  ceiling_case(st, g_bandwidth, [] { return uocr_bench::measure_read_bandwidth_gbs(); }, "GBps");
}

void BM_Encoder1024(benchmark::State& st) {
  if (!ready(st)) return;
  Fixture& f = fixture();
  const uocr::ModelConfig& cfg = f.model->config();
  uocr::VisionEncoder enc(cfg, f.model->weights());
  const double gflop = uocr_bench::encoder_flops(cfg, f.view_size).total() / 1e9;
  Times t;
  for (auto _ : st) {
    t.time([&] {
      std::vector<float> out = enc.encode_view(f.view.data(), f.view_size);
      benchmark::DoNotOptimize(out.data());
    });
  }
  const uocr_bench::Rate peak = gemm_peak();
  const double best = Times::min(t.wall), best_cpu = Times::min(t.cpu);
  st.counters["best_s"] = best;
  st.counters["mean_s"] = Times::mean(t.wall);
  st.counters["GFLOP"] = gflop;
  st.counters["GFLOPps"] = gflop / best;
  st.counters["pct_peak"] = 100 * gflop / best / peak.wall;
  st.counters["cpu_s"] = best_cpu;
  st.counters["cpu_pct_peak"] = 100 * gflop / best_cpu / peak.cpu;
  st.counters["threads"] = uocr_bench::omp_threads();
  st.SetLabel(std::to_string(f.view_size) + " px view of " + f.image);
}

void BM_EncoderStages(benchmark::State& st) {
  if (!ready(st)) return;
  Fixture& f = fixture();
  const uocr::ModelConfig& cfg = f.model->config();
  const uocr::ModelWeights& w = f.model->weights();
  const uocr_bench::EncoderFlops fl = uocr_bench::encoder_flops(cfg, f.view_size);
  Times sam_t, clip_t;
  uocr::vision::Workspace ws;  // kept across iterations, as a session's encoder keeps it
  for (auto _ : st) {
    sam_t.time([&] { uocr::vision::sam_forward(cfg.sam, w.sam, f.view.data(), f.view_size, ws); });
    clip_t.time([&] {
      const float* clip = uocr::vision::clip_forward(cfg.clip, w.clip, ws.sam_out, ws);
      benchmark::DoNotOptimize(clip);
    });
  }
  const uocr_bench::Rate peak = gemm_peak();
  const double sam_s = Times::min(sam_t.wall), clip_s = Times::min(clip_t.wall);
  const double sam_c = Times::min(sam_t.cpu), clip_c = Times::min(clip_t.cpu);
  st.counters["sam_s"] = sam_s;
  st.counters["sam_pct_peak"] = 100 * fl.sam() / sam_s / 1e9 / peak.wall;
  st.counters["sam_cpu_pct_peak"] = 100 * fl.sam() / sam_c / 1e9 / peak.cpu;
  st.counters["clip_s"] = clip_s;
  st.counters["clip_pct_peak"] = 100 * fl.clip() / clip_s / 1e9 / peak.wall;
  st.counters["clip_cpu_pct_peak"] = 100 * fl.clip() / clip_c / 1e9 / peak.cpu;
}

void BM_Prefill(benchmark::State& st) {
  if (!ready(st)) return;
  const LoadedModel& m = *fixture().model;
  const uocr::DecoderConfig& d = m.config().decoder;
  uocr::Decoder dec(d, m.weights().decoder);
  uocr::KvCache cache(d, decode_window());
  int64_t tokens = 0;
  const std::vector<float> emb = prompt_embeddings(dec, &tokens);
  dec.prefill(emb, 0, cache);  // warm-up: faults the decoder weights in
  Times t;
  for (auto _ : st) {
    t.time([&] {
      std::vector<float> logits = dec.prefill(emb, 0, cache);
      benchmark::DoNotOptimize(logits.data());
    });
  }
  const double gflop = prefill_flops(d, tokens) / 1e9;
  const double best = Times::min(t.wall), best_cpu = Times::min(t.cpu);
  st.counters["tokens"] = double(tokens);
  st.counters["best_s"] = best;
  st.counters["mean_s"] = Times::mean(t.wall);
  st.counters["tok_per_s"] = double(tokens) / best;
  st.counters["GFLOPps"] = gflop / best;
  st.counters["pct_peak"] = 100 * gflop / best / gemm_peak().wall;
  st.counters["cpu_s"] = best_cpu;
  st.counters["cpu_tok_per_s"] = double(tokens) / best_cpu;
  st.counters["threads"] = uocr_bench::omp_threads();
}

// A decoder past the base prompt's prefill with its R-SWA ring full (the steady state of
// decoding): the next token to feed and its position.
struct SteadyDecode {
  const uocr::DecoderConfig& d;
  uocr::Decoder dec;
  uocr::KvCache cache;
  int64_t pos = 0;
  int32_t tok = 0;

  explicit SteadyDecode(const LoadedModel& m)
      : d(m.config().decoder), dec(d, m.weights().decoder), cache(d, decode_window()) {
    int64_t tokens = 0;
    const std::vector<float> emb = prompt_embeddings(dec, &tokens);
    pos = tokens;
    tok = argmax(dec.prefill(emb, 0, cache));
    for (int i = 0; i < cache.window() + 2; ++i) tok = argmax(dec.decode_step(tok, pos++, cache));
  }
};

void BM_DecodeStep(benchmark::State& st) {
  if (!ready(st)) return;
  SteadyDecode sd(*fixture().model);
  Times t;
  for (auto _ : st) {
    const std::vector<float>* l = nullptr;
    t.time([&] { l = &sd.dec.decode_step(sd.tok, sd.pos++, sd.cache); });
    st.PauseTiming();
    sd.tok = argmax(*l);
    st.ResumeTiming();
  }
  const int64_t kv_rows = sd.cache.reference_rows() + sd.cache.generated_rows();
  const uocr_bench::DecodeBytes b =
      uocr_bench::decode_bytes(sd.d, uocr_bench::ElementBytes::of(fixture().model->weights().decoder), kv_rows);
  const uocr_bench::Rate bw = bandwidth();
  const double roof_ms = b.total() / (bw.wall * 1e9) * 1e3, roof_cpu_ms = b.total() / (bw.cpu * 1e9) * 1e3;
  const double ms = Times::median(t.wall) * 1e3, cpu_ms = Times::median(t.cpu) * 1e3;
  st.counters["ms_per_token"] = ms;  // median: robust to the other tenants' bursts
  st.counters["mean_ms"] = Times::mean(t.wall) * 1e3;
  st.counters["best_ms"] = Times::min(t.wall) * 1e3;
  st.counters["roofline_ms"] = roof_ms;
  st.counters["pct_roofline"] = 100 * roof_ms / ms;
  st.counters["cpu_ms"] = cpu_ms;
  st.counters["cpu_pct_roofline"] = 100 * roof_cpu_ms / cpu_ms;
  st.counters["eff_GBps"] = b.total() / (ms / 1e3) / 1e9;
  st.counters["weight_MB"] = b.weights() / 1e6;
  st.counters["kv_MB"] = b.kv / 1e6;
  st.counters["kv_rows"] = double(kv_rows);
  st.counters["threads"] = uocr_bench::omp_threads();
}

void BM_DraftVerify(benchmark::State& st) {
  if (!ready(st)) return;
  SteadyDecode sd(*fixture().model);
  const int64_t rows = st.range(0) + 1;
  std::mt19937 rng(1);
  std::vector<int32_t> pass(static_cast<size_t>(rows));
  std::vector<float> rows_logits(static_cast<size_t>(rows * sd.d.vocab));
  Times step, verify;
  for (auto _ : st) {
    // Both forget their tokens afterwards (the ring keeps its size), so every pass sees the same cache.
    step.time([&] { sd.dec.decode_step(sd.tok, sd.pos, sd.cache); });
    sd.cache.unclaim(1);
    for (int32_t& t : pass) t = int32_t(rng() % uint32_t(sd.d.vocab));
    verify.time([&] { sd.dec.decode_tokens(pass.data(), rows, sd.pos, sd.cache, rows_logits.data()); });
    sd.cache.unclaim(rows);
  }
  const double step_ms = Times::median(step.wall) * 1e3, verify_ms = Times::median(verify.wall) * 1e3;
  st.counters["step_ms"] = step_ms;
  st.counters["verify_ms"] = verify_ms;
  st.counters["verify_over_step"] = verify_ms / step_ms;
  st.counters["cpu_verify_over_step"] = Times::median(verify.cpu) / Times::median(step.cpu);
  st.counters["threads"] = uocr_bench::omp_threads();
}

// The decoder proposal in numbers: a MoE layer's decode FFN (6 routed experts + the shared
// expert, m = 1) as the 21 separate linear() calls moe_forward makes, against the same
// products in two linear_batch() calls (all gate+up, then all down). Same bytes, same results.
// Successive iterations walk through the MoE layers so the weights come from DRAM (11 x 55 MB
// exceeds the L3), as in a real decode step.
void BM_MoeLayerDecode(benchmark::State& st) {
  if (!ready(st)) return;
#ifndef UOCR_CPU_LINEAR_BATCH
  st.SkipWithError("this linear.hpp has no linear_batch (baseline build)");
#else
  const LoadedModel& m = *fixture().model;
  const uocr::DecoderConfig& d = m.config().decoder;
  std::vector<std::vector<const uocr::MlpWeights*>> layers;
  for (const uocr::DecoderLayerWeights& lw : m.weights().decoder.layers) {
    if (!lw.moe) continue;
    std::vector<const uocr::MlpWeights*> mlps;
    for (int e = 0; e < d.experts_per_token; ++e) mlps.push_back(&lw.experts[size_t(e)]);
    if (lw.has_shared) mlps.push_back(&lw.shared);
    layers.push_back(mlps);
  }
  if (layers.empty()) {
    st.SkipWithError("the model has no MoE layer");
    return;
  }
  const int64_t hidden = d.hidden;
  const std::vector<float> x(size_t(hidden), 0.01f);
  const size_t n_mlp = layers[0].size();
  std::vector<std::vector<float>> gate(n_mlp), up(n_mlp), down(n_mlp, std::vector<float>(size_t(hidden)));
  for (size_t i = 0; i < n_mlp; ++i) {
    gate[i].resize(size_t(layers[0][i]->gate.out()));
    up[i].resize(size_t(layers[0][i]->up.out()));
  }
  double bytes = 0;
  for (const auto* p : layers[0])
    for (const uocr::LinearWeights* l : {&p->gate, &p->up, &p->down}) bytes += double(l->weight->numel()) * 2;
  auto separate = [&](const std::vector<const uocr::MlpWeights*>& mlps) {
    for (size_t i = 0; i < mlps.size(); ++i) {
      uocr::cpu::linear(x.data(), 1, mlps[i]->gate, gate[i].data());
      uocr::cpu::linear(x.data(), 1, mlps[i]->up, up[i].data());
      uocr::cpu::linear(gate[i].data(), 1, mlps[i]->down, down[i].data());
    }
  };
  auto batched = [&](const std::vector<const uocr::MlpWeights*>& mlps) {
    std::vector<uocr::cpu::LinearJob> jobs;
    for (size_t i = 0; i < mlps.size(); ++i) {
      jobs.push_back({x.data(), 1, mlps[i]->gate.weight, nullptr, gate[i].data()});
      jobs.push_back({x.data(), 1, mlps[i]->up.weight, nullptr, up[i].data()});
    }
    uocr::cpu::linear_batch(jobs.data(), jobs.size());
    jobs.clear();
    for (size_t i = 0; i < mlps.size(); ++i) jobs.push_back({gate[i].data(), 1, mlps[i]->down.weight, nullptr, down[i].data()});
    uocr::cpu::linear_batch(jobs.data(), jobs.size());
  };
  for (const auto& l : layers) separate(l);  // fault every layer in
  Times ts, tb;
  size_t it = 0;
  for (auto _ : st) {
    ts.time([&] { separate(layers[it % layers.size()]); });
    tb.time([&] { batched(layers[(it + layers.size() / 2) % layers.size()]); });
    ++it;
  }
  const double sep = Times::median(ts.wall), bat = Times::median(tb.wall);
  st.counters["MB"] = bytes / 1e6;
  st.counters["separate_ms"] = sep * 1e3;
  st.counters["batched_ms"] = bat * 1e3;
  st.counters["separate_cpu_ms"] = Times::median(ts.cpu) * 1e3;
  st.counters["batched_cpu_ms"] = Times::median(tb.cpu) * 1e3;
  st.counters["speedup"] = sep / bat;
  st.counters["threads"] = uocr_bench::omp_threads();
#endif
}

void print_setup() {
  double load[3] = {0, 0, 0};
  getloadavg(load, 3);
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  std::fprintf(stderr, "uocr bench: %d OpenMP thread(s), OMP_WAIT_POLICY=%s, load average %.2f %.2f %.2f\n",
               uocr_bench::omp_threads(), policy ? policy : "(unset: libgomp spins, then sleeps)", load[0], load[1],
               load[2]);
  if (!policy && load[0] > uocr_bench::omp_threads())
    std::fprintf(stderr,
                 "uocr bench: the machine is oversubscribed; with spinning barriers the wall times mostly measure "
                 "that (see docs/PERFORMANCE.md: OMP_WAIT_POLICY=passive)\n");
  Fixture& f = fixture();
  if (!f.why.empty()) {
    std::fprintf(stderr, "uocr bench: model cases skipped: %s\n", f.why.c_str());
    return;
  }
  const uocr::ModelConfig& cfg = f.model->config();
  const uocr_bench::EncoderFlops fl = uocr_bench::encoder_flops(cfg, f.view_size);
  std::fprintf(stderr,
               "uocr bench: model %s; page %s\n"
               "  encoder FLOPs per %d view: %.1f G (SAM linear %.1f, SAM attention %.1f, SAM convs %.1f, "
               "CLIP linear %.1f, CLIP attention %.1f, projector %.1f)\n",
               f.model->dir.c_str(), f.image.c_str(), f.view_size, fl.total() / 1e9, fl.sam_linear / 1e9,
               fl.sam_attention / 1e9, fl.sam_conv / 1e9, fl.clip_linear / 1e9, fl.clip_attention / 1e9,
               fl.projector / 1e9);
  const uocr::DecoderConfig& d = cfg.decoder;
  const int64_t prompt_rows = 1 + (int64_t(f.view_size) / 64) * (f.view_size / 64 + 1) + 1 + 3;
  const uocr_bench::DecodeBytes b = uocr_bench::decode_bytes(d, uocr_bench::ElementBytes::of(f.model->weights().decoder),
                                                             prompt_rows + decode_window());
  std::fprintf(stderr,
               "  decode bytes per token (the model's weight types): attention %.1f MB, dense MLP %.1f MB, routers %.2f MB, "
               "routed experts %.1f MB, shared experts %.1f MB, lm_head %.1f MB = %.1f MB weights (%.0f bytes)\n"
               "  + float32 KV of ~%lld rows x %d layers: %.1f MB\n",
               b.attention / 1e6, b.dense_mlp / 1e6, b.router / 1e6, b.experts / 1e6, b.shared / 1e6, b.lm_head / 1e6,
               b.weights() / 1e6, b.weights(), (long long)(prompt_rows + decode_window()), d.layers, b.kv / 1e6);
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  using benchmark::kMillisecond;
  using benchmark::kSecond;
  benchmark::RegisterBenchmark("BM_GemmPeak", BM_GemmPeak)->Iterations(1)->Unit(kMillisecond)->UseRealTime();
  benchmark::RegisterBenchmark("BM_ReadBandwidth", BM_ReadBandwidth)->Iterations(1)->Unit(kMillisecond)->UseRealTime();
  benchmark::RegisterBenchmark("BM_Encoder1024", BM_Encoder1024)
      ->Iterations(env_int("UOCR_BENCH_ENCODER_ITERS", 3))->Unit(kSecond)->UseRealTime();
  benchmark::RegisterBenchmark("BM_EncoderStages", BM_EncoderStages)->Iterations(1)->Unit(kSecond)->UseRealTime();
  benchmark::RegisterBenchmark("BM_Prefill", BM_Prefill)
      ->Iterations(env_int("UOCR_BENCH_PREFILL_ITERS", 3))->Unit(kSecond)->UseRealTime();
  benchmark::RegisterBenchmark("BM_DecodeStep", BM_DecodeStep)
      ->Iterations(env_int("UOCR_BENCH_DECODE_STEPS", 32))->Unit(kMillisecond)->UseRealTime();
  benchmark::RegisterBenchmark("BM_MoeLayerDecode", BM_MoeLayerDecode)->Iterations(44)->Unit(kMillisecond)->UseRealTime();
  benchmark::RegisterBenchmark("BM_DraftVerify", BM_DraftVerify)
      ->Arg(4)->Arg(8)->Arg(16)->Iterations(env_int("UOCR_BENCH_DECODE_STEPS", 32) / 2)->Unit(kMillisecond)->UseRealTime();
  print_setup();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
