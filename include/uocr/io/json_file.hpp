// A model folder's JSON files (config.json, the shard index, uocr_decode.json): read and parsed,
// or an invalid_model error naming the file.
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "uocr/core/error.hpp"
#include "uocr/io/mapped_file.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

template <class Json = nlohmann::json>
inline Json read_model_json(const std::string& path) {
  try {
    return Json::parse(read_text_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw Error(Status::invalid_model, path + ": not valid JSON: " + e.what());
  }
}

UOCR_NAMESPACE_END
