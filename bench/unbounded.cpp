// Unbounded documents (issue 4, "Measures"): peak memory from 1 to 3,600 pages in four decoding
// modes, SR-SWA attention time per decode step against dense R-SWA, and the logits deviation
// that SR-SWA budgets and page-group sizes cost. Synthetic pages (N(0,1) visual embeddings) go
// through the golden tiny-a decoder (the real layout at toy width), driven by teacher-forced
// token streams with "<PAGE>" markers, so page groups slide without a trained model.
// Results, machine state and commands: docs/PERFORMANCE.md, "Unbounded documents: memory and
// SR-SWA"; plots: bench/unbounded_plot.py. A benchmark, not a test: it measures, it asserts only
// that the run did what it says (pages reached, sizes consistent).
//
//   unbounded memory    [--pages 1,10,100,1000,3600] [--modes full,oneshot,infinite,sparse[,grouped]]
//                       [--tokens-per-page 64] [--max-oneshot-pages 100] [--out memory.json]
//       Each (mode, pages) runs in a fresh process (this binary re-executed as `unbounded case`),
//       so the process's max RSS is that configuration's alone. The one-shot modes past
//       --max-oneshot-pages are not run (the prefill is quadratic in the prompt length and every
//       step reads every row: hours at 1,000 pages on 2 cores); their peak comes from the KV
//       accounting formula instead, marked "formula", never measured.
//   unbounded case MODE PAGES [--tokens-per-page 64] [--max-steps N]
//       one configuration, one JSON line on stdout; --max-steps stops the stream early
//   unbounded step      [--pages 10,100,1000,3600] [--dims tiny-a,real] [--gate FAN_OUT,BEAM] [--cap-gb 4] [--cold 1]
//                       [--out step.json]
//       SR-SWA (default budgets and gate tree) against dense R-SWA over the same reference; at the
//       real width 3,600 pages hold 10 GB of K+V (one layer, cycled) + 0.7 GB of summaries;
//       --cold 0 keeps the caches between calls (see CacheEvictor)
//   unbounded deviation [--pages 12] [--out deviation.json]
//
// Modes: full (full causal attention over the one-shot prompt: the generated KV grows), oneshot
// (R-SWA with window 128 over the one-shot prompt: the reference holds every page), infinite
// (page groups, G = 4, O = 3), sparse (infinite + SR-SWA, default budgets), grouped (infinite with
// group positions: each group at a 4-page document's positions, re-based by key rotation).
// Environment: UOCR_BENCH_SHARED_DIR overrides the folder holding golden/ and unlimited-ocr/.
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "uocr/decoder/attention.hpp"
#include "uocr/decoder/decoder.hpp"
#include "uocr/decoder/kv_cache.hpp"
#include "uocr/decoder/page_groups.hpp"
#include "uocr/decoder/sparse_reference.hpp"
#include "uocr/io/npy.hpp"
#include "uocr/model/checkpoint.hpp"
#include "uocr/model/config.hpp"
#include "uocr/model/weights.hpp"
#include "uocr/session/session.hpp"
#include "uocr/tokenizer/tokenizer.hpp"

#ifndef UOCR_BENCH_SHARED_DIR
#define UOCR_BENCH_SHARED_DIR "../shared"
#endif

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr int kWindow = 128;  // R-SWA window n of the real model (unlimited-ocr sliding_window)

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string shared_dir() {
  const char* env = std::getenv("UOCR_BENCH_SHARED_DIR");
  return env && *env ? env : UOCR_BENCH_SHARED_DIR;
}

std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

// kB of a /proc/self/status field (VmHWM: peak resident set, the same as getrusage's ru_maxrss).
long status_kb(const std::string& field) {
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.compare(0, field.size() + 1, field + ":") == 0) return std::atol(line.c_str() + field.size() + 1);
  return -1;
}

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(std::stoll(item));
  return out;
}

std::vector<std::string> parse_words(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) out.push_back(item);
  return out;
}

// --name value options after the positional arguments.
struct Options {
  std::map<std::string, std::string> values;
  std::vector<std::string> positional;
  Options(int argc, char** argv, int first) {
    for (int i = first; i < argc; ++i) {
      const std::string a = argv[i];
      if (a.rfind("--", 0) == 0) {
        uocr::require(i + 1 < argc, uocr::Status::invalid_argument, [&] { return "option " + a + " needs a value"; });
        values[a.substr(2)] = argv[++i];
      } else {
        positional.push_back(a);
      }
    }
  }
  std::string get(const std::string& name, const std::string& fallback) const {
    const auto it = values.find(name);
    return it == values.end() ? fallback : it->second;
  }
};

void write_json(const json& j, const std::string& path) {
  if (path.empty()) return;
  std::ofstream f(path);
  uocr::require(bool(f), uocr::Status::io, [&] { return "cannot write " + path; });
  f << j.dump(1) << "\n";
  std::fprintf(stderr, "wrote %s\n", path.c_str());
}

