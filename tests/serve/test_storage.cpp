// tools/serve/storage.hpp: FileStorage in a temporary folder and, when built with UOCR_SERVE_S3,
// S3Storage against moto's local S3 server (PyPI moto[server]), which the test starts itself on a
// free port with signature checking on. Without moto_server on PATH the S3 cases are skipped.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/prctl.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../../tools/serve/storage.hpp"

namespace fs = std::filesystem;
using uocr::Status;
using uocr_serve::Storage;

namespace {

// The status an action throws with; ok when it throws nothing.
Status status_of(const std::function<void()>& action, std::string* message = nullptr) {
  try {
    action();
  } catch (const uocr::Error& e) {
    if (message) *message = e.what();
    return e.status();
  }
  return Status::ok;
}

struct TempDir {
  fs::path path;
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "uocr-storage-test-XXXXXX").string();
    REQUIRE(::mkdtemp(pattern.data()) != nullptr);
    path = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::string binary_bytes() {
  std::string bytes("a\0b\xff\x00\xfe", 6);
  for (int i = 0; i < 256; ++i) bytes += char(i);
  return bytes;
}

std::string big_bytes() {
  std::mt19937 rng(1234);
  std::string bytes(3 << 20, '\0');
  for (char& c : bytes) c = char(rng());
  return bytes;
}

// Round trips, missing keys, overwrite, remove and key checks: what every Storage must do.
void check_objects(Storage& s) {
  const std::string binary = binary_bytes();
  s.put("t/bin", binary);
  CHECK(s.get("t/bin") == std::optional<std::string>(binary));

  const std::string big = big_bytes();
  s.put("t/big.bin", big);
  const std::optional<std::string> big_back = s.get("t/big.bin");
  REQUIRE(big_back.has_value());
  CHECK(big_back->size() == big.size());
  CHECK(*big_back == big);

  CHECK_FALSE(s.get("t/missing").has_value());
  CHECK_FALSE(s.get("no-such-folder/x").has_value());

  s.put("t/over", "first version, longer");
  s.put("t/over", "second");
  CHECK(s.get("t/over") == std::optional<std::string>("second"));
  s.put("t/empty", "");
  CHECK(s.get("t/empty") == std::optional<std::string>(""));

  s.remove("t/over");
  CHECK_FALSE(s.get("t/over").has_value());
  CHECK(status_of([&] { s.remove("t/over"); }) == Status::ok);  // removing nothing is fine
  CHECK(s.get("t/bin") == std::optional<std::string>(binary));

  for (const std::string bad : {"../x", "/abs", "a//b", "", "a/../b", "./x", "a/", "a b", "a\\b", "x?y", "%2e%2e"}) {
    CAPTURE(bad);
    CHECK(status_of([&] { s.put(bad, "x"); }) == Status::invalid_argument);
    CHECK(status_of([&] { (void)s.get(bad); }) == Status::invalid_argument);
    CHECK(status_of([&] { s.remove(bad); }) == Status::invalid_argument);
    if (bad != "a/") CHECK(status_of([&] { s.remove_prefix(bad); }) == Status::invalid_argument);  // "a/" is a folder
  }
  CHECK(status_of([&] { s.remove_prefix("/"); }) == Status::invalid_argument);
}

// remove_prefix removes that folder only: neighbours with a common start of name survive.
void check_remove_prefix(Storage& s) {
  for (const char* key : {"jobs/1/input/0001.pdf", "jobs/1/input/0002.png", "jobs/1/result.json", "jobs/1/session/ckpt-3",
                          "jobs/10/result.json", "jobs/1x", "jobs/2/result.json", "other/1/result.json"})
    s.put(key, std::string("bytes of ") + key);
  s.remove_prefix("jobs/1/");
  for (const char* gone : {"jobs/1/input/0001.pdf", "jobs/1/input/0002.png", "jobs/1/result.json", "jobs/1/session/ckpt-3"}) {
    CAPTURE(gone);
    CHECK_FALSE(s.get(gone).has_value());
  }
  for (const char* kept : {"jobs/10/result.json", "jobs/1x", "jobs/2/result.json", "other/1/result.json"}) {
    CAPTURE(kept);
    CHECK(s.get(kept) == std::optional<std::string>(std::string("bytes of ") + kept));
  }
  CHECK(status_of([&] { s.remove_prefix("jobs/9/"); }) == Status::ok);  // nothing there
  s.remove_prefix("jobs/2");                                             // no trailing slash: the same folder
  CHECK_FALSE(s.get("jobs/2/result.json").has_value());
  CHECK(s.get("jobs/10/result.json").has_value());
}

}  // namespace

