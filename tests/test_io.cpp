// Model folder loading: config.json, safetensors (index + shards), weight binding, .npy I/O,
// and the errors a damaged model folder must produce.
#include <doctest/doctest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <tuple>

#include "support/checks.hpp"
#include "support/golden_model.hpp"
#include "support/test_support.hpp"
#include "uocr/backends/cpu/gemm_bf16.hpp"
#include "uocr/backends/cpu/linear.hpp"
#include "uocr/io/npy.hpp"
#include "uocr/io/safetensors.hpp"
#include "uocr/model/checkpoint.hpp"
#include "uocr/model/config.hpp"
#include "uocr/model/weights.hpp"

namespace fs = std::filesystem;
using uocr::Status;

namespace {

using uocr_test::error_of;
using uocr_test::golden_model_dir;


// A scratch copy of the golden model (weights symlinked unless `copy_weights`) that a test may damage.
struct ModelCopy {
  fs::path dir;
  explicit ModelCopy(const std::string& tag) {
    dir = fs::temp_directory_path() / ("uocr_test_" + tag + "_" + std::to_string(std::random_device{}()));
    fs::create_directories(dir);
    for (const char* f : {"config.json", "model.safetensors.index.json", "model-00001-of-000001.safetensors"})
      fs::copy_file(fs::path(golden_model_dir()) / f, dir / f);
  }
  ~ModelCopy() { fs::remove_all(dir); }
  std::string path(const char* f) const { return (dir / f).string(); }
  std::string read(const char* f) const {
    std::ifstream in(path(f), std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  void write(const char* f, const std::string& s) const {
    std::ofstream out(path(f), std::ios::binary | std::ios::trunc);
    out << s;
  }
};

// Replaces every occurrence (config.json repeats decoder keys in language_config).
void replace_all(std::string& s, const std::string& from, const std::string& to) {
  size_t n = 0;
  for (size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size()), ++n) s.replace(p, from.size(), to);
  REQUIRE(n > 0);
}

}  // namespace

TEST_CASE("the golden model folder (tiny-b) loads and every tensor is bound") {
  auto cfg = uocr::ModelConfig::load(golden_model_dir() + "/config.json");
  CHECK(cfg.model_type == "unlimited-ocr");
  CHECK(cfg.decoder.hidden == 16);
  CHECK(cfg.decoder.layers == 3);
  CHECK(cfg.decoder.head_dim == 4);
  CHECK(cfg.decoder.kv_heads == 2);
  CHECK(cfg.decoder.n_routed_experts == 6);
  CHECK(cfg.decoder.experts_per_token == 3);
  CHECK(cfg.decoder.sliding_window == 8);
  CHECK(cfg.sam.width == 48);
  CHECK(cfg.sam.global_layers == std::vector<int>{1});
  CHECK(cfg.sam.out_chans == 24);
  CHECK(cfg.clip.ffn == 80);
  CHECK(cfg.clip.positions() == 257);
  auto ck = uocr::Checkpoint::open(golden_model_dir());
  CHECK(ck.size() == 154);
  CHECK(ck.parameter_count() == 4576032);
  auto w = uocr::ModelWeights::bind(ck, cfg);
  CHECK(w.decoder.layers.size() == 3);
  CHECK(w.decoder.layers[1].moe);
  CHECK(w.decoder.layers[1].experts.size() == 6);
  CHECK(ck.unused().empty());
  // Spot-check values through the bf16 path: the first lm_head row is finite and non-zero.
  std::vector<float> row(16);
  w.decoder.lm_head->read_f32(0, 16, row.data());
  float sum = 0;
  for (float v : row) sum += std::abs(v);
  CHECK(sum > 0.f);
}

TEST_CASE("the published Unlimited-OCR config.json parses to the real dimensions") {
  auto cfg = uocr::ModelConfig::load(uocr_test::published_dir() + "/config.json");
  CHECK(cfg.model_type == "unlimited-ocr");
  CHECK(cfg.decoder.hidden == 1280);
  CHECK(cfg.decoder.head_dim == 128);
  CHECK(cfg.decoder.n_routed_experts == 64);
  CHECK(cfg.decoder.n_shared_experts == 2);
  CHECK(cfg.decoder.experts_per_token == 6);
  CHECK(cfg.decoder.sliding_window == 128);
  CHECK(cfg.decoder.rope_theta == 10000.f);
  CHECK(cfg.decoder.rms_eps == doctest::Approx(1e-6));
  CHECK(cfg.sam.width == 768);
  CHECK(cfg.sam.out_chans == 256);
  CHECK(cfg.sam.window == 14);
  CHECK(cfg.clip.ffn == 4096);
  CHECK(cfg.projector.input_dim == 2048);
}

TEST_CASE("damaged model folders give errors that name the file and tensor") {
  SUBCASE("missing folder") {
    auto msg = error_of([] { uocr::Checkpoint::open("/nonexistent/model"); }, Status::invalid_model);
    CHECK(msg.find("/nonexistent/model") != std::string::npos);
  }
  SUBCASE("truncated shard") {
    ModelCopy m("trunc");
    std::string data = m.read("model-00001-of-000001.safetensors");
    m.write("model-00001-of-000001.safetensors", data.substr(0, data.size() / 2));
    auto msg = error_of([&] { uocr::Checkpoint::open(m.dir.string()); }, Status::invalid_model);
    CHECK(msg.find("model-00001-of-000001.safetensors") != std::string::npos);
    CHECK(msg.find("truncated") != std::string::npos);
  }
  SUBCASE("header cut short") {
    ModelCopy m("hdr");
    m.write("model-00001-of-000001.safetensors", m.read("model-00001-of-000001.safetensors").substr(0, 100));
    error_of([&] { uocr::Checkpoint::open(m.dir.string()); }, Status::invalid_model);
  }
  SUBCASE("corrupt header JSON") {
    ModelCopy m("json");
    std::string data = m.read("model-00001-of-000001.safetensors");
    data[8] = '[';
    data[9] = '!';
    m.write("model-00001-of-000001.safetensors", data);
    auto msg = error_of([&] { uocr::Checkpoint::open(m.dir.string()); }, Status::invalid_model);
    CHECK(msg.find("JSON") != std::string::npos);
  }
  SUBCASE("config that does not match the tensor shapes") {
    ModelCopy m("shape");
    std::string cfg = m.read("config.json");
    replace_all(cfg, "\"intermediate_size\": 40", "\"intermediate_size\": 41");
    m.write("config.json", cfg);
    auto msg = error_of([&] { uocr_test::bind_model_folder(m.dir.string()); }, Status::invalid_model);
    CHECK(msg.find("model.layers.0.mlp.gate_proj.weight") != std::string::npos);
    CHECK(msg.find("[40, 16]") != std::string::npos);
  }
  SUBCASE("config with fewer layers than the checkpoint") {
    ModelCopy m("layers");
    std::string cfg = m.read("config.json");
    replace_all(cfg, "\"num_hidden_layers\": 3", "\"num_hidden_layers\": 2");
    m.write("config.json", cfg);
    auto msg = error_of([&] { uocr_test::bind_model_folder(m.dir.string()); }, Status::invalid_model);
    CHECK(msg.find("model.layers.2") != std::string::npos);
  }
  SUBCASE("index names a tensor the shard lacks") {
    ModelCopy m("index");
    std::string idx = m.read("model.safetensors.index.json");
    idx.replace(idx.find("\"weight_map\": {") + 15, 0, "\"model.extra\": \"model-00001-of-000001.safetensors\",");
    m.write("model.safetensors.index.json", idx);
    auto msg = error_of([&] { uocr::Checkpoint::open(m.dir.string()); }, Status::invalid_model);
    CHECK(msg.find("model.extra") != std::string::npos);
  }
  SUBCASE("bad config JSON") {
    ModelCopy m("cfg");
    m.write("config.json", "{\"hidden_size\": ");
    error_of([&] { uocr::ModelConfig::load(m.path("config.json")); }, Status::invalid_model);
  }
  SUBCASE("config with a missing key") {
    ModelCopy m("key");
    m.write("config.json", "{\"model_type\": \"unlimited-ocr\"}");
    auto msg = error_of([&] { uocr::ModelConfig::load(m.path("config.json")); }, Status::invalid_model);
    CHECK(msg.find("hidden_size") != std::string::npos);
  }
  SUBCASE("unsupported attention variant") {
    ModelCopy m("mla");
    std::string cfg = m.read("config.json");
    replace_all(cfg, "\"use_mla\": false", "\"use_mla\": true");
    m.write("config.json", cfg);
    error_of([&] { uocr::ModelConfig::load(m.path("config.json")); }, Status::unsupported);
  }
}

TEST_CASE("config values that would divide by zero, overflow or index past the vocabulary are refused, naming the key") {
  // The golden config with `from` replaced by `to`: loading it must fail with invalid_model
  // (not SIGFPE, not an allocation of absurd size) and name every word of `key`.
  auto refused = [](const std::string& from, const std::string& to, std::vector<std::string> key) {
    CAPTURE(to);
    ModelCopy m("cfgval");
    std::string cfg = m.read("config.json");
    replace_all(cfg, from, to);
    m.write("config.json", cfg);
    const std::string msg = error_of([&] { uocr::ModelConfig::load(m.path("config.json")); }, Status::invalid_model);
    for (const std::string& k : key) CHECK_MESSAGE(msg.find(k) != std::string::npos, msg);
  };
  const std::string sam_heads = "\"heads\": 3,\n        \"layers\": 3,";  // the clip block's "heads" is followed by "image_size"
  const std::string clip_heads = "\"heads\": 3,\n        \"image_size\": 224,";
  SUBCASE("SAM heads 0") { refused(sam_heads, "\"heads\": 0,\n        \"layers\": 3,", {"sam_vit_b", "heads"}); }
  SUBCASE("SAM width not divisible by its heads") { refused(sam_heads, "\"heads\": 5,\n        \"layers\": 3,", {"sam_vit_b", "heads"}); }
  SUBCASE("SAM window 0") { refused("\"window_size\": 14", "\"window_size\": 0", {"sam_vit_b", "window_size"}); }
  SUBCASE("CLIP heads 0") { refused(clip_heads, "\"heads\": 0,\n        \"image_size\": 224,", {"clip-l-14-224", "heads"}); }
  SUBCASE("CLIP patch size 0") { refused("\"patch_size\": 14", "\"patch_size\": 0", {"clip-l-14-224", "patch_size"}); }
  SUBCASE("CLIP patch size not dividing its image size") {
    refused("\"patch_size\": 14", "\"patch_size\": 15", {"clip-l-14-224", "patch_size"});
  }
  SUBCASE("huge page size") { refused("\"image_size\": 1024,", "\"image_size\": 1073741824,", {"vision_config.image_size"}); }
  SUBCASE("huge CLIP image size") {
    refused("\"image_size\": 224,", "\"image_size\": 1073741816,", {"clip-l-14-224", "image_size"});  // 14 x 76695844
  }
  SUBCASE("zero or negative eps") {
    for (const char* eps : {"0", "-1e-06"})
      refused("\"vocab_size\": 129280,", std::string("\"vocab_size\": 129280, \"rms_norm_eps\": ") + eps + ",", {"rms_norm_eps"});
  }
  SUBCASE("RoPE theta zero or beyond float") {
    for (const char* theta : {"0", "1e39"})
      refused("\"vocab_size\": 129280,", std::string("\"vocab_size\": 129280, \"rope_theta\": ") + theta + ",", {"rope_theta"});
  }
  SUBCASE("special token ids outside the vocabulary") {
    refused("\"eos_token_id\": 1,", "\"eos_token_id\": 129280,", {"eos_token_id", "129280"});
    refused("\"bos_token_id\": 0,", "\"bos_token_id\": -1,", {"bos_token_id"});
    refused("\"vocab_size\": 129280,", "\"vocab_size\": 129280, \"pad_token_id\": 200000,", {"pad_token_id"});
  }
}

TEST_CASE("safetensors data_offsets must tile the data section, naming the tensors that do not") {
  // As Hugging Face's safetensors requires: overlapping ranges would alias one tensor's weights
  // with another's, and bytes of no tensor mean a header that does not describe its file.
  const std::string path =
      (fs::temp_directory_path() / ("uocr_tiling_" + std::to_string(std::random_device{}()) + ".safetensors")).string();
  // F32 tensors {name, elements, begin, end} over a data section of `data_bytes`.
  struct Tensor {
    const char* name;
    int elements;
    int begin, end;
  };
  auto load = [&](const std::vector<Tensor>& tensors, size_t data_bytes) {
    std::string header = "{";
    for (const Tensor& t : tensors)
      header += std::string(header.size() > 1 ? "," : "") + "\"" + t.name + "\":{\"dtype\":\"F32\",\"shape\":[" +
                std::to_string(t.elements) + "],\"data_offsets\":[" + std::to_string(t.begin) + "," + std::to_string(t.end) + "]}";
    header += "}";
    std::string file(8, '\0');
    for (int i = 0; i < 8; ++i) file[size_t(i)] = char((header.size() >> (8 * i)) & 0xff);
    std::ofstream(path, std::ios::binary) << file << header << std::string(data_bytes, '\1');
    return uocr::SafetensorsFile(path).tensors().size();
  };
  CHECK(load({{"b", 2, 0, 8}, {"a", 3, 8, 20}, {"empty", 0, 20, 20}}, 20) == 3);  // in any order
  SUBCASE("overlapping") {
    const std::string msg = error_of([&] { load({{"a", 2, 0, 8}, {"b", 2, 4, 12}}, 12); }, Status::invalid_model);
    CHECK_MESSAGE(msg.find("tensors a [0, 8) and b [4, 12) overlap") != std::string::npos, msg);
  }
  SUBCASE("one range twice") {
    const std::string msg = error_of([&] { load({{"w1", 2, 0, 8}, {"w2", 2, 0, 8}}, 8); }, Status::invalid_model);
    CHECK_MESSAGE(msg.find("tensors w1 [0, 8) and w2 [0, 8) overlap") != std::string::npos, msg);
  }
  SUBCASE("a gap between two tensors") {
    const std::string msg = error_of([&] { load({{"a", 1, 0, 4}, {"b", 1, 8, 12}}, 12); }, Status::invalid_model);
    CHECK_MESSAGE(msg.find("bytes [4, 8) of the data section belong to no tensor (between a [0, 4) and b [8, 12)") !=
                      std::string::npos, msg);
  }
  SUBCASE("bytes after the last tensor") {
    const std::string msg = error_of([&] { load({{"a", 2, 0, 8}}, 12); }, Status::invalid_model);
    CHECK_MESSAGE(msg.find("the last 4 bytes of the data section belong to no tensor (the last data is a [0, 8))") !=
                      std::string::npos, msg);
  }
  fs::remove(path);
}

TEST_CASE("a safetensors file whose header leaves its data misaligned loads with every tensor aligned and unchanged") {
  // The kernels read bf16 and f32 weights in place through typed pointers; a header of odd length
  // (legal JSON padding) must not hand them misaligned addresses.
  ModelCopy m("misaligned");
  const char* shard = "model-00001-of-000001.safetensors";
  const std::string data = m.read(shard);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | uint8_t(data[size_t(i)]);
  const uint64_t padded = header_len + 1 + (header_len % 2);  // odd: the data section starts at an odd offset
  std::string file = data.substr(0, 8 + header_len) + std::string(padded - header_len, ' ') + data.substr(8 + header_len);
  for (int i = 0; i < 8; ++i) file[size_t(i)] = char((padded >> (8 * i)) & 0xff);
  m.write(shard, file);

  const uocr::SafetensorsFile original(golden_model_dir() + "/" + shard), moved(m.path(shard));
  REQUIRE(moved.tensors().size() == original.tensors().size());
  for (const auto& [name, t] : moved.tensors()) {
    CAPTURE(name);
    CHECK(reinterpret_cast<uintptr_t>(t.data) % uocr::dtype_size(t.dtype) == 0);
    CHECK(t.to_vector() == original.tensors().at(name).to_vector());
  }
  uocr_test::bind_model_folder(m.dir.string());
}

TEST_CASE("npy round trip and golden arrays") {
  const std::string p = (fs::temp_directory_path() / "uocr_npy_roundtrip.npy").string();
  std::vector<float> v = {1.5f, -2.f, 3.25f, 0.f, 7.f, 8.f};
  uocr::write_npy_f32(p, {2, 3}, v.data());
  auto a = uocr::read_npy(p);
  CHECK(a.shape == std::vector<int64_t>{2, 3});
  CHECK(a.to_f32() == v);
  fs::remove(p);
  auto ids = uocr::read_npy(uocr_test::golden("input_ids.npy")).to_i64();
  REQUIRE(ids.size() == 277);  // BOS, 273 x <image>, "document parsing."
  CHECK(ids[0] == 0);
  CHECK(ids[1] == 128815);
  CHECK(ids[274] == 34030);
  CHECK(ids[276] == 16);
  auto neck = uocr::read_npy(uocr_test::golden("sam_neck.npy"));
  CHECK(neck.descr == "<f4");
  CHECK(neck.shape == std::vector<int64_t>{1, 24, 64, 64});
  error_of([] { uocr::read_npy(golden_model_dir() + "/config.json"); }, Status::invalid_argument);
}

TEST_CASE("linear kernel matches a naive product for bf16 weights, decode and GEMM paths") {
  auto cfg = uocr::ModelConfig::load(golden_model_dir() + "/config.json");
  auto ck = uocr::Checkpoint::open(golden_model_dir());
  auto w = uocr::ModelWeights::bind(ck, cfg);
  const auto& l = w.sam.blocks[0].lin1;  // [192, 48] with bias
  const std::vector<float> wf = l.weight->to_vector(), bf = l.bias->to_vector();
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  for (int64_t m : {1, 3, 37}) {
    std::vector<float> x(size_t(m * l.in()));
    for (float& f : x) f = nd(rng);
    auto y = uocr::cpu::linear(x, m, l);
    double max_err = 0;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < l.out(); ++j) {
        double ref = bf[size_t(j)];
        for (int64_t c = 0; c < l.in(); ++c) ref += double(x[size_t(i * l.in() + c)]) * wf[size_t(j * l.in() + c)];
        max_err = std::max(max_err, std::abs(ref - y[size_t(i * l.out() + j)]));
      }
    CHECK(max_err < 1e-4);
  }
}

