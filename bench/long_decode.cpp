// Long decoding, R-SWA against full attention, in one run: the KV bytes held and the time of a
// decode step after 256, 1k, 4k, 16k and 32k generated tokens.
//
//   python3 bench/long_decode_model.py --out /tmp/uocr-long      # once: ~1 GB random weights
//   meson setup BUILD -Dbench=true && ninja -C BUILD bench/long_decode
//   OMP_WAIT_POLICY=passive BUILD/bench/long_decode --model /tmp/uocr-long --out long_decode.json
//   python3 bench/long_decode_plot.py long_decode.json docs/img/long_decode.png
//
// How a state of k generated tokens is reached. Decoding 32k tokens one by one would take hours
// at this size (and full attention's steps grow), so each cache is fast-forwarded: the prompt is
// prefilled for real (BOS + 273 visual tokens + 3 text tokens, random visual embeddings), then
// KvCache::claim_slot() takes the slot of every skipped token exactly as a decode step would
// (R-SWA: appended until P + n, then the oldest slot overwritten; full: the generated region
// grows) and the slot is filled with a real key/value row copied from the reference. The cache
// then holds what it would after k tokens: P reference rows plus min(k, n) (R-SWA) or k (full)
// generated rows, and the next position is P + k. What is timed is Decoder::decode_step at that
// state: every weight, every held KV row, RoPE at the true position. Only the values in the
// skipped rows differ from a real run's, and the step's work does not depend on them (no mask,
// no data-dependent branch; the MoE may route to other experts, but always 6 of the same size).
//
// At each point each mode runs `--warmup` untimed steps (the full cache reallocates when it
// passes a power of two) and then `--steps` timed steps back to back, as a session would; the
// greedy token of each step feeds the next. The modes are not interleaved step by step: a
// full-attention step at 16k streams ~0.7 GB of KV through the caches and the R-SWA step after
// it would pay for that (docs/PERFORMANCE.md), which is not R-SWA's cost. Reported per point
// and mode: the KV bytes (the cache's own accounting) and the median wall and calling-thread CPU
// milliseconds of a step (see docs/PERFORMANCE.md for why both).
//
// On a shared machine the load changes between the points, minutes apart. So R-SWA is also timed
// against a twin: a second R-SWA cache fast-forwarded to the first point (256) only, stepped
// alternately with the R-SWA cache of the current point, in the same seconds. Their ratio
// ("paired") is R-SWA's own growth; the plain ratio of the points' medians is reported as well.
//
// The published config's max_position_embeddings is 32768; the position limit is widened on
// purpose to reach 32k generated tokens after the prompt (RoPE at a larger position costs the same).
//
// Options: --model DIR (/tmp/uocr-long), --out FILE (JSON), --points 256,1024,4096,16384,32768,
// --steps 32, --warmup 2, --window 128.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "roofline.hpp"
#include "uocr/decoder/decoder.hpp"
#include "uocr/decoder/kv_cache.hpp"
#include "uocr/model/model.hpp"

namespace {

using uocr_bench::seconds_since;
using uocr_bench::thread_cpu_seconds;
using Clock = std::chrono::steady_clock;

struct Options {
  std::string model = "/tmp/uocr-long";
  std::string out;  // JSON file; empty: stdout only
  std::vector<int64_t> points = {256, 1024, 4096, 16384, 32768};
  int window = 128;
  int steps = 32;
  int warmup = 2;
};

std::vector<int64_t> parse_points(const std::string& s) {
  std::vector<int64_t> v;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) {
    const long long k = std::atoll(item.c_str());
    if (k <= 0) throw std::runtime_error("--points wants positive token counts, got '" + item + "'");
    v.push_back(k);
  }
  if (v.empty() || !std::is_sorted(v.begin(), v.end()))
    throw std::runtime_error("--points wants increasing token counts");
  return v;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      return argv[++i];
    };
    auto positive = [&](const std::string& v) {
      const int n = std::atoi(v.c_str());
      if (n <= 0) throw std::runtime_error(a + " wants a positive number, got '" + v + "'");
      return n;
    };
    if (a == "--model") o.model = value();
    else if (a == "--out") o.out = value();
    else if (a == "--points") o.points = parse_points(value());
    else if (a == "--window") o.window = positive(value());
    else if (a == "--steps") o.steps = positive(value());
    else if (a == "--warmup") o.warmup = std::max(0, std::atoi(value().c_str()));
    else throw std::runtime_error("unknown argument " + a + " (see the comment at the top of bench/long_decode.cpp)");
  }
  return o;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One attention mode: its cache, its decoder (own scratch) and where its sequence stands.
struct Mode {
  const char* name;
  uocr::Decoder decoder;
  uocr::KvCache cache;
  int64_t position = 0;
  int32_t token = 0;
  std::vector<double> wall, cpu;  // of the timed steps at the current point