TEST_CASE("FileStorage: objects, overwrite, remove, remove_prefix, key checks") {
  TempDir dir;
  uocr_serve::FileStorage s(dir.path / "store");
  CHECK(s.url() == "file://" + (dir.path / "store").string());
  check_objects(s);
  check_remove_prefix(s);
  // Writes go through temporary names that never stay behind.
  for (const auto& entry : fs::recursive_directory_iterator(dir.path / "store")) {
    CAPTURE(entry.path());
    CHECK(entry.path().filename().string().find(".tmp-") == std::string::npos);
  }
}

TEST_CASE("open_storage: file URLs and unknown schemes") {
  TempDir dir;
  const std::unique_ptr<Storage> s = uocr_serve::open_storage("file://" + (dir.path / "s").string());
  s->put("a/b", "c");
  CHECK(s->get("a/b") == std::optional<std::string>("c"));
  CHECK(std::ifstream(dir.path / "s" / "a" / "b").good());
  CHECK(status_of([] { uocr_serve::open_storage("file://relative/path"); }) == Status::invalid_argument);
  CHECK(status_of([] { uocr_serve::open_storage("ftp://host/x"); }) == Status::invalid_argument);
  CHECK(status_of([] { uocr_serve::open_storage(""); }) == Status::invalid_argument);
}

#ifndef UOCR_SERVE_S3

TEST_CASE("open_storage: s3 URLs without S3 support") {
  std::string message;
  CHECK(status_of([] { uocr_serve::open_storage("s3://bucket/prefix"); }, &message) == Status::invalid_argument);
  CHECK(message.find("built without S3") != std::string::npos);
}

#else  // UOCR_SERVE_S3

namespace {

namespace s3d = uocr_serve::s3_detail;

// Sets (or, with nullptr, unsets) a variable for one scope.
struct EnvVar {
  std::string name;
  std::optional<std::string> old;
  EnvVar(std::string n, const char* value) : name(std::move(n)) {
    if (const char* v = std::getenv(name.c_str())) old = v;
    value ? ::setenv(name.c_str(), value, 1) : ::unsetenv(name.c_str());
  }
  ~EnvVar() { old ? ::setenv(name.c_str(), old->c_str(), 1) : ::unsetenv(name.c_str()); }
};

// All AWS_* variables S3Storage reads, cleared or set for one scope.
struct AwsEnv {
  std::vector<std::unique_ptr<EnvVar>> vars;
  AwsEnv(const char* key, const char* secret, const char* endpoint, const char* token = nullptr) {
    vars.push_back(std::make_unique<EnvVar>("AWS_ACCESS_KEY_ID", key));
    vars.push_back(std::make_unique<EnvVar>("AWS_SECRET_ACCESS_KEY", secret));
    vars.push_back(std::make_unique<EnvVar>("AWS_SESSION_TOKEN", token));
    vars.push_back(std::make_unique<EnvVar>("AWS_REGION", "us-east-1"));
    vars.push_back(std::make_unique<EnvVar>("AWS_DEFAULT_REGION", nullptr));
    vars.push_back(std::make_unique<EnvVar>("AWS_ENDPOINT_URL_S3", endpoint));
    vars.push_back(std::make_unique<EnvVar>("AWS_ENDPOINT_URL", nullptr));
  }
};

std::string find_on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (dir.empty()) continue;
    const std::string candidate = dir + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0)
    port = ntohs(addr.sin_port);
  ::close(fd);
  return port;
}