// The golden tiny-a model (decoder only) with its one-shot prompt and its 300 reference tokens.
struct TinyModel {
  std::string dir = shared_dir() + "/golden/tiny-a";
  uocr::ModelConfig cfg = uocr::ModelConfig::load(dir + "/config.json");
  uocr::Checkpoint ck = uocr::Checkpoint::open(dir);
  uocr::ModelWeights w = uocr::ModelWeights::bind(ck, cfg);
  uocr::Tokenizer tok = uocr::Tokenizer::load(dir + "/tokenizer.json");
  std::vector<float> vision = uocr::read_npy(dir + "/vision_tokens.npy").to_f32();  // one page [273, hidden]
  uocr::DocumentLayout layout;  // head and tail of the prompt, page_tokens; pages set per run
  std::vector<int32_t> text;    // the reference generated ids without EOS: filler for streams
  std::vector<int32_t> marker = tok.encode("<PAGE>");

  TinyModel() {
    const std::vector<int64_t> ids = uocr::read_npy(dir + "/input_ids.npy").to_i64();
    const auto first = std::find(ids.begin(), ids.end(), int64_t(uocr::kImageTokenId));
    const auto last = std::find_if(first, ids.end(), [](int64_t t) { return t != uocr::kImageTokenId; });
    layout.head.assign(ids.begin(), first);
    layout.tail.assign(last, ids.end());
    layout.page_tokens = int64_t(last - first);
    for (int64_t id : uocr::read_npy(dir + "/gen_ids.npy").to_i64())
      if (id != cfg.decoder.eos_id) text.push_back(int32_t(id));
    uocr::require(layout.page_tokens * cfg.decoder.hidden == int64_t(vision.size()) && !text.empty() && !marker.empty(),
                  uocr::Status::invalid_model, "tiny-a golden files do not fit together");
  }
  const uocr::DecoderConfig& dc() const { return cfg.decoder; }
  uocr::DocumentLayout document(int64_t pages) const {
    uocr::DocumentLayout l = layout;
    l.pages = pages;
    return l;
  }
};

// Teacher-forced output of a document: each page's share opens with "<PAGE>" and is filled with
// the reference text (cycled), `per_page` tokens per page. Made on the fly: never the whole stream.
class PagedStream {
 public:
  PagedStream(const TinyModel& m, int64_t pages, int64_t per_page) : m_(m), pages_(pages), per_page_(per_page) {
    uocr::require(per_page_ > int64_t(m.marker.size()), uocr::Status::invalid_argument, [&] {
      return "tokens per page must exceed the " + std::to_string(m.marker.size()) + " tokens of <PAGE>";
    });
  }
  int64_t size() const { return pages_ * per_page_; }
  int32_t at(int64_t i) const {
    const int64_t j = i % per_page_;
    if (j < int64_t(m_.marker.size())) return m_.marker[size_t(j)];
    const int64_t filler = i / per_page_ * (per_page_ - int64_t(m_.marker.size())) + j - int64_t(m_.marker.size());
    return m_.text[size_t(filler) % m_.text.size()];
  }

 private:
  const TinyModel& m_;
  int64_t pages_, per_page_;
};

// Random visual embeddings of page p (deterministic per page), the scale of real ones.
void random_page(int64_t p, int64_t tokens, int64_t hidden, std::vector<float>& out) {
  std::mt19937 rng(uint32_t(1000 + p));
  std::normal_distribution<float> nd(0.f, 1.f);
  out.resize(size_t(tokens * hidden));
  for (float& v : out) v = nd(rng);
}

// ---------------------------------------------------------------------------------------------
// memory: one configuration per process

const std::vector<std::string> kModes = {"full", "oneshot", "infinite", "sparse", "grouped"};

uocr::PageGroupParams group_params(const std::string& mode) {
  uocr::PageGroupParams pp;  // G = 4, O = 3, SR-SWA default budgets
  pp.group_positions = mode == "grouped";
  pp.allow_position_extrapolation = !pp.group_positions;
  pp.sparse = mode == "sparse";
  return pp;
}

// KV rows held at the peak of a run, by the KV cache's accounting (reference + generated rows).
int64_t peak_rows(const std::string& mode, const uocr::DocumentLayout& l, int64_t generated) {
  const int64_t group = group_params(mode).group_pages;
  const int64_t head_tail = int64_t(l.head.size() + l.tail.size());
  if (mode == "full") return l.prompt_length() + generated;
  if (mode == "oneshot") return l.prompt_length() + std::min<int64_t>(generated, kWindow);
  return head_tail + std::min(group, l.pages) * l.page_tokens + std::min<int64_t>(generated, kWindow);
}

size_t kv_bytes_per_token(const uocr::DecoderConfig& c) { return size_t(2) * c.kv_heads * c.head_dim * sizeof(float) * c.layers; }

