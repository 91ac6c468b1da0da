// Pre-tokenizer: splits text into the words that BPE encodes one by one. It implements, by hand,
// the pipelines that tokenizer.json files of byte-level BPE models declare:
//  - the DeepSeek-V3 Sequence: Split(\p{N}{1,3}), Split([一-龥぀-ゟ゠-ヿ]+) and Split(<word
//    regex>), all Isolated, then ByteLevel(add_prefix_space=false, use_regex=false);
//  - a bare ByteLevel, with or without its GPT-2 regex and prefix space.
// Each regex is a matcher that reproduces Oniguruma's leftmost-first, backtracking result, so the
// words are exactly those of HF tokenizers. Anything else is refused at load time.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "uocr/core/error.hpp"
#include "uocr/tokenizer/unicode_tables.hpp"
#include "uocr/tokenizer/utf8.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

class PreTokenizer {
 public:
  // Reads the "pre_tokenizer" value of tokenizer.json; `file` names it in error messages.
  static PreTokenizer from_json(const nlohmann::json& spec, const std::string& file) {
    PreTokenizer p;
    if (spec.is_object() && spec.value("type", "") == "ByteLevel") {
      p.read_byte_level(spec, file);
      return p;
    }
    const bool is_sequence = spec.is_object() && spec.value("type", "") == "Sequence" &&
                             spec.contains("pretokenizers") && spec["pretokenizers"].is_array() &&
                             !spec["pretokenizers"].empty();
    if (!is_sequence)
      throw unsupported(file, "it must be ByteLevel or a Sequence ending in ByteLevel");
    const auto& steps = spec["pretokenizers"];
    for (size_t i = 0; i + 1 < steps.size(); ++i) p.rules_.push_back(read_split(steps[i], file));
    const auto& last = steps.back();
    if (!last.is_object() || last.value("type", "") != "ByteLevel") {
      throw unsupported(file, "the Sequence must end with ByteLevel");
    }
    p.read_byte_level(last, file);
    return p;
  }

  // Calls fn(std::string_view word) for every word of `text` (valid UTF-8), in order. A word may
  // point into a temporary buffer when a prefix space was added.
  template <class Fn>
  void for_each_word(std::string_view text, Fn&& fn) const {
    if (!text.empty()) run(0, text, fn);
  }

 private:
  enum class Rule { digits_1_3, cjk_kana, deepseek_v3_words, gpt2_words };

  static Error unsupported(const std::string& file, const std::string& what) {
    return Error(Status::unsupported, file + ": pre_tokenizer is not supported by uocr: " + what);
  }

  static Rule read_split(const nlohmann::json& step, const std::string& file) {
    if (!step.is_object() || step.value("type", "") != "Split") {
      throw unsupported(file, "only Split steps may precede ByteLevel, got " + step.dump());
    }
    const auto& pattern = step.value("pattern", nlohmann::json());
    const std::string regex =
        pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string()
            ? pattern["Regex"].get<std::string>()
            : std::string();
    if (step.value("behavior", "") != "Isolated" || step.value("invert", true)) {
      throw unsupported(file,
                        "Split must have behavior Isolated and invert false, got " + step.dump());
    }
    if (regex == "\\p{N}{1,3}") return Rule::digits_1_3;
    if (regex == "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+") return Rule::cjk_kana;
    if (regex ==
        "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?"
        "[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+") {
      return Rule::deepseek_v3_words;
    }
    throw unsupported(file, "unknown Split pattern " + pattern.dump());
  }

  void read_byte_level(const nlohmann::json& step, const std::string& file) {
    const auto flag = [&](const char* key, bool fallback) {
      if (!step.contains(key)) return fallback;
      if (!step[key].is_boolean())
        throw unsupported(file, std::string("ByteLevel.") + key + " must be a boolean");
      return step[key].get<bool>();
    };
    add_prefix_space_ = flag("add_prefix_space", true);  // defaults of HF's ByteLevel
    use_regex_ = flag("use_regex", true);
  }

  template <class Fn>
  void run(size_t stage, std::string_view piece, Fn& fn) const {
    if (stage < rules_.size()) {
      isolate(rules_[stage], piece, [&](std::string_view sub) { run(stage + 1, sub, fn); });
      return;
    }
    // ByteLevel: HF prepends the space to every piece that reaches it, not only the first.
    if (add_prefix_space_ && piece.front() != ' ') {
      const std::string spaced = " " + std::string(piece);
      finish(spaced, fn);
    } else {
      finish(piece, fn);
    }
  }

  template <class Fn>
  void finish(std::string_view piece, Fn& fn) const {
    if (use_regex_) {
      isolate(Rule::gpt2_words, piece, fn);
    } else {
      fn(piece);
    }
  }

  // Split with behavior Isolated: matches and the gaps between them both become pieces.
  template <class Fn>
  static void isolate(Rule rule, std::string_view s, Fn&& fn) {
    size_t gap = 0, pos = 0;
    while (pos < s.size()) {
      const size_t end = match(rule, s, pos);
      if (end == pos) {
        utf8::next(s, pos);
        continue;
      }
      if (gap < pos) fn(s.substr(gap, pos - gap));
      fn(s.substr(pos, end - pos));
      gap = pos = end;
    }
    if (gap < s.size()) fn(s.substr(gap));
  }