struct HttpResult {
  CURLcode rc = CURLE_OK;
  long status = 0;
  std::string body;
};

// A plain request for moto's own API and for IAM set-up (not signed: moto checks no signatures
// while authentication is off, and routes IAM calls by the Authorization header's scope).
HttpResult http(const std::string& method, const std::string& url, const std::string& body, std::vector<std::string> headers,
                long timeout_s = 10) {
  s3d::global_init();
  HttpResult result;
  CURL* h = curl_easy_init();
  if (!h) {
    result.rc = CURLE_FAILED_INIT;
    return result;
  }
  curl_slist* list = nullptr;
  for (const std::string& header : headers) list = curl_slist_append(list, header.c_str());
  curl_easy_setopt(h, CURLOPT_URL, url.c_str());
  curl_easy_setopt(h, CURLOPT_HTTPHEADER, list);
  curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(h, CURLOPT_TIMEOUT, timeout_s);
  curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, &s3d::write_body);
  curl_easy_setopt(h, CURLOPT_WRITEDATA, &result.body);
  if (method == "POST") {
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body.c_str());
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(body.size()));
  }
  result.rc = curl_easy_perform(h);
  if (result.rc == CURLE_OK) curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &result.status);
  curl_slist_free_all(list);
  curl_easy_cleanup(h);
  return result;
}

std::string form_escape(const std::string& s) { return s3d::uri_encode(s, false); }

// moto_server on 127.0.0.1:<free port>, with an IAM user allowed everything and a bucket; killed
// (with its process group) when the program ends. moto dies with the test too (PR_SET_PDEATHSIG).
class Moto {
 public:
  static const std::string& program() {
    static const std::string path = find_on_path("moto_server");
    return path;
  }

  Moto() {
    try {
      start();
    } catch (const std::exception& e) {
      error = e.what();
    }
    if (!error.empty()) error += "\n--- moto_server log ---\n" + log_tail();
  }
  ~Moto() { stop(); }

  std::string error;  // why the server is not usable; "" when it is
  std::string endpoint, key, secret;
  const std::string bucket = "uocr-test";

  // Signature checking on every request (on) or none (off).
  void auth(bool on) { REQUIRE_MESSAGE(set_auth(on), "moto reset-auth failed"); }

  s3d::Settings settings() const {
    s3d::Settings s;
    s.access_key = key;
    s.secret_key = secret;
    s.endpoint = endpoint;
    return s;
  }