// max_steps >= 0 stops the stream early (one-shot R-SWA past the window: its KV no longer changes).
json run_case(const std::string& mode, int64_t pages, int64_t per_page, int64_t max_steps) {
  uocr::require(std::find(kModes.begin(), kModes.end(), mode) != kModes.end(), uocr::Status::invalid_argument,
                [&] { return "unknown mode " + mode + " (full, oneshot, infinite, sparse, grouped)"; });
  uocr::require(pages >= 1, uocr::Status::invalid_argument, "pages must be >= 1");
  const std::string load_start = load_average();
  const TinyModel m;
  const long rss_loaded_kb = status_kb("VmHWM");
  const uocr::DocumentLayout L = m.document(pages);
  const PagedStream stream(m, pages, per_page);
  const int64_t steps = max_steps >= 0 ? std::min(max_steps, stream.size()) : stream.size();
  const int64_t hidden = m.dc().hidden;
  uocr::PageClock clock(0);  // markers only: the stream has one per page

  json r = {{"mode", mode}, {"pages", pages}, {"tokens_per_page", per_page}, {"steps", steps}, {"stream_steps", stream.size()},
            {"source", "measured"}};
  size_t peak = 0, allocated = 0, summaries = 0, page_buffer = 0;
  int64_t reference_rows = 0, slides = 0, last_position = 0;
  double start_s = 0, decode_s = 0, slide_s = 0;
  const auto t_all = Clock::now();
  if (mode == "full" || mode == "oneshot") {
    uocr::Decoder dec(m.dc(), m.w.decoder);
    dec.set_position_limit(uocr::kMaxExtrapolatedPosition);
    uocr::KvCache cache(m.dc(), mode == "full" ? 0 : kWindow);
    {
      std::vector<float> x = dec.embed(L.head), page;
      x.reserve(size_t(L.prompt_length() * hidden));
      for (int64_t p = 0; p < pages; ++p) {
        random_page(p, L.page_tokens, hidden, page);
        x.insert(x.end(), page.begin(), page.end());
      }
      const std::vector<float> tail = dec.embed(L.tail);
      x.insert(x.end(), tail.begin(), tail.end());
      const auto t0 = Clock::now();
      dec.prefill(x, 0, cache);
      start_s = seconds_since(t0);
    }
    reference_rows = cache.reference_rows();
    peak = cache.total_bytes();
    allocated = cache.allocated_bytes();
    const auto t0 = Clock::now();
    for (int64_t i = 0; i < steps; ++i) {
      const int32_t t = stream.at(i);
      clock.feed(m.tok.token_bytes(t));
      last_position = L.prompt_length() + i;
      dec.decode_step(t, last_position, cache);
      peak = std::max(peak, cache.total_bytes());
      allocated = std::max(allocated, cache.allocated_bytes());
    }
    decode_s = seconds_since(t0);
  } else {
    uocr::PageGroupDecoder eng(m.dc(), m.w.decoder, kWindow, group_params(mode));
    uocr::FunctionPageEmbeddings src(pages, [&](int64_t p, std::vector<float>& out) { random_page(p, L.page_tokens, hidden, out); });
    const auto t0 = Clock::now();
    eng.start(L, src);
    start_s = seconds_since(t0);
    reference_rows = eng.cache().reference_rows();
    for (int64_t i = 0; i < steps; ++i) {
      const int32_t t = stream.at(i);
      const auto t1 = Clock::now();
      for (int64_t b = clock.feed(m.tok.token_bytes(t)); b > 0; --b) eng.next_page();
      const auto t2 = Clock::now();
      last_position = std::max(last_position, eng.next_position());
      eng.step(t);
      slide_s += std::chrono::duration<double>(t2 - t1).count();
      decode_s += seconds_since(t2);
      allocated = std::max(allocated, eng.memory().kv_allocated_bytes);
      uocr::require(eng.memory().reference_kv_bytes == size_t(reference_rows) * eng.cache().bytes_per_token(), uocr::Status::internal,
                    "page groups: the reference changed size");
    }
    uocr::require(steps < stream.size() || (eng.current_page() == pages - 1 && src.delivered() == pages), uocr::Status::internal,
                  "the <PAGE> markers did not carry the group through every page");
    peak = eng.memory().peak_kv_bytes;
    summaries = eng.memory().sparse_summary_bytes;
    page_buffer = eng.memory().page_buffer_bytes;
    slides = eng.slides();
  }
  uocr::require(steps < stream.size() || clock.page() == pages - 1, uocr::Status::internal, "the stream's markers did not reach the last page");
  const size_t per_token = kv_bytes_per_token(m.dc());
  uocr::require(peak == size_t(peak_rows(mode, L, steps)) * per_token, uocr::Status::internal,
                "the measured KV peak disagrees with the accounting formula");
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  r["reference_rows"] = reference_rows;
  r["kv_peak_bytes"] = peak;
  r["kv_allocated_bytes"] = allocated;
  r["sparse_summary_bytes"] = summaries;
  r["page_buffer_bytes"] = page_buffer;
  r["slides"] = slides;
  r["last_position"] = last_position;
  r["rss_after_load_kb"] = rss_loaded_kb;
  r["max_rss_kb"] = long(ru.ru_maxrss);
  r["start_seconds"] = start_s;
  r["decode_ms_per_step"] = steps > 0 ? decode_s / double(steps) * 1e3 : 0.0;
  r["slide_seconds"] = slide_s;
  r["wall_seconds"] = seconds_since(t_all);
  r["load_average"] = load_start + " -> " + load_average();
  return r;
}

// The peak the KV accounting gives for a configuration that is not run.
json formula_case(const TinyModel& m, const std::string& mode, int64_t pages, int64_t per_page) {
  const uocr::DocumentLayout L = m.document(pages);
  const int64_t rows = peak_rows(mode, L, pages * per_page);
  return {{"mode", mode},
          {"pages", pages},
          {"tokens_per_page", per_page},
          {"steps", pages * per_page},
          {"source", "formula"},
          {"kv_peak_rows", rows},
          {"kv_peak_bytes", size_t(rows) * kv_bytes_per_token(m.dc())}};
}

std::string self_path() {
  std::vector<char> buf(4096);
  const ssize_t n = readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  uocr::require(n > 0, uocr::Status::io, "cannot find this executable (/proc/self/exe)");
  return std::string(buf.data(), size_t(n));
}

