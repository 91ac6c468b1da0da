// s3://bucket/prefix: a Storage in any S3-compatible object store (AWS S3, MinIO, Ceph RGW, ...),
// spoken to over libcurl, which signs every request with AWS Signature V4 (no cloud SDK).
// Settings come from the standard AWS variables:
//   AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY   required
//   AWS_SESSION_TOKEN                          temporary credentials (optional)
//   AWS_REGION or AWS_DEFAULT_REGION           default us-east-1
//   AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL    an S3-compatible server (http://127.0.0.1:9000),
//                                              addressed path-style: ENDPOINT/bucket/key
// Without an endpoint, objects live at https://bucket.s3.REGION.amazonaws.com/key.
// The credentials need s3:GetObject, s3:PutObject, s3:DeleteObject and s3:ListBucket: without
// s3:ListBucket, S3 answers 403 instead of 404 for a missing object, which is an error here.
#pragma once
#include <curl/curl.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "storage.hpp"
#include "uocr/core/error.hpp"
#include "uocr/io/sha256.hpp"
#include "uocr/tokenizer/utf8.hpp"

#if LIBCURL_VERSION_NUM < 0x074b00
#error "S3 storage needs libcurl 7.75 or newer (CURLOPT_AWS_SIGV4)"
#endif

namespace uocr_serve {
namespace s3_detail {

// The x-amz-content-sha256 header's value: libcurl 7.x signs that header as the payload hash but
// does not compute it for uploads, and S3 requires the header.
inline std::string sha256_hex(const std::string& data) {
  uocr::Sha256 h;
  h.update(data);
  return h.hex();
}

// SigV4's URI encoding: everything but A-Z a-z 0-9 - _ . ~ as %XX (upper-case hex); '/' kept in
// paths, encoded in query values. libcurl signs the URL as given, so it must already be canonical.
inline std::string uri_encode(const std::string& s, bool keep_slash) {
  static constexpr char hex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' ||
        c == '~' || (keep_slash && c == '/'))
      out += char(c);
    else
      out += {'%', hex[c >> 4], hex[c & 15]};
  }
  return out;
}

// The five predefined XML entities and character references; anything else stays as written.
inline std::string xml_unescape(const std::string& s) {
  std::string out;
  size_t i = 0;
  while (i < s.size()) {
    const size_t semi = s[i] == '&' ? s.find(';', i) : std::string::npos;
    if (semi == std::string::npos || semi - i > 12) {
      out += s[i++];
      continue;
    }
    const std::string name = s.substr(i + 1, semi - i - 1);
    if (name == "amp") out += '&';
    else if (name == "lt") out += '<';
    else if (name == "gt") out += '>';
    else if (name == "quot") out += '"';
    else if (name == "apos") out += '\'';
    else if (name.size() > 1 && name[0] == '#') {
      const bool is_hex = name[1] == 'x' || name[1] == 'X';
      const std::string digits = name.substr(is_hex ? 2 : 1);
      char* end = nullptr;
      const unsigned long cp = digits.empty() ? 0 : std::strtoul(digits.c_str(), &end, is_hex ? 16 : 10);
      if (digits.empty() || *end != '\0' || cp == 0 || cp > 0x10ffff) {
        out += s[i++];
        continue;
      }
      uocr::utf8::append(out, char32_t(cp));
    } else {
      out += s[i++];
      continue;
    }
    i = semi + 1;
  }
  return out;
}

// The text of every <tag>...</tag> in `xml`, unescaped. S3's answers are flat enough that this
// needs no parser: the tags read here (Key, Code, Message, ...) never nest in themselves.
inline std::vector<std::string> xml_texts(const std::string& xml, const std::string& tag) {
  std::vector<std::string> out;
  const std::string open = "<" + tag + ">", close = "</" + tag + ">";
  size_t pos = 0;
  while ((pos = xml.find(open, pos)) != std::string::npos) {
    const size_t begin = pos + open.size();
    const size_t end = xml.find(close, begin);
    if (end == std::string::npos) break;
    out.push_back(xml_unescape(xml.substr(begin, end - begin)));
    pos = end + close.size();
  }
  return out;
}
inline std::string xml_text(const std::string& xml, const std::string& tag) {
  std::vector<std::string> texts = xml_texts(xml, tag);
  return texts.empty() ? std::string() : std::move(texts.front());
}

