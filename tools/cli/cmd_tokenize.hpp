// `uocr inspect tokenize [--model DIR] (--text STR | --ids 1,2,3)`: encodes or decodes with the
// model folder's tokenizer.json, so that token ids can be compared with HF tokenizers from outside.
// --text prints the ids space-separated on one line; --ids prints the decoded text byte-exact,
// special tokens kept and no newline added.
#pragma once
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "args.hpp"
#include "model_dir.hpp"
#include "uocr/core/error.hpp"
#include "uocr/tokenizer/tokenizer.hpp"

namespace uocr_cli {

inline CommandOptions inspect_tokenize_options() {
  return {"inspect tokenize", {"--model", "--text", "--ids"}, {}, false, {}};
}

// "1,2, 3" -> {1, 2, 3}; anything that is not a 32-bit integer is an error.
inline std::vector<int32_t> parse_id_list(const std::string& text) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < text.size()) {
    if (text[i] == ',' || text[i] == ' ') {
      ++i;
      continue;
    }
    const char* start = text.c_str() + i;
    char* end = nullptr;
    errno = 0;
    const long long v = std::strtoll(start, &end, 10);
    uocr::require(end != start && errno == 0 && v >= INT32_MIN && v <= INT32_MAX &&
                      (*end == ',' || *end == ' ' || *end == '\0'),
                  uocr::Status::invalid_argument,
                  [&] { return "--ids: not a list of integers: " + text; });
    ids.push_back(int32_t(v));
    i = size_t(end - text.c_str());
  }
  return ids;
}

inline int cmd_inspect_tokenize(const Args& args) {
  const bool has_text = args.has("--text"), has_ids = args.has("--ids");
  uocr::require(has_text != has_ids, uocr::Status::invalid_argument,
                "inspect tokenize needs exactly one of --text or --ids");
  const auto tok = uocr::Tokenizer::load(model_dir(args) + "/tokenizer.json");
  if (has_text) {
    std::string line;
    for (int32_t id : tok.encode(args.required("--text"))) {
      if (!line.empty()) line += ' ';
      line += std::to_string(id);
    }
    std::printf("%s\n", line.c_str());
  } else {
    const std::string text = tok.decode(parse_id_list(args.required("--ids")));
    std::fwrite(text.data(), 1, text.size(), stdout);
  }
  return 0;
}

}  // namespace uocr_cli
