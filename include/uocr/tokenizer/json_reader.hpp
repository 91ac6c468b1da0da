// Reads tokenizer.json through nlohmann's SAX interface. model.vocab and model.merges, nearly all
// of the file, go straight into their tables: a DOM of their quarter million strings (a std::map
// of 128k keys among them) costs more than the rest of loading. Everything else becomes an
// ordinary nlohmann::json.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "uocr/core/error.hpp"
#include "uocr/tokenizer/bpe.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

struct TokenizerJson {
  nlohmann::json root;    // the whole file except the two members below
  TokenIndex vocab;       // model.vocab
  Bpe::MergeList merges;  // model.merges, both formats
  bool has_vocab = false;
  bool has_merges = false;
};

class TokenizerJsonReader final : public nlohmann::json_sax<nlohmann::json> {
 public:
  // `name` stands for the file in error messages.
  static TokenizerJson read(const std::string& text, const std::string& name) {
    TokenizerJsonReader reader(name);
    nlohmann::json::sax_parse(text, &reader);  // parse errors throw from parse_error()
    return std::move(reader.out_);
  }

  bool null() override { return value(nullptr); }
  bool boolean(bool v) override { return value(v); }
  bool number_integer(number_integer_t v) override { return value(v); }
  bool number_unsigned(number_unsigned_t v) override {
    if (mode_ != Mode::vocab) return value(v);
    if (v > uint64_t(INT32_MAX)) throw bad_vocab();
    out_.vocab.insert(std::move(key_), int32_t(v));
    return true;
  }
  bool number_float(number_float_t v, const string_t&) override { return value(v); }
  bool string(string_t& v) override {
    if (mode_ == Mode::merges) {
      add_merge_line(v);
      return true;
    }
    if (mode_ == Mode::merge_pair) {
      pair_.push_back(std::move(v));
      return true;
    }
    return value(std::move(v));
  }
  bool binary(binary_t& v) override { return value(nlohmann::json::binary(std::move(v))); }
  bool key(string_t& k) override {
    key_ = std::move(k);
    return true;
  }
  bool start_object(std::size_t) override {
    if (mode_ == Mode::dom && at_model_member("vocab")) {
      mode_ = Mode::vocab;
      return true;
    }
    return open(nlohmann::json::object());
  }
  bool end_object() override {
    if (mode_ == Mode::vocab) {
      mode_ = Mode::dom;
      out_.has_vocab = true;
      return true;
    }
    return close();
  }
  bool start_array(std::size_t) override {
    if (mode_ == Mode::dom && at_model_member("merges")) {
      mode_ = Mode::merges;
      return true;
    }
    if (mode_ == Mode::merges) {
      mode_ = Mode::merge_pair;
      pair_.clear();
      return true;
    }
    return open(nlohmann::json::array());
  }
  bool end_array() override {
    if (mode_ == Mode::merge_pair) {
      if (pair_.size() != 2) throw bad_merge("is not a pair of strings");
      out_.merges.emplace_back(std::move(pair_[0]), std::move(pair_[1]));
      mode_ = Mode::merges;
      return true;
    }
    if (mode_ == Mode::merges) {
      mode_ = Mode::dom;
      out_.has_merges = true;
      return true;
    }
    return close();
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    throw Error(Status::invalid_model, name_ + ": invalid JSON: " + e.what());
  }

 private:
  enum class Mode { dom, vocab, merges, merge_pair };

  explicit TokenizerJsonReader(std::string name) : name_(std::move(name)) {}

  // True when the next value is the member `name` of the top-level "model" object.
  bool at_model_member(const char* name) const {
    return stack_.size() == 2 && path_[1] == "model" && stack_.back()->is_object() && key_ == name;
  }

  Error bad_vocab() const {
    return Error(Status::invalid_model, name_ + ": malformed key model.vocab[\"" + key_ + "\"]");
  }
  Error bad_merge(const std::string& why) const {
    return Error(Status::invalid_model,
                 name_ + ": model.merges[" + std::to_string(out_.merges.size()) + "] " + why);
  }

  // A merge in the "a b" format: exactly one space, as HF requires; "#version" lines are skipped.
  void add_merge_line(const std::string& line) {
    if (line.rfind("#version", 0) == 0) return;
    const size_t sp = line.find(' ');
    if (sp == std::string::npos || line.find(' ', sp + 1) != std::string::npos) {
      throw bad_merge("is not of the form \"a b\": " + line);
    }
    out_.merges.emplace_back(line.substr(0, sp), line.substr(sp + 1));
  }

  // Places a finished value in the DOM and returns where it went.
  nlohmann::json* place(nlohmann::json&& v) {
    if (mode_ != Mode::dom) throw mode_ == Mode::vocab ? bad_vocab() : bad_merge("is malformed");
    if (stack_.empty()) {
      out_.root = std::move(v);
      return &out_.root;
    }
    nlohmann::json& parent = *stack_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(v));
      return &parent.back();
    }
    nlohmann::json& slot = parent[key_];
    slot = std::move(v);
    return &slot;
  }
  bool value(nlohmann::json&& v) {
    place(std::move(v));
    return true;
  }
  bool open(nlohmann::json&& container) {
    const bool in_object = !stack_.empty() && stack_.back()->is_object();
    std::string key = in_object ? key_ : std::string();
    stack_.push_back(place(std::move(container)));
    path_.push_back(std::move(key));
    return true;
  }
  bool close() {
    stack_.pop_back();
    path_.pop_back();
    return true;
  }

  std::string name_;
  TokenizerJson out_;
  std::vector<nlohmann::json*> stack_;  // open containers, outermost first
  std::vector<std::string> path_;       // the key each open container sits under
  std::string key_;
  Mode mode_ = Mode::dom;
  std::vector<std::string> pair_;
};

UOCR_NAMESPACE_END
