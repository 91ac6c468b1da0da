// Tokenizer parity with Hugging Face `tokenizers`: tests/data/tokenizer_fixture.jsonl holds
// strings and the ids/decodes the library produced (python/uocr_dev/fixtures/gen_tokenizer.py).
#include <doctest/doctest.h>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support/test_support.hpp"
#include "uocr/tokenizer/tokenizer.hpp"

using uocr_test::message_of;
using uocr_test::status_of;

namespace {

std::string tokenizer_path() { return uocr_test::published_dir() + "/tokenizer.json"; }

const uocr::Tokenizer& deepseek() {
  static const uocr::Tokenizer tok = uocr::Tokenizer::load(tokenizer_path());
  return tok;
}

std::vector<nlohmann::json> fixture() {
  const std::string path = uocr_test::source_dir() + "/tests/data/tokenizer_fixture.jsonl";
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), "cannot open ", path);
  std::vector<nlohmann::json> records;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) records.push_back(nlohmann::json::parse(line));
  }
  return records;
}

// A small byte-level BPE tokenizer.json; `pre_tokenizer` is its pre_tokenizer value.
std::string mini_tokenizer(const nlohmann::json& pre_tokenizer) {
  const uocr::ByteMap bytes;
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    uocr::utf8::append(ch, bytes.to_char(uint8_t(b)));
    vocab[ch] = b;
  }
  nlohmann::json merges = nlohmann::json::array();  // [a, b] pairs, the newer merges format
  for (const char* m : {"h e", "l l", "he ll", "Ġ w", "o r", "Ġw or"}) {
    const std::string s = m;
    const size_t sp = s.find(' ');
    merges.push_back(nlohmann::json::array({s.substr(0, sp), s.substr(sp + 1)}));
    vocab[s.substr(0, sp) + s.substr(sp + 1)] = vocab.size();
  }
  const auto added = [](int id, const char* content, bool special, bool strip, bool single,
                        bool norm) {
    return nlohmann::json{{"id", id},          {"content", content}, {"single_word", single},
                          {"lstrip", strip},   {"rstrip", strip},    {"normalized", norm},
                          {"special", special}};
  };
  nlohmann::json j = {
      {"version", "1.0"},
      {"added_tokens",
       {added(300, "<x>", true, false, false, false), added(301, "<s>", true, true, false, false),
        added(302, "bar", false, false, true, true)}},
      {"normalizer", nullptr},
      {"pre_tokenizer", pre_tokenizer},
      {"post_processor", nullptr},
      {"decoder",
       {{"type", "ByteLevel"},
        {"add_prefix_space", true},
        {"trim_offsets", true},
        {"use_regex", true}}},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"vocab", vocab},
        {"merges", merges}}}};
  return j.dump();
}

}  // namespace

TEST_CASE("tokenizer: prompt ids and vocabulary") {
  const auto& tok = deepseek();
  CHECK(tok.encode("document parsing.") == std::vector<int32_t>{34030, 76466, 16});
  CHECK(tok.encode("\nFree OCR.") == std::vector<int32_t>{201, 21431, 126041, 16});
  CHECK(tok.encode("<image>") == std::vector<int32_t>{128815});
  CHECK(tok.encode("").empty());
  CHECK(tok.token_id("<image>") == 128815);
  CHECK(tok.token_id("<td>") == 128821);
  CHECK(tok.token_id("Ġt") >= 0);
  CHECK(tok.token_id("no such token") == -1);
  CHECK(tok.vocab_size() == 128827);
  CHECK(tok.bos_id() == 0);
  CHECK(tok.eos_id() == 1);
  CHECK(tok.is_special(128815));
  CHECK_FALSE(tok.is_special(16));
  CHECK(tok.decode({0, 34030, 76466, 16, 1}, true) == "document parsing.");
}