 private:
  void start() {
    if (program().empty()) throw std::runtime_error("moto_server is not on PATH");
    dir_ = std::make_unique<TempDir>();
    log_ = (dir_->path / "moto.log").string();
    const int port = free_port();
    if (port == 0) throw std::runtime_error("no free port");
    endpoint = "http://127.0.0.1:" + std::to_string(port);
    const std::string port_text = std::to_string(port);
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != parent) ::_exit(1);
      const int fd = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      if (fd >= 0) {
        ::dup2(fd, 1);
        ::dup2(fd, 2);
      }
      const char* argv[] = {"moto_server", "-H", "127.0.0.1", "-p", port_text.c_str(), nullptr};
      ::execv(program().c_str(), const_cast<char* const*>(argv));
      ::_exit(127);
    }
    ::setpgid(pid_, pid_);  // also from here, so that stop() finds the group whichever runs first

    // Up within 20 s (100 tries, 200 ms apart), or the start failed.
    bool up = false;
    for (int i = 0; i < 100 && !up; ++i) {
      int wstatus = 0;
      if (::waitpid(pid_, &wstatus, WNOHANG) == pid_) {
        pid_ = -1;
        throw std::runtime_error("moto_server exited during start-up");
      }
      const HttpResult r = http("GET", endpoint + "/moto-api/", "", {}, 2);
      up = r.rc == CURLE_OK && r.status > 0;
      if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    if (!up) throw std::runtime_error("moto_server did not answer within 20 s on " + endpoint);

    // An IAM user with an access key and a policy allowing everything: moto checks signatures
    // only against keys it issued.
    if (!set_auth(false)) throw std::runtime_error("moto reset-auth failed");
    const std::string scope =
        "Authorization: AWS4-HMAC-SHA256 Credential=AKIASETUP/20240101/us-east-1/iam/aws4_request, SignedHeaders=host, Signature=0";
    const auto iam = [&](const std::string& params) {
      const HttpResult r = http("POST", endpoint + "/", params + "&Version=2010-05-08",
                                {scope, "Content-Type: application/x-www-form-urlencoded"});
      if (r.rc != CURLE_OK || r.status != 200)
        throw std::runtime_error("moto IAM call failed: HTTP " + std::to_string(r.status) + " " + r.body);
      return r.body;
    };
    iam("Action=CreateUser&UserName=uocr");
    const std::string created = iam("Action=CreateAccessKey&UserName=uocr");
    key = s3d::xml_text(created, "AccessKeyId");
    secret = s3d::xml_text(created, "SecretAccessKey");
    if (key.empty() || secret.empty()) throw std::runtime_error("moto CreateAccessKey answered " + created);
    iam("Action=PutUserPolicy&UserName=uocr&PolicyName=all&PolicyDocument=" +
        form_escape(R"({"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"*","Resource":"*"}]})"));

    // The bucket, with a signed PUT checked by moto.
    if (!set_auth(true)) throw std::runtime_error("moto reset-auth failed");
    const s3d::Response r = s3d::send(settings(), "PUT", settings().bucket_url(bucket), "", "bucket " + bucket);
    if (!r.ok()) throw std::runtime_error("cannot create the bucket: " + r.describe());
  }

  bool set_auth(bool on) {
    const HttpResult r = http("POST", endpoint + "/moto-api/reset-auth", on ? "0" : "inf", {"Content-Type: text/plain"});
    return r.rc == CURLE_OK && r.status == 200;
  }

  void stop() {
    if (pid_ <= 0) return;
    ::kill(-pid_, SIGTERM);
    // Gone within 5 s (50 checks), else killed.
    for (int i = 0; i < 50; ++i) {
      if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ::kill(-pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  std::string log_tail() const {
    std::ifstream in(log_);
    std::stringstream all;
    all << in.rdbuf();
    const std::string text = all.str();
    return text.size() > 4000 ? text.substr(text.size() - 4000) : text;
  }

  pid_t pid_ = -1;
  std::unique_ptr<TempDir> dir_;
  std::string log_;
};

Moto& moto() {
  static Moto server;
  return server;
}

const bool kNoMoto = [] {
  if (Moto::program().empty()) std::fprintf(stderr, "moto_server is not on PATH (pip install 'moto[server]'): S3 cases skipped\n");
  return Moto::program().empty();
}();

}  // namespace

TEST_CASE("S3 helpers: URI encoding, XML text") {
  CHECK(s3d::uri_encode("jobs/1/a b+c~_.-%", true) == "jobs/1/a%20b%2Bc~_.-%25");
  CHECK(s3d::uri_encode("jobs/1/", false) == "jobs%2F1%2F");
  CHECK(s3d::uri_encode("\xff", false) == "%FF");
  CHECK(s3d::xml_unescape("&lt;a&amp;b&#x41;&#66;&gt;&quot;&apos;&bogus;&") == "<a&bAB>\"'&bogus;&");
  CHECK(s3d::xml_unescape("&#xe9;") == "\xc3\xa9");
  const std::string list = "<ListBucketResult><Contents><Key>a&amp;b</Key></Contents><Contents><Key>c</Key></Contents></ListBucketResult>";
  CHECK(s3d::xml_texts(list, "Key") == std::vector<std::string>{"a&b", "c"});
  CHECK(s3d::xml_text(list, "Code").empty());
}

TEST_CASE("S3 settings: environment and URLs") {
  {
    AwsEnv env(nullptr, nullptr, nullptr);
    std::string message;
    CHECK(status_of([] { uocr_serve::open_storage("s3://bucket/prefix"); }, &message) == Status::invalid_argument);
    CHECK(message.find("AWS_ACCESS_KEY_ID") != std::string::npos);
    CHECK(message.find("AWS_SECRET_ACCESS_KEY") != std::string::npos);
  }
  {
    AwsEnv env("AKIA", nullptr, nullptr);
    CHECK(status_of([] { uocr_serve::open_storage("s3://bucket/prefix"); }) == Status::invalid_argument);
  }
  AwsEnv env("AKIAEXAMPLE", "secret", nullptr);
  CHECK(uocr_serve::open_storage("s3://bucket/a/b/")->url() == "s3://bucket/a/b");
  CHECK(uocr_serve::open_storage("s3://bucket")->url() == "s3://bucket");
  CHECK(uocr_serve::open_storage("s3://bucket/")->url() == "s3://bucket");
  for (const char* bad : {"s3://", "s3:///prefix", "s3://bucket/../x", "s3://bucket/a//b", "s3://bu:cket/x", "s3://b@evil/x"}) {
    CAPTURE(bad);
    CHECK(status_of([&] { uocr_serve::open_storage(bad); }) == Status::invalid_argument);
  }
  CHECK(s3d::Settings::from_environment().bucket_url("b") == "https://b.s3.us-east-1.amazonaws.com");
  CHECK(s3d::Settings::from_environment().bucket_url("b.c") == "https://s3.us-east-1.amazonaws.com/b.c");
  {
    EnvVar region("AWS_REGION", nullptr), fallback("AWS_DEFAULT_REGION", "eu-west-3");
    CHECK(s3d::Settings::from_environment().bucket_url("b") == "https://b.s3.eu-west-3.amazonaws.com");
  }
  {
    EnvVar region("AWS_REGION", "bad:region");
    CHECK(status_of([] { s3d::Settings::from_environment(); }) == Status::invalid_argument);
  }
  {
    EnvVar endpoint("AWS_ENDPOINT_URL", "http://127.0.0.1:9000/");
    CHECK(s3d::Settings::from_environment().bucket_url("b") == "http://127.0.0.1:9000/b");
    EnvVar s3_endpoint("AWS_ENDPOINT_URL_S3", "https://minio.example:9000");
    CHECK(s3d::Settings::from_environment().bucket_url("b") == "https://minio.example:9000/b");
  }
  {
    EnvVar endpoint("AWS_ENDPOINT_URL_S3", "ftp://host");
    CHECK(status_of([] { s3d::Settings::from_environment(); }) == Status::invalid_argument);
  }
}

TEST_CASE("S3Storage: objects, overwrite, remove, key checks (signatures checked)" * doctest::skip(kNoMoto)) {
  Moto& m = moto();
  REQUIRE_MESSAGE(m.error.empty(), m.error);
  m.auth(true);
  AwsEnv env(m.key.c_str(), m.secret.c_str(), m.endpoint.c_str());
  const std::unique_ptr<Storage> s = uocr_serve::open_storage("s3://" + m.bucket + "/root/sub");
  CHECK(s->url() == "s3://" + m.bucket + "/root/sub");
  check_objects(*s);

  // Keys go under the prefix; a store without a prefix sees them whole.
  const std::unique_ptr<Storage> whole = uocr_serve::open_storage("s3://" + m.bucket);
  CHECK(whole->get("root/sub/t/bin") == std::optional<std::string>(binary_bytes()));
  whole->put("top-level.txt", "top");
  CHECK(whole->get("top-level.txt") == std::optional<std::string>("top"));
  CHECK_FALSE(s->get("top-level.txt").has_value());

  // One store from several threads: every call has its own handle.
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 5; ++i) {
        const std::string key = "threads/" + std::to_string(t) + "/" + std::to_string(i);
        const std::string value(1000 + i, char('a' + t));
        try {
          s->put(key, value);
          if (s->get(key) != std::optional<std::string>(value)) ++mismatches;
        } catch (const uocr::Error&) {
          ++mismatches;
        }
      }
    });
  for (std::thread& thread : threads) thread.join();
  CHECK(mismatches.load() == 0);
}

