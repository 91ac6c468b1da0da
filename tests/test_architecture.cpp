// The seams the architecture rests on (docs/ARCHITECTURE.md): the backend contract that page
// groups check at compile time, the engine registry, and the headers' hygiene (one umbrella
// include, the version, the ABI namespace that keeps differently built units apart).
#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <type_traits>
#include <vector>

#include "support/demo_model.hpp"
#include "support/test_support.hpp"
#include "uocr.h"
#include "uocr/decoder/backend_contract.hpp"
#include "uocr/uocr.hpp"

namespace {

// A decoder that keeps the required part of the contract but claims every capability while
// providing none of their calls, and a cache missing its arrays.
struct ClaimsTooMuch {
  static constexpr uocr::BackendCapabilities capabilities{true, true, true};
  const uocr::DecoderConfig& config() const;
  std::vector<float> embed(const std::vector<int32_t>&) const;
  std::vector<float> prefill(const std::vector<float>&, int64_t, uocr::KvCache&);
  std::vector<float> prefill_segment(const float*, int64_t, const int64_t*, uocr::KvCache&, int64_t,
                                     const std::vector<uocr::RowSpan>&, bool);
  const std::vector<float>& decode_step(int32_t, int64_t, uocr::KvCache&);
  int64_t position_limit() const;
  void set_position_limit(int64_t);
  void set_decode_attention(uocr::SparseReference*);
  size_t scratch_bytes() const;
  void set_deadline(const uocr::Deadline&);
};
struct NoArrays {};

}  // namespace

TEST_CASE("the CPU decoder keeps the backend contract and declares its capabilities") {
  constexpr uocr::BackendCapabilities caps = uocr::check_backend_contract<uocr::Decoder, uocr::KvCache>();
  static_assert(caps.host_kv && caps.batched_decode && caps.multi_token_decode);
  static_assert(uocr::PageGroupDecoder::capabilities.multi_token_decode);
  CHECK(caps.host_kv);
}

TEST_CASE("the contract's checks see a missing call") {
  using namespace uocr::contract;
  // Every required call is there...
  static_assert(has_prefill<ClaimsTooMuch, uocr::KvCache>::value && has_decode_step<ClaimsTooMuch, uocr::KvCache>::value &&
                has_prefill_segment<ClaimsTooMuch, uocr::KvCache>::value && has_position_limit<ClaimsTooMuch>::value &&
                has_set_deadline<ClaimsTooMuch>::value);
  // ...but not those of the capabilities it claims: check_backend_contract would stop the build.
  static_assert(!has_decode_batch<ClaimsTooMuch, uocr::KvCache>::value);
  static_assert(!has_decode_tokens<ClaimsTooMuch, uocr::KvCache>::value);
  static_assert(!has_kv_arrays<NoArrays>::value && !has_visit_rows<NoArrays>::value && !has_summarize_page<NoArrays>::value);
  static_assert(!has_capabilities<NoArrays>::value && !has_decode_step<NoArrays, uocr::KvCache>::value &&
                !has_set_deadline<NoArrays>::value);
  CHECK(has_decode_tokens<uocr::Decoder, uocr::KvCache>::value);
}

// ---- header-only hygiene ----

namespace uocr_test {
std::string abi_namespace_without_libjpeg();
uocr::ImageU8 load_image_without_libjpeg(const std::string& path);
}  // namespace uocr_test

TEST_CASE("uocr/version.hpp is the project's version and the C header's") {
  CHECK(std::string(UOCR_VERSION_STRING) == UOCR_PROJECT_VERSION);
  CHECK(std::string(uocr::version_string) == UOCR_PROJECT_VERSION);
  CHECK(std::to_string(UOCR_VERSION_MAJOR) + "." + std::to_string(UOCR_VERSION_MINOR) + "." +
            std::to_string(UOCR_VERSION_PATCH) ==
        UOCR_PROJECT_VERSION);
  CHECK(UOCR_VERSION_NUMBER == uocr_version_number());
  CHECK(std::string(uocr_version_string()) == UOCR_VERSION_STRING);
  // Everything is in the versioned inline namespace, and still reached as uocr::.
  CHECK(std::string(uocr::abi_namespace).rfind("v" + std::to_string(UOCR_VERSION_MAJOR) + "_" +
                                                    std::to_string(UOCR_VERSION_MINOR), 0) == 0);
  static_assert(std::is_same_v<uocr::Model, uocr::UOCR_ABI_NAMESPACE::Model>);
}

TEST_CASE("units built with different JPEG settings keep their own code (the setting names the namespace)") {
  const std::string jpeg = uocr_test::source_dir() + "/tests/fuzz/corpus/image/photo1_48x32.jpg";
  const uocr::ImageU8 here = uocr::load_image(jpeg);
  const uocr::ImageU8 there = uocr_test::load_image_without_libjpeg(jpeg);
  REQUIRE(here.width == there.width);
  REQUIRE(here.height == there.height);
#ifdef UOCR_HAVE_LIBJPEG
  CHECK(uocr_test::abi_namespace_without_libjpeg() != uocr::abi_namespace);
  // Had the linker merged the two units' load_image, both would decode with one library.
  CHECK(here.rgb != there.rgb);
#else
  CHECK(uocr_test::abi_namespace_without_libjpeg() == uocr::abi_namespace);
  CHECK(here.rgb == there.rgb);
#endif
}