TEST_CASE("tokenizer: fixture parity with HF tokenizers") {
  const auto& tok = deepseek();
  const auto records = fixture();
  REQUIRE(records.size() >= 5000);
  size_t encoded = 0, streamed = 0;
  for (size_t i = 0; i < records.size(); ++i) {
    const auto& r = records[i];
    const auto ids = r.at("ids").get<std::vector<int32_t>>();
    const auto decoded = r.at("decoded").get<std::string>();
    INFO("fixture line ", i + 1);
    if (r.contains("text")) {
      const auto text = r["text"].get<std::string>();
      INFO("text: ", nlohmann::json(text).dump());
      const auto got = tok.encode(text);
      INFO("got ", nlohmann::json(got).dump(), " want ", r["ids"].dump());
      CHECK(got == ids);
      ++encoded;
    }
    CHECK(tok.decode(ids) == decoded);
    CHECK(tok.decode(ids, true) == r.value("decoded_skip", decoded));

    // Token-by-token streaming: whole characters only, and the same text in the end.
    uocr::utf8::StreamDecoder stream;
    std::string joined;
    bool whole_chars = true;
    for (int32_t id : ids) {
      const std::string piece = stream.feed(tok.token_bytes(id));
      whole_chars = whole_chars && uocr::utf8::find_invalid(piece) == piece.size();
      joined += piece;
    }
    joined += stream.flush();
    CHECK(whole_chars);
    CHECK(joined == decoded);
    ++streamed;
  }
  MESSAGE("encoded ", encoded, " fixture strings, decoded and streamed ", streamed, " id lists");
}

TEST_CASE("tokenizer: UTF-8 replacement like Python errors='replace'") {
  using uocr::utf8::sanitize;
  const std::string r = "\xEF\xBF\xBD";  // U+FFFD
  CHECK(sanitize("\xE4\xBD\xA0") == "\xE4\xBD\xA0");
  CHECK(sanitize("\xFF") == r);
  CHECK(sanitize("\xE4\xBD") == r);
  CHECK(sanitize("\xF0\x9F\x98"
                 "A") == r + "A");
  CHECK(sanitize("\xED\xA0\x80") == r + r + r);
  CHECK(sanitize("\xC0\xAF") == r + r);
  CHECK(sanitize("\xE0\x80\xAF") == r + r + r);
  CHECK(sanitize("\xF4\x90\x80\x80") == r + r + r + r);
  CHECK(sanitize("a\x80\x80"
                 "b") == "a" + r + r + "b");

  uocr::utf8::StreamDecoder d;
  CHECK(d.feed("\xE4") == "");
  CHECK(d.feed("\xBD") == "");
  CHECK(d.feed("\xA0\xE4") == "\xE4\xBD\xA0");
  CHECK(d.flush() == r);
}

TEST_CASE("tokenizer: self-made byte-level BPE tokenizer.json") {
  using V = std::vector<int32_t>;
  // Expected ids from HF tokenizers 0.23.3 on the same JSON. HF numbers the added tokens
  // 262..264 (after the vocabulary), ignoring the ids 300..302 written in the file.
  SUBCASE("ByteLevel without regex") {
    const auto tok = uocr::Tokenizer::from_string(mini_tokenizer({{"type", "ByteLevel"},
                                                                  {"add_prefix_space", false},
                                                                  {"trim_offsets", true},
                                                                  {"use_regex", false}}));
    CHECK(tok.encode("hello world") == V{258, 111, 261, 108, 100});
    CHECK(tok.encode("a <s> b") == V{97, 263, 98});
    CHECK(tok.encode("bar barn xbar bar. \u00e9") ==
          V{264, 32, 98, 97, 114, 110, 32, 120, 98, 97, 114, 32, 264, 46, 32, 195, 169});
    CHECK(tok.encode("<x>hello<x>") == V{262, 258, 111, 262});
    CHECK(tok.decode({262, 258, 111, 262}, true) == "hello");
    CHECK(tok.bos_id() == -1);
  }
  SUBCASE("ByteLevel with GPT-2 regex and prefix space") {
    const auto tok = uocr::Tokenizer::from_string(mini_tokenizer({{"type", "ByteLevel"},
                                                                  {"add_prefix_space", true},
                                                                  {"trim_offsets", true},
                                                                  {"use_regex", true}}));
    CHECK(tok.encode("hello world") == V{32, 258, 111, 261, 108, 100});
    CHECK(tok.encode("a <s> b") == V{32, 97, 263, 32, 98});
    CHECK(tok.encode("bar barn xbar bar. \u00e9") ==
          V{264, 32, 98, 97, 114, 110, 32, 120, 98, 97, 114, 32, 264, 32, 46, 32, 195, 169});
    CHECK(tok.encode("<x>hello<x>") == V{262, 32, 258, 111, 262});
    CHECK(tok.encode("hello   world\n\nhi's 12") ==
          V{32, 258, 111, 32, 32, 261, 108, 100, 10, 10, 104, 105, 39, 115, 32, 49, 50});
  }
}

