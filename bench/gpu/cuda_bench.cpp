// uocr_cuda_bench: times the CUDA decoder on a model folder (bench/gpu/run.sh makes a
// random-weight one at the real dimensions) and prints a table; --json also writes the numbers.
//
//   uocr_cuda_bench --model DIR [--device 0] [--prompt 273] [--decode 256] [--window 128]
//                   [--batch 16,128] [--batch-steps 64] [--long 2048] [--json FILE]
//
// Measured (weights as stored, bf16; float32 activations unless said):
//  - the vision encoder per view (SAM + CLIP + projector): the 1,024 global view and a 640 tile,
//    random pixels, median of 3 after a warm-up;
//  - prefill of 273 (one base page), 1,024 and 4,096 prompt tokens, and 1,024 with bf16 GEMMs;
//  - single-stream decode with R-SWA (window n): decode_step (logits read back, argmax on the
//    host, as a session does) and the device-greedy path (argmax on the GPU), each with CUDA
//    graphs on (the default: the step replays a captured graph) and off (kernels launched one by
//    one), on fresh caches in the same run, and the ratio of the step times;
//  - batched decode of B sequences per step (decode_batch_greedy), total tokens/s, and 16
//    concurrent sessions the way the engine runs them without batching (a thread and a stream each);
//  - full attention vs R-SWA: mean step time over the first and the last 128 of --long steps;
//  - SR-SWA vs dense R-SWA over one reference of 15 pages (BOS + 15 x 273 tokens, the longest
//    prompt timed above): decode_step with the selection attached (default budgets; page gate
//    and token selector on the device) and without, and the share of reference rows the selection attended;
//  - peak device memory (allocator) and KV bytes per session.
// Exit codes: 0 measured, 2 no usable GPU (Status::unsupported; the message says why), 1 other errors.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "backends/cuda/decoder.hpp"
#include "backends/cuda/vision.hpp"
#include "uocr/decoder/sparse_reference.hpp"
#include "uocr/model/checkpoint.hpp"
#include "uocr/model/config.hpp"
#include "uocr/model/weights.hpp"

namespace cu = uocr::cuda;

namespace {

struct Args {
  std::string model, json;
  int device = 0, window = 128;
  int64_t prompt = 273, decode = 256, batch_steps = 64, long_steps = 2048;
  std::vector<int64_t> batches = {16, 128};
};

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::stoll(item));
  return out;
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto value = [&]() -> std::string {
      uocr::require(i + 1 < argc, uocr::Status::invalid_argument, [&] { return k + " needs a value"; });
      return argv[++i];
    };
    if (k == "--model") a.model = value();
    else if (k == "--json") a.json = value();
    else if (k == "--device") a.device = std::stoi(value());
    else if (k == "--window") a.window = std::stoi(value());
    else if (k == "--prompt") a.prompt = std::stoll(value());
    else if (k == "--decode") a.decode = std::stoll(value());
    else if (k == "--batch") a.batches = parse_list(value());
    else if (k == "--batch-steps") a.batch_steps = std::stoll(value());
    else if (k == "--long") a.long_steps = std::stoll(value());
    else throw uocr::Error(uocr::Status::invalid_argument, "unknown argument " + k + " (see the header of bench/gpu/cuda_bench.cpp)");
  }
  uocr::require(!a.model.empty(), uocr::Status::invalid_argument, "--model DIR is required");
  uocr::require(a.prompt > 0 && a.prompt <= 4096 && a.decode > 0 && a.batch_steps > 0 && a.long_steps >= 256 && a.window > 0,
                uocr::Status::invalid_argument, "sizes must be positive, --prompt at most 4096 and --long at least 256");
  for (int64_t b : a.batches)
    uocr::require(b > 0 && b < 4096, uocr::Status::invalid_argument, "batch sizes must be in [1, 4096)");
  return a;
}

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

struct Row {
  std::string name;
  double value;
  std::string unit, note;
};

