// A model folder's int8 copy (what `uocr quantize IN OUT` runs): the decoder's linear layers and
// lm_head as int8 with one scale per row, everything else byte for byte, in the layout
// model/quantization.hpp describes. The copy loads like any model folder.
#pragma once
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "uocr/io/json_file.hpp"
#include "uocr/io/safetensors_writer.hpp"
#include "uocr/model/checkpoint.hpp"
#include "uocr/model/config.hpp"
#include "uocr/model/quantization.hpp"
#include "uocr/model/weights.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

struct QuantizeReport {
  int64_t matrices = 0;               // weight matrices made int8
  int64_t quantized_parameters = 0;   // their parameters
  int64_t parameters = 0;             // all parameters of the model
  uint64_t bytes_before = 0, bytes_after = 0;  // the weight files' sizes
};

namespace detail {

// The weights `uocr quantize` makes int8: every linear layer of the decoder and lm_head.
inline std::set<const TensorView*> int8_targets(const DecoderWeights& d) {
  std::set<const TensorView*> out{d.lm_head};
  auto mlp = [&](const MlpWeights& m) { out.insert({m.gate.weight, m.up.weight, m.down.weight}); };
  for (const DecoderLayerWeights& l : d.layers) {
    out.insert({l.q.weight, l.k.weight, l.v.weight, l.o.weight});
    if (l.moe) {
      for (const MlpWeights& e : l.experts) mlp(e);
      if (l.has_shared) mlp(l.shared);
    } else {
      mlp(l.dense);
    }
  }
  return out;
}

}  // namespace detail

// Writes the int8 copy of model folder `in` into `out`, which must not exist or be empty. On
// failure nothing is left in `out`.
inline QuantizeReport quantize_model_folder(const std::string& in, const std::string& out) {
  namespace fs = std::filesystem;
  std::error_code ec;
  require(fs::is_directory(in), Status::invalid_argument, [&] { return in + " is not a model folder"; });
  const bool existed = fs::exists(out);
  require(!existed || (fs::is_directory(out) && fs::is_empty(out)), Status::invalid_argument,
          [&] { return out + " exists and is not an empty folder (the int8 copy goes into a new one)"; });
  require(!existed || !fs::equivalent(in, out), Status::invalid_argument, [&] { return "the copy cannot replace " + in; });

  const std::string config_path = in + "/config.json";
  // Read once, in order: the copy's config.json keeps the source's key order.
  nlohmann::ordered_json config_json = read_model_json<nlohmann::ordered_json>(config_path);
  const ModelConfig config = ModelConfig::from_json(nlohmann::json(config_json), config_path);
  require(!config.int8_weights, Status::invalid_argument, [&] { return in + " is int8 already"; });
  const Checkpoint ck = Checkpoint::open(in);
  const ModelWeights weights = ModelWeights::bind(ck, config);
  const std::set<const TensorView*> targets = detail::int8_targets(weights.decoder);

  QuantizeReport report;
  report.parameters = ck.parameter_count();
  std::vector<SafetensorsEntry> entries;
  auto scales = std::make_shared<std::map<std::string, std::vector<float>>>();
  for (const auto& [name, t] : ck.tensors()) {
    if (!targets.count(t)) {
      entries.push_back({name, t->dtype, t->shape, [t = t](const auto& put) {
                           put(t->data, size_t(t->numel()) * dtype_size(t->dtype));
                         }});
      continue;
    }
    ++report.matrices;
    report.quantized_parameters += t->numel();
    entries.push_back({name, DType::i8, t->shape, [t = t, scales](const auto& put) {
                         const int64_t rows = t->dim(0), cols = t->dim(1);
                         std::vector<int8_t> q(size_t(rows * cols));
                         std::vector<float>& s = (*scales)[t->name];
                         s.assign(size_t(rows), 0.f);
                         int64_t bad_row = -1;
#pragma omp parallel
                         {
                           std::vector<float> row(static_cast<size_t>(cols));
#pragma omp for schedule(dynamic, 16)
                           for (int64_t r = 0; r < rows; ++r) {
                             t->read_f32(r * cols, cols, row.data());
                             bool finite = true;
                             for (float v : row) finite = finite && std::isfinite(v);
                             if (!finite) {
#pragma omp critical
                               bad_row = bad_row < 0 ? r : std::min(bad_row, r);
                               continue;
                             }
                             s[size_t(r)] = quantize_row(row.data(), cols, q.data() + r * cols);
                           }
                         }
                         require(bad_row < 0, Status::invalid_model, [&] {
                           return t->file + ": tensor " + t->name + " row " + std::to_string(bad_row) +
                                  " holds a value that is not finite; it has no int8 form";
                         });
                         put(q.data(), q.size());
                       }});
    entries.push_back({name + kScaleSuffix, DType::f32, {t->dim(0), 1}, [name = name, scales](const auto& put) {
                         const std::vector<float>& s = scales->at(name);
                         put(s.data(), s.size() * sizeof(float));
                       }});
  }

  if (!existed) fs::create_directories(out);
  try {
    write_safetensors(out + "/model.safetensors", entries);
    config_json["quantization_config"] = int8_quantization_config();
    std::ofstream config_out(out + "/config.json");
    config_out << config_json.dump(2) << "\n";
    config_out.close();
    require(bool(config_out), Status::io, [&] { return "cannot write " + out + "/config.json"; });
    for (const fs::directory_entry& e : fs::directory_iterator(in)) {
      const std::string file = e.path().filename().string();
      if (!e.is_regular_file() || file == "config.json" || file == "model.safetensors.index.json" ||
          e.path().extension() == ".safetensors")
        continue;
      fs::copy_file(e.path(), fs::path(out) / file);
    }
  } catch (...) {
    if (existed) {
      for (const fs::directory_entry& e : fs::directory_iterator(out, ec)) fs::remove_all(e.path(), ec);
    } else {
      fs::remove_all(out, ec);
    }
    throw;
  }
  for (const std::string& shard : read_shard_index(in).shards) report.bytes_before += fs::file_size(in + "/" + shard);
  report.bytes_after = fs::file_size(out + "/model.safetensors");
  return report;
}

UOCR_NAMESPACE_END
