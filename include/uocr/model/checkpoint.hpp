// A model folder's weights as published: model.safetensors.index.json + shards (or a single
// model.safetensors). Lookups check names and shapes and say which file is at fault. An int8
// tensor comes with its row scales bound (model/quantization.hpp).
#pragma once
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "uocr/io/json_file.hpp"
#include "uocr/io/mapped_file.hpp"
#include "uocr/io/safetensors.hpp"
#include "uocr/model/quantization.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

// The files a model folder's weights are in: the shards model.safetensors.index.json lists, in
// first-listed order, with the shard of every tensor; or the single model.safetensors.
struct ShardIndex {
  std::vector<std::string> shards;                // plain file names
  std::map<std::string, std::string> weight_map;  // tensor -> shard; empty for a single file
};

inline ShardIndex read_shard_index(const std::string& dir) {
  ShardIndex out;
  const std::string index_path = dir + "/model.safetensors.index.json";
  if (file_exists(index_path)) {
    const nlohmann::json index = read_model_json(index_path);
    require(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(),
            Status::invalid_model, [&] { return index_path + ": missing object 'weight_map'"; });
    std::set<std::string> unique;
    for (auto it = index["weight_map"].begin(); it != index["weight_map"].end(); ++it) {
      require(it.value().is_string(), Status::invalid_model,
              [&] { return index_path + ": weight_map entry " + it.key() + " is not a file name"; });
      const std::string shard = it.value().get<std::string>();
      require(shard.find('/') == std::string::npos && shard != ".." && !shard.empty(), Status::invalid_model,
              [&] { return index_path + ": shard name '" + shard + "' must be a plain file name"; });
      out.weight_map[it.key()] = shard;
      if (unique.insert(shard).second) out.shards.push_back(shard);
    }
  } else if (file_exists(dir + "/model.safetensors")) {
    out.shards.push_back("model.safetensors");
  } else {
    throw Error(Status::invalid_model, dir + ": no model.safetensors.index.json or model.safetensors found");
  }
  return out;
}

class Checkpoint {
 public:
  static Checkpoint open(const std::string& dir) {
    Checkpoint c;
    c.dir_ = dir;
    const auto [shards, weight_map] = read_shard_index(dir);
    for (const std::string& shard : shards) {
      c.files_.push_back(std::make_unique<SafetensorsFile>(dir + "/" + shard));
      for (const auto& kv : c.files_.back()->tensors()) {
        require(c.tensors_.emplace(kv.first, &kv.second).second, Status::invalid_model,
                [&] { return "tensor " + kv.first + " appears in more than one shard of " + dir; });
      }
    }
    for (const auto& kv : weight_map) {
      auto it = c.tensors_.find(kv.first);
      require(it != c.tensors_.end(), Status::invalid_model, [&] {
        return "tensor " + kv.first + " is listed in model.safetensors.index.json but missing from " + kv.second;
      });
      require(it->second->file == dir + "/" + kv.second, Status::invalid_model, [&] {
        return "tensor " + kv.first + " is in " + it->second->file + " but the index says " + kv.second;
      });
    }
    c.bind_int8_scales();
    return c;
  }

  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }

  // The tensor `name`, which must have exactly `shape`; marks it used.
  const TensorView& get(const std::string& name, const std::vector<int64_t>& shape) const {
    auto it = tensors_.find(name);
    require(it != tensors_.end(), Status::invalid_model,
            [&] { return "checkpoint " + dir_ + " lacks tensor " + name + " (expected shape " + shape_string(shape) + ")"; });
    const TensorView& t = *it->second;
    require(t.shape == shape, Status::invalid_model, [&] {
      return "tensor " + name + " in " + t.file + " has shape " + shape_string(t.shape) + ", expected " +
             shape_string(shape) + " from config.json";
    });
    used_.insert(name);
    if (t.row_scale) used_.insert(name + kScaleSuffix);
    return t;
  }

  // Whether any tensor is int8.
  bool has_int8() const { return !int8_.empty(); }

  // Names present in the files that no get() asked for (after the model is built): a config
  // that does not describe the checkpoint shows up here.
  std::vector<std::string> unused() const {
    std::vector<std::string> out;
    for (const auto& kv : tensors_)
      if (!used_.count(kv.first)) out.push_back(kv.first);
    return out;
  }

  // Every tensor by name (int8 ones with their scales bound).
  const std::map<std::string, const TensorView*>& tensors() const { return tensors_; }
  size_t size() const { return tensors_.size(); }
  int64_t parameter_count() const {
    int64_t n = 0;
    for (const auto& kv : tensors_)
      if (!is_int8_scale(kv.first)) n += kv.second->numel();
    return n;
  }
  const std::string& dir() const { return dir_; }

 private:
  // An int8 tensor as the kernels read it: its view with the row scales of X_scale attached.
  struct Int8Tensor {
    TensorView view;
    std::vector<float> scales;
  };

  void bind_int8_scales() {
    for (auto& kv : tensors_) {
      if (kv.second->dtype != DType::i8) continue;
      auto scale = tensors_.find(kv.first + kScaleSuffix);
      require(scale != tensors_.end(), Status::invalid_model, [&] {
        return kv.second->file + ": int8 tensor " + kv.first + " has no " + kv.first + kScaleSuffix + " (its row scales)";
      });
      Int8Tensor& q = int8_[kv.first];
      q.view = *kv.second;
      q.scales = read_row_scales(q.view, *scale->second);
      q.view.row_scale = q.scales.data();
      kv.second = &q.view;
    }
  }
  bool is_int8_scale(const std::string& name) const {
    const size_t n = std::char_traits<char>::length(kScaleSuffix);
    return name.size() > n && name.compare(name.size() - n, n, kScaleSuffix) == 0 &&
           int8_.count(name.substr(0, name.size() - n));
  }

  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*> tensors_;
  std::map<std::string, Int8Tensor> int8_;  // node-stable: tensors_ points into it
  mutable std::set<std::string> used_;
};

UOCR_NAMESPACE_END
