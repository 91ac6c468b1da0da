// safetensors reader over a memory map: header validated completely before any tensor is used,
// so a truncated or corrupt file is an error naming the file and tensor, never a crash.
#pragma once
#include <algorithm>
#include <cstdint>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "uocr/core/dtype.hpp"
#include "uocr/core/error.hpp"
#include "uocr/io/mapped_file.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

// A tensor inside a mapped checkpoint: no copy, valid while the owning file stays open.
struct TensorView {
  std::string name;
  std::string file;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  // i8 weights: one scale per row (dim 0); an element's value is its integer times its row's
  // scale (model/quantization.hpp). Null for every other tensor.
  const float* row_scale = nullptr;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  int64_t dim(size_t i) const { return shape.at(i); }
  // Reads element range [offset, offset + n) as float32 (i8 weights dequantized).
  void read_f32(int64_t offset, int64_t n, float* out) const {
    if (n == 0) return;  // `out` may be null (an empty vector's data()), which memcpy must not see
    to_f32(dtype, data + size_t(offset) * dtype_size(dtype), out, size_t(n));
    if (!row_scale) return;
    const int64_t cols = numel() / shape[0];
    for (int64_t i = 0; i < n;) {
      const int64_t row = (offset + i) / cols, end = std::min(n, (row + 1) * cols - offset);
      const float s = row_scale[row];
      for (; i < end; ++i) out[i] *= s;
    }
  }
  std::vector<float> to_vector() const {
    std::vector<float> v(static_cast<size_t>(numel()));
    read_f32(0, numel(), v.data());
    return v;
  }
};

