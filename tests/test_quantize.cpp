// Int8 weights (uocr/model/quantization.hpp): the CPU kernels on int8 rows, `quantize_model_folder`
// (what `uocr quantize` runs) on the golden model, and the errors of damaged int8 folders.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>

#include <nlohmann/json.hpp>

#include "support/checks.hpp"
#include "support/golden_model.hpp"
#include "support/test_support.hpp"
#include "uocr/backends/cpu/linear.hpp"
#include "uocr/decoder/decoder.hpp"
#include "uocr/io/read_file.hpp"
#include "uocr/io/safetensors_writer.hpp"
#include "uocr/model/checkpoint.hpp"
#include "uocr/model/config.hpp"
#include "uocr/model/model.hpp"
#include "uocr/model/quantize_folder.hpp"
#include "uocr/model/weights.hpp"

namespace fs = std::filesystem;
using uocr::DType;
using uocr::Status;

namespace {

using uocr_test::error_of;

struct TempDir {
  fs::path dir = fs::temp_directory_path() / ("uocr_quantize_" + std::to_string(std::random_device{}()));
  TempDir() { fs::create_directories(dir); }
  ~TempDir() { fs::remove_all(dir); }
  std::string operator/(const std::string& name) const { return (dir / name).string(); }
};

// An int8 copy of the golden model (tiny-b) in `dir`.
std::string int8_golden(const TempDir& t) {
  const std::string out = t / "int8";
  uocr::quantize_model_folder(uocr_test::golden_model_dir(), out);
  return out;
}

// A tensor of a safetensors file, with its bytes, to rewrite a damaged copy.
struct Tensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

// Rewrites `file` with `edit` applied to its tensors.
void rewrite(const std::string& file, const std::function<void(std::vector<Tensor>&)>& edit) {
  std::vector<Tensor> tensors;
  {
    const uocr::SafetensorsFile f(file);
    for (const auto& [name, t] : f.tensors())
      tensors.push_back({name, t.dtype, t.shape,
                         std::string(reinterpret_cast<const char*>(t.data), size_t(t.numel()) * uocr::dtype_size(t.dtype))});
  }
  edit(tensors);
  std::vector<uocr::SafetensorsEntry> entries;
  for (const Tensor& t : tensors)
    entries.push_back({t.name, t.dtype, t.shape, [&t](const auto& put) { put(t.bytes.data(), t.bytes.size()); }});
  uocr::write_safetensors(file, entries);
}

Tensor& find(std::vector<Tensor>& ts, const std::string& name) {
  for (Tensor& t : ts)
    if (t.name == name) return t;
  FAIL("no tensor " << name);
  return ts.front();
}

void edit_config(const std::string& dir, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = nlohmann::json::parse(uocr::read_text_file(dir + "/config.json"));
  edit(j);
  std::ofstream(dir + "/config.json") << j.dump(2);
}

}  // namespace

TEST_CASE("int8 rows: every kernel computes scale · Σ q·x, each row's bits independent of the batch") {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> qd(-127, 127);
  std::normal_distribution<float> nd;
  for (int64_t k : {64, 133}) {  // a tail of k that is not a multiple of 16
    const int64_t n = 37;         // rows past the kernels' groups of 4 and blocks of 16
    std::vector<int8_t> q(size_t(n * k));
    std::vector<float> scale(static_cast<size_t>(n));
    for (int8_t& v : q) v = int8_t(qd(rng));
    for (float& s : scale) s = std::fabs(nd(rng)) * 0.01f;
    scale[3] = 0.f;  // an all-zero row has scale 0
    uocr::TensorView w;
    w.name = "int8 test matrix";
    w.dtype = DType::i8;
    w.shape = {n, k};
    w.data = reinterpret_cast<const uint8_t*>(q.data());
    w.row_scale = scale.data();

    std::vector<float> deq(size_t(n * k));
    w.read_f32(0, n * k, deq.data());
    for (int64_t i = 0; i < n * k; ++i) REQUIRE(deq[size_t(i)] == float(q[size_t(i)]) * scale[size_t(i / k)]);

    for (int64_t m : {1, 2, 3, 4, 5, 17, 128, 129, 260}) {
      CAPTURE(k);
      CAPTURE(m);
      std::vector<float> x(size_t(m * k)), y(size_t(m * n));
      for (float& v : x) v = nd(rng);
      uocr::cpu::linear(x.data(), m, w, nullptr, y.data());
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          double dot = 0, magnitude = 0;
          for (int64_t c = 0; c < k; ++c) {
            const double term = double(q[size_t(j * k + c)]) * x[size_t(i * k + c)];
            dot += term;
            magnitude += std::fabs(term);
          }
          const double ref = dot * scale[size_t(j)];
          REQUIRE(std::fabs(y[size_t(i * n + j)] - ref) <= 1e-5 * magnitude * scale[size_t(j)] + 1e-30);
        }
      if (m <= uocr::cpu::row_exact_rows(w)) {
        std::vector<float> alone(static_cast<size_t>(n));
        for (int64_t i = 0; i < m; ++i) {
          uocr::cpu::linear(x.data() + i * k, 1, w, nullptr, alone.data());
          REQUIRE(std::equal(alone.begin(), alone.end(), y.begin() + i * n));
        }
      }
      std::vector<float> batched(size_t(m * n));
      const uocr::cpu::LinearJob job{x.data(), m, &w, nullptr, batched.data()};
      uocr::cpu::linear_batch(&job, 1);
      REQUIRE(batched == y);
    }
  }
}

