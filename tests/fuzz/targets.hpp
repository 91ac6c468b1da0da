// The bodies of the libFuzzer targets (tests/fuzz/fuzzer.cpp, run by tests/fuzz/run.sh) and
// of their regression replay in the normal suite (tests/test_fuzz_corpus.cpp): each feeds its
// bytes to a real parser of untrusted input. A uocr::Error is the parser refusing the input, which
// is fine, except Status::internal (a broken invariant). Any other exception, a crash, a leak or
// undefined behaviour is a finding.
//
// Parsers that only take a path read the bytes from a file in a private folder of the process.
// The session checkpoint target edits a real checkpoint instead of taking whole files (see
// fuzz_checkpoint). Not thread-safe: one input at a time.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

// model_dir.hpp, which the command headers include, names the demo model's folders; parsing
// options never reads them.
#ifndef UOCR_DEMO_MODEL_INSTALLED
#define UOCR_DEMO_MODEL_INSTALLED ""
#endif
#ifndef UOCR_DEMO_MODEL_SOURCE
#define UOCR_DEMO_MODEL_SOURCE ""
#endif

#include "../../tools/cli/args.hpp"
#include "../../tools/cli/cmd_inspect.hpp"
#include "../../tools/cli/cmd_run.hpp"
#include "../../tools/cli/cmd_tokenize.hpp"
#include "../../tools/cli/decode_limits.hpp"
#include "../../tools/serve/chat_request.hpp"
#ifdef UOCR_CLI_SERVE
#include <httplib.h>

#include "../../tools/serve/job_request.hpp"
#endif
#include "../../tools/serve/job_options.hpp"
#include "../../tools/serve/job_store.hpp"
#include "../../tools/serve/redis.hpp"
#include "../../tools/serve/storage.hpp"
#include "../support/test_support.hpp"
#include "uocr/core/error.hpp"
#include "uocr/image/image.hpp"
#include "uocr/io/npy.hpp"
#include "uocr/io/safetensors.hpp"
#include "uocr/model/checkpoint.hpp"
#include "uocr/model/config.hpp"
#include "uocr/model/decode_defaults.hpp"
#include "uocr/session/checkpoint.hpp"
#include "uocr/session/session.hpp"
#include "uocr/session/page_group_choice.hpp"
#include "uocr/session/page_source.hpp"
#include "uocr/tokenizer/tokenizer.hpp"
#include "uocr/tokenizer/utf8.hpp"