// Runs `unbounded case ...` in a fresh process and returns its JSON line.
json run_child(const std::string& mode, int64_t pages, int64_t per_page) {
  const std::string cmd = "'" + self_path() + "' case " + mode + " " + std::to_string(pages) + " --tokens-per-page " +
                          std::to_string(per_page);
  FILE* p = popen(cmd.c_str(), "r");
  uocr::require(p != nullptr, uocr::Status::io, [&] { return "cannot start " + cmd; });
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int status = pclose(p);
  uocr::require(status == 0 && !out.empty(), uocr::Status::internal, [&] { return cmd + " failed (status " + std::to_string(status) + ")"; });
  return json::parse(out);
}

double mb(double bytes) { return bytes / 1e6; }

int memory_main(const Options& o) {
  const std::vector<int64_t> page_counts = parse_list(o.get("pages", "1,10,100,1000,3600"));
  const std::vector<std::string> modes = parse_words(o.get("modes", "full,oneshot,infinite,sparse"));
  const int64_t per_page = std::stoll(o.get("tokens-per-page", "64"));
  const int64_t max_oneshot = std::stoll(o.get("max-oneshot-pages", "100"));
  const TinyModel m;
  const uocr::DecoderConfig real = uocr::ModelConfig::load(shared_dir() + "/unlimited-ocr/config.json").decoder;
  json all = {{"tokens_per_page", per_page},
              {"window", kWindow},
              {"page_tokens", m.layout.page_tokens},
              {"kv_bytes_per_token", kv_bytes_per_token(m.dc())},
              {"real_kv_bytes_per_token", kv_bytes_per_token(real)},
              {"load_average_start", load_average()},
              {"cases", json::array()}};
  std::printf("peak memory, %lld tokens per page (<PAGE> + text), tiny-a decoder, window %d; load %s\n", (long long)per_page,
              kWindow, load_average().c_str());
  std::printf("%-9s %6s %9s %14s %14s %12s %12s %10s %9s %s\n", "mode", "pages", "steps", "KV peak MB", "KV alloc MB",
              "max RSS MB", "RSS load MB", "ms/step", "wall s", "source");
  for (const std::string& mode : modes)
    for (int64_t pages : page_counts) {
      const bool one_shot = mode == "full" || mode == "oneshot";
      json r = one_shot && pages > max_oneshot ? formula_case(m, mode, pages, per_page) : run_child(mode, pages, per_page);
      const uocr::DocumentLayout L = m.document(pages);
      r["real_kv_peak_bytes_formula"] = size_t(peak_rows(mode, L, pages * per_page)) * kv_bytes_per_token(real);
      const bool measured = r["source"] == "measured";
      auto num = [&](const char* key, double scale) { return measured ? r[key].get<double>() * scale : -1.0; };
      std::printf("%-9s %6lld %9lld %14.3f %14.3f %12.1f %12.1f %10.3f %9.1f %s\n", mode.c_str(), (long long)pages,
                  (long long)(pages * per_page), mb(r["kv_peak_bytes"].get<double>()), num("kv_allocated_bytes", 1e-6),
                  num("max_rss_kb", 1.024e-3), num("rss_after_load_kb", 1.024e-3), num("decode_ms_per_step", 1),
                  num("wall_seconds", 1), measured ? "measured" : "formula (not run: hours here, see --max-oneshot-pages)");
      std::fflush(stdout);
      all["cases"].push_back(r);
    }
  all["load_average_end"] = load_average();
  // The targets, from this run (by the KV accounting, then by max RSS: the whole process).
  auto value_of = [&](const std::string& mode, int64_t pages, const char* key) {
    for (const json& c : all["cases"])
      if (c["mode"] == mode && c["pages"] == pages && c.contains(key)) return c[key].get<double>();
    return -1.0;
  };
  for (const char* key : {"kv_peak_bytes", "max_rss_kb"})
    for (const std::string& mode : {std::string("infinite"), std::string("sparse")}) {
      const double p10 = value_of(mode, 10, key), p3600 = value_of(mode, 3600, key), full100 = value_of("full", 100, key),
                   m100 = value_of(mode, 100, key);
      if (p10 > 0 && p3600 > 0) std::printf("%s %s: at 3600 pages / at 10 pages = %.4f (target <= 1.05)\n", mode.c_str(), key, p3600 / p10);
      if (full100 > 0 && m100 > 0)
        std::printf("%s %s: reduction vs full attention at 100 pages = %.2f%% (target >= 96%%)\n", mode.c_str(), key,
                    100 * (1 - m100 / full100));
    }
  write_json(all, o.get("out", ""));
  return 0;
}

// ---------------------------------------------------------------------------------------------
// step: reference attention time per decode step, SR-SWA vs dense R-SWA over the same reference

// CPU time of this process (every thread): the work done, which the other tenants of a shared
// machine do not inflate the way they inflate wall time.
double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

struct CallTime {
  double wall_ms = 0, cpu_ms = 0;
};

// Streams a buffer of twice the last-level cache before each timed call (untimed): in a real
// decode step the layer's weights (hundreds of MB at the real width) pass through the caches
// between two layers' attention, so a layer's K/V and summaries are never cache-hot. Without it
// a small reference would stay partly in a large L3 and a large one would not.
class CacheEvictor {
 public:
  explicit CacheEvictor(bool on) {
    if (on) buf_.assign(size_t(std::max(sysconf(_SC_LEVEL3_CACHE_SIZE), 32L << 20)) * 2 / sizeof(int64_t), 1);
  }
  void run() {
    int64_t sum = 0;
    for (size_t i = 0; i < buf_.size(); i += 64 / sizeof(int64_t)) sum += buf_[i];
    sink_ = sum;
  }
  size_t bytes() const { return buf_.size() * sizeof(int64_t); }
  bool on() const { return !buf_.empty(); }