TEST_CASE("tokenizer: a merge whose tokens or result are not in the vocabulary is refused, naming the merge") {
  // As HF tokenizers refuses it (MergeTokenOutOfVocabulary): BPE would otherwise give an id of no token.
  const auto plain = nlohmann::json::parse(mini_tokenizer(
      {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}));
  auto refused = [](const nlohmann::json& j, const std::string& merge, const std::string& token) {
    std::string msg;
    CHECK(status_of([&] { uocr::Tokenizer::from_string(j.dump(), "x.json"); }, &msg) == uocr::Status::invalid_model);
    CHECK_MESSAGE(msg.find(merge) != std::string::npos, msg);
    CHECK_MESSAGE(msg.find(token) != std::string::npos, msg);
  };
  auto no_result = plain;
  no_result["model"]["vocab"].erase("hell");
  refused(no_result, "model.merges[2] \"he ll\"", "result \"hell\"");
  auto no_part = plain;
  no_part["model"]["merges"].push_back({"zz", "q"});
  no_part["model"]["vocab"]["zzq"] = 400;
  refused(no_part, "model.merges[6] \"zz q\"", "token \"zz\"");
}

TEST_CASE("tokenizer: errors") {
  using uocr::Status;
  using uocr::Tokenizer;
  CHECK(status_of([] { Tokenizer::load("/nonexistent/tokenizer.json"); }) == Status::io);
  CHECK(status_of([] { Tokenizer::from_string("{\"model\": [1, 2", "bad.json"); }) ==
        Status::invalid_model);
  CHECK(message_of([] {
          Tokenizer::from_string("{\"model\": [1, 2", "bad.json");
        }).find("bad.json") != std::string::npos);

  const auto plain = nlohmann::json::parse(mini_tokenizer({{"type", "ByteLevel"},
                                                           {"add_prefix_space", false},
                                                           {"trim_offsets", true},
                                                           {"use_regex", false}}));
  auto no_merges = plain;
  no_merges["model"].erase("merges");
  CHECK(status_of([&] { Tokenizer::from_string(no_merges.dump(), "x.json"); }) ==
        Status::invalid_model);
  CHECK(message_of([&] {
          Tokenizer::from_string(no_merges.dump(), "x.json");
        }).find("model.merges") != std::string::npos);
  auto odd_split = plain;
  odd_split["pre_tokenizer"] = {{"type", "Sequence"},
                                {"pretokenizers",
                                 {{{"type", "Split"},
                                   {"pattern", {{"Regex", "\\d+"}}},
                                   {"behavior", "Isolated"},
                                   {"invert", false}},
                                  plain["pre_tokenizer"]}}};
  CHECK(status_of([&] { Tokenizer::from_string(odd_split.dump()); }) == Status::unsupported);
  auto wrong_type = plain;
  wrong_type["model"]["fuse_unk"] = "yes";
  CHECK(status_of([&] { Tokenizer::from_string(wrong_type.dump()); }) == Status::invalid_model);
  auto bad_vocab = plain;
  bad_vocab["model"]["vocab"]["h"] = "seven";
  CHECK(status_of([&] { Tokenizer::from_string(bad_vocab.dump()); }) == Status::invalid_model);
  auto bad_merge = plain;
  bad_merge["model"]["merges"][0] = "h e l";
  CHECK(status_of([&] { Tokenizer::from_string(bad_merge.dump()); }) == Status::invalid_model);
  auto nfc = plain;
  nfc["normalizer"] = {{"type", "NFC"}};
  CHECK(status_of([&] { Tokenizer::from_string(nfc.dump()); }) == Status::unsupported);

  const auto& tok = deepseek();
  CHECK(status_of([&] { tok.decode({16, 200000}); }) == Status::tokenizer);
  CHECK(message_of([&] { tok.decode({16, 200000}); }).find("200000") != std::string::npos);
  CHECK(status_of([&] { tok.decode({-1}); }) == Status::tokenizer);
  CHECK(status_of([&] { tok.decode({128827}); }) == Status::tokenizer);  // just past the last id
  CHECK(status_of([&] { tok.encode("bad \xFF utf-8"); }) == Status::invalid_argument);
}