  Mode(const char* n, const uocr::Model& m, int window) : name(n), decoder(m.config().decoder, m.weights().decoder),
                                                          cache(m.config().decoder, window) {}

  void prefill(const std::vector<float>& prompt) {
    const std::vector<float> logits = decoder.prefill(prompt, 0, cache);
    position = cache.reference_rows();
    token = argmax(logits);
  }

  // Claims the slots of tokens up to `generated`, filling each with a reference row (see the top).
  void fast_forward(int64_t generated) {
    const int64_t row = cache.row_floats(), ref = cache.reference_rows();
    while (cache.generated_tokens() < generated) {
      const int64_t from = cache.generated_tokens() % ref;
      const int64_t slot = cache.claim_slot();
      for (int l = 0; l < cache.layers(); ++l) {
        std::memcpy(cache.generated_k(l) + slot * row, cache.reference_k(l) + from * row, size_t(row) * sizeof(float));
        std::memcpy(cache.generated_v(l) + slot * row, cache.reference_v(l) + from * row, size_t(row) * sizeof(float));
      }
      ++position;
    }
  }

  void step(bool timed) {
    const auto t0 = Clock::now();
    const double c0 = thread_cpu_seconds();
    const std::vector<float>& logits = decoder.decode_step(token, position++, cache);
    if (timed) {
      wall.push_back(seconds_since(t0));
      cpu.push_back(thread_cpu_seconds() - c0);
    }
    token = argmax(logits);
  }

