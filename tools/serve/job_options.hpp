// A job's options (POST /v1/jobs): what the client chose, kept in job.json so that a restarted
// server builds the same session, and their parsing from JSON values or form fields' text.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "api_error.hpp"
#include "stored_json.hpp"

namespace uocr_serve {

// Splits "http://host:port/path" into the part httplib::Client takes and the path; false if it is
// not an http or https URL.
inline bool split_url(const std::string& url, std::string& origin, std::string& path) {
  const size_t scheme = url.find("://");
  if (scheme == std::string::npos) return false;
  const std::string s = url.substr(0, scheme);
  if (s != "http" && s != "https") return false;
  const size_t slash = url.find('/', scheme + 3);
  origin = url.substr(0, slash);
  path = slash == std::string::npos ? "/" : url.substr(slash);
  return origin.size() > scheme + 3;
}

// What the client chose: kept in job.json, so that a restarted server builds the same session.
struct JobOptions {
  std::string mode = "base";     // gundam: a single image only
  std::string prompt;            // "": upstream's prompt for the page count
  int dpi = 300;                 // PDF pages
  int64_t first_page = 1, last_page = 0;  // 1-based, inclusive; 0: to the end
  int64_t max_tokens = 0;
  int ngram_size = 35, ngram_window = -1;
  double temperature = 0, top_p = 1;
  uint64_t seed = 0;
  std::string callback_url;

  nlohmann::json to_json() const {
    return {{"mode", mode}, {"prompt", prompt}, {"dpi", dpi}, {"first_page", first_page}, {"last_page", last_page},
            {"max_tokens", max_tokens}, {"ngram_size", ngram_size}, {"ngram_window", ngram_window}, {"temperature", temperature},
            {"top_p", top_p}, {"seed", seed}, {"callback_url", callback_url}};
  }
  static JobOptions from_json(const nlohmann::json& j) {
    JobOptions o;
    o.mode = j.at("mode").get<std::string>();
    o.prompt = j.at("prompt").get<std::string>();
    o.dpi = stored_integer<int>(j, "dpi");
    o.first_page = stored_integer<int64_t>(j, "first_page");
    o.last_page = stored_integer<int64_t>(j, "last_page");
    o.max_tokens = stored_integer<int64_t>(j, "max_tokens");
    o.ngram_size = stored_integer<int>(j, "ngram_size");
    o.ngram_window = stored_integer<int>(j, "ngram_window");
    o.temperature = stored_number(j, "temperature");
    o.top_p = stored_number(j, "top_p");
    o.seed = stored_integer<uint64_t>(j, "seed");
    o.callback_url = j.at("callback_url").get<std::string>();
    return o;
  }
};

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

}  // namespace uocr_serve