inline std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path) : map_(path) {
    const size_t size = map_.size();
    require(size >= 8, Status::invalid_model, [&] { return path + ": too small for a safetensors file"; });
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | map_.data()[i];
    require(header_len <= size - 8, Status::invalid_model, [&] {
      return path + ": header length " + std::to_string(header_len) + " exceeds file size " +
             std::to_string(size) + " (truncated file?)";
    });
    nlohmann::json header;
    try {
      header = nlohmann::json::parse(map_.data() + 8, map_.data() + 8 + header_len);
    } catch (const nlohmann::json::exception& e) {
      throw Error(Status::invalid_model, path + ": header is not valid JSON: " + e.what());
    }
    require(header.is_object(), Status::invalid_model, [&] { return path + ": header is not a JSON object"; });
    const uint8_t* base = map_.data() + 8 + header_len;
    const uint64_t data_size = size - 8 - header_len;
    // The kernels read elements in place, through pointers of their type. Hugging Face's writer
    // pads the header to 8 bytes; a file whose header does not leave its data aligned still
    // loads, from an aligned copy of its data section.
    if (reinterpret_cast<uintptr_t>(base) % kDataAlignment != 0) {
      try {
        aligned_data_.assign(base, base + data_size);
      } catch (const std::bad_alloc&) {
        throw Error(Status::out_of_memory, path + ": no memory for an aligned copy of its " + std::to_string(data_size) +
                                               "-byte data section (its header length " + std::to_string(header_len) +
                                               " leaves the data misaligned)");
      }
      base = aligned_data_.data();
    }
    for (auto it = header.begin(); it != header.end(); ++it) {
      if (it.key() == "__metadata__") continue;
      tensors_.emplace(it.key(), parse_entry(path, it.key(), it.value(), base, data_size));
    }
    check_tiling(path, data_size, base);
  }

  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const std::string& path() const { return map_.path(); }

 private:
  static DType parse_dtype(const std::string& path, const std::string& name, const std::string& s) {
    if (s == "BF16") return DType::bf16;
    if (s == "F16") return DType::f16;
    if (s == "F32") return DType::f32;
    if (s == "I8") return DType::i8;
    throw Error(Status::unsupported, path + ": tensor " + name + " has dtype " + s + " (supported: BF16, F16, F32, I8)");
  }

  static TensorView parse_entry(const std::string& path, const std::string& name, const nlohmann::json& e,
                                const uint8_t* base, uint64_t data_size) {
    auto bad = [&](const std::string& why) { return Error(Status::invalid_model, path + ": tensor " + name + ": " + why); };
    if (!e.is_object() || !e.contains("dtype") || !e.contains("shape") || !e.contains("data_offsets"))
      throw bad("entry needs dtype, shape and data_offsets");
    const auto& js = e["shape"];
    const auto& jo = e["data_offsets"];
    if (!e["dtype"].is_string() || !js.is_array() || !jo.is_array() || jo.size() != 2) throw bad("malformed entry");
    TensorView t;
    t.name = name;
    t.file = path;
    t.dtype = parse_dtype(path, name, e["dtype"].get<std::string>());
    uint64_t numel = 1;
    for (const auto& d : js) {
      if (!d.is_number_unsigned()) throw bad("shape entries must be non-negative integers");
      const uint64_t v = d.get<uint64_t>();
      if (v > (uint64_t(1) << 40) || (v && numel > (uint64_t(1) << 62) / v)) throw bad("shape too large");
      numel *= v;
      t.shape.push_back(int64_t(v));
    }
    if (!jo[0].is_number_unsigned() || !jo[1].is_number_unsigned()) throw bad("data_offsets must be integers");
    const uint64_t begin = jo[0].get<uint64_t>(), end = jo[1].get<uint64_t>();
    if (begin > end || end > data_size)
      throw bad("data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + ") outside the " +
                std::to_string(data_size) + "-byte data section (truncated file?)");
    if (end - begin != numel * dtype_size(t.dtype))
      throw bad("byte size " + std::to_string(end - begin) + " does not match shape " + shape_string(t.shape));
    if (begin % dtype_size(t.dtype) != 0) throw bad("misaligned data offset");
    t.data = base + begin;
    return t;
  }

  // The tensors' byte ranges must tile the data section, in some order, as Hugging Face's
  // safetensors requires: no two share a byte (one tensor's weights would alias another's), no
  // byte belongs to none and nothing follows the last.
  void check_tiling(const std::string& path, uint64_t data_size, const uint8_t* base) const {
    struct Range {
      uint64_t begin, end;
      const std::string* name;
    };
    std::vector<Range> ranges;
    for (const auto& kv : tensors_) {
      const uint64_t begin = uint64_t(kv.second.data - base);
      ranges.push_back({begin, begin + uint64_t(kv.second.numel()) * dtype_size(kv.second.dtype), &kv.first});
    }
    std::sort(ranges.begin(), ranges.end(),
              [](const Range& a, const Range& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
    auto span = [](const Range& r) { return *r.name + " [" + std::to_string(r.begin) + ", " + std::to_string(r.end) + ")"; };
    uint64_t covered = 0;
    for (size_t i = 0; i < ranges.size(); ++i) {
      const Range& r = ranges[i];
      if (r.begin < covered)
        throw Error(Status::invalid_model, path + ": the data of tensors " + span(ranges[i - 1]) + " and " + span(r) +
                                               " overlap (data_offsets must tile the data section)");
      if (r.begin > covered)
        throw Error(Status::invalid_model, path + ": bytes [" + std::to_string(covered) + ", " + std::to_string(r.begin) +
                                               ") of the data section belong to no tensor (" +
                                               (i ? "between " + span(ranges[i - 1]) + " and " : "before ") + span(r) +
                                               "; data_offsets must tile the data section)");
      covered = r.end;
    }
    require(covered == data_size, Status::invalid_model, [&] {
      return path + ": the last " + std::to_string(data_size - covered) + " bytes of the data section belong to no tensor" +
             (ranges.empty() ? std::string() : " (the last data is " + span(ranges.back()) + ")") +
             "; data_offsets must tile the data section";
    });
  }

  static constexpr uintptr_t kDataAlignment = 8;

  MappedFile map_;
  std::vector<uint8_t> aligned_data_;  // empty unless the mapped data section is misaligned
  std::map<std::string, TensorView> tensors_;
};

// The size file `path` must have by its header alone: 8 + the header's length + the end of the
// last tensor's data. Reads just the header, so a truncated download is told apart from a corrupt
// file without mapping it; a file cut inside its header is an error saying so.
inline uint64_t safetensors_expected_size(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  require(bool(f), Status::io, [&] { return "cannot open " + path; });
  f.seekg(0, std::ios::end);
  const uint64_t size = uint64_t(f.tellg());
  f.seekg(0);
  uint8_t len[8] = {};
  f.read(reinterpret_cast<char*>(len), 8);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | len[i];
  require(f && size - 8 >= header_len, Status::invalid_model, [&] {
    return path + ": truncated inside its header (" + std::to_string(size) + " bytes" +
           (f ? ", the header alone needs " + std::to_string(8 + header_len) : std::string()) + ")";
  });
  std::string text(header_len, '\0');
  f.read(text.data(), std::streamsize(header_len));
  const nlohmann::json header = nlohmann::json::parse(text, nullptr, false);
  require(header.is_object(), Status::invalid_model, [&] { return path + ": header is not a JSON object"; });
  uint64_t data_end = 0;
  for (const auto& entry : header) {
    if (!entry.is_object() || !entry.contains("data_offsets")) continue;  // __metadata__
    const auto& offsets = entry["data_offsets"];
    if (offsets.is_array() && offsets.size() == 2 && offsets[1].is_number_unsigned())
      data_end = std::max(data_end, offsets[1].get<uint64_t>());
  }
  return 8 + header_len + data_end;
}

UOCR_NAMESPACE_END