 private:
  std::vector<int64_t> buf_;
  volatile int64_t sink_ = 0;
};

// Medians over `rounds` of the time per call (wall and process CPU), each round at least `min_s`
// of timed calls and `min_calls` calls (every layer held at least once); the evictor runs
// between calls, outside the timed spans, and then a round stops at 50 calls (an eviction takes
// far longer than a tiny-a call, whose rounds would otherwise take minutes).
CallTime time_calls(const std::function<void(int64_t)>& call, CacheEvictor& evict, int64_t min_calls, double min_s, int rounds) {
  call(0);
  std::vector<double> wall, cpu;
  int64_t i = 0;
  for (int r = 0; r < rounds; ++r) {
    int64_t n = 0;
    double el = 0, el_cpu = 0;
    do {
      evict.run();
      const auto t0 = Clock::now();
      const double c0 = process_cpu_seconds();
      call(i++);
      el_cpu += process_cpu_seconds() - c0;
      el += seconds_since(t0);
      ++n;
    } while (n < min_calls || (el < min_s && (!evict.on() || n < 50)));
    wall.push_back(el / double(n) * 1e3);
    cpu.push_back(el_cpu / double(n) * 1e3);
  }
  std::sort(wall.begin(), wall.end());
  std::sort(cpu.begin(), cpu.end());
  return {wall[wall.size() / 2], cpu[cpu.size() / 2]};
}