TEST_CASE("the engine registry opens what the program registered, and says what it has") {
  // This program includes no GPU backend's public header: only the CPU is registered.
  CHECK(uocr::compiled_backends() == "cpu");
  const auto model = uocr::Model::load(uocr_test::source_dir() + "/models/uocr-demo");
  CHECK(uocr::open_engine(model, uocr::Backend::cpu)->backend() == uocr::Backend::cpu);
  const std::string msg = uocr_test::message_of([&] { uocr::open_engine(model, uocr::Backend::vulkan); });
  CHECK(msg.find("the vulkan backend is not built into this library (built: cpu)") != std::string::npos);
  CHECK(uocr_test::status_of([&] { uocr::open_engine(model, uocr::Backend::cuda); }) == uocr::Status::unsupported);
}

TEST_CASE("an engine's decoder takes a run's deadline to its backend: one that has passed stops the first prefill") {
  const auto model = uocr_test::demo_model();
  const std::unique_ptr<uocr::DecoderEngine> decoder = uocr::open_engine(model, uocr::Backend::cpu)->decoder(0, {});
  decoder->set_deadline(uocr::Deadline::after(std::chrono::steady_clock::now() - std::chrono::seconds(1), 1e-3));
  const uocr_test::RandomDocument document(1, 8, model->config().decoder.hidden);
  uocr::FunctionPageEmbeddings pages = document.pages();
  std::string msg;
  CHECK(uocr_test::status_of([&] { decoder->start(document.layout, pages); }, &msg) == uocr::Status::cancelled);
  CHECK(msg == "a prefill (before decoder layer 0 of " + std::to_string(model->config().decoder.layers) +
                   ") ran past the run's time budget");
}

TEST_CASE("the installed headers stand alone: none reaches into a compiled backend's own code") {
  // A backend's folder (backends/<name>/) is compiled into its library and not installed; the
  // headers under include/ reach it only through its public face.
  std::vector<std::string> offenders;
  size_t headers = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(uocr_test::source_dir() + "/include")) {
    if (!entry.is_regular_file()) continue;
    ++headers;
    std::ifstream in(entry.path());
    std::string line;
    while (std::getline(in, line))
      if (line.rfind("#include \"backends/", 0) == 0) offenders.push_back(entry.path().string() + ": " + line);
  }
  CHECK(headers > 50);
  for (const std::string& o : offenders) MESSAGE(o);
  CHECK(offenders.empty());
}

TEST_CASE("sessions opened on an engine run on it; params asking for another engine are refused") {
  const auto model = uocr::Model::load(uocr_test::source_dir() + "/models/uocr-demo");
  const std::shared_ptr<uocr::Engine> engine = uocr::open_engine(model, uocr::Backend::cpu, {0, {4, 1000}});
  CHECK(engine->model() == model);
  CHECK(engine->options().batching.max_batch == 4);

  uocr::Session defaults(engine);  // engine fields left at their defaults: the engine's
  CHECK(defaults.engine() == engine);
  uocr::SessionParams same;
  same.batching = {4, 1000};
  CHECK(uocr::Session(engine, same).engine() == engine);

  uocr::SessionParams other = same;
  other.batching.max_batch = 2;
  std::string msg;
  CHECK(uocr_test::status_of([&] { uocr::Session s(engine, other); }, &msg) == uocr::Status::invalid_argument);
  CHECK(msg.find("ask for cpu device 0, batching 2 (wait 1000 us), f32 but its engine runs cpu device 0, batching 4") !=
        std::string::npos);
  other = same;
  other.precision = uocr::Precision::bf16;
  CHECK(uocr_test::status_of([&] { uocr::Session s(engine, other); }) == uocr::Status::invalid_argument);
  CHECK(uocr_test::status_of([&] { uocr::Session s(std::shared_ptr<uocr::Engine>{}); }) == uocr::Status::invalid_argument);

  // Sessions opened from the model open engines of their own: nothing shared, nothing kept.
  const uocr::Session a(model, same), b(model, same);
  CHECK(a.engine() != b.engine());
  CHECK(a.engine()->options().batching.max_batch == 4);
}

TEST_CASE("the umbrella header's example runs as written") {
  // uocr/uocr.hpp's example, with a short output.
  auto model = uocr::Model::load(uocr_test::source_dir() + "/models/uocr-demo");
  uocr::FilePages pages({uocr_test::source_dir() + "/samples/data/demo-page1.png"});
  uocr::SessionParams params;
  params.max_new_tokens = 8;
  uocr::Session session(model, params, {});
  int events = 0;
  uocr::RunSummary summary = session.run(pages, [&](const uocr::Event&) { return ++events > 0; });
  CHECK(summary.generated_tokens > 0);
  CHECK(summary.generated_tokens <= 8);
  CHECK(events > 0);
}
