// Where a fleet keeps what outlives one machine (docs/SCALING.md): each job's uploads, its
// session checkpoints and its result, under keys such as "jobs/<id>/input/0001.pdf".
//   file:///path          a folder on a file system every node mounts (NFS, CephFS, a local disk for one machine)
//   s3://bucket/prefix    any S3-compatible store (s3_storage.hpp)
// Every put is atomic: a reader sees the old object or the new one, never a part of one.
#pragma once
#include <algorithm>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "durable_file.hpp"
#include "uocr/core/error.hpp"
#include "uocr/io/read_file.hpp"

namespace uocr_serve {

class Storage {
 public:
  virtual ~Storage() = default;
  // Stores `bytes` under `key`, replacing any object there, atomically. Throws Error(io).
  virtual void put(const std::string& key, const std::string& bytes) = 0;
  // The object's bytes; nullopt when there is none. Throws Error(io) when the store cannot be read.
  virtual std::optional<std::string> get(const std::string& key) = 0;
  // Deletes the object if there is one. Throws Error(io).
  virtual void remove(const std::string& key) = 0;
  // Deletes every object whose key starts with `prefix` ("jobs/<id>/"). Throws Error(io).
  virtual void remove_prefix(const std::string& prefix) = 0;
  // The store's URL without credentials, for logs.
  virtual std::string url() const = 0;
};

// Keys are relative paths of letters, digits and "._-" between slashes: never "..", never absolute.
inline bool is_storage_key(const std::string& key) {
  if (key.empty() || key.front() == '/' || key.back() == '/') return false;
  size_t begin = 0;
  while (begin <= key.size()) {
    const size_t end = std::min(key.find('/', begin), key.size());
    const std::string part = key.substr(begin, end - begin);
    if (part.empty() || part == "." || part == "..") return false;
    for (char c : part)
      if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-')) return false;
    begin = end + 1;
  }
  return true;
}
inline void require_storage_key(const std::string& key) {
  uocr::require(is_storage_key(key), uocr::Status::invalid_argument, [&] { return "'" + key + "' is not a storage key"; });
}

// file:///path: objects are files under the folder, replaced durably (durable_file.hpp).
class FileStorage final : public Storage {
 public:
  explicit FileStorage(std::filesystem::path root) : root_(std::move(root)) {
    std::error_code ec;
    std::filesystem::create_directories(root_, ec);
    uocr::require(!ec, uocr::Status::io, [&] { return "cannot create the storage folder " + root_.string() + ": " + ec.message(); });
  }

  void put(const std::string& key, const std::string& bytes) override {
    require_storage_key(key);
    const std::filesystem::path path = root_ / key;
    std::error_code ec;
    std::filesystem::create_directories(path.parent_path(), ec);
    uocr::require(!ec, uocr::Status::io, [&] { return "cannot create " + path.parent_path().string() + ": " + ec.message(); });
    replace_durably(path, bytes);
  }

  std::optional<std::string> get(const std::string& key) override {
    require_storage_key(key);
    const std::filesystem::path path = root_ / key;
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) return std::nullopt;
    const std::vector<uint8_t> bytes = uocr::read_file_capped(path.string(), UINT64_MAX, "stored object");
    return std::string(bytes.begin(), bytes.end());
  }

  void remove(const std::string& key) override {
    require_storage_key(key);
    std::error_code ec;
    std::filesystem::remove(root_ / key, ec);
    uocr::require(!ec, uocr::Status::io, [&] { return "cannot delete " + (root_ / key).string() + ": " + ec.message(); });
  }

  void remove_prefix(const std::string& prefix) override {
    // Prefixes name folders here ("jobs/<id>/"): the folder goes with everything in it.
    std::string folder = prefix;
    while (!folder.empty() && folder.back() == '/') folder.pop_back();
    require_storage_key(folder);
    std::error_code ec;
    std::filesystem::remove_all(root_ / folder, ec);
    uocr::require(!ec, uocr::Status::io, [&] { return "cannot delete " + (root_ / folder).string() + ": " + ec.message(); });
  }

  std::string url() const override { return "file://" + root_.string(); }

 private:
  std::filesystem::path root_;
};

// s3_storage.hpp (built with libcurl; without it, a clear error).
inline std::unique_ptr<Storage> open_s3_storage(const std::string& url);

// The store a URL names. Throws Error(invalid_argument) for a URL of another kind.
inline std::unique_ptr<Storage> open_storage(const std::string& url) {
  if (url.rfind("file://", 0) == 0) {
    const std::string path = url.substr(7);
    uocr::require(!path.empty() && path.front() == '/', uocr::Status::invalid_argument,
                  [&] { return "storage URL '" + url + "' must be file:///absolute/path"; });
    return std::make_unique<FileStorage>(path);
  }
  if (url.rfind("s3://", 0) == 0) return open_s3_storage(url);
  throw uocr::Error(uocr::Status::invalid_argument, "storage URL '" + url + "' must start with file:/// or s3://");
}

}  // namespace uocr_serve

#ifdef UOCR_SERVE_S3
#include "s3_storage.hpp"
#else
namespace uocr_serve {
inline std::unique_ptr<Storage> open_s3_storage(const std::string&) {
  throw uocr::Error(uocr::Status::invalid_argument,
                    "this uocr was built without S3 storage (libcurl4-openssl-dev was not found when it was configured)");
}
}  // namespace uocr_serve
#endif