int step_main(const Options& o) {
  const std::vector<int64_t> page_counts = parse_list(o.get("pages", "10,100,1000,3600"));
  const std::vector<std::string> dim_names = parse_words(o.get("dims", "tiny-a,real"));
  const double cap = std::stod(o.get("cap-gb", "4")) * 1e9;
  CacheEvictor evict(o.get("cold", "1") != "0");
  const TinyModel m;
  struct Dims {
    std::string name;
    uocr::DecoderConfig c;
  };
  std::vector<Dims> dims;
  for (const std::string& name : dim_names) {
    uocr::require(name == "tiny-a" || name == "real", uocr::Status::invalid_argument, [&] { return "unknown dims " + name + " (tiny-a, real)"; });
    dims.push_back({name, name == "tiny-a" ? m.dc() : uocr::ModelConfig::load(shared_dir() + "/unlimited-ocr/config.json").decoder});
  }
  uocr::SparseParams sp;  // the defaults: gate 4 pages (tree of fan-out 4, beam 8), 64 blocks of 16
  if (const std::vector<int64_t> gate = parse_list(o.get("gate", "")); !gate.empty()) {
    uocr::require(gate.size() == 2, uocr::Status::invalid_argument, "--gate takes FAN_OUT,BEAM");
    sp.gate_fan_out = int(gate[0]);
    sp.gate_beam = int(gate[1]);
  }
  json all = {{"window", kWindow},
              {"page_tokens", m.layout.page_tokens},
              {"block_tokens", sp.block_tokens},
              {"page_budget", sp.page_budget},
              {"block_budget", sp.block_budget},
              {"gate_fan_out", sp.gate_fan_out},
              {"gate_beam", sp.gate_beam},
              {"cache_evicted_bytes", evict.bytes()},
              {"load_average_start", load_average()},
              {"cases", json::array()}};
  std::printf("reference attention per decode step (all layers), SR-SWA (gate %d pages: tree fan-out %d, beam %d; %d blocks of %d) vs "
              "dense R-SWA over the same reference + window %d; caches evicted between calls: %.0f MB; load %s\n",
              sp.page_budget, sp.gate_fan_out, sp.gate_beam ? sp.gate_beam : 2 * sp.page_budget, sp.block_budget, sp.block_tokens,
              kWindow, mb(double(evict.bytes())), load_average().c_str());
  std::printf("%-7s %6s %9s %7s %19s %19s %14s %10s %6s %7s %11s\n", "dims", "pages", "ref rows", "layers*", "dense ms wall/cpu",
              "SR-SWA ms wall/cpu", "speed-up w/cpu", "rows used", "levels", "bounds+", "summary MB");
  for (const Dims& d : dims)
    for (int64_t pages : page_counts) {
      const uocr::ReferenceLayout layout =
          uocr::one_shot_layout(int64_t(m.layout.head.size()), pages, m.layout.page_tokens, int64_t(m.layout.tail.size()));
      const uocr::AttentionShape s{d.c.heads, d.c.kv_heads, d.c.head_dim};
      const int64_t rows = layout.rows(), kr = s.kv_row();
      const double per_layer = 2.0 * double(rows + kWindow) * double(kr) * sizeof(float);
      // Distinct K/V per layer, as in a real step (a layer's rows are cold when its turn comes),
      // up to the cap; beyond it the layers held are cycled (at that size no layer fits in cache).
      const int held = int(std::clamp<double>(std::floor(cap / per_layer), 1, d.c.layers));
      uocr::DecoderConfig c = d.c;
      c.layers = held;
      uint32_t x = 12345;  // LCG: random enough for timing, fast for gigabytes
      auto fill = [&](std::vector<float>& a) {
        for (float& f : a) f = float(int32_t(x = x * 1664525u + 1013904223u) >> 8) * (1.0f / 8388608.0f);
      };
      std::vector<std::vector<float>> k(static_cast<size_t>(held)), v(k.size()), gk(k.size()), gv(k.size());
      for (int l = 0; l < held; ++l) {
        for (auto* a : {&k[size_t(l)], &v[size_t(l)]}) a->resize(size_t(rows * kr));
        for (auto* a : {&gk[size_t(l)], &gv[size_t(l)]}) a->resize(size_t(kWindow * kr));
        for (auto* a : {&k[size_t(l)], &v[size_t(l)], &gk[size_t(l)], &gv[size_t(l)]}) fill(*a);
      }
      constexpr int kQueries = 64;  // a different query every call: the selection moves as in decoding
      std::vector<float> q(size_t(kQueries * s.q_row())), out(size_t(s.q_row())), scores(size_t(s.heads * (rows + kWindow)));
      fill(q);
      uocr::SparseReference sr(c, layout, sp);
      for (int l = 0; l < held; ++l)
        for (size_t p = 0; p < size_t(pages); ++p) sr.summarize(l, p, k[size_t(l)].data());
      auto args = [&](int64_t i, int& l, const float*& qi) {
        l = int(i % held);
        qi = q.data() + (i / held % kQueries) * s.q_row();
      };
      const CallTime dense = time_calls(
          [&](int64_t i) {
            int l;
            const float* qi;
            args(i, l, qi);
            uocr::decode_attention(qi, {k[size_t(l)].data(), v[size_t(l)].data(), rows}, {gk[size_t(l)].data(), gv[size_t(l)].data(), kWindow},
                                   s, scores.data(), out.data());
          },
          evict, held, 0.3, 3);
      sr.reset_counters();
      const CallTime sparse = time_calls(
          [&](int64_t i) {
            int l;
            const float* qi;
            args(i, l, qi);
            sr.attend(l, qi, {k[size_t(l)].data(), v[size_t(l)].data(), rows}, {gk[size_t(l)].data(), gv[size_t(l)].data(), kWindow}, s,
                      out.data());
          },
          evict, held, 0.3, 3);
      const double used = double(sr.rows_attended()) / double(sr.rows_dense());
      // Quest bounds (gate nodes + blocks) per head and layer: rows_dense counts heads x rows per call.
      const double bounds = double(sr.bounds_evaluated()) / (double(sr.rows_dense()) / double(rows));
      const int L = d.c.layers;
      json r = {{"dims", d.name},
                {"pages", pages},
                {"reference_rows", rows},
                {"layers", L},
                {"layers_held", held},
                {"heads", d.c.heads},
                {"kv_heads", d.c.kv_heads},
                {"head_dim", d.c.head_dim},
                {"dense_ms_per_step", dense.wall_ms * L},
                {"sparse_ms_per_step", sparse.wall_ms * L},
                {"dense_cpu_ms_per_step", dense.cpu_ms * L},
                {"sparse_cpu_ms_per_step", sparse.cpu_ms * L},
                {"speedup", dense.wall_ms / sparse.wall_ms},
                {"speedup_cpu", dense.cpu_ms / sparse.cpu_ms},
                {"reference_rows_used", used},
                {"gate_levels", sr.gate_levels()},
                {"bounds_per_head_layer", bounds},
                {"summary_bytes_per_layer", double(sr.summary_bytes()) / held},
                {"load_average", load_average()}};
      std::printf("%-7s %6lld %9lld %3d/%-3d %9.2f/%-9.2f %9.2f/%-9.2f %6.1fx/%5.1fx %9.2f%% %6d %7.0f %11.2f\n", d.name.c_str(),
                  (long long)pages, (long long)rows, held, L, dense.wall_ms * L, dense.cpu_ms * L, sparse.wall_ms * L,
                  sparse.cpu_ms * L, dense.wall_ms / sparse.wall_ms, dense.cpu_ms / sparse.cpu_ms, used * 100, sr.gate_levels(), bounds,
                  mb(double(sr.summary_bytes()) / held * L));
      std::fflush(stdout);
      all["cases"].push_back(r);
    }
  std::printf("* layers with their own K/V in memory (the rest cycle over them); times are per layer x all layers\n"
              "+ Quest bounds evaluated (gate tree nodes + blocks of the gated pages) per head and layer\n");
  // Flatness: SR-SWA's step at each page count over its step at the fewest pages, per dims.
  for (const Dims& d : dims) {
    const json* base = nullptr;
    for (const json& c : all["cases"]) {
      if (c["dims"] != d.name) continue;
      if (!base) base = &c;
      std::printf("%s: SR-SWA step at %lld pages / at %lld pages = %.2f wall, %.2f cpu (target <= 1.2 at 1,000)\n", d.name.c_str(),
                  (long long)c["pages"].get<int64_t>(), (long long)(*base)["pages"].get<int64_t>(),
                  c["sparse_ms_per_step"].get<double>() / (*base)["sparse_ms_per_step"].get<double>(),
                  c["sparse_cpu_ms_per_step"].get<double>() / (*base)["sparse_cpu_ms_per_step"].get<double>());
    }
  }
  all["load_average_end"] = load_average();
  write_json(all, o.get("out", ""));
  return 0;
}

