// Prompt ids exactly as upstream builds them: BOS, then the prompt text split at "<image>",
// each text piece encoded without special tokens, the visual-token block in place of the
// (single) "<image>", no EOS. Multi-page input puts every page's block at that one place.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "uocr/core/error.hpp"
#include "uocr/model/model.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

inline constexpr const char* kSinglePagePrompt = "<image>document parsing.";
inline constexpr const char* kMultiPagePrompt = "<image>Multi page parsing.";

struct Prompt {
  std::vector<int32_t> ids;
  int64_t image_offset = 0;  // index of the first visual token in ids
  int64_t image_tokens = 0;
};

inline Prompt build_prompt(const Model& model, const std::string& text, int64_t n_visual_tokens) {
  static const std::string tag = "<image>";
  const size_t at = text.find(tag);
  require(at != std::string::npos, Status::invalid_argument, [&] { return "prompt '" + text + "' has no <image>"; });
  require(text.find(tag, at + tag.size()) == std::string::npos, Status::invalid_argument,
          [&] { return "prompt '" + text + "' has more than one <image>"; });
  require(n_visual_tokens > 0, Status::invalid_argument, "a prompt needs at least one visual token");
  Prompt p;
  p.ids.push_back(int32_t(model.config().decoder.bos_id));
  const std::vector<int32_t> before = model.tokenizer().encode(text.substr(0, at));
  p.ids.insert(p.ids.end(), before.begin(), before.end());
  p.image_offset = int64_t(p.ids.size());
  p.image_tokens = n_visual_tokens;
  p.ids.insert(p.ids.end(), size_t(n_visual_tokens), model.image_token_id());
  const std::vector<int32_t> after = model.tokenizer().encode(text.substr(at + tag.size()));
  p.ids.insert(p.ids.end(), after.begin(), after.end());
  return p;
}

UOCR_NAMESPACE_END