class Bench {
 public:
  Bench(const Args& a, cu::Context& ctx, const uocr::ModelConfig& cfg, const uocr::ModelWeights& w)
      : a_(a), ctx_(ctx), cfg_(cfg), mw_(w), d_(cfg.decoder), w_(&w.decoder) {
    double t0 = now();
    dw_ = cu::DecoderDeviceWeights::upload(ctx_, d_, w.decoder);
    ctx_.synchronize();
    add("weights upload", now() - t0, "s", std::to_string(dw_->bytes >> 20) + " MiB of matrices");
    dec_ = std::make_unique<cu::CudaDecoder>(ctx_, d_, w.decoder, dw_);
    std::mt19937 rng(7);
    std::uniform_int_distribution<int32_t> id(2, d_.vocab - 1);
    for (int64_t i = 0; i < 4096; ++i) ids_.push_back(id(rng));
    ids_[0] = d_.bos_id;
  }

  void vision() {
    const double t0 = now();
    cu::CudaVisionEncoder enc(ctx_, cfg_, mw_);
    ctx_.synchronize();
    add("vision weights upload", now() - t0, "s", "");
    std::mt19937 rng(11);
    std::normal_distribution<float> pixel(0.f, 1.f);
    for (int size : {1024, 640}) {
      std::vector<float> view(size_t(3) * size_t(size) * size_t(size));
      for (float& v : view) v = pixel(rng);
      enc.encode_view(view.data(), size);  // warm-up (tables, allocations, cuBLAS heuristics)
      std::vector<double> t;
      for (int i = 0; i < 3; ++i) {
        const double s0 = now();
        enc.encode_view(view.data(), size);
        t.push_back(now() - s0);
      }
      std::sort(t.begin(), t.end());
      add("vision encoder, one " + std::to_string(size) + " view", t[1] * 1e3, "ms",
          size == 1024 ? "the global view of a page" : "one tile (gundam modes)");
    }
  }

  void prefill() {
    for (int64_t p : {a_.prompt, int64_t(1024), int64_t(4096)}) {
      if (p > d_.max_positions) continue;
      add("prefill " + std::to_string(p) + " tokens", p / median_prefill(p), "tokens/s", "");
    }
    ctx_.set_gemm_precision(uocr::Precision::bf16);
    add("prefill 1024 tokens, bf16 GEMMs", 1024 / median_prefill(1024), "tokens/s", "tensor cores");
    ctx_.set_gemm_precision(uocr::Precision::f32);
  }

  void single_stream() {
    double greedy_ms[2] = {0, 0};  // step time with graphs on, off
    for (bool graphs : {true, false}) {
      dec_->set_cuda_graphs(graphs);
      const std::string label = graphs ? ", CUDA graphs" : ", no graphs";
      cu::CudaKvCache cache(ctx_, d_, a_.window);
      dec_->prefill(prompt(a_.prompt), 0, cache);
      int32_t tok = 5;
      for (int i = 0; i < 8; ++i) tok = argmax(dec_->decode_step(tok, a_.prompt + i, cache));  // warm-up (capture)
      ctx_.synchronize();
      const double t0 = now();
      for (int64_t i = 0; i < a_.decode; ++i) tok = argmax(dec_->decode_step(tok, a_.prompt + 8 + i, cache));
      const double host = now() - t0;
      add("decode, 1 stream (logits to host)" + label, a_.decode / host, "tokens/s",
          "R-SWA n=" + std::to_string(a_.window) + ", " + ms(host / double(a_.decode)) + " ms/step");
      std::vector<cu::CudaKvCache*> one = {&cache};
      std::vector<int32_t> t = {tok};
      const double t1 = now();
      for (int64_t i = 0; i < a_.decode; ++i) t = dec_->decode_batch_greedy(t, {a_.prompt + 8 + a_.decode + i}, one);
      const double greedy = now() - t1;
      greedy_ms[graphs ? 0 : 1] = greedy / double(a_.decode) * 1e3;
      add("decode, 1 stream (argmax on GPU)" + label, a_.decode / greedy, "tokens/s",
          ms(greedy / double(a_.decode)) + " ms/step, target >= 1,200");
      if (graphs) {
        // Fewer replays than the 2·decode + 8 steps above: some ran eagerly (the failure is in the note).
        const cu::CudaDecoder::GraphStats& st = dec_->graph_stats();
        add("decode steps replayed from CUDA graphs", double(st.replays), "steps",
            std::to_string(st.captures) + " captures" + (st.last_failure.empty() ? "" : "; " + st.last_failure));
        add("KV cache per session", double(cache.allocated_bytes()) / (1 << 20), "MiB",
            "P=" + std::to_string(a_.prompt) + " + n=" + std::to_string(a_.window));
      }
    }
    dec_->set_cuda_graphs(true);
    add("decode step time, no graphs / CUDA graphs", greedy_ms[1] / greedy_ms[0], "x", "argmax on GPU, 1 stream");
  }