inline std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

struct Settings {
  std::string access_key, secret_key, session_token;
  std::string region = "us-east-1";
  std::string endpoint;  // "" = AWS itself

  static Settings from_environment() {
    Settings s;
    s.access_key = env("AWS_ACCESS_KEY_ID");
    s.secret_key = env("AWS_SECRET_ACCESS_KEY");
    s.session_token = env("AWS_SESSION_TOKEN");
    uocr::require(!s.access_key.empty() && !s.secret_key.empty(), uocr::Status::invalid_argument,
                  "S3 storage needs credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                  "(and AWS_SESSION_TOKEN for temporary credentials)");
    for (const char* name : {"AWS_REGION", "AWS_DEFAULT_REGION"})
      if (!env(name).empty()) {
        s.region = env(name);
        break;
      }
    // The region goes into libcurl's "aws:amz:REGION:s3" and the host name.
    const bool region_ok = s.region.size() <= 64 && std::all_of(s.region.begin(), s.region.end(), [](char c) {
      return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
    });
    uocr::require(region_ok, uocr::Status::invalid_argument, [&] { return "AWS region '" + s.region + "' is not a region name"; });
    for (const char* name : {"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"})
      if (!env(name).empty()) {
        s.endpoint = env(name);
        uocr::require(s.endpoint.rfind("http://", 0) == 0 || s.endpoint.rfind("https://", 0) == 0, uocr::Status::invalid_argument,
                      [&] { return std::string(name) + " '" + s.endpoint + "' must start with http:// or https://"; });
        while (s.endpoint.back() == '/') s.endpoint.pop_back();
        break;
      }
    return s;
  }

  // The bucket's URL, without a trailing slash: path-style on a custom endpoint (S3-compatible
  // servers rarely have per-bucket host names), virtual-hosted on AWS except for names with dots,
  // which AWS's wildcard TLS certificate does not cover.
  std::string bucket_url(const std::string& bucket) const {
    if (!endpoint.empty()) return endpoint + "/" + bucket;
    if (bucket.find('.') != std::string::npos) return "https://s3." + region + ".amazonaws.com/" + bucket;
    return "https://" + bucket + ".s3." + region + ".amazonaws.com";
  }
};

struct Response {
  long status = 0;
  std::string body;
  bool ok() const { return status >= 200 && status < 300; }
  // The S3 error code of an error answer ("NoSuchKey"); "" when the body has none.
  std::string code() const { return xml_text(body, "Code"); }
  // "HTTP 403 SignatureDoesNotMatch: The request signature ..."
  std::string describe() const {
    std::string out = "HTTP " + std::to_string(status);
    const std::string c = code(), message = xml_text(body, "Message");
    if (!c.empty()) out += " " + c;
    if (!message.empty()) out += ": " + message;
    return out;
  }
};

inline void global_init() {
  // Once per process, before any handle; never cleaned up, as threads may still use curl at exit.
  static const CURLcode rc = curl_global_init(CURL_GLOBAL_DEFAULT);
  uocr::require(rc == CURLE_OK, uocr::Status::io, [&] { return std::string("cannot initialise libcurl: ") + curl_easy_strerror(rc); });
}

struct Upload {
  const std::string* bytes;
  size_t offset;
};
inline size_t read_body(char* buffer, size_t size, size_t count, void* user) {
  auto* upload = static_cast<Upload*>(user);
  const size_t n = std::min(size * count, upload->bytes->size() - upload->offset);
  std::memcpy(buffer, upload->bytes->data() + upload->offset, n);
  upload->offset += n;
  return n;
}
inline size_t write_body(char* data, size_t size, size_t count, void* user) {
  static_cast<std::string*>(user)->append(data, size * count);
  return size * count;
}

// One request: method "GET", "PUT" (with `body`) or "DELETE"; `url` already URI-encoded, its query
// sorted by name (SigV4's canonical form). Answers any HTTP status; transport failures, 5xx and
// throttling are tried again (3 tries in all), then throw Error(io) naming `what`.
inline Response send(const Settings& settings, const std::string& method, const std::string& url, const std::string& body,
                     const std::string& what) {
  global_init();
  const std::string payload_hash = "x-amz-content-sha256: " + sha256_hex(body);
  const std::string token = "x-amz-security-token: " + settings.session_token;
  const std::string sigv4 = "aws:amz:" + settings.region + ":s3";
  constexpr int kTries = 3;
  std::string failure;
  for (int attempt = 1;; ++attempt) {
    const auto started = std::chrono::steady_clock::now();
    std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> curl(curl_easy_init(), &curl_easy_cleanup);
    uocr::require(curl != nullptr, uocr::Status::io, "cannot create a libcurl handle");
    struct curl_slist* list = curl_slist_append(nullptr, payload_hash.c_str());
    if (list && !settings.session_token.empty()) {
      struct curl_slist* more = curl_slist_append(list, token.c_str());
      if (!more) curl_slist_free_all(list);
      list = more;
    }
    std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)> headers(list, &curl_slist_free_all);
    uocr::require(headers != nullptr, uocr::Status::io, "cannot build the request headers");
    Upload upload{&body, 0};
    Response response;
    char error[CURL_ERROR_SIZE] = {};
    CURL* h = curl.get();
    curl_easy_setopt(h, CURLOPT_URL, url.c_str());
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers.get());
    curl_easy_setopt(h, CURLOPT_AWS_SIGV4, sigv4.c_str());
    curl_easy_setopt(h, CURLOPT_USERNAME, settings.access_key.c_str());
    curl_easy_setopt(h, CURLOPT_PASSWORD, settings.secret_key.c_str());
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 10L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 300L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, error);
#if LIBCURL_VERSION_NUM >= 0x075500
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
#else
    curl_easy_setopt(h, CURLOPT_PROTOCOLS, long(CURLPROTO_HTTP | CURLPROTO_HTTPS));