// ---------------------------------------------------------------------------------------------
// deviation: logits against exact one-shot R-SWA as SR-SWA budgets and page groups shrink

struct Deviation {
  double max_abs = 0, max_rel = 0, mean_rel = 0;
  int64_t agree = 0, rows = 0;
  void add(const std::vector<float>& ours, const std::vector<float>& ref) {
    double d2 = 0, r2 = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      const double e = double(ours[i]) - ref[i];
      max_abs = std::max(max_abs, std::abs(e));
      d2 += e * e;
      r2 += double(ref[i]) * ref[i];
    }
    const double rel = std::sqrt(d2 / r2);
    max_rel = std::max(max_rel, rel);
    mean_rel += rel;
    agree += std::max_element(ours.begin(), ours.end()) - ours.begin() == std::max_element(ref.begin(), ref.end()) - ref.begin();
    ++rows;
  }
  json to_json() const {
    return {{"max_abs", max_abs}, {"max_rel", max_rel}, {"mean_rel", mean_rel / double(rows)}, {"top1_agree", agree}, {"rows", rows}};
  }
};

int deviation_main(const Options& o) {
  const int64_t pages = std::stoll(o.get("pages", "12"));
  const TinyModel m;
  const uocr::DocumentLayout L = m.document(pages);
  const int64_t hidden = m.dc().hidden, t = L.page_tokens;
  // The golden page, its token rows rotated by 23·p on page p: real visual statistics, pages that differ.
  auto page = [&](int64_t p, std::vector<float>& out) {
    out.resize(m.vision.size());
    const int64_t shift = (23 * p) % t;
    for (int64_t r = 0; r < t; ++r)
      std::copy_n(m.vision.begin() + (r * hidden), hidden, out.begin() + ((r + shift) % t) * hidden);
  };
  // The reference output spread over the pages, each share opened by "<PAGE>".
  std::vector<int32_t> stream;
  for (int64_t p = 0; p < pages; ++p) {
    stream.insert(stream.end(), m.marker.begin(), m.marker.end());
    const size_t a = m.text.size() * size_t(p) / size_t(pages), b = m.text.size() * size_t(p + 1) / size_t(pages);
    stream.insert(stream.end(), m.text.begin() + std::ptrdiff_t(a), m.text.begin() + std::ptrdiff_t(b));
  }
  uocr::require(L.prompt_length() + int64_t(stream.size()) <= m.dc().max_positions, uocr::Status::invalid_argument,
                "too many pages for tiny-a's positions: use fewer");

  // Exact one-shot R-SWA: the prefill's logits, then one row per fed token.
  uocr::Decoder dec(m.dc(), m.w.decoder);
  uocr::KvCache prefilled(m.dc(), kWindow);
  std::vector<std::vector<float>> ref;
  {
    std::vector<float> x = dec.embed(L.head), pg;
    for (int64_t p = 0; p < pages; ++p) {
      page(p, pg);
      x.insert(x.end(), pg.begin(), pg.end());
    }
    const std::vector<float> tail = dec.embed(L.tail);
    x.insert(x.end(), tail.begin(), tail.end());
    ref.push_back(dec.prefill(x, 0, prefilled));
  }
  {
    uocr::KvCache cache = prefilled;
    for (size_t i = 0; i < stream.size(); ++i) ref.push_back(dec.decode_step(stream[i], L.prompt_length() + int64_t(i), cache));
  }

  json all = {{"pages", pages},
              {"page_tokens", t},
              {"steps", stream.size()},
              {"window", kWindow},
              {"load_average_start", load_average()},
              {"sparse", json::array()},
              {"groups", json::array()}};
  std::printf("logits vs exact one-shot R-SWA: tiny-a, %lld pages x %lld tokens (golden page, rows rotated per page), %zu "
              "teacher-forced steps + the prefill row, window %d\n",
              (long long)pages, (long long)t, stream.size(), kWindow);

  // SR-SWA over the one-shot reference: budgets shrinking, then block sizes at equal row budgets.
  const uocr::ReferenceLayout layout = uocr::one_shot_layout(int64_t(L.head.size()), pages, t, int64_t(L.tail.size()));
  std::vector<uocr::SparseParams> grid;
  for (int pb : {0, 8, 4, 2, 1})
    for (int bb : {0, 64, 32, 16, 8, 4}) grid.push_back({16, pb, bb, true});
  for (int rows : {1024, 256})
    for (int bt : {8, 32, 64}) grid.push_back({bt, 4, rows / bt, true});
  // The default gate tree over 12 pages is 12 -> 3 nodes: a beam of 2 x page budget covers the 3
  // for page budgets >= 2 (exactly the flat gate's pages); page budget 1 descends with a beam of 2.
  // Narrower trees (fan-out 2: 12 -> 6 -> 3 -> 2 nodes) with beams that do not cover every level:
  // the gate may miss pages that scoring every page would pass.
  for (const auto& [pb, beam] : {std::pair{4, 4}, std::pair{4, 0}, std::pair{2, 2}, std::pair{1, 1}}) grid.push_back({16, pb, 64, true, 2, beam});
  std::printf("\nSR-SWA (0 = no limit; gate tree fan-out/beam, beam 0 = 2 x page budget)\n%-12s %-12s %-12s %-10s %-10s %-12s %-12s %-12s %s\n",
              "block tokens", "page budget", "block budget", "fan/beam", "rows used", "max |dlogit|", "max rel err", "mean rel err", "top-1 agree");
  for (const uocr::SparseParams& sp : grid) {
    uocr::SparseReference sr(m.dc(), layout, sp);
    uocr::KvCache cache = prefilled;
    sr.rebuild(cache);
    dec.set_decode_attention(&sr);
    Deviation dv;
    dv.add(ref[0], ref[0]);  // the prefill is dense in every SR-SWA configuration
    for (size_t i = 0; i < stream.size(); ++i) dv.add(dec.decode_step(stream[i], L.prompt_length() + int64_t(i), cache), ref[i + 1]);
    dec.set_decode_attention(nullptr);
    const double used = double(sr.rows_attended()) / double(sr.rows_dense());
    json r = dv.to_json();
    r.update({{"block_tokens", sp.block_tokens},
              {"page_budget", sp.page_budget},
              {"block_budget", sp.block_budget},
              {"gate_fan_out", sp.gate_fan_out},
              {"gate_beam", sp.gate_beam},
              {"gate_levels", sr.gate_levels()},
              {"rows_used", used}});
    const std::string tree = std::to_string(sp.gate_fan_out) + "/" + std::to_string(sp.gate_beam);
    std::printf("%-12d %-12d %-12d %-10s %8.1f%%  %-12.3g %-12.3g %-12.3g %lld/%lld\n", sp.block_tokens, sp.page_budget, sp.block_budget,
                tree.c_str(), used * 100, dv.max_abs, dv.max_rel, dv.mean_rel / double(dv.rows), (long long)dv.agree, (long long)dv.rows);
    std::fflush(stdout);
    all["sparse"].push_back(r);
  }

  // Page groups (G pages held, O = G - 1: slide by one page per boundary), dense and with SR-SWA.
  struct GroupRun {
    int g;
    bool sparse;
    uocr::SparseParams sp;
  };
  std::vector<GroupRun> runs;
  for (int g : {int(pages), 8, 6, 4, 3, 2})
    if (g <= pages) runs.push_back({g, false, {}});
  runs.push_back({4, true, {}});
  runs.push_back({4, true, {16, 2, 16, true}});
  std::printf("\npage groups (O = G - 1)\n%-4s %-22s %-12s %-12s %-12s %s\n", "G", "SR-SWA", "max |dlogit|", "max rel err",
              "mean rel err", "top-1 agree");
  for (const GroupRun& gr : runs) {
    uocr::PageGroupParams pp;
    pp.group_pages = gr.g;
    pp.overlap_pages = gr.g - 1;
    pp.sparse = gr.sparse;
    pp.sparse_params = gr.sp;
    uocr::PageGroupDecoder eng(m.dc(), m.w.decoder, kWindow, pp);
    uocr::FunctionPageEmbeddings src(pages, page);
    uocr::PageClock clock(0);
    Deviation dv;
    dv.add(eng.start(L, src), ref[0]);
    for (size_t i = 0; i < stream.size(); ++i) {
      for (int64_t b = clock.feed(m.tok.token_bytes(stream[i])); b > 0; --b) eng.next_page();
      dv.add(eng.step(stream[i]), ref[i + 1]);
    }
    uocr::require(eng.current_page() == pages - 1, uocr::Status::internal, "the markers did not reach the last page");
    const std::string budgets = gr.sparse ? std::to_string(gr.sp.page_budget) + " pages, " + std::to_string(gr.sp.block_budget) +
                                                " blocks of " + std::to_string(gr.sp.block_tokens)
                                          : "off";
    json r = dv.to_json();
    r.update({{"group_pages", gr.g}, {"overlap_pages", gr.g - 1}, {"sparse", budgets}, {"slides", eng.slides()}});
    std::printf("%-4d %-22s %-12.3g %-12.3g %-12.3g %lld/%lld\n", gr.g, budgets.c_str(), dv.max_abs, dv.max_rel,
                dv.mean_rel / double(dv.rows), (long long)dv.agree, (long long)dv.rows);
    std::fflush(stdout);
    all["groups"].push_back(r);
  }
  all["load_average_end"] = load_average();
  write_json(all, o.get("out", ""));
  return 0;
}