  // B independent sequences stepped together (each its own cache; the same prompt).
  void batched() {
    for (int64_t b : a_.batches)
      for (uocr::Precision prec : {uocr::Precision::f32, uocr::Precision::bf16}) {
        // bf16 only changes the cuBLAS path, which batches wider than the mat-vec kernel take.
        if (prec == uocr::Precision::bf16 && b <= cu::ops::kMatvecMaxRows) continue;
        ctx_.set_gemm_precision(prec);
        batch_of(b, prec == uocr::Precision::bf16 ? ", bf16 GEMMs" : "");
        ctx_.set_gemm_precision(uocr::Precision::f32);
      }
  }

  void batch_of(int64_t b, const std::string& label) {
    std::vector<std::unique_ptr<cu::CudaKvCache>> caches;
    std::vector<cu::CudaKvCache*> ptrs;
    const std::vector<float> x = prompt(a_.prompt);
    for (int64_t i = 0; i < b; ++i) {
      caches.push_back(std::make_unique<cu::CudaKvCache>(ctx_, d_, a_.window));
      dec_->prefill(x, 0, *caches.back());
      ptrs.push_back(caches.back().get());
    }
    std::vector<int32_t> tokens(ids_.begin() + 1, ids_.begin() + 1 + b);  // diverging streams
    std::vector<int64_t> pos(size_t(b), a_.prompt);
    auto step = [&] {
      tokens = dec_->decode_batch_greedy(tokens, pos, ptrs);
      for (int64_t& p : pos) ++p;
    };
    for (int i = 0; i < 4; ++i) step();
    const double t0 = now();
    for (int64_t s = 0; s < a_.batch_steps; ++s) step();
    const double sec = now() - t0;
    add("decode, " + std::to_string(b) + " sequences batched" + label, double(b * a_.batch_steps) / sec, "tokens/s",
        std::to_string(sec / double(a_.batch_steps) * 1e3).substr(0, 6) + " ms/step" +
            (b == 16 ? ", target >= 5,000" : ""));
  }

  // B sessions as the engine runs them today: one thread, Context (stream) and decoder each over
  // the shared weights, no batching across them.
  void concurrent(int64_t b) {
    const std::vector<float> x = prompt(a_.prompt);
    std::vector<std::thread> threads;
    std::vector<std::string> errors(static_cast<size_t>(b));
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    for (int64_t i = 0; i < b; ++i)
      threads.emplace_back([&, i] {
        try {
          cu::Context ctx(a_.device);
          cu::CudaDecoder dec(ctx, d_, *w_, dw_);
          cu::CudaKvCache cache(ctx, d_, a_.window);
          dec.prefill(x, 0, cache);
          int32_t tok = ids_[size_t(i + 1)];
          ++ready;
          while (!go) std::this_thread::yield();
          for (int64_t s = 0; s < a_.batch_steps; ++s) tok = argmax(dec.decode_step(tok, a_.prompt + s, cache));
        } catch (const std::exception& e) {
          errors[size_t(i)] = e.what();
          ++ready;
        }
      });
    while (ready < b) std::this_thread::yield();
    const double t0 = now();
    go = true;
    for (std::thread& t : threads) t.join();
    const double sec = now() - t0;
    for (const std::string& e : errors) uocr::require(e.empty(), uocr::Status::internal, [&] { return "concurrent session: " + e; });
    add("decode, " + std::to_string(b) + " concurrent sessions (threads, no batching)", double(b * a_.batch_steps) / sec,
        "tokens/s", "one stream per session");
  }

