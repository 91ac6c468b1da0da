// uocr::Tokenizer: loads a Hugging Face tokenizer.json of a byte-level BPE model and encodes /
// decodes exactly as the `tokenizers` library does with add_special_tokens=False:
// added tokens -> pre-tokenizer -> BPE, and the ByteLevel decoder back. Configurations it cannot
// reproduce exactly are refused at load time with Status::unsupported. A loaded Tokenizer is
// immutable: encode/decode may run from several threads at once.
#pragma once
#include <algorithm>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include "uocr/core/error.hpp"
#include "uocr/tokenizer/added_tokens.hpp"
#include "uocr/tokenizer/bpe.hpp"
#include "uocr/tokenizer/json_reader.hpp"
#include "uocr/tokenizer/pre_tokenizer.hpp"
#include "uocr/tokenizer/utf8.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

class Tokenizer {
 public:
  // Reads tokenizer.json. BOS/EOS come from tokenizer_config.json or special_tokens_map.json
  // next to it when present (tokenizer.json itself does not name them).
  static Tokenizer load(const std::string& tokenizer_json_path) {
    Tokenizer t = from_string(read_file(tokenizer_json_path), tokenizer_json_path);
    const size_t slash = tokenizer_json_path.find_last_of("/\\");
    const std::string dir =
        slash == std::string::npos ? "" : tokenizer_json_path.substr(0, slash + 1);
    for (const char* sibling : {"tokenizer_config.json", "special_tokens_map.json"}) {
      t.read_bos_eos(dir + sibling);
    }
    return t;
  }

  // Parses the text of a tokenizer.json; `name` stands for the file in error messages.
  static Tokenizer from_string(const std::string& json_text,
                               const std::string& name = "tokenizer.json") {
    TokenizerJson parsed = TokenizerJsonReader::read(json_text, name);
    try {
      return from_parsed(parsed, name);
    } catch (const nlohmann::json::exception& e) {  // a value of the wrong JSON type
      throw Error(Status::invalid_model, name + ": " + e.what());
    }
  }

  // Token ids of `text` (UTF-8), without BOS/EOS.
  std::vector<int32_t> encode(std::string_view text) const {
    const size_t bad = utf8::find_invalid(text);
    require(bad == text.size(), Status::invalid_argument,
            [&] { return "text to encode is not valid UTF-8 (byte " + std::to_string(bad) + ")"; });
    std::vector<int32_t> ids;
    ids.reserve(text.size() / 3 + 4);
    added_.split(text, [&](std::string_view piece, int32_t id) {
      if (id >= 0) {
        ids.push_back(id);
        return;
      }
      pre_.for_each_word(piece, [&](std::string_view word) { bpe_.encode_word(word, ids); });
    });
    return ids;
  }