namespace uocr_fuzz {

namespace detail {

// Runs `parse`; returns normally when it succeeds or refuses its input with a uocr::Error.
template <class Fn>
void refusal_allowed(Fn&& parse) {
  try {
    parse();
  } catch (const uocr::Error& e) {
    if (e.status() == uocr::Status::internal) throw;
  }
}

// A property every input must have; a std::logic_error (a finding) when it does not.
inline void expect(bool property, const std::string& what) {
  if (!property) throw std::logic_error("fuzz property violated: " + what);
}

// Runs `parse`; returns normally when it succeeds or refuses its request as the service does, with
// an ApiError of a 4xx status (a 5xx would blame the server for the client's bytes).
template <class Fn>
void client_error_allowed(Fn&& parse) {
  try {
    parse();
  } catch (const uocr_serve::ApiError& e) {
    expect(e.status() >= 400 && e.status() < 500, std::string("a request was refused with ") + std::to_string(e.status()));
  }
}

// A chat completions body, parsed as uocr serve does; what every accepted one must have.
inline void check_chat_request(const std::string& body) {
  const uocr_serve::ChatRequest r = uocr_serve::parse_chat_request(body, 300);
  const std::string& prompt = r.params.prompt;
  const size_t tag = prompt.find("<image>");
  expect(tag != std::string::npos && prompt.find("<image>", tag + 1) == std::string::npos, "the prompt has one <image>");
  expect(!r.images.empty() && r.images.size() <= 300, "a request has 1..300 images");
}

// Job options as set from a request; what job.json must give back.
inline void check_job_options(const uocr_serve::JobOptions& o) {
  expect(o.first_page >= 1 && (o.last_page == 0 || o.last_page >= o.first_page), "a page range is ordered");
  expect(o.mode == "base" || o.mode == "gundam", "the mode is base or gundam");
  expect(o.dpi >= 36 && o.dpi <= 1200, "the dpi is in 36..1200");
  expect(uocr_serve::JobOptions::from_json(o.to_json()).to_json() == o.to_json(), "job options survive job.json");
}

// Files for the parsers that take a path: memory files (memfd), each linked to by name from a
// private folder of the process, so that parsers open them like any file while rewriting one per
// input costs no disk I/O (a truncating write to a disk file can take milliseconds). The folder
// goes when the process exits.
class Scratch {
 public:
  Scratch() {
    std::string pattern = (std::filesystem::temp_directory_path() / "uocr-fuzz-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("cannot create a folder for fuzz inputs");
    root_ = pattern;
  }
  ~Scratch() {
    for (const auto& kv : files_) ::close(kv.second);
    std::error_code ec;
    std::filesystem::remove_all(root_, ec);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  // The path of file `name` ("folder/file"), holding `size` bytes from `data`.
  std::string write(const std::string& name, const void* data, size_t size) {
    const std::filesystem::path path = root_ / name;
    int& fd = files_.emplace(name, -1).first->second;
    if (fd < 0) {
      std::filesystem::create_directories(path.parent_path());
      fd = ::memfd_create(name.c_str(), MFD_CLOEXEC);
      if (fd < 0) throw std::runtime_error("cannot create a memory file for fuzz input " + name);
    }
    // (Re)linked when something replaced the link (a checkpoint is saved by renaming over it).
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) {
      std::filesystem::remove(path);
      std::filesystem::create_symlink("/proc/self/fd/" + std::to_string(fd), path);
    }
    const auto* p = static_cast<const char*>(data);
    bool ok = ::ftruncate(fd, 0) == 0;
    for (size_t done = 0; ok && done < size;) {
      const ssize_t n = ::pwrite(fd, p + done, size - done, off_t(done));
      ok = n > 0;
      done += ok ? size_t(n) : 0;
    }
    if (!ok) throw std::runtime_error("cannot write fuzz input " + name);
    return path.string();
  }
  // The path of folder `name`, created if needed (write() puts files "name/..." there).
  std::string folder(const std::string& name) const {
    const std::filesystem::path path = root_ / name;
    std::filesystem::create_directories(path);
    return path.string();
  }

 private:
  std::filesystem::path root_;
  std::map<std::string, int> files_;  // name -> memory file
};

inline Scratch& scratch() {
  static Scratch s;
  return s;
}

// A valid shard of two tensors, "a" (F32 [2]) and "b" (BF16 [1, 2]), which the shard indexes of
// the safetensors target may name.
inline std::string two_tensor_shard() {
  std::string header =
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"BF16","shape":[1,2],"data_offsets":[8,12]}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[size_t(i)] = char((uint64_t(header.size()) >> (8 * i)) & 0xff);
  const uint8_t data[12] = {0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0, 0x80, 0x3f, 0x00, 0x40};  // 1, -2; 1, 2
  return file + header + std::string(reinterpret_cast<const char*>(data), sizeof data);
}

}  // namespace detail

// safetensors: the bytes as a safetensors file (the header parser, and the size the header alone
// implies), then as the model.safetensors.index.json of a folder whose one shard
// (detail::two_tensor_shard) holds "a" and "b".
inline int fuzz_safetensors(const uint8_t* data, size_t size) {
  const std::string path = detail::scratch().write("safetensors/model.safetensors", data, size);
  detail::refusal_allowed([&] {
    const uocr::SafetensorsFile file(path);
    // Every value read: a range the header check let through is touched.
    for (const auto& kv : file.tensors())
      detail::expect(int64_t(kv.second.to_vector().size()) == kv.second.numel(), "tensor " + kv.first + " reads its shape's values");
  });
  detail::refusal_allowed([&] { uocr::safetensors_expected_size(path); });

  static const std::string shard = detail::two_tensor_shard();
  detail::scratch().write("sharded/model-00001-of-000001.safetensors", shard.data(), shard.size());
  detail::scratch().write("sharded/model.safetensors.index.json", data, size);
  detail::refusal_allowed([&] { uocr::Checkpoint::open(detail::scratch().folder("sharded")); });
  return 0;
}

// config: the bytes as a model folder's config.json and as its uocr_decode.json.
inline int fuzz_config(const uint8_t* data, size_t size) {
  const std::string config = detail::scratch().write("config/config.json", data, size);
  detail::scratch().write(std::string("config/") + uocr::DecodeDefaults::kFileName, data, size);
  detail::refusal_allowed([&] { uocr::ModelConfig::load(config); });
  detail::refusal_allowed([&] { uocr::DecodeDefaults::load_folder(detail::scratch().folder("config")); });
  return 0;
}

// tokenizer_json: the bytes as a tokenizer.json; a tokenizer that loads then encodes a text of
// every kind of word its pre-tokenizer knows and decodes every id (those past its ids refused).
inline int fuzz_tokenizer_json(const uint8_t* data, size_t size) {
  detail::refusal_allowed([&] {
    const uocr::Tokenizer tok = uocr::Tokenizer::from_string(std::string(reinterpret_cast<const char*>(data), size));
    const std::vector<int32_t> ids =
        tok.encode("Hello, world! 123456 <image>\n\n  x中文かなカナ\t<|end|> é\xcc\x81 \xf0\x9f\x98\x80");
    for (const int32_t id : ids) detail::expect(id >= 0 && size_t(id) < tok.id_limit(), "encode gives ids of the tokenizer");
    std::vector<int32_t> all;
    for (size_t id = 0; id < std::min<size_t>(tok.id_limit(), 1 << 16); ++id) all.push_back(int32_t(id));
    detail::refusal_allowed([&] { tok.decode(all); });
    detail::refusal_allowed([&] { tok.decode({int32_t(tok.id_limit())}); });
    detail::refusal_allowed([&] { tok.decode({-1}); });
  });
  return 0;
}

// tokenizer_codec: the bytes encoded as text, and read as token ids (3 bytes each, modulo one
// past the last id) decoded, with the published tokenizer. Encoding valid UTF-8 and decoding the
// ids gives the text back (byte-level BPE, no normalizer, no stripping added tokens); decoding
// token by token through utf8::StreamDecoder gives what decoding at once gives.
inline int fuzz_tokenizer_codec(const uint8_t* data, size_t size) {
  static const uocr::Tokenizer tok = uocr::Tokenizer::load(uocr_test::published_dir() + "/tokenizer.json");
  const std::string text(reinterpret_cast<const char*>(data), size);
  detail::refusal_allowed([&] {
    const std::vector<int32_t> ids = tok.encode(text);
    detail::expect(tok.decode(ids) == text, "decode(encode(text)) == text");
  });
  std::vector<int32_t> ids;
  for (size_t i = 0; i + 3 <= size; i += 3)
    ids.push_back(int32_t((uint32_t(data[i]) | uint32_t(data[i + 1]) << 8 | uint32_t(data[i + 2]) << 16) % (tok.id_limit() + 1)));
  detail::refusal_allowed([&] {
    const std::string once = tok.decode(ids);
    uocr::utf8::StreamDecoder stream;
    std::string streamed;
    for (const int32_t id : ids) streamed += stream.feed(tok.generated_bytes(id));
    streamed += stream.flush();
    detail::expect(streamed == once, "streamed decoding == decoding at once");
  });
  detail::refusal_allowed([&] { tok.decode(ids, true); });
  return 0;
}

// npy: the bytes as a .npy file, read and converted to float32 and to int64.
inline int fuzz_npy(const uint8_t* data, size_t size) {
  const std::string path = detail::scratch().write("npy/input.npy", data, size);
  detail::refusal_allowed([&] {
    const uocr::NpyArray a = uocr::read_npy(path);
    detail::refusal_allowed([&] { a.to_f32(); });
    detail::refusal_allowed([&] { a.to_i64(); });
  });
  return 0;
}

// image: the bytes decoded as an image file of any format the build reads, with a budget small
// enough that no input can exhaust the fuzzer's memory.
inline int fuzz_image(const uint8_t* data, size_t size) {
  uocr::DecodeLimits limits;
  limits.max_pixels = 4000000;
  limits.max_bytes = 64 << 20;
  detail::refusal_allowed([&] {
    const uocr::ImageU8 im = uocr::decode_image(data, size, limits);
    detail::expect(im.width > 0 && im.height > 0 && im.rgb.size() == size_t(im.width) * size_t(im.height) * 3,
                   "a decoded image has its size's pixels");
  });
  return 0;
}

namespace detail {

// The document the checkpoint target resumes, as tests/support/resume_case.hpp's but greedy (sampling
// sorts the 129k logits at every step): three pages (small synthetic ones), two held at a time,
// the fallback sliding every 8 tokens.
struct CheckpointCase {
  std::shared_ptr<const uocr::Model> model;
  std::vector<uocr::ImageU8> pages;
  std::unique_ptr<uocr::Session> session;
  std::string payload;  // of token 20, after the slide at token 16
};

inline CheckpointCase make_checkpoint_case() {
  CheckpointCase c;
  c.model = uocr::Model::load(uocr_test::golden_model_dir());
  for (int p = 0; p < 3; ++p) {
    uocr::ImageU8 page = uocr::make_image(40 + 8 * p, 32);
    for (size_t i = 0; i < page.rgb.size(); ++i) page.rgb[i] = uint8_t(i * (7 + p) % 251);
    c.pages.push_back(std::move(page));
  }
  uocr::SessionParams params;
  params.max_new_tokens = 40;
  uocr::DocumentParams groups;
  groups.groups.group_pages = 2;
  groups.groups.overlap_pages = 1;
  groups.page_fallback_tokens = 8;
  c.session = std::make_unique<uocr::Session>(c.model, params, groups);
  uocr::CheckpointOptions ck;
  ck.path = scratch().folder("checkpoint") + "/base.ckpt";
  ck.every_tokens = 5;
  uocr::ImageListPages pages(c.pages);
  int64_t tokens = 0;
  c.session->run(pages, [&](const uocr::Event& e) { return e.type != uocr::Event::Type::token || ++tokens < 23; }, ck);
  c.payload = uocr::read_checkpoint(ck.path);
  return c;
}

// The path of a checkpoint file holding `payload`, in write_checkpoint's format but not fsync'ed.
inline std::string write_unsynced_checkpoint(const std::string& payload) {
  const uint32_t version = uocr::kCheckpointVersion, zero = 0;
  const uint64_t size = payload.size(), sum = uocr::Fnv64().add(payload.data(), payload.size()).value();
  std::string file(uocr::detail::kCheckpointMagic, 8);
  file.append(reinterpret_cast<const char*>(&version), 4).append(reinterpret_cast<const char*>(&zero), 4);
  file.append(reinterpret_cast<const char*>(&size), 8).append(reinterpret_cast<const char*>(&sum), 8);
  file += payload;
  return scratch().write("checkpoint/input.ckpt", file.data(), file.size());
}

}  // namespace detail

// checkpoint: an edit of a real checkpoint of a document on tiny-b (made once per process),
// resumed until its first token. A fuzzer cannot forge the FNV-1a checksum, and a whole
// checkpoint is too large for a corpus (tiny-b's logits alone are 517 KB), so the input is
//   u16 at | u16 drop | bytes
// (little-endian): `drop` bytes of the payload at `at` replaced by `bytes`, the file then written
// with a right checksum. `at` counts from the payload's start (identities, layout, page-group
// state, the first KV rows), or with its top bit set from its end (the last logits and the loop
// state); both are clamped to the payload. Shorter inputs resume the checkpoint as it is (the
// fuzzer's LLVMFuzzerInitialize does, so that making the checkpoint is outside the per-input timeout).
inline int fuzz_checkpoint(const uint8_t* data, size_t size) {
  static detail::CheckpointCase c = detail::make_checkpoint_case();
  std::string payload = c.payload;
  if (size >= 4) {
    const size_t code = size_t(data[0]) | size_t(data[1]) << 8, drop = size_t(data[2]) | size_t(data[3]) << 8;
    const size_t offset = std::min(code & 0x7fff, payload.size());
    const size_t at = code & 0x8000 ? payload.size() - offset : offset;
    payload.replace(at, std::min(drop, payload.size() - at), reinterpret_cast<const char*>(data + 4), size - 4);
  }
  const std::string path = detail::write_unsynced_checkpoint(payload);
  detail::refusal_allowed([&] {
    uocr::ImageListPages pages(c.pages);
    uocr::CheckpointOptions ck;
    ck.path = path;
    ck.resume = true;
    c.session->run(pages, [](const uocr::Event& e) { return e.type != uocr::Event::Type::token; }, ck);
  });
  return 0;
}

namespace detail {

// Reads the options of `uocr run` as cmd_run does, then the page-group settings as the session
// checks them.
inline void read_run_options(const uocr_cli::Args& args) {
  uocr_cli::RunOptions o = uocr_cli::parse_run_options(args);
  o.groups.apply(uocr::DecodeDefaults{}, o.inf.groups);
  uocr::PageGroupDecoder::validate(o.inf.groups);
}

}  // namespace detail

// cli_args: the bytes split on NUL into an argument list, parsed as each command of the CLI
// parses its own (tools/cli: Args against the command's CommandOptions, then every option read
// the way the command reads it), without running anything.
inline int fuzz_cli_args(const uint8_t* data, size_t size) {
  std::vector<std::string> argv;
  const char* p = reinterpret_cast<const char*>(data);
  for (const char *start = p, *end = p + size;; ++p) {
    if (p == end || *p == '\0') {
      argv.emplace_back(start, p);
      if (p == end) break;
      start = p + 1;
    }
  }
  using uocr_cli::Args;
  detail::refusal_allowed([&] { detail::read_run_options(Args(argv, uocr_cli::run_options())); });
  detail::refusal_allowed([&] {
    const Args args(argv, uocr_cli::inspect_model_options());
    args.has("--verify");
    args.get("--checksums", "");
    args.get("--model", "");
  });
  detail::refusal_allowed([&] {
    const Args args(argv, uocr_cli::inspect_tokenize_options());
    args.get("--text", "");
    if (args.has("--ids")) uocr_cli::parse_id_list(args.required("--ids"));
  });
  for (const uocr_cli::CommandOptions& options : {uocr_cli::inspect_vision_options(), uocr_cli::inspect_logits_options()}) {
    detail::refusal_allowed([&] {
      const Args args(argv, options);
      args.all("--image");
      args.choice("--mode", {"base", "gundam"}, "base");
      uocr_cli::decode_limits(args);
      args.required("-o");
      if (options.command == "inspect logits") {
        args.required("--input-ids");
        args.get("--generated", "");
        if (args.choice("--attention", {"rswa", "full"}, "rswa") == "rswa") args.integer("--window", 128);
      }
    });
  }
  return 0;
}

// uocr serve's request parsers: the bytes as a chat completions body (tools/serve/chat_request.hpp)
// and as a job's options (job_options.hpp). An ApiError of status 4xx is the refusal; a prompt
// without exactly one "<image>", or a request without an image, would be a finding. And the
// fleet's: a Redis URL (redis.hpp), a storage key (storage.hpp; one that climbs out of its folder
// would be a finding) and a job's progress as a job hash holds it (job_store.hpp).
inline int fuzz_service_request(const uint8_t* data, size_t size) {
  const std::string body(reinterpret_cast<const char*>(data), size);
  detail::client_error_allowed([&] { detail::check_chat_request(body); });
  detail::client_error_allowed([&] {
    const nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
    if (j.is_discarded()) return;
    uocr_serve::JobOptions o;
    uocr_serve::set_job_options(o, j);
    detail::check_job_options(o);
  });
  try {
    const uocr_serve::RedisAddress a = uocr_serve::RedisAddress::parse(body);
    detail::expect(!a.host.empty() && a.port >= 1 && a.port <= 65535 && a.db >= 0, "a Redis address has a host, a port and a database");
  } catch (const uocr::Error& e) {
    detail::expect(e.status() == uocr::Status::invalid_argument, "a bad Redis URL is invalid_argument");
  }
  if (uocr_serve::is_storage_key(body)) {
    detail::expect(body.front() != '/' && ("/" + body + "/").find("/../") == std::string::npos, "a storage key stays in its folder");
  }
  const nlohmann::json progress = nlohmann::json::parse(body, nullptr, false);
  if (!progress.is_discarded()) {
    try {
      uocr_serve::Job::Progress p;
      read_progress(progress, p);
    } catch (const nlohmann::json::exception&) {
    } catch (const uocr::Error& e) {
      detail::expect(e.status() == uocr::Status::invalid_argument, "a bad job state is invalid_argument");
    }
  }
  return 0;
}

#ifdef UOCR_CLI_SERVE
namespace detail {

// An HTTP connection whose client sent `data` and then closed; what the server writes is dropped.
class ClientBytes final : public httplib::Stream {
 public:
  ClientBytes(const uint8_t* data, size_t size) : data_(reinterpret_cast<const char*>(data)), left_(size) {}
  bool is_readable() const override { return true; }
  bool is_writable() const override { return true; }
  ssize_t read(char* out, size_t size) override {
    const size_t n = std::min(size, left_);
    if (n > 0) std::memcpy(out, data_, n);
    data_ += n;
    left_ -= n;
    return ssize_t(n);
  }
  ssize_t write(const char*, size_t size) override { return ssize_t(size); }
  void get_remote_ip_and_port(std::string& ip, int& port) const override { ip = "127.0.0.1", port = 40000; }
  void get_local_ip_and_port(std::string& ip, int& port) const override { ip = "127.0.0.1", port = 8000; }
  socket_t socket() const override { return INVALID_SOCKET; }

