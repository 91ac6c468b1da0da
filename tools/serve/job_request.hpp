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
#include "data_uri.hpp"
#include "job_options.hpp"
#include "job_store.hpp"

namespace uocr_serve {

// The path of one job, its id the first match; the job's other routes extend it.
inline const std::string kJobPath = "/v1/jobs/([^/]+)";

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
        set_job_options(r.options, j);
      } else {
        set_job_option(r.options, name, part.content);
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
        set_job_options(r.options, *it);
      } else {
        set_job_option(r.options, it.key(), *it);
      }
    }
  }
  if (files.empty()) throw ApiError(400, "the job has no file: upload a PDF or page images (multipart field 'file', or JSON 'files')", "files");
  for (size_t i = 0; i < files.size(); ++i) r.uploads.emplace_back(detail::stored_name(i, files[i]), std::move(files[i]));
  return r;
}

}  // namespace uocr_serve
