// Added tokens (tokenizer.json "added_tokens"): split out of the text before pre-tokenization,
// as HF's AddedVocabulary does. Tokens with normalized=false are matched first on the raw text,
// then tokens with normalized=true on the remaining pieces (the normalizer is the identity for
// the tokenizers uocr accepts). Matching is leftmost-longest, and lstrip / rstrip / single_word
// follow HF's rules, including their Rust-regex notions of \s and \w.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "uocr/core/error.hpp"
#include "uocr/tokenizer/bpe.hpp"
#include "uocr/tokenizer/unicode_tables.hpp"
#include "uocr/tokenizer/utf8.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = true;
};

class AddedTokens {
 public:
  // Reads the "added_tokens" array of tokenizer.json; `file` names it in error messages.
  // Ids are assigned the way HF does on load, not taken from the file: a token whose text is in
  // the model vocabulary (or earlier in the list) gets that id, any other the next one from
  // vocab.size() on. For consistent files, as DeepSeek's, the two agree.
  static AddedTokens from_json(const nlohmann::json& list, const TokenIndex& vocab,
                               const std::string& file) {
    AddedTokens a;
    if (!list.is_array()) {
      throw Error(Status::invalid_model, file + ": missing or malformed key added_tokens");
    }
    std::unordered_map<std::string, int32_t> ids;
    int32_t next_id = int32_t(vocab.size());
    for (size_t i = 0; i < list.size(); ++i) {
      const auto& e = list[i];
      const auto malformed = [&](const char* key) {
        return Error(Status::invalid_model, file + ": missing or malformed key added_tokens[" +
                                                std::to_string(i) + "]." + key);
      };
      const auto flag = [&](const char* key) {
        if (!e.is_object() || !e.contains(key) || !e[key].is_boolean()) throw malformed(key);
        return e[key].get<bool>();
      };
      if (!e.is_object() || !e.contains("id") || !e["id"].is_number_unsigned())
        throw malformed("id");
      if (!e.contains("content") || !e["content"].is_string()) throw malformed("content");
      AddedToken t;
      t.content = e["content"].get<std::string>();
      t.special = flag("special");
      t.lstrip = flag("lstrip");
      t.rstrip = flag("rstrip");
      t.single_word = flag("single_word");
      t.normalized = flag("normalized");
      if (t.content.empty()) continue;  // HF ignores empty tokens
      if (const auto it = ids.find(t.content); it != ids.end()) {
        t.id = it->second;
      } else if (const int32_t v = vocab.find(t.content); v >= 0) {
        t.id = v;
      } else {
        t.id = next_id++;
      }
      ids[t.content] = t.id;
      (t.normalized ? a.normalized_ : a.raw_).insert(t.content, a.tokens_.size());
      a.tokens_.push_back(std::move(t));
    }
    return a;
  }

  const std::vector<AddedToken>& tokens() const { return tokens_; }

  // Calls fn(std::string_view piece, int32_t id) for the pieces of `text` in order: id is the
  // added token's id, or -1 for text that goes on to the pre-tokenizer. Empty pieces are skipped.
  template <class Fn>
  void split(std::string_view text, Fn&& fn) const {
    find(raw_, text, [&](std::string_view piece, int32_t id) {
      if (id >= 0) {
        fn(piece, id);
      } else {
        find(normalized_, piece, fn);
      }
    });
  }

 private:
  // Byte trie over token contents; node 0 is the root.
  class Trie {
   public:
    void insert(std::string_view word, size_t token) {
      int32_t node = 0;
      for (unsigned char b : word) {
        const uint64_t key = edge(node, b);
        auto it = edges_.find(key);
        if (it == edges_.end()) {
          it = edges_.emplace(key, int32_t(terminal_.size())).first;
          terminal_.push_back(-1);
          if (node == 0) first_byte_[b] = true;
        }
        node = it->second;
      }
      terminal_[size_t(node)] = int32_t(token);  // a later duplicate content replaces the earlier
    }
    // Longest token starting at `pos`: sets `end` and returns its index, or -1.
    int32_t longest(std::string_view s, size_t pos, size_t& end) const {
      if (!first_byte_[static_cast<unsigned char>(s[pos])]) return -1;
      int32_t node = 0, found = -1;
      for (size_t i = pos; i < s.size(); ++i) {
        const auto it = edges_.find(edge(node, static_cast<unsigned char>(s[i])));
        if (it == edges_.end()) break;
        node = it->second;
        if (terminal_[size_t(node)] >= 0) {
          found = terminal_[size_t(node)];
          end = i + 1;
        }
      }
      return found;
    }
    bool empty() const { return edges_.empty(); }

   private:
    static uint64_t edge(int32_t node, unsigned char b) {
      return (uint64_t(uint32_t(node)) << 8) | b;
    }
    std::unordered_map<uint64_t, int32_t> edges_;
    std::vector<int32_t> terminal_{-1};
    std::array<bool, 256> first_byte_{};
  };

  static bool is_space(char32_t cp) { return unicode::classify(cp) & unicode::space; }
  static bool is_word(char32_t cp) { return unicode::classify(cp) & unicode::word; }

  // Start of the character that ends at byte `end` (> 0) of valid UTF-8 text.
  static size_t char_before(std::string_view s, size_t end) {
    size_t i = end - 1;
    while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
    return i;
  }
  static char32_t char_at(std::string_view s, size_t i) { return utf8::next(s, i); }

  // HF's AddedVocabulary::find_matches on one piece, forwarding pieces to fn.
  template <class Fn>
  void find(const Trie& trie, std::string_view s, Fn&& fn) const {
    if (s.empty()) return;
    if (trie.empty()) {
      fn(s, -1);
      return;
    }
    size_t done = 0;  // end of the text already handed out
    size_t pos = 0;
    while (pos < s.size()) {
      size_t stop = 0;
      const int32_t index = trie.longest(s, pos, stop);
      if (index < 0) {
        ++pos;
        continue;
      }
      const AddedToken& t = tokens_[size_t(index)];
      size_t start = pos;
      pos = stop;  // the search resumes after the match, whatever stripping does below
      if (t.single_word) {
        const bool word_before = start > 0 && is_word(char_at(s, char_before(s, start)));
        const bool word_after = stop < s.size() && is_word(char_at(s, stop));
        if (word_before || word_after) continue;
      }
      if (t.lstrip) {  // take the spaces before, but not ones an earlier piece already holds
        size_t first = start;
        while (first > 0 && is_space(char_at(s, char_before(s, first))))
          first = char_before(s, first);
        start = std::max(first, done);
      }
      if (t.rstrip) {
        while (stop < s.size() && is_space(char_at(s, stop))) utf8::next(s, stop);
      }
      if (done < start) fn(s.substr(done, start - done), -1);
      fn(s.substr(start, stop - start), t.id);
      done = stop;
    }
    if (done < s.size()) fn(s.substr(done), -1);
  }

  std::vector<AddedToken> tokens_;
  Trie raw_;
  Trie normalized_;
};

UOCR_NAMESPACE_END