int usage() {
  std::fprintf(stderr,
               "usage: unbounded memory [--pages 1,10,100,1000,3600] [--modes full,oneshot,infinite,sparse[,grouped]] "
               "[--tokens-per-page 64] [--max-oneshot-pages 100] [--out FILE]\n"
               "       unbounded case MODE PAGES [--tokens-per-page 64] [--max-steps N]\n"
               "       unbounded step [--pages 10,100,1000,3600] [--dims tiny-a,real] [--gate FAN_OUT,BEAM] [--cap-gb 4] [--cold 1] [--out FILE]\n"
               "       unbounded deviation [--pages 12] [--out FILE]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  const std::string what = argv[1];
  try {
    const Options o(argc, argv, 2);
    if (what == "memory") return memory_main(o);
    if (what == "step") return step_main(o);
    if (what == "deviation") return deviation_main(o);
    if (what == "case") {
      if (o.positional.size() != 2) return usage();
      const json r = run_case(o.positional[0], std::stoll(o.positional[1]), std::stoll(o.get("tokens-per-page", "64")),
                              std::stoll(o.get("max-steps", "-1")));
      std::printf("%s\n", r.dump().c_str());
      return 0;
    }
    return usage();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "unbounded %s: %s\n", what.c_str(), e.what());
    return 1;
  }
}