TEST_CASE("bf16 compute: float32 sums of the bf16-rounded products, every shape, both weight types") {
  if (!uocr::cpu::bf16_compute_available()) {
    MESSAGE("this CPU has no AVX-512 BF16: Precision::bf16 runs the float32 kernels, checked below");
  }
  MESSAGE("bf16 products (past 128 rows, and MoE experts of AMX widths) run on "
          << std::string(uocr::cpu::amx_bf16_available() ? "AMX tiles" : "AVX-512 vectors")
          << "; both units checked where the CPU has them");
  std::mt19937 rng(11);
  std::normal_distribution<float> nd;
  // m: one micro-kernel row short of a tile and past it, the tail; n: not a multiple of the
  // 16-row panel or the 32-column step; k: odd (a zero-padded pair) and past one k pass (512).
  // m from 5 to kSmallGemmRows (128): the small-m kernel, bf16 weights only (as MoE experts are);
  // widths AMX takes there (k a multiple of 32, n of 16; a lone last 16 weight rows; one and
  // several x panels, an odd count) and ones it leaves to the vector kernel.
  for (auto [m, n, k] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {129, 17, 3}, {200, 300, 257}, {131, 33, 1100}, {5, 17, 3}, {26, 300, 257}, {128, 33, 1100}, {7, 6, 31},
           {26, 48, 64}, {5, 32, 96}, {100, 80, 640}}) {
    for (uocr::DType dtype : {uocr::DType::bf16, uocr::DType::f32}) {
      if (m <= 128 && dtype == uocr::DType::f32) continue;
      std::vector<float> x(size_t(m * k)), wf(size_t(n * k)), bias(static_cast<size_t>(n));
      for (float& v : x) v = nd(rng);
      for (float& v : wf) v = nd(rng);
      for (float& v : bias) v = nd(rng);
      std::vector<uint16_t> wb(wf.size());
      for (size_t i = 0; i < wf.size(); ++i) wb[i] = uocr::f32_to_bf16(wf[i]);
      uocr::TensorView w, b;
      w.dtype = dtype;
      w.shape = {n, k};
      w.data = dtype == uocr::DType::bf16 ? reinterpret_cast<const uint8_t*>(wb.data()) : reinterpret_cast<const uint8_t*>(wf.data());
      b.shape = {n};
      b.data = reinterpret_cast<const uint8_t*>(bias.data());
      std::vector<float> y(size_t(m * n)), y32(size_t(m * n));
      uocr::cpu::linear(x.data(), m, w, &b, y.data(), uocr::Precision::bf16);
      uocr::cpu::linear(x.data(), m, w, &b, y32.data(), uocr::Precision::f32);
      // Reference in double over what bf16 compute multiplies: both operands rounded to bf16
      // (exact products), so only float32 accumulation separates it from the kernel.
      std::vector<double> ref(y.size()), scale(y.size());
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double r = bias[size_t(j)], a = std::fabs(bias[size_t(j)]);
          for (int64_t c = 0; c < k; ++c) {
            const double t = double(uocr::round_to_bf16(x[size_t(i * k + c)])) * uocr::bf16_to_f32(wb[size_t(j * k + c)]);
            r += t;
            a += std::fabs(t);
          }
          ref[size_t(i * n + j)] = r;
          scale[size_t(i * n + j)] = a;
        }
      // The largest error relative to the sum of |terms|.
      const auto worst_of = [&](const std::vector<float>& out) {
        double worst = 0;
        for (size_t i = 0; i < out.size(); ++i) worst = std::max(worst, std::fabs(ref[i] - out[i]) / scale[i]);
        return worst;
      };
      const double worst = worst_of(y);
      double differs = 0;
      for (size_t i = 0; i < y.size(); ++i) differs = std::max(differs, double(std::fabs(y[i] - y32[i])));
      CAPTURE(m);
      CAPTURE(n);
      CAPTURE(k);
      if (uocr::cpu::bf16_compute_available()) {
        CHECK(worst < 1e-6);   // float32 accumulation error, relative to the sum of |terms|
        CHECK(differs > 0);    // and not the float32 path: inputs were rounded
      } else {
        CHECK(differs == 0);
      }
#ifdef UOCR_CPU_BF16_KERNEL
      // Both units (AMX tiles where the CPU has them, linear()'s choice then; AVX-512 vectors)
      // agree with the reference too, and linear() ran the default unit.
      if (uocr::cpu::bf16_compute_available()) {
        std::vector<uocr::cpu::Bf16Unit> units{uocr::cpu::Bf16Unit::vector};
        if (uocr::cpu::amx_bf16_available()) units.push_back(uocr::cpu::Bf16Unit::amx);
        for (uocr::cpu::Bf16Unit unit : units) {
          std::vector<float> yu(y.size());
          if (m > 128)
            uocr::cpu::gemm_bf16(x.data(), m, w, yu.data(), bias.data(), unit);
          else
            uocr::cpu::gemm_bf16_small_m(x.data(), m, wb.data(), n, k, yu.data(), bias.data(), unit);
          CAPTURE(int(unit));
          CHECK(worst_of(yu) < 1e-6);
          if (unit == (uocr::cpu::amx_bf16_available() ? uocr::cpu::Bf16Unit::amx : uocr::cpu::Bf16Unit::vector)) CHECK(yu == y);
        }
      }
#endif
    }
  }
  // A decode step's mat-vec (m <= 4) and float32 weights up to kSmallGemmRows rows keep float32
  // whatever is asked.
  for (auto [m, dtype] : std::vector<std::pair<int64_t, uocr::DType>>{{4, uocr::DType::bf16}, {64, uocr::DType::f32}}) {
    const int64_t n = 40, k = 24;
    std::vector<float> x(size_t(m * k)), wf(size_t(n * k)), y(size_t(m * n)), y32(size_t(m * n));
    for (float& v : x) v = nd(rng);
    for (float& v : wf) v = nd(rng);
    std::vector<uint16_t> wb(wf.size());
    for (size_t i = 0; i < wf.size(); ++i) wb[i] = uocr::f32_to_bf16(wf[i]);
    uocr::TensorView w;
    w.dtype = dtype;
    w.shape = {n, k};
    w.data = dtype == uocr::DType::bf16 ? reinterpret_cast<const uint8_t*>(wb.data()) : reinterpret_cast<const uint8_t*>(wf.data());
    uocr::cpu::linear(x.data(), m, w, nullptr, y.data(), uocr::Precision::bf16);
    uocr::cpu::linear(x.data(), m, w, nullptr, y32.data(), uocr::Precision::f32);
    CAPTURE(m);
    CHECK(y == y32);
  }
}

