// The committed fuzz inputs, replayed through the bodies of the fuzz targets (tests/fuzz/targets.hpp)
// in every build, not only by tests/fuzz/run.sh: the seeds (tests/fuzz/corpus/<target>/) and the
// inputs that once showed a bug (tests/fuzz/regressions/<target>/). Each must be accepted or
// refused with a uocr::Error; a crash ends this test, anything else thrown fails it.
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "fuzz/targets.hpp"
#include "support/test_support.hpp"

namespace {

namespace fs = std::filesystem;

using Body = int (*)(const uint8_t*, size_t);
using uocr_fuzz::kTargets;
using uocr_fuzz::Target;

const char* const kKinds[] = {"corpus", "regressions"};

fs::path fuzz_dir() { return fs::path(uocr_test::source_dir()) / "tests" / "fuzz"; }

// The files of tests/fuzz/<kind>/<target>/, sorted; none when the folder does not exist.
std::vector<fs::path> inputs(const std::string& kind, const std::string& target) {
  std::vector<fs::path> files;
  const fs::path dir = fuzz_dir() / kind / target;
  if (fs::is_directory(dir))
    for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

// Each committed input of `target` that `body` did not accept or refuse with a uocr::Error,
// with what it threw.
std::vector<std::string> failures(const std::string& target, Body body) {
  std::vector<std::string> out;
  for (const char* kind : kKinds)
    for (const fs::path& file : inputs(kind, target)) {
      std::ifstream in(file, std::ios::binary);
      const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      try {
        body(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      } catch (const std::exception& e) {
        out.push_back(file.string() + ": " + e.what());
      } catch (...) {
        out.push_back(file.string() + ": an exception of unknown type");
      }
    }
  return out;
}

}  // namespace

TEST_CASE("every fuzz target has seeds, and every input folder is a target's") {
  for (const Target& t : kTargets) {
    CAPTURE(t.name);
    CHECK(!inputs("corpus", t.name).empty());
  }
  for (const char* kind : kKinds) {
    const fs::path dir = fuzz_dir() / kind;
    if (!fs::is_directory(dir)) continue;
    for (const auto& e : fs::directory_iterator(dir)) {
      const std::string name = e.path().filename().string();
      CAPTURE(e.path().string());
      CHECK(std::any_of(std::begin(kTargets), std::end(kTargets), [&](const Target& t) { return name == t.name; }));
    }
  }
}

TEST_CASE("the committed fuzz inputs are accepted or refused with a uocr::Error") {
  for (const Target& t : kTargets) {
    SUBCASE(t.name) {
      if (!t.run) {
        MESSAGE("skipped: this build has no parsers for " << t.name);
        continue;
      }
      for (const std::string& failure : failures(t.name, t.run)) FAIL_CHECK(failure);
    }
  }
}

#ifdef UOCR_CLI_SERVE
TEST_CASE("the http_request target's bytes reach the service's parsers through cpp-httplib") {
  auto read = [](const std::string& bytes) { return uocr_fuzz::read_http_request(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()); };
  const std::string options = R"({"pages":"2-3"})";
  const std::string multipart = "--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.png\"\r\n\r\nPNG\r\n"
                                "--b\r\nContent-Disposition: form-data; name=\"file\"; filename=\"b.png\"\r\n\r\nPNG\r\n"
                                "--b\r\nContent-Disposition: form-data; name=\"options\"\r\n\r\n" + options + "\r\n--b--\r\n";
  const auto job = read("POST /v1/jobs HTTP/1.1\r\nContent-Type: multipart/form-data; boundary=b\r\nContent-Length: " +
                        std::to_string(multipart.size()) + "\r\n\r\n" + multipart);
  CHECK(job.route == "jobs");
  CHECK(job.uploads == 2);
  const std::string chat = R"({"messages":[{"role":"user","content":"no image"}]})";
  CHECK(read("POST /v1/chat/completions HTTP/1.1\r\nContent-Length: " + std::to_string(chat.size()) + "\r\n\r\n" + chat).route == "chat");
  CHECK(read("GET /v1/jobs/job-0123456789abcdef01234567/result HTTP/1.1\r\n\r\n").route == "job");
  CHECK(read("GET /v1/jobs/%2e%2e HTTP/1.1\r\n\r\n").route == "not a job");
  CHECK(read("GARBAGE\r\n\r\n").route.empty());
}
#endif

TEST_CASE("the replay fails on what a fuzz run reports") {
  // A body that throws something else than a refusal fails on every input.
  const Body throws = [](const uint8_t*, size_t) -> int { throw std::logic_error("not a refusal"); };
  CHECK(failures("npy", throws).size() == inputs("corpus", "npy").size() + inputs("regressions", "npy").size());
  // Refusals pass, except an internal error: a broken invariant, not a refused input.
  using uocr_fuzz::detail::refusal_allowed;
  CHECK_NOTHROW(refusal_allowed([] { throw uocr::Error(uocr::Status::invalid_model, "refused"); }));
  CHECK_THROWS_AS(refusal_allowed([] { throw uocr::Error(uocr::Status::internal, "broken"); }), uocr::Error);
  CHECK_THROWS_AS(refusal_allowed([] { throw std::bad_alloc(); }), std::bad_alloc);
}