 private:
  const char* data_;
  size_t left_;
};

// cpp-httplib's server reading one request from a connection (its request line, headers, chunked
// and multipart bodies, percent-decoding), handing what it parsed to uocr serve's parsers of the
// routes that take a client's data: a chat completions body, a job's upload (multipart or JSON)
// and a job id in a path. Anything thrown past those parsers' refusals is kept as the finding.
class RequestParsers final : public httplib::Server {
 public:
  RequestParsers() {
    Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response&) {
      route_ = "chat";
      client_error_allowed([&] { check_chat_request(req.body); });
    });
    Post("/v1/jobs", [this](const httplib::Request& req, httplib::Response&) {
      route_ = "jobs";
      client_error_allowed([&] {
        const uocr_serve::JobRequest job = uocr_serve::parse_job_request(req);
        uploads_ = job.uploads.size();
        expect(!job.uploads.empty(), "a job has a file");
        for (const auto& [name, bytes] : job.uploads) expect(!bytes.empty() && uocr_serve::is_storage_key(name), "an upload is stored under a plain name");
        check_job_options(job.options);
      });
    });
    // A job's routes (server.hpp) look a job up only once its id is one.
    Get(uocr_serve::kJobPath + "(/.*)?", [this](const httplib::Request& req, httplib::Response&) {
      const std::string id = req.matches[1];
      const bool is_job = uocr_serve::JobStore::is_job_id(id);
      route_ = is_job ? "job" : "not a job";
      if (is_job) expect(uocr_serve::is_storage_key("jobs/" + id + "/job.json"), "a job id names one folder");
    });
    set_exception_handler([this](const httplib::Request&, httplib::Response&, std::exception_ptr e) { thrown_ = e; });
  }