TEST_CASE("S3Storage: remove_prefix" * doctest::skip(kNoMoto)) {
  Moto& m = moto();
  REQUIRE_MESSAGE(m.error.empty(), m.error);
  // moto decodes the query before checking a signature, so it rejects the correctly signed
  // "prefix=jobs%2F1%2F" (AWS and MinIO accept it): this case runs with moto's checks off.
  m.auth(false);
  uocr_serve::S3Storage s(m.bucket, "rp", m.settings());
  check_remove_prefix(s);
  // More keys than one list page (moto's pages hold 1000): continuation tokens are followed.
  for (int i = 0; i < 1005; ++i) s.put("many/" + std::to_string(i), "x");
  s.put("many-not/keep", "y");
  s.remove_prefix("many/");
  CHECK_FALSE(s.get("many/0").has_value());
  CHECK_FALSE(s.get("many/1004").has_value());
  const s3d::Response list =
      s3d::send(m.settings(), "GET", m.settings().bucket_url(m.bucket) + "?list-type=2&prefix=" + s3d::uri_encode("rp/many/", false),
                "", "list");
  CHECK(list.ok());
  CHECK(s3d::xml_texts(list.body, "Key").empty());
  CHECK(s.get("many-not/keep") == std::optional<std::string>("y"));
  m.auth(true);
}