  static int32_t argmax(const std::vector<float>& logits) {
    return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
};

nlohmann::json kv_json(const uocr::KvCache& c) {
  return {{"reference_bytes", c.reference_bytes()}, {"window_bytes", c.window_bytes()},
          {"kv_bytes", c.total_bytes()}, {"allocated_bytes", c.allocated_bytes()},
          {"generated_rows", c.generated_rows()}};
}

std::vector<double> load_average() {
  double l[3] = {0, 0, 0};
  getloadavg(l, 3);
  return {l[0], l[1], l[2]};
}

int run(const Options& o) {
  const auto model = uocr::Model::load(o.model);
  const uocr::DecoderConfig& d = model->config().decoder;
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  nlohmann::json out;
  out["model"] = {{"dir", o.model}, {"layers", d.layers}, {"hidden", d.hidden}, {"heads", d.heads},
                  {"kv_heads", d.kv_heads}, {"head_dim", d.head_dim}, {"vocab", d.vocab},
                  {"routed_experts", d.n_routed_experts}, {"experts_per_token", d.experts_per_token}};
  out["omp_threads"] = uocr_bench::omp_threads();
  out["omp_wait_policy"] = policy ? policy : "";
  out["load_average_start"] = load_average();
  out["window"] = o.window;
  out["steps"] = o.steps;
  out["warmup"] = o.warmup;
  std::fprintf(stderr, "long_decode: %s, %d layers, %d threads, OMP_WAIT_POLICY=%s, load %.2f\n", o.model.c_str(),
               d.layers, uocr_bench::omp_threads(), policy ? policy : "(unset)",
               out["load_average_start"][0].get<double>());

  // The base single-page prompt's length: BOS + 273 visual tokens + "document parsing." (3 tokens).
  constexpr int64_t prompt_tokens = 1 + 273 + 3;
  std::vector<float> prompt(size_t(prompt_tokens * d.hidden));
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  for (float& x : prompt) x = normal(rng);

  Mode rswa("rswa", *model, o.window), full("full", *model, 0), twin("rswa_twin", *model, o.window);
  const int64_t last_position = prompt_tokens + o.points.back() + o.warmup + o.steps;
  for (Mode* m : {&rswa, &full, &twin}) {
    if (last_position > d.max_positions) m->decoder.set_position_limit(last_position);
    m->prefill(prompt);
  }
  out["prompt_tokens"] = prompt_tokens;
  out["bytes_per_token"] = rswa.cache.bytes_per_token();
  twin.fast_forward(o.points.front());

  std::printf("%9s | %12s %10s %10s %7s %7s | %12s %10s %10s\n", "generated", "rswa KV MB", "wall ms", "cpu ms",
              "/twin", "cpu", "full KV MB", "wall ms", "cpu ms");
  for (int64_t k : o.points) {
    nlohmann::json point = {{"generated", k}};
    for (Mode* m : {&rswa, &full}) {
      m->fast_forward(k);
      point[m->name] = kv_json(m->cache);  // the state the first step runs in
    }
    point[twin.name] = kv_json(twin.cache);
    point[twin.name]["generated"] = twin.cache.generated_tokens();
    for (Mode* m : {&rswa, &full, &twin}) {
      m->wall.clear();
      m->cpu.clear();
    }
    for (int s = 0; s < o.warmup + o.steps; ++s) {
      twin.step(s >= o.warmup);
      rswa.step(s >= o.warmup);
    }
    for (int s = 0; s < o.warmup + o.steps; ++s) full.step(s >= o.warmup);
    for (Mode* m : {&rswa, &full, &twin}) {
      nlohmann::json& j = point[m->name];
      j["wall_ms"] = median(m->wall) * 1e3;
      j["cpu_ms"] = median(m->cpu) * 1e3;
      j["wall_ms_min"] = *std::min_element(m->wall.begin(), m->wall.end()) * 1e3;
      j["kv_bytes_after"] = m->cache.total_bytes();
    }
    point["rswa"]["paired_wall_ratio"] = point["rswa"]["wall_ms"].get<double>() / point[twin.name]["wall_ms"].get<double>();
    point["rswa"]["paired_cpu_ratio"] = point["rswa"]["cpu_ms"].get<double>() / point[twin.name]["cpu_ms"].get<double>();
    std::printf("%9lld | %12.2f %10.1f %10.1f %7.3f %7.3f | %12.2f %10.1f %10.1f\n", (long long)k,
                point["rswa"]["kv_bytes"].get<double>() / 1e6, point["rswa"]["wall_ms"].get<double>(),
                point["rswa"]["cpu_ms"].get<double>(), point["rswa"]["paired_wall_ratio"].get<double>(),
                point["rswa"]["paired_cpu_ratio"].get<double>(), point["full"]["kv_bytes"].get<double>() / 1e6,
                point["full"]["wall_ms"].get<double>(), point["full"]["cpu_ms"].get<double>());
    std::fflush(stdout);
    out["points"].push_back(point);
  }
  out["load_average_end"] = load_average();

  // The targets, from this run alone.
  const nlohmann::json& first = out["points"].front();
  const nlohmann::json& last = out["points"].back();
  // From P + n on, every R-SWA figure is exactly (P + n) rows.
  const size_t ring_full = size_t(prompt_tokens + o.window) * rswa.cache.bytes_per_token();
  int64_t compared = 0;
  bool constant = true;
  for (const nlohmann::json& p : out["points"]) {
    if (p["generated"].get<int64_t>() < o.window) continue;
    ++compared;
    constant = constant && p["rswa"]["kv_bytes"] == ring_full && p["rswa"]["kv_bytes_after"] == ring_full &&
               (p["rswa_twin"]["generated"].get<int64_t>() < o.window || p["rswa_twin"]["kv_bytes"] == ring_full);
  }
  constant = constant && compared > 0;
  nlohmann::json& t = out["targets"];
  t["rswa_kv_bytes_identical"] = constant;
  t["rswa_step_ratio_wall"] = last["rswa"]["wall_ms"].get<double>() / first["rswa"]["wall_ms"].get<double>();
  t["rswa_step_ratio_cpu"] = last["rswa"]["cpu_ms"].get<double>() / first["rswa"]["cpu_ms"].get<double>();
  t["rswa_paired_ratio_wall"] = last["rswa"]["paired_wall_ratio"];
  t["rswa_paired_ratio_cpu"] = last["rswa"]["paired_cpu_ratio"];
  t["full_step_ratio_wall"] = last["full"]["wall_ms"].get<double>() / first["full"]["wall_ms"].get<double>();
  t["full_step_ratio_cpu"] = last["full"]["cpu_ms"].get<double>() / first["full"]["cpu_ms"].get<double>();
  t["full_kv_ratio"] = last["full"]["kv_bytes"].get<double>() / first["full"]["kv_bytes"].get<double>();
  std::printf("R-SWA KV bytes identical at every point from P + n on: %s; step time %lld / %lld tokens: R-SWA %.3f (cpu %.3f), "
              "paired with the twin %.3f (cpu %.3f), full %.2f (cpu %.2f); full KV x%.1f; load %.2f -> %.2f\n",
              constant ? "yes" : "NO", (long long)last["generated"].get<int64_t>(),
              (long long)first["generated"].get<int64_t>(), t["rswa_step_ratio_wall"].get<double>(),
              t["rswa_step_ratio_cpu"].get<double>(), t["rswa_paired_ratio_wall"].get<double>(),
              t["rswa_paired_ratio_cpu"].get<double>(), t["full_step_ratio_wall"].get<double>(),
              t["full_step_ratio_cpu"].get<double>(), t["full_kv_ratio"].get<double>(),
              out["load_average_start"][0].get<double>(), out["load_average_end"][0].get<double>());
  if (!o.out.empty()) {
    std::ofstream f(o.out);
    f << out.dump(2) << "\n";
    if (!f) throw std::runtime_error("cannot write " + o.out);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "long_decode: %s\n", e.what());
    return 1;
  }
}