TEST_CASE("quantize_model_folder: the decoder's linear layers and lm_head int8, everything else byte for byte") {
  TempDir t;
  const std::string src = uocr_test::golden_model_dir(), out = int8_golden(t);
  const auto cfg = uocr::ModelConfig::load(out + "/config.json");
  CHECK(cfg.int8_weights);
  const auto ck = uocr::Checkpoint::open(out), original = uocr::Checkpoint::open(src);
  const auto w = uocr::ModelWeights::bind(ck, cfg);
  const auto wo = uocr::ModelWeights::bind(original, uocr::ModelConfig::load(src + "/config.json"));
  CHECK(ck.parameter_count() == original.parameter_count());  // the scales are not parameters

  auto check_int8 = [](const uocr::TensorView* q, const uocr::TensorView* f) {
    CAPTURE(q->name);
    REQUIRE(q->dtype == DType::i8);
    REQUIRE(q->row_scale != nullptr);
    const int64_t rows = q->dim(0), cols = q->dim(1);
    std::vector<float> a(static_cast<size_t>(cols)), b(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      q->read_f32(r * cols, cols, a.data());
      f->read_f32(r * cols, cols, b.data());
      float max_abs = 0;
      for (float v : b) max_abs = std::max(max_abs, std::fabs(v));
      REQUIRE(q->row_scale[r] == max_abs / 127.f);
      for (int64_t c = 0; c < cols; ++c) REQUIRE(std::fabs(a[size_t(c)] - b[size_t(c)]) <= 0.5001f * q->row_scale[r]);
    }
  };
  const auto& d = w.decoder;
  check_int8(d.lm_head, wo.decoder.lm_head);
  for (size_t l = 0; l < d.layers.size(); ++l) {
    const auto &L = d.layers[l], &O = wo.decoder.layers[l];
    for (auto p : {&uocr::DecoderLayerWeights::q, &uocr::DecoderLayerWeights::k, &uocr::DecoderLayerWeights::v,
                   &uocr::DecoderLayerWeights::o})
      check_int8((L.*p).weight, (O.*p).weight);
    auto mlp = [&](const uocr::MlpWeights& a, const uocr::MlpWeights& b) {
      check_int8(a.gate.weight, b.gate.weight);
      check_int8(a.up.weight, b.up.weight);
      check_int8(a.down.weight, b.down.weight);
    };
    if (L.moe) {
      for (size_t e = 0; e < L.experts.size(); ++e) mlp(L.experts[e], O.experts[e]);
      if (L.has_shared) mlp(L.shared, O.shared);
      CHECK(L.router.weight->dtype != DType::i8);
    } else {
      mlp(L.dense, O.dense);
    }
  }
  // What stays: the same dtype and bytes.
  size_t kept = 0;
  for (const auto& [name, v] : ck.tensors()) {
    if (v->dtype == DType::i8) continue;
    if (name.size() > 6 && name.compare(name.size() - 6, 6, "_scale") == 0) continue;
    CAPTURE(name);
    const uocr::TensorView& o = *original.tensors().at(name);
    REQUIRE(v->dtype == o.dtype);
    REQUIRE(v->shape == o.shape);
    REQUIRE(std::memcmp(v->data, o.data, size_t(o.numel()) * uocr::dtype_size(o.dtype)) == 0);
    ++kept;
  }
  CHECK(kept > 0);

  // The int8 copy computes what its dequantized weights compute (prefill logits of a prompt).
  uocr::Decoder int8(cfg.decoder, w.decoder), source(cfg.decoder, wo.decoder);
  uocr::KvCache c1(cfg.decoder, 0), c2(cfg.decoder, 0);
  const std::vector<int32_t> ids{0, 5, 17, 3, 9, 11, 2, 7};
  const auto a = int8.prefill(int8.embed(ids), 0, c1), b = source.prefill(source.embed(ids), 0, c2);
  float max_logit = 0, max_diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    max_logit = std::max(max_logit, std::fabs(b[i]));
    max_diff = std::max(max_diff, std::fabs(a[i] - b[i]));
  }
  MESSAGE("tiny-b prefill logits, int8 vs source: max |diff| " << max_diff << " of max |logit| " << max_logit);
  CHECK(max_diff > 0.f);             // the int8 weights are in use
  CHECK(max_diff < 0.05f * max_logit);

  SUBCASE("the copy goes into a new or empty folder, from a folder that is not int8 already") {
    fs::create_directories(t / "full");
    std::ofstream(t / "full/x") << "x";
    error_of([&] { uocr::quantize_model_folder(src, t / "full"); }, Status::invalid_argument);
    CHECK(fs::exists(t / "full/x"));
    const std::string msg = error_of([&] { uocr::quantize_model_folder(out, t / "again"); }, Status::invalid_argument);
    CHECK_MESSAGE(msg.find("is int8 already") != std::string::npos, msg);
    CHECK(!fs::exists(t / "again"));
  }
}

