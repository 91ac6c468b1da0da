// uocr_decode.json of a model folder: the page-group settings the model reads long documents
// best with, measured by whoever trained it. A model trained on short documents (such as the
// bundled demo model) can need other settings than the library's defaults, which follow upstream;
// callers who leave a setting unset get the folder's value (session/page_group_choice.hpp).
//
//   {"pages_per_group": 3, "overlap_pages": 2, "positions": "group", "slide_kv": "recompute", "comment": "..."}
//
// Every key is optional; an absent file sets nothing. Unknown keys are refused, so a typo is
// reported instead of being silently ignored.
#pragma once
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "uocr/core/error.hpp"
#include "uocr/io/json_file.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

// How decode positions are numbered once a document outgrows one page group (page_groups.hpp).
enum class PositionPolicy {
  limit,        // upstream's one-shot numbering; a document past the context length is refused
  extrapolate,  // one-shot numbering past the context length
  group,        // every page group at the positions of a document of G pages
};

inline const char* position_policy_name(PositionPolicy p) {
  return p == PositionPolicy::group ? "group" : p == PositionPolicy::extrapolate ? "extrapolate" : "limit";
}

inline std::optional<PositionPolicy> parse_position_policy(const std::string& s) {
  for (PositionPolicy p : {PositionPolicy::limit, PositionPolicy::extrapolate, PositionPolicy::group})
    if (s == position_policy_name(p)) return p;
  return std::nullopt;
}

// What a page group's slide does with the KV it keeps (page_groups.hpp, recompute_on_slide).
enum class SlideKv {
  reuse,      // kept pages and window as they are (upstream's infinite decoding)
  recompute,  // held pages, tail and window computed again, as a fresh G-page document
};

inline const char* slide_kv_name(SlideKv k) { return k == SlideKv::recompute ? "recompute" : "reuse"; }

inline std::optional<SlideKv> parse_slide_kv(const std::string& s) {
  for (SlideKv k : {SlideKv::reuse, SlideKv::recompute})
    if (s == slide_kv_name(k)) return k;
  return std::nullopt;
}

struct DecodeDefaults {
  int pages_per_group = 0;  // 0: not set
  int overlap_pages = 0;    // 0: not set
  std::optional<PositionPolicy> positions;
  std::optional<SlideKv> slide_kv;

  static constexpr const char* kFileName = "uocr_decode.json";

  static DecodeDefaults load_folder(const std::string& dir) {
    const std::string path = dir + "/" + kFileName;
    return file_exists(path) ? from_json(read_model_json(path), path) : DecodeDefaults{};
  }

  static DecodeDefaults from_json(const nlohmann::json& j, const std::string& path) {
    require(j.is_object(), Status::invalid_model, [&] { return path + ": top level must be an object"; });
    DecodeDefaults d;
    for (const auto& [key, value] : j.items()) {
      if (key == "comment") continue;
      if (key == "pages_per_group" || key == "overlap_pages") {
        // &key = key: lambdas capture structured bindings only from C++20 (clang refuses it in C++17).
        require(value.is_number_integer() && value.get<int64_t>() >= 1 && value.get<int64_t>() <= 1 << 20,
                Status::invalid_model, [&, &key = key] { return path + ": " + key + " must be a positive integer"; });
        (key == "pages_per_group" ? d.pages_per_group : d.overlap_pages) = value.get<int>();
      } else if (key == "positions") {
        require(value.is_string() && parse_position_policy(value.get<std::string>()), Status::invalid_model,
                [&] { return path + ": positions must be \"limit\", \"extrapolate\" or \"group\""; });
        d.positions = parse_position_policy(value.get<std::string>());
      } else if (key == "slide_kv") {
        require(value.is_string() && parse_slide_kv(value.get<std::string>()), Status::invalid_model,
                [&] { return path + ": slide_kv must be \"reuse\" or \"recompute\""; });
        d.slide_kv = parse_slide_kv(value.get<std::string>());
      } else {
        throw Error(Status::invalid_model, path + ": unknown key '" + key +
                                               "' (known: pages_per_group, overlap_pages, positions, slide_kv, comment)");
      }
    }
    require(d.pages_per_group != 1, Status::invalid_model,
            [&] { return path + ": pages_per_group must be >= 2 (the page being read and the next)"; });
    // An overlap is a choice for one group size, so it comes with one.
    require(d.overlap_pages == 0 || (d.pages_per_group != 0 && d.overlap_pages < d.pages_per_group), Status::invalid_model,
            [&] { return path + ": overlap_pages needs pages_per_group and must be below it"; });
    return d;
  }
};

UOCR_NAMESPACE_END