  // Which route took the request ("" for none: a request httplib refused) and, for a job, how
  // many files it uploaded.
  struct Reached {
    std::string route;
    size_t uploads = 0;
  };

  Reached read_request(const uint8_t* data, size_t size) {
    thrown_ = nullptr;
    route_.clear();
    uploads_ = 0;
    ClientBytes client(data, size);
    bool closed = false;
    process_request(client, true, closed, nullptr);
    if (thrown_) std::rethrow_exception(thrown_);
    return {route_, uploads_};
  }

 private:
  std::exception_ptr thrown_;
  std::string route_;
  size_t uploads_ = 0;
};

}  // namespace detail

// Raw bytes from an HTTP client, read by the server uocr serve runs on, to the service's request
// parsers (detail::RequestParsers). cpp-httplib is the system's library, not instrumented: the
// fuzzer is guided by what reaches our parsers, not by httplib's own branches.
inline detail::RequestParsers::Reached read_http_request(const uint8_t* data, size_t size) {
  static detail::RequestParsers server;
  return server.read_request(data, size);
}

inline int fuzz_http_request(const uint8_t* data, size_t size) {
  read_http_request(data, size);
  return 0;
}
#endif

// Every target: its name (run as fuzz_<name>; seeds in tests/fuzz/corpus/<name>/), its body, the
// longest input worth trying (a little longer than its longest seed), and whether a first call on
// no input sets it up (the checkpoint to edit), before libFuzzer's per-input timeout applies. A
// target whose parsers this build lacks (http_request without cpp-httplib) has no body.
struct Target {
  const char* name;
  int (*run)(const uint8_t*, size_t);
  size_t max_len;
  bool set_up_first = false;
};

inline const Target kTargets[] = {
    {"safetensors", fuzz_safetensors, 4096},
    {"config", fuzz_config, 8192},
    {"tokenizer_json", fuzz_tokenizer_json, 32768},
    {"tokenizer_codec", fuzz_tokenizer_codec, 2048},
    {"npy", fuzz_npy, 1024},
    {"image", fuzz_image, 16384},
    {"checkpoint", fuzz_checkpoint, 512, true},
    {"cli_args", fuzz_cli_args, 1024},
    {"service_request", fuzz_service_request, 4096},
#ifdef UOCR_CLI_SERVE
    {"http_request", fuzz_http_request, 8192},
#else
    {"http_request", nullptr, 8192},
#endif
};

}  // namespace uocr_fuzz
