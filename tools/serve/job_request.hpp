// POST /v1/jobs: a document (a PDF, or ordered page images, or several of them in order) and its
// options, as multipart/form-data or JSON.
//   multipart: parts named "file" (or "files"), in page order; options as fields of their own
//     (mode=base, pages=3-7, ...) or as one "options" field holding a JSON object.
//   JSON: {"files": ["data:application/pdf;base64,...", "data:image/png;base64,..."], "options": {...}}
// Options: mode (base | gundam: one image only), prompt, dpi (PDF pages, 36..1200), pages ("N" or
// "FIRST-LAST", 1-based over the whole document), max_tokens, ngram_size, window_size,
// temperature, top_p, seed, callback_url (http or https; the server must have a callback secret).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "api_error.hpp"
#include "callback.hpp"
#include "data_uri.hpp"
#include "job_store.hpp"

namespace uocr_serve {

struct JobRequest {
  JobOptions options;
  std::vector<std::pair<std::string, std::string>> uploads;  // stored name (0001.pdf, 0002.image), bytes
};

namespace detail {

inline bool is_pdf_bytes(const std::string& bytes) { return bytes.rfind("%PDF-", 0) == 0; }

inline std::string stored_name(size_t index, const std::string& bytes) {
  char b[32];
  std::snprintf(b, sizeof b, "%04zu.%s", index + 1, is_pdf_bytes(bytes) ? "pdf" : "image");
  return b;
}

// One option, given as JSON (from a JSON body or the "options" field) or as a form field's text.
inline void set_job_option(JobOptions& o, const std::string& key, const nlohmann::json& v) {
  auto text = [&]() -> std::string {
    if (v.is_string()) return v.get<std::string>();
    throw ApiError(400, "option '" + key + "' must be a string", key);
  };
  auto integer = [&](int64_t lo, int64_t hi) -> int64_t {
    int64_t n = 0;
    if (v.is_number_integer()) n = v.get<int64_t>();
    else if (v.is_string()) {
      const std::string s = v.get<std::string>();
      size_t used = 0;
      try {
        n = std::stoll(s, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (s.empty() || used != s.size()) throw ApiError(400, "option '" + key + "' must be an integer", key);
    } else {
      throw ApiError(400, "option '" + key + "' must be an integer", key);
    }
    if (n < lo || n > hi) throw ApiError(400, "option '" + key + "' must be in " + std::to_string(lo) + ".." + std::to_string(hi), key);
    return n;
  };
  auto real = [&](double lo, double hi) -> double {
    double x = 0;
    if (v.is_number()) x = v.get<double>();
    else if (v.is_string()) {
      try {
        size_t used = 0;
        x = std::stod(v.get<std::string>(), &used);
        if (used != v.get<std::string>().size()) throw std::invalid_argument("");
      } catch (const std::exception&) {
        throw ApiError(400, "option '" + key + "' must be a number", key);
      }
    } else {
      throw ApiError(400, "option '" + key + "' must be a number", key);
    }
    if (!(x >= lo && x <= hi)) throw ApiError(400, "option '" + key + "' is out of range", key);
    return x;
  };
  if (key == "mode") {
    o.mode = text();
    if (o.mode != "base" && o.mode != "gundam") throw ApiError(400, "option 'mode' must be base or gundam", key);
  } else if (key == "prompt") o.prompt = text();
  else if (key == "dpi") o.dpi = int(integer(36, 1200));
  else if (key == "pages") {
    const std::string r = v.is_number_integer() ? std::to_string(v.get<int64_t>()) : text();
    const size_t dash = r.find('-');
    const nlohmann::json first = dash == std::string::npos ? r : r.substr(0, dash);
    const nlohmann::json last = dash == std::string::npos ? r : r.substr(dash + 1);
    JobOptions range;
    set_job_option(range, "first_page", first);
    set_job_option(range, "last_page", last);
    if (range.last_page < range.first_page) throw ApiError(400, "option 'pages' must be N or FIRST-LAST with FIRST <= LAST", key);
    o.first_page = range.first_page;
    o.last_page = range.last_page;
  } else if (key == "first_page") o.first_page = integer(1, INT32_MAX);
  else if (key == "last_page") o.last_page = integer(1, INT32_MAX);
  else if (key == "max_tokens") o.max_tokens = integer(1, INT32_MAX);
  else if (key == "ngram_size") o.ngram_size = int(integer(0, 1 << 20));
  else if (key == "window_size" || key == "ngram_window") o.ngram_window = int(integer(1, 1 << 24));
  else if (key == "temperature") o.temperature = real(0, 100);
  else if (key == "top_p") o.top_p = real(1e-6, 1);
  else if (key == "seed") o.seed = uint64_t(integer(0, INT64_MAX));
  else if (key == "callback_url") {
    o.callback_url = text();
    std::string origin, path;
    if (!split_url(o.callback_url, origin, path)) throw ApiError(400, "option 'callback_url' must be an http:// or https:// URL", key);
  } else {
    throw ApiError(400, "unknown option '" + key + "'", key);
  }
}

inline void set_job_options(JobOptions& o, const nlohmann::json& options) {
  if (!options.is_object()) throw ApiError(400, "'options' must be a JSON object", "options");
  for (auto it = options.begin(); it != options.end(); ++it) set_job_option(o, it.key(), it.value());
}

}  // namespace detail

inline JobRequest parse_job_request(const httplib::Request& req) {
  JobRequest r;
  std::vector<std::string> files;
  if (req.is_multipart_form_data()) {
    for (const auto& [name, part] : req.files) {
      if (name == "file" || name == "files") {
        if (part.content.empty()) throw ApiError(400, "an uploaded file is empty", name);
        files.push_back(part.content);
      } else if (name == "options") {
        const nlohmann::json j = nlohmann::json::parse(part.content, nullptr, false);
        if (j.is_discarded()) throw ApiError(400, "the 'options' field is not valid JSON", "options");
        detail::set_job_options(r.options, j);
      } else {
        detail::set_job_option(r.options, name, part.content);
      }
    }
  } else {
    const nlohmann::json body = nlohmann::json::parse(req.body, nullptr, false);
    if (body.is_discarded()) throw ApiError(400, "the request body is neither multipart/form-data nor valid JSON");
    if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
    for (auto it = body.begin(); it != body.end(); ++it) {
      if (it.key() == "files") {
        if (!it->is_array()) throw ApiError(400, "'files' must be a list of data: URIs", "files");
        for (size_t i = 0; i < it->size(); ++i) {
          const std::string at = "files[" + std::to_string(i) + "]";
          if (!(*it)[i].is_string()) throw ApiError(400, "'" + at + "' must be a data: URI", at);
          files.push_back(decode_data_uri((*it)[i].get<std::string>(), at).bytes);
        }
      } else if (it.key() == "options") {
        detail::set_job_options(r.options, *it);
      } else {
        detail::set_job_option(r.options, it.key(), *it);
      }
    }
  }
  if (files.empty()) throw ApiError(400, "the job has no file: upload a PDF or page images (multipart field 'file', or JSON 'files')", "files");
  for (size_t i = 0; i < files.size(); ++i) r.uploads.emplace_back(detail::stored_name(i, files[i]), std::move(files[i]));
  return r;
}

}  // namespace uocr_serve
