// A copy of a model folder (all bf16 weights in one shard) with element 0 of one tensor set to the
// bf16 value `bits`, in a temp folder removed with it: weights damaged on purpose.
#pragma once
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

namespace uocr_test {

struct DamagedModel {
  std::filesystem::path dir;
  DamagedModel(const std::string& source, const std::string& tensor, uint16_t bits) {
    dir = std::filesystem::temp_directory_path() / ("uocr_damaged_" + std::to_string(std::random_device{}()));
    std::filesystem::copy(source, dir);  // files, symlinks followed (tiny-b links its tokenizer)
    std::fstream f(dir / "model-00001-of-000001.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    unsigned char len[8];
    REQUIRE(f.read(reinterpret_cast<char*>(len), 8));
    uint64_t header_len = 0;
    for (int i = 7; i >= 0; --i) header_len = header_len << 8 | len[i];
    std::string header(size_t(header_len), '\0');
    REQUIRE(f.read(&header[0], std::streamsize(header_len)));
    const nlohmann::json entry = nlohmann::json::parse(header).at(tensor);
    REQUIRE(entry.at("dtype") == "BF16");
    f.seekp(std::streamoff(8 + header_len + entry.at("data_offsets").at(0).get<uint64_t>()));
    const char le[2] = {char(bits & 0xFF), char(bits >> 8)};
    REQUIRE(f.write(le, 2));
  }
  ~DamagedModel() { std::filesystem::remove_all(dir); }
  DamagedModel(const DamagedModel&) = delete;
  DamagedModel& operator=(const DamagedModel&) = delete;
};

}  // namespace uocr_test