  // Text of `ids`; invalid UTF-8 from partial tokens becomes U+FFFD as in HF.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const {
    std::string bytes;
    for (int32_t id : ids) {
      if (skip_special && is_special(id)) continue;
      bytes += token_bytes(id);
    }
    return utf8::sanitize(bytes);
  }

  // Raw bytes of one token (possibly part of a UTF-8 character): feed these to a
  // utf8::StreamDecoder to stream text token by token.
  const std::string& token_bytes(int32_t id) const {
    require(known(id), Status::tokenizer,
            [&] { return "token id " + std::to_string(id) + " is not in the vocabulary"; });
    return bytes_[size_t(id)];
  }

  // Bytes of a token the model generated, for streaming: token_bytes(), or nothing for an id the
  // model's vocabulary has and the tokenizer does not (the published vocab_size 129280 exceeds
  // its ids, up to 128826; random or undertrained weights pick them). HF's decode drops such ids
  // the same way; decode() and token_bytes() stay strict for ids a caller passes in.
  const std::string& generated_bytes(int32_t id) const {
    static const std::string none;
    require(id >= 0, Status::tokenizer, [&] { return "token id " + std::to_string(id) + " is negative"; });
    return known(id) ? bytes_[size_t(id)] : none;
  }

  bool is_special(int32_t id) const {
    require(known(id), Status::tokenizer,
            [&] { return "token id " + std::to_string(id) + " is not in the vocabulary"; });
    return kind_[size_t(id)] == Kind::special;
  }

  // Id of a token given as its vocabulary string (added tokens first), or -1.
  int32_t token_id(std::string_view token) const {
    const int32_t added = added_ids_.find(token);
    return added >= 0 ? added : bpe_.vocab().find(token);
  }

  // Number of distinct tokens, added ones included (HF get_vocab_size(with_added_tokens=True)).
  size_t vocab_size() const { return vocab_size_; }
  // One past the largest token id (ids may have gaps, so this can exceed vocab_size()).
  size_t id_limit() const { return bytes_.size(); }

  int32_t bos_id() const { return bos_id_; }  // -1 when unknown
  int32_t eos_id() const { return eos_id_; }

 private:
  enum class Kind : uint8_t { none, normal, special };
  static constexpr int64_t kMaxId = 1 << 24;  // guards the id table against absurd ids

  static Tokenizer from_parsed(TokenizerJson& parsed, const std::string& name) {
    const nlohmann::json& j = parsed.root;
    if (!j.is_object())
      throw Error(Status::invalid_model, name + ": top level is not a JSON object");
    const auto key = [&](const char* k) -> const nlohmann::json& {
      if (!j.contains(k)) throw Error(Status::invalid_model, name + ": missing key " + k);
      return j[k];
    };
    check_normalizer(key("normalizer"), name);
    const auto& decoder = key("decoder");
    if (!decoder.is_object() || decoder.value("type", "") != "ByteLevel") {
      throw Error(Status::unsupported, name + ": decoder must be ByteLevel, got " + decoder.dump());
    }
    const auto& model = key("model");
    if (!parsed.has_vocab || !parsed.has_merges) {
      throw Error(Status::invalid_model, name + ": missing or malformed key model." +
                                             (parsed.has_vocab ? "merges" : "vocab"));
    }
    Tokenizer t;
    t.pre_ = PreTokenizer::from_json(key("pre_tokenizer"), name);
    t.bpe_ = Bpe::build(model, std::move(parsed.vocab), parsed.merges, name);
    t.added_ = AddedTokens::from_json(key("added_tokens"), t.bpe_.vocab(), name);
    t.build_id_table(name);
    return t;
  }

  static std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw Error(Status::io, "cannot open tokenizer file " + path);
    std::ostringstream ss;
    ss << in.rdbuf();
    if (in.bad()) throw Error(Status::io, "cannot read tokenizer file " + path);
    return ss.str();
  }

  static nlohmann::json parse(const std::string& text, const std::string& name) {
    try {
      return nlohmann::json::parse(text);
    } catch (const nlohmann::json::parse_error& e) {
      throw Error(Status::invalid_model, name + ": invalid JSON: " + e.what());
    }
  }

  // Only an identity normalizer is reproduced: none, or an empty Sequence.
  static void check_normalizer(const nlohmann::json& n, const std::string& name) {
    const bool identity = n.is_null() || (n.is_object() && n.value("type", "") == "Sequence" &&
                                          n.contains("normalizers") &&
                                          n["normalizers"].is_array() && n["normalizers"].empty());
    if (!identity)
      throw Error(Status::unsupported, name + ": normalizer not supported: " + n.dump());
  }

  bool known(int32_t id) const {
    return id >= 0 && size_t(id) < kind_.size() && kind_[size_t(id)] != Kind::none;
  }

  // Bytes and kind of every id. Added tokens take precedence over the model vocabulary; HF
  // decides "special" by a token's text, so any id whose text is a special token's is special.
  void build_id_table(const std::string& name) {
    int64_t limit = 0;
    bpe_.vocab().for_each(
        [&](const std::string&, int32_t id) { limit = std::max<int64_t>(limit, id + int64_t(1)); });
    for (const auto& t : added_.tokens()) limit = std::max<int64_t>(limit, t.id + int64_t(1));
    if (limit > kMaxId) throw Error(Status::invalid_model, name + ": token ids exceed 2^24");
    std::unordered_set<std::string> special_texts;
    for (const auto& t : added_.tokens()) {
      if (t.special) special_texts.insert(t.content);
    }
    const auto kind_of = [&](const std::string& text) {
      return special_texts.count(text) ? Kind::special : Kind::normal;
    };
    bytes_.assign(size_t(limit), std::string());
    kind_.assign(size_t(limit), Kind::none);
    bpe_.vocab().for_each([&](const std::string& token, int32_t id) {
      bytes_[size_t(id)] = bpe_.byte_map().token_bytes(token);
      kind_[size_t(id)] = kind_of(token);
    });
    vocab_size_ = bpe_.vocab().size();
    for (const auto& t : added_.tokens()) {
      if (added_ids_.find(t.content) < 0 && bpe_.vocab().find(t.content) < 0) ++vocab_size_;
      added_ids_.insert(t.content, t.id);
      bytes_[size_t(t.id)] = bpe_.byte_map().token_bytes(t.content);
      kind_[size_t(t.id)] = kind_of(t.content);
    }
  }

  // Sets BOS/EOS from a config file's "bos_token" / "eos_token" (a string or {"content": ...}),
  // unless already known. A missing file is fine; a malformed one is an error.
  void read_bos_eos(const std::string& path) {
    if (!std::ifstream(path)) return;
    const nlohmann::json j = parse(read_file(path), path);
    const auto id_of = [&](const char* key) -> int32_t {
      if (!j.is_object() || !j.contains(key)) return -1;
      const auto& v = j[key];
      if (v.is_string()) return token_id(v.get<std::string>());
      if (v.is_object() && v.contains("content") && v["content"].is_string()) {
        return token_id(v["content"].get<std::string>());
      }
      return -1;
    };
    if (bos_id_ < 0) bos_id_ = id_of("bos_token");
    if (eos_id_ < 0) eos_id_ = id_of("eos_token");
  }

  AddedTokens added_;
  PreTokenizer pre_;
  Bpe bpe_;
  TokenIndex added_ids_;
  std::vector<std::string> bytes_;
  std::vector<Kind> kind_;
  size_t vocab_size_ = 0;
  int32_t bos_id_ = -1;
  int32_t eos_id_ = -1;
};

UOCR_NAMESPACE_END