  // One decoded character of the subject, with its classes.
  struct Char {
    char32_t cp = 0;
    uint8_t flags = 0;
    size_t end = 0;  // byte offset just past it
    bool valid = false;
  };
  static Char at(std::string_view s, size_t pos) {
    Char c;
    if (pos >= s.size()) return c;
    c.end = pos;
    c.cp = utf8::next(s, c.end);
    c.flags = unicode::classify(c.cp);
    c.valid = true;
    return c;
  }
  // End of the longest run of characters starting at `pos` that satisfy `pred`.
  template <class Pred>
  static size_t run_end(std::string_view s, size_t pos, Pred pred) {
    for (Char c = at(s, pos); c.valid && pred(c); c = at(s, c.end)) pos = c.end;
    return pos;
  }
  static bool has(const Char& c, uint8_t flags) { return (c.flags & flags) != 0; }
  static bool is_ascii_letter(char32_t cp) { return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z'; }
  static bool is_crlf(char32_t cp) { return cp == '\r' || cp == '\n'; }

  // End of the match that starts exactly at `pos`, or `pos` when there is none.
  static size_t match(Rule rule, std::string_view s, size_t pos) {
    using namespace unicode;
    const Char c0 = at(s, pos);
    switch (rule) {
      case Rule::digits_1_3: {  // \p{N}{1,3}
        size_t end = pos;
        Char c = c0;
        for (int k = 0; k < 3 && c.valid && has(c, number); ++k, c = at(s, c.end)) end = c.end;
        return end;
      }
      case Rule::cjk_kana:  // [一-龥぀-ゟ゠-ヿ]+
        return run_end(s, pos, [](const Char& c) {
          return (c.cp >= 0x4E00 && c.cp <= 0x9FA5) || (c.cp >= 0x3040 && c.cp <= 0x30FF);
        });
      case Rule::deepseek_v3_words:
        return match_deepseek_v3(s, pos, c0);
      case Rule::gpt2_words:
        return match_gpt2(s, pos, c0);
    }
    return pos;
  }

  static bool is_letter_or_mark(const Char& c) { return has(c, unicode::letter | unicode::mark); }
  static bool is_punct_or_symbol(const Char& c) { return has(c, unicode::punct | unicode::symbol); }

  // [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+ | [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+ |
  //  ?[\p{P}\p{S}]+[\r\n]* | \s*[\r\n]+ | \s+(?!\S) | \s+
  static size_t match_deepseek_v3(std::string_view s, size_t pos, const Char& c0) {
    using namespace unicode;
    const Char c1 = at(s, c0.end);
    const bool ascii_punct = c0.cp < 0x80 && (c0.flags & (punct | symbol));
    if (ascii_punct && c1.valid && is_ascii_letter(c1.cp)) {
      return run_end(s, c1.end, [](const Char& c) { return is_ascii_letter(c.cp); });
    }
    // The optional leading character is tried first, then (backtracking) left out.
    if (!is_crlf(c0.cp) && !has(c0, letter | punct | symbol) && c1.valid && is_letter_or_mark(c1)) {
      return run_end(s, c1.end, is_letter_or_mark);
    }
    if (is_letter_or_mark(c0)) return run_end(s, c0.end, is_letter_or_mark);
    const auto crlf_tail = [&](size_t end) {
      return run_end(s, end, [](const Char& c) { return is_crlf(c.cp); });
    };
    if (c0.cp == ' ' && c1.valid && is_punct_or_symbol(c1)) {
      return crlf_tail(run_end(s, c1.end, is_punct_or_symbol));
    }
    if (is_punct_or_symbol(c0)) return crlf_tail(run_end(s, c0.end, is_punct_or_symbol));
    return match_whitespace(s, pos, c0, true);
  }

  // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  static size_t match_gpt2(std::string_view s, size_t pos, const Char& c0) {
    using namespace unicode;
    if (c0.cp == '\'') {
      for (std::string_view suffix : {"s", "t", "re", "ve", "m", "ll", "d"}) {
        if (s.substr(c0.end, suffix.size()) == suffix) return c0.end + suffix.size();
      }
    }
    const Char c1 = at(s, c0.end);
    const auto other = [](const Char& c) { return !has(c, space | letter | number); };
    for (uint8_t cls : {letter, number}) {
      const auto in_class = [cls](const Char& c) { return has(c, cls); };
      if (c0.cp == ' ' && c1.valid && in_class(c1)) return run_end(s, c1.end, in_class);
      if (in_class(c0)) return run_end(s, c0.end, in_class);
    }
    if (c0.cp == ' ' && c1.valid && other(c1)) return run_end(s, c1.end, other);
    if (other(c0)) return run_end(s, c0.end, other);
    return match_whitespace(s, pos, c0, false);
  }

  // Whitespace alternatives at `pos`: [\s*[\r\n]+ |] \s+(?!\S) | \s+.
  static size_t match_whitespace(std::string_view s, size_t pos, const Char& c0, bool crlf_first) {
    if (!has(c0, unicode::space)) return pos;
    size_t end = pos, last_start = pos, after_crlf = pos;
    size_t count = 0;
    for (Char c = c0; c.valid && has(c, unicode::space); c = at(s, c.end)) {
      last_start = end;
      end = c.end;
      ++count;
      if (is_crlf(c.cp)) after_crlf = c.end;
    }
    // \s*[\r\n]+: greedy \s* backs off to the last CR/LF of the run.
    if (crlf_first && after_crlf != pos) return after_crlf;
    // \s+(?!\S): at the end of the subject the whole run; otherwise the run minus its last
    // character, which is then left to precede the following word. A single space falls to \s+.
    if (end == s.size() || count == 1) return end;
    return last_start;
  }

  std::vector<Rule> rules_;
  bool add_prefix_space_ = false;
  bool use_regex_ = false;
};

UOCR_NAMESPACE_END