#ifdef UOCR_CPU_AMX_KERNEL
TEST_CASE("AMX products inside a caller's loop (the vision attention's): packed rows and columns, ragged shapes") {
  if (!uocr::cpu::amx_bf16_available()) {
    MESSAGE("this CPU has no AMX-BF16: the vision attention runs float32, nothing to check here");
    return;
  }
  std::mt19937 rng(17);
  std::normal_distribution<float> nd;
  // q·kᵀ at the 1024 view's shapes for one block, probabilities·v (k = 4096 keys, n = hd), and
  // shapes that pad every dimension (m, n not multiples of 32, k not of 32, one lone panel).
  for (auto [m, n, k] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {128, 4096, 64}, {128, 64, 4096}, {37, 50, 16}, {64, 16, 1600}, {5, 33, 70}}) {
    std::vector<float> a(size_t(m * k)), b(size_t(n * k)), bt(size_t(k * n));
    for (float& v : a) v = nd(rng);
    for (float& v : b) v = nd(rng);
    for (int64_t j = 0; j < n; ++j)
      for (int64_t c = 0; c < k; ++c) bt[size_t(c * n + j)] = b[size_t(j * k + c)];
    const int64_t words = uocr::cpu::amx_rows(n) * uocr::cpu::amx_pairs(k);
    std::vector<uint32_t> rows_packed(size_t(words), 1), columns_packed(size_t(words), 2);
    uocr::cpu::pack_bf16_rows(b.data(), n, k, k, rows_packed.data());
    uocr::cpu::pack_bf16_columns(bt.data(), k, n, n, columns_packed.data());
    CAPTURE(m);
    CAPTURE(n);
    CAPTURE(k);
    CHECK(rows_packed == columns_packed);  // b's rows and bᵀ's columns are the same operand
    std::vector<uint16_t> a_rows(size_t(uocr::cpu::amx_rows(m) * 2 * uocr::cpu::amx_pairs(k)), 0xFFFF);
    uocr::cpu::round_bf16_rows(a.data(), m, k, a_rows.data());
    // Output rows wider than n: the columns past n keep their sentinel.
    const int64_t ldy = n + 3;
    std::vector<float> y(size_t(m * ldy), -7.f);
    {
      const uocr::cpu::AmxTiles tiles;
      uocr::cpu::amx_product(a_rows.data(), rows_packed.data(), m, n, k, y.data(), ldy);
    }
    double worst = 0;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double r = 0, s = 0;
        for (int64_t c = 0; c < k; ++c) {
          const double t = double(uocr::round_to_bf16(a[size_t(i * k + c)])) * uocr::round_to_bf16(b[size_t(j * k + c)]);
          r += t;
          s += std::fabs(t);
        }
        worst = std::max(worst, std::fabs(r - y[size_t(i * ldy + j)]) / s);
      }
      for (int64_t j = n; j < ldy; ++j) CHECK(y[size_t(i * ldy + j)] == -7.f);
    }
    CHECK(worst < 1e-6);
  }
}
#endif