TEST_CASE("S3Storage: bad credentials, missing bucket, unreachable server" * doctest::skip(kNoMoto)) {
  Moto& m = moto();
  REQUIRE_MESSAGE(m.error.empty(), m.error);
  m.auth(true);
  std::string message;

  s3d::Settings wrong = m.settings();
  wrong.secret_key = "not-the-secret";
  uocr_serve::S3Storage bad_secret(m.bucket, "p", wrong);
  CHECK(status_of([&] { bad_secret.put("k", "v"); }, &message) == Status::io);
  CHECK(message.find("SignatureDoesNotMatch") != std::string::npos);
  CHECK(message.find("403") != std::string::npos);
  CHECK(message.find("not-the-secret") == std::string::npos);
  CHECK(status_of([&] { (void)bad_secret.get("k"); }, &message) == Status::io);
  CHECK(message.find("SignatureDoesNotMatch") != std::string::npos);

  s3d::Settings unknown = m.settings();
  unknown.access_key = "AKIAUNKNOWNUNKNOWN00";
  CHECK(status_of([&] { uocr_serve::S3Storage(m.bucket, "p", unknown).put("k", "v"); }, &message) == Status::io);
  CHECK(message.find("InvalidAccessKeyId") != std::string::npos);

  // The session token travels, signed: moto refuses one with a long-term key.
  s3d::Settings token = m.settings();
  token.session_token = "FwoGZXIvYXdzE/token+with=chars";
  CHECK(status_of([&] { uocr_serve::S3Storage(m.bucket, "p", token).put("k", "v"); }, &message) == Status::io);
  CHECK(message.find("InvalidToken") != std::string::npos);

  uocr_serve::S3Storage no_bucket("uocr-no-such-bucket", "p", m.settings());
  CHECK(status_of([&] { no_bucket.put("k", "v"); }, &message) == Status::io);
  CHECK(message.find("NoSuchBucket") != std::string::npos);
  CHECK(status_of([&] { (void)no_bucket.get("k"); }, &message) == Status::io);
  CHECK(message.find("NoSuchBucket") != std::string::npos);
  CHECK(status_of([&] { no_bucket.remove_prefix("jobs/1/"); }) == Status::io);

  // Nothing listening: tried a few times, then Error(io).
  s3d::Settings closed = m.settings();
  closed.endpoint = "http://127.0.0.1:" + std::to_string(free_port());
  const auto started = std::chrono::steady_clock::now();
  CHECK(status_of([&] { (void)uocr_serve::S3Storage(m.bucket, "p", closed).get("k"); }, &message) == Status::io);
  CHECK(message.find("3 tries") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::seconds(30));
}

#endif  // UOCR_SERVE_S3