#endif
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, &write_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &response.body);
    if (method == "PUT") {
      curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
      curl_easy_setopt(h, CURLOPT_READFUNCTION, &read_body);
      curl_easy_setopt(h, CURLOPT_READDATA, &upload);
      curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, curl_off_t(body.size()));
    } else if (method != "GET") {
      curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method.c_str());
    }
    const CURLcode rc = curl_easy_perform(h);
    bool again;
    if (rc == CURLE_OK) {
      curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &response.status);
      if (response.status < 500 && response.status != 429) return response;
      failure = response.describe();
      again = true;
    } else {
      failure = std::string(curl_easy_strerror(rc)) + (error[0] ? std::string(": ") + error : std::string());
      // A transfer that ran into the overall timeout is not started over: the caller would wait minutes more.
      again = !(rc == CURLE_OPERATION_TIMEDOUT && std::chrono::steady_clock::now() - started > std::chrono::seconds(60));
      response.status = 0;
    }
    if (!again || attempt == kTries) {
      if (response.status != 0) return response;  // the server's own 5xx answer, for the caller to describe
      throw uocr::Error(uocr::Status::io, "S3 " + method + " " + what + " failed: " + failure +
                                              (attempt > 1 ? " (" + std::to_string(attempt) + " tries)" : ""));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250 << (2 * (attempt - 1))));  // 250 ms, then 1 s
  }
}

}  // namespace s3_detail

class S3Storage final : public Storage {
 public:
  // `prefix` is "" or a storage key ("uocr/prod"); object keys go under it.
  S3Storage(std::string bucket, std::string prefix, s3_detail::Settings settings)
      : bucket_(std::move(bucket)), prefix_(std::move(prefix)), settings_(std::move(settings)) {
    // Bucket names go into host names and paths unencoded.
    const bool bucket_ok = !bucket_.empty() && bucket_.size() <= 255 && std::all_of(bucket_.begin(), bucket_.end(), [](char c) {
      return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '_';
    });
    uocr::require(bucket_ok, uocr::Status::invalid_argument, [&] { return "'" + bucket_ + "' is not an S3 bucket name"; });
    uocr::require(prefix_.empty() || is_storage_key(prefix_), uocr::Status::invalid_argument,
                  [&] { return "S3 prefix '" + prefix_ + "' must be letters, digits and \"._-\" between slashes"; });
  }

  void put(const std::string& key, const std::string& bytes) override {
    require_storage_key(key);
    // One PUT: S3 makes the object visible whole or not at all (up to 5 GiB per PUT).
    const s3_detail::Response r = send("PUT", object_url(full_key(key)), bytes, key);
    if (!r.ok()) fail("PUT", key, r);
  }