  // Step time early and late in a long generation: flat with R-SWA, growing with full attention.
  void long_decode() {
    for (int window : {a_.window, 0}) {
      cu::CudaKvCache cache(ctx_, d_, window);
      dec_->prefill(prompt(a_.prompt), 0, cache);
      int32_t tok = 5;
      std::vector<cu::CudaKvCache*> one = {&cache};
      double first = 0, last = 0;
      const int64_t steps = std::min<int64_t>(a_.long_steps, d_.max_positions - a_.prompt - 1);
      for (int64_t i = 0; i < steps; ++i) {
        const double t0 = now();
        tok = dec_->decode_batch_greedy({tok}, {a_.prompt + i}, one)[0];
        const double dt = now() - t0;
        if (i >= 8 && i < 136) first += dt;
        if (i >= steps - 128) last += dt;
      }
      const std::string name = window ? "R-SWA n=" + std::to_string(window) : std::string("full attention");
      add(name + ": step time, tokens 8..135", first / 128 * 1e3, "ms", "");
      add(name + ": step time, last 128 of " + std::to_string(steps), last / 128 * 1e3, "ms",
          "ratio last/first " + std::to_string(last / first).substr(0, 5));
    }
  }

  // Decode over a reference of kSparsePages pages, dense R-SWA then SR-SWA (default budgets),
  // the same cache and weights: the summaries are read back per page as page groups do.
  void sparse_decode() {
    constexpr int64_t kPage = 273, kSparsePages = 15;
    const int64_t rows = 1 + kSparsePages * kPage;
    if (rows + a_.window + 3 * a_.decode > d_.max_positions) return;
    cu::CudaKvCache cache(ctx_, d_, a_.window);
    dec_->prefill(prompt(rows), 0, cache);
    uocr::ReferenceLayout layout;
    layout.always = {uocr::RowSpan{0, 1}};
    for (int64_t p = 0; p < kSparsePages; ++p) layout.pages.push_back(uocr::RowSpan{1 + p * kPage, kPage});
    uocr::SparseReference sparse(d_, layout, uocr::SparseParams{});
    for (size_t p = 0; p < size_t(kSparsePages); ++p) cache.summarize_page(sparse, p);
    int64_t pos = rows;
    int32_t tok = 5;
    auto steps = [&](int64_t n) {
      ctx_.synchronize();
      const double t0 = now();
      for (int64_t i = 0; i < n; ++i) tok = argmax(dec_->decode_step(tok, pos++, cache));
      return (now() - t0) / double(n);
    };
    const std::string ref = std::to_string(kSparsePages) + " pages (" + std::to_string(rows) + " rows)";
    steps(a_.window);  // fills the ring: both timings see a full window
    add("dense R-SWA over " + ref + ": step time", steps(a_.decode) * 1e3, "ms", "logits to host");
    dec_->set_decode_attention(&sparse);
    const double t = steps(a_.decode);
    dec_->set_decode_attention(nullptr);
    add("SR-SWA over " + ref + ": step time", t * 1e3, "ms",
        std::to_string(100.0 * double(sparse.rows_attended()) / double(sparse.rows_dense())).substr(0, 4) +
            "% of reference rows; selection on the device");
  }

  void memory() {
    const cu::MemoryStats m = ctx_.memory();
    add("peak device memory (allocator)", double(m.peak_reserved) / (1 << 20), "MiB", "weights + all the above");
  }

  void print(std::ostream& out) const {
    out << "\n| measurement | value | unit | note |\n| --- | ---: | --- | --- |\n";
    for (const Row& r : rows_) {
      char v[64];
      std::snprintf(v, sizeof v, r.value >= 100 ? "%.0f" : "%.3g", r.value);
      out << "| " << r.name << " | " << v << " | " << r.unit << " | " << r.note << " |\n";
    }
  }

