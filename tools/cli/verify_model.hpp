// `uocr inspect model --verify [--checksums FILE]`: checks a downloaded model folder before use,
// one report line per check and one per problem:
//   - every shard the index names is there, of exactly the size its safetensors header implies;
//   - with --checksums, every listed file's SHA-256 (`sha256sum` lines "HEX  NAME", or a JSON
//     object NAME -> "HEX" or Git LFS's "sha256:HEX"), names relative to the model folder;
//   - the model loads: every tensor config.json needs bound with its shape, the tokenizer read.
// Exit 0 when every check passes, 1 otherwise.
#pragma once
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "uocr/io/mapped_file.hpp"
#include "uocr/io/safetensors.hpp"
#include "uocr/io/sha256.hpp"
#include "uocr/model/checkpoint.hpp"
#include "uocr/model/model.hpp"

namespace uocr_cli {

// A checksum as written in the file -> 64 lowercase hex digits; `where` names it in errors.
inline std::string sha256_digest(std::string v, const std::string& where) {
  if (v.rfind("sha256:", 0) == 0) v = v.substr(7);
  for (char& c : v) c = char(std::tolower(static_cast<unsigned char>(c)));
  uocr::require(v.size() == 64 && v.find_first_not_of("0123456789abcdef") == std::string::npos,
                uocr::Status::invalid_argument, [&] { return where + ": '" + v + "' is not a SHA-256 digest"; });
  return v;
}

// File name -> expected SHA-256, from `sha256sum` output or a JSON object.
inline std::map<std::string, std::string> read_checksums(const std::string& path) {
  const std::string text = uocr::read_text_file(path);
  std::map<std::string, std::string> out;
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '{') {
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
    uocr::require(j.is_object(), uocr::Status::invalid_argument, [&] { return path + ": not a valid JSON object"; });
    for (auto it = j.begin(); it != j.end(); ++it) {
      uocr::require(it.value().is_string(), uocr::Status::invalid_argument,
                    [&] { return path + ": the checksum of " + it.key() + " is not a string"; });
      out[it.key()] = sha256_digest(it.value().get<std::string>(), path + ": " + it.key());
    }
    return out;
  }
  std::istringstream lines(text);
  int number = 0;
  for (std::string line; std::getline(lines, line);) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    // "HEX  NAME" (text mode) or "HEX *NAME" (binary mode), as sha256sum writes them.
    const size_t space = line.find(' ');
    const bool well_formed = space != std::string::npos && space + 2 < line.size() &&
                             (line[space + 1] == ' ' || line[space + 1] == '*');
    const std::string where = path + " line " + std::to_string(number);
    uocr::require(well_formed, uocr::Status::invalid_argument, [&] { return where + ": expected 'SHA256  FILENAME'"; });
    std::string name = line.substr(space + 2);
    if (name.rfind("./", 0) == 0) name = name.substr(2);
    out[name] = sha256_digest(line.substr(0, space), where);
  }
  uocr::require(!out.empty(), uocr::Status::invalid_argument, [&] { return path + " lists no checksums"; });
  return out;
}

class ModelReport {
 public:
  void ok(const std::string& what) { std::printf("ok    %s\n", what.c_str()); }
  void fail(const std::string& what) {
    std::printf("FAIL  %s\n", what.c_str());
    ++failures_;
  }
  int failures() const { return failures_; }

 private:
  int failures_ = 0;
};

// Every shard present and complete; false when one is not (loading it would fail the same way).
inline bool check_shards(const std::string& dir, ModelReport& report) {
  namespace fs = std::filesystem;
  uocr::ShardIndex index;
  try {
    index = uocr::read_shard_index(dir);
  } catch (const uocr::Error& e) {
    report.fail(e.what());
    return false;
  }
  bool complete = true;
  for (const std::string& shard : index.shards) {
    const std::string path = dir + "/" + shard;
    if (!fs::is_regular_file(path)) {
      report.fail("missing shard " + shard + " (named by model.safetensors.index.json)");
      complete = false;
      continue;
    }
    try {
      const uint64_t size = fs::file_size(path), expected = uocr::safetensors_expected_size(path);
      if (size == expected) {
        report.ok("shard " + shard + " (" + std::to_string(size) + " bytes)");
        continue;
      }
      report.fail((size < expected ? "truncated shard " : "oversized shard ") + shard + ": " + std::to_string(size) +
                  " bytes, expected " + std::to_string(expected) + " from its header");
    } catch (const uocr::Error& e) {
      report.fail("truncated shard " + shard + ": " + e.what());
    }
    complete = false;
  }
  return complete;
}

inline void check_checksums(const std::string& dir, const std::string& checksums, ModelReport& report) {
  const bool tty = ::isatty(STDERR_FILENO);
  for (const auto& [name, expected] : read_checksums(checksums)) {
    const std::string path = (std::filesystem::path(dir) / name).string();
    if (!std::filesystem::is_regular_file(path)) {
      report.fail("missing file " + name + " (listed in " + checksums + ")");
      continue;
    }
    const uint64_t size = std::filesystem::file_size(path);
    // &name = name: lambdas capture structured bindings only from C++20 (clang refuses it in C++17).
    const std::string actual = uocr::sha256_file(path, [&, &name = name](uint64_t done) {
      if (tty) std::fprintf(stderr, "\r\033[Ksha256 %s %3d%%", name.c_str(), size ? int(done * 100 / size) : 100);
    });
    if (tty) std::fprintf(stderr, "\r\033[K");
    if (actual == expected)
      report.ok("sha256 " + name);
    else
      report.fail("checksum mismatch " + name + ": expected " + expected + ", actual " + actual);
  }
}

inline int verify_model(const std::string& dir, const std::string& checksums) {
  std::printf("verifying %s\n", dir.c_str());
  ModelReport report;
  const bool shards = check_shards(dir, report);
  if (!checksums.empty()) check_checksums(dir, checksums, report);
  if (shards) {
    try {
      const auto model = uocr::Model::load(dir);
      const size_t bound = model->checkpoint().size() - model->checkpoint().unused().size();
      report.ok("tensors: " + std::to_string(bound) + " bound to config.json, shapes and dtypes checked");
      report.ok("tokenizer: " + std::to_string(model->tokenizer().vocab_size()) + " tokens");
    } catch (const uocr::Error& e) {
      report.fail(std::string("model does not load: ") + e.what());
    }
  }
  if (report.failures() == 0) {
    std::printf("model verified\n");
    return 0;
  }
  std::printf("%d problem(s) found\n", report.failures());
  return 1;
}

}  // namespace uocr_cli