TEST_CASE("damaged int8 folders are refused with an error that names the tensor or the key") {
  TempDir t;
  const std::string dir = int8_golden(t), file = dir + "/model.safetensors";
  uocr_test::bind_model_folder(dir);
  const std::string q = "model.layers.1.self_attn.q_proj.weight";

  SUBCASE("an int8 tensor without its scale") {
    rewrite(file, [&](std::vector<Tensor>& ts) {
      ts.erase(std::remove_if(ts.begin(), ts.end(), [&](const Tensor& x) { return x.name == q + "_scale"; }), ts.end());
    });
    const std::string msg = error_of([&] { uocr_test::bind_model_folder(dir); }, Status::invalid_model);
    CHECK_MESSAGE(msg.find("int8 tensor " + q + " has no " + q + "_scale") != std::string::npos, msg);
  }
  SUBCASE("a scale of the wrong shape") {
    rewrite(file, [&](std::vector<Tensor>& ts) {
      Tensor& s = find(ts, q + "_scale");
      s.shape = {s.shape[0] / 2, 2};
    });
    const std::string msg = error_of([&] { uocr_test::bind_model_folder(dir); }, Status::invalid_model);
    CHECK_MESSAGE(msg.find(q + "_scale is F32 [") != std::string::npos, msg);
    CHECK_MESSAGE(msg.find("expected one float scale per row") != std::string::npos, msg);
  }
  SUBCASE("a scale that is not finite") {
    rewrite(file, [&](std::vector<Tensor>& ts) {
      const float nan = std::nanf("");
      std::memcpy(find(ts, q + "_scale").bytes.data() + 4 * 5, &nan, 4);
    });
    const std::string msg = error_of([&] { uocr_test::bind_model_folder(dir); }, Status::invalid_model);
    CHECK_MESSAGE(msg.find(q + "_scale row 5 is nan") != std::string::npos, msg);
  }
  SUBCASE("an int8 tensor outside the decoder's linear layers") {
    const std::string v = "model.vision_model.transformer.layers.0.mlp.fc1.weight";
    rewrite(file, [&](std::vector<Tensor>& ts) {
      Tensor& x = find(ts, v);
      std::vector<float> f(x.bytes.size() / 2);
      uocr::to_f32(DType::bf16, x.bytes.data(), f.data(), f.size());
      x.dtype = DType::i8;
      x.bytes.assign(f.size(), '\0');
      ts.push_back({v + "_scale", DType::f32, {x.shape[0], 1}, std::string(size_t(x.shape[0]) * 4, '\0')});
    });
    const std::string msg = error_of([&] { uocr_test::bind_model_folder(dir); }, Status::unsupported);
    CHECK_MESSAGE(msg.find("tensor " + v + " is int8; int8 is read for the decoder's linear layers and lm_head only") !=
                      std::string::npos, msg);
  }
  SUBCASE("int8 tensors with no quantization_config") {
    edit_config(dir, [](nlohmann::json& j) { j.erase("quantization_config"); });
    const std::string msg = error_of([&] { uocr_test::bind_model_folder(dir); }, Status::invalid_model);
    CHECK_MESSAGE(msg.find("has int8 tensors but its config.json declares no quantization_config") != std::string::npos, msg);
  }
  SUBCASE("a quantization_config over weights that are not int8") {
    for (const auto& e : fs::directory_iterator(uocr_test::golden_model_dir()))
      if (e.path().extension() == ".safetensors") fs::copy_file(e.path(), t / "plain.safetensors");
    fs::remove(file);
    fs::rename(t / "plain.safetensors", file);
    const std::string msg = error_of([&] { uocr_test::bind_model_folder(dir); }, Status::invalid_model);
    CHECK_MESSAGE(msg.find("declares int8 weights but no tensor is int8") != std::string::npos, msg);
  }
  SUBCASE("quantization schemes uocr does not read") {
    const std::vector<std::pair<std::function<void(nlohmann::json&)>, std::string>> cases{
        {[](nlohmann::json& c) { c["quant_method"] = "awq"; }, "has quant_method 'awq'"},
        {[](nlohmann::json& c) { c["format"] = "pack-quantized"; }, "has format 'pack-quantized'"},
        {[](nlohmann::json& c) { c["config_groups"]["group_0"]["weights"]["num_bits"] = 4; }, "weights num_bits 4"},
        {[](nlohmann::json& c) { c["config_groups"]["group_0"]["weights"]["strategy"] = "group"; },
         "weights strategy \"group\""},
        {[](nlohmann::json& c) { c["config_groups"]["group_0"]["weights"]["symmetric"] = false; }, "asymmetric"},
        {[](nlohmann::json& c) { c["config_groups"]["group_0"]["input_activations"] = {{"num_bits", 8}}; },
         "quantizes input_activations"},
    };
    const std::string config = uocr::read_text_file(dir + "/config.json");
    for (const auto& [edit, expected] : cases) {
      std::ofstream(dir + "/config.json") << config;
      edit_config(dir, [&](nlohmann::json& j) { edit(j["quantization_config"]); });
      const std::string msg = error_of([&] { uocr_test::bind_model_folder(dir); }, Status::unsupported);
      CHECK_MESSAGE(msg.find(expected) != std::string::npos, msg);
    }
  }
}

TEST_CASE("a weight that is not finite has no int8 form: quantize refuses it and leaves nothing behind") {
  TempDir t;
  const std::string src = t / "src";
  fs::create_directories(src);
  for (const auto& e : fs::directory_iterator(uocr_test::golden_model_dir())) fs::copy_file(e.path(), src + "/" + e.path().filename().string());
  std::string shard;
  for (const auto& e : fs::directory_iterator(src))
    if (e.path().extension() == ".safetensors") shard = e.path().string();
  const std::string k = "model.layers.0.self_attn.k_proj.weight";
  rewrite(shard, [&](std::vector<Tensor>& ts) {
    const uint16_t inf = 0x7f80;  // bf16 +inf
    std::memcpy(find(ts, k).bytes.data() + 2 * 70, &inf, 2);
  });
  const std::string msg = error_of([&] { uocr::quantize_model_folder(src, t / "out"); }, Status::invalid_model);
  CHECK_MESSAGE(msg.find("tensor " + k + " row ") != std::string::npos, msg);
  CHECK(!fs::exists(t / "out"));
}