  void write_json(const std::string& path, const std::string& device) const {
    std::ofstream f(path);
    f << "{\n  \"device\": \"" << device << "\",\n  \"rows\": [\n";
    for (size_t i = 0; i < rows_.size(); ++i)
      f << "    {\"name\": \"" << rows_[i].name << "\", \"value\": " << rows_[i].value << ", \"unit\": \"" << rows_[i].unit
        << "\", \"note\": \"" << rows_[i].note << "\"}" << (i + 1 < rows_.size() ? "," : "") << "\n";
    f << "  ]\n}\n";
    uocr::require(bool(f), uocr::Status::io, [&] { return "cannot write " + path; });
  }

 private:
  void add(const std::string& name, double value, const std::string& unit, const std::string& note) {
    rows_.push_back({name, value, unit, note});
    std::printf("  %-44s %12.4g %s  %s\n", name.c_str(), value, unit.c_str(), note.c_str());
    std::fflush(stdout);
  }

  std::vector<float> prompt(int64_t p) const { return dec_->embed(std::vector<int32_t>(ids_.begin(), ids_.begin() + p)); }

  static std::string ms(double seconds) { return std::to_string(seconds * 1e3).substr(0, 6); }

  static int32_t argmax(const std::vector<float>& logits) {
    return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }

  double median_prefill(int64_t p) {
    cu::CudaKvCache cache(ctx_, d_, a_.window);
    const std::vector<float> x = prompt(p);
    dec_->prefill(x, 0, cache);  // warm-up (allocations, cuBLAS heuristics)
    std::vector<double> t;
    for (int i = 0; i < 3; ++i) {
      const double t0 = now();
      dec_->prefill(x, 0, cache);
      t.push_back(now() - t0);
    }
    std::sort(t.begin(), t.end());
    return t[1];
  }

  const Args& a_;
  cu::Context& ctx_;
  const uocr::ModelConfig& cfg_;
  const uocr::ModelWeights& mw_;
  const uocr::DecoderConfig& d_;
  const uocr::DecoderWeights* w_;
  std::shared_ptr<cu::DecoderDeviceWeights> dw_;
  std::unique_ptr<cu::CudaDecoder> dec_;
  std::vector<int32_t> ids_;
  std::vector<Row> rows_;
};

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse(argc, argv);
    const uocr::ModelConfig cfg = uocr::ModelConfig::load(a.model + "/config.json");
    const uocr::Checkpoint ck = uocr::Checkpoint::open(a.model);
    const uocr::ModelWeights w = uocr::ModelWeights::bind(ck, cfg);
    cu::Context ctx(a.device);
    const std::string device = ctx.info().name + " (sm_" + std::to_string(ctx.info().major) + std::to_string(ctx.info().minor) +
                               ", " + std::to_string(ctx.info().total_bytes >> 30) + " GiB)";
    std::printf("uocr_cuda_bench on %s: hidden %d, %d layers, %d experts (top-%d), vocab %d\n", device.c_str(),
                cfg.decoder.hidden, cfg.decoder.layers, cfg.decoder.n_routed_experts, cfg.decoder.experts_per_token,
                cfg.decoder.vocab);
    Bench b(a, ctx, cfg, w);
    b.vision();
    b.prefill();
    b.single_stream();
    b.batched();
    b.concurrent(16);
    b.long_decode();
    b.sparse_decode();
    b.memory();
    b.print(std::cout);
    if (!a.json.empty()) b.write_json(a.json, device);
    return 0;
  } catch (const uocr::Error& e) {
    std::fprintf(stderr, "uocr_cuda_bench: %s (%s)\n", e.what(), uocr::status_name(e.status()));
    return e.status() == uocr::Status::unsupported ? 2 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "uocr_cuda_bench: %s\n", e.what());
    return 1;
  }
}