  std::optional<std::string> get(const std::string& key) override {
    require_storage_key(key);
    s3_detail::Response r = send("GET", object_url(full_key(key)), {}, key);
    if (r.ok()) return std::move(r.body);
    if (r.status == 404 && (r.code() == "NoSuchKey" || r.code().empty())) return std::nullopt;
    fail("GET", key, r);
  }

  void remove(const std::string& key) override {
    require_storage_key(key);
    remove_full_key(full_key(key), key);
  }

  void remove_prefix(const std::string& prefix) override {
    // Prefixes name folders, as in FileStorage: "jobs/1/" and "jobs/1" both leave "jobs/10/" alone.
    std::string folder = prefix;
    while (!folder.empty() && folder.back() == '/') folder.pop_back();
    require_storage_key(folder);
    const std::string list_prefix = full_key(folder) + "/";
    // Every key first, then the deletes: continuation tokens need not survive deletions.
    std::vector<std::string> keys;
    std::string token;
    while (true) {
      std::string query = "?";
      if (!token.empty()) query += "continuation-token=" + s3_detail::uri_encode(token, false) + "&";
      query += "list-type=2&prefix=" + s3_detail::uri_encode(list_prefix, false);
      const s3_detail::Response r = send("GET", settings_.bucket_url(bucket_) + query, {}, prefix);
      if (!r.ok()) fail("list", prefix, r);
      for (std::string& key : s3_detail::xml_texts(r.body, "Key"))
        if (key.rfind(list_prefix, 0) == 0) keys.push_back(std::move(key));
      if (s3_detail::xml_text(r.body, "IsTruncated") != "true") break;
      std::string next = s3_detail::xml_text(r.body, "NextContinuationToken");
      uocr::require(!next.empty() && next != token, uocr::Status::io,
                    [&] { return "S3 list " + describe(prefix) + " is truncated without a new continuation token"; });
      token = std::move(next);
    }
    for (const std::string& key : keys) remove_full_key(key, key.substr(prefix_.empty() ? 0 : prefix_.size() + 1));
  }

  std::string url() const override { return "s3://" + bucket_ + (prefix_.empty() ? "" : "/" + prefix_); }

 private:
  std::string full_key(const std::string& key) const { return prefix_.empty() ? key : prefix_ + "/" + key; }
  std::string object_url(const std::string& full) const { return settings_.bucket_url(bucket_) + "/" + s3_detail::uri_encode(full, true); }
  std::string describe(const std::string& key) const { return url() + "/" + key; }

  s3_detail::Response send(const char* method, const std::string& url, const std::string& body, const std::string& key) const {
    return s3_detail::send(settings_, method, url, body, describe(key));
  }
  [[noreturn]] void fail(const char* what, const std::string& key, const s3_detail::Response& r) const {
    throw uocr::Error(uocr::Status::io, std::string("S3 ") + what + " " + describe(key) + " failed: " + r.describe());
  }
  void remove_full_key(const std::string& full, const std::string& key) {
    const s3_detail::Response r = send("DELETE", object_url(full), {}, key);
    // S3 answers 204 whether or not the object was there; some compatible servers answer 404.
    if (!r.ok() && !(r.status == 404 && r.code() != "NoSuchBucket")) fail("DELETE", key, r);
  }

  std::string bucket_, prefix_;
  s3_detail::Settings settings_;
};

// s3://bucket or s3://bucket/prefix, with the settings from the environment.
inline std::unique_ptr<Storage> open_s3_storage(const std::string& url) {
  uocr::require(url.rfind("s3://", 0) == 0, uocr::Status::invalid_argument, [&] { return "'" + url + "' is not an s3:// URL"; });
  const std::string rest = url.substr(5);
  const size_t slash = rest.find('/');
  std::string bucket = rest.substr(0, slash);
  std::string prefix = slash == std::string::npos ? "" : rest.substr(slash + 1);
  while (!prefix.empty() && prefix.back() == '/') prefix.pop_back();
  uocr::require(!bucket.empty(), uocr::Status::invalid_argument, [&] { return "storage URL '" + url + "' must be s3://bucket/prefix"; });
  return std::make_unique<S3Storage>(std::move(bucket), std::move(prefix), s3_detail::Settings::from_environment());
}

}  // namespace uocr_serve
