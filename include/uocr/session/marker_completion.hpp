// Completing a "<PAGE>" marker the model has begun. With page groups the marker is what moves the
// page clock and slides the group (uocr/session/session.hpp): a marker begun and then left
// ("<PACE>") leaves the group a page behind the text, and the model then reads a page twice.
// Seen with the demo model on a document whose pages repeat: upstream's no-repeat n-gram rule
// banned the marker's next letter, because the page's text and the marker after it had already
// occurred. Once the text held since the last complete marker is a prefix of "<PAGE>" at least
// kMinPrefix bytes long, only tokens that continue the marker stay possible, whatever the n-gram
// rule says (the sampler then picks among them as usual). The session does this in runs whose group
// slides, until the last page's marker: in the last group a broken marker costs the page's event
// and boundary (seen on the same repeated document once the last group held the repeat).
#pragma once
#include <array>
#include <cmath>
#include <cstdint>
#include <string_view>
#include <vector>

#include "uocr/session/output_parser.hpp"
#include "uocr/tokenizer/tokenizer.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

class MarkerCompletion {
 public:
  // "<P": the published tokenizer writes the marker as "<P" "AGE" ">", so a shorter prefix would
  // never apply to it; "<" alone begins table tags.
  static constexpr size_t kMinPrefix = 2;

  explicit MarkerCompletion(const Tokenizer& tok) {
    for (size_t k = kMinPrefix; k < kPageMarker.size(); ++k) {
      const std::string_view rest = kPageMarker.substr(k);
      continues_[k].assign(tok.id_limit(), 0);
      for (size_t id = 0; id < tok.id_limit(); ++id) {
        const std::string& b = tok.generated_bytes(int32_t(id));
        if (b.empty() || tok.is_special(int32_t(id))) continue;
        if (rest.substr(0, b.size()) == b || std::string_view(b).substr(0, rest.size()) == rest) {
          continues_[k][id] = 1;
          any_[k] = true;
        }
      }
    }
  }

  // `written`: bytes of the marker held so far (OutputParser::page_marker_prefix()).
  bool writing(size_t written) const { return written >= kMinPrefix && written < kPageMarker.size() && any_[written]; }
  bool continues(size_t written, int32_t id) const {
    return writing(written) && id >= 0 && size_t(id) < continues_[written].size() && continues_[written][size_t(id)];
  }
  // Every token that does not continue the marker gets -inf (writing(written) required).
  void restrict(size_t written, std::vector<float>& logits) const {
    for (size_t id = 0; id < logits.size(); ++id)
      if (!continues(written, int32_t(id))) logits[id] = -INFINITY;
  }

 private:
  std::array<std::vector<uint8_t>, kPageMarker.size()> continues_;  // by marker bytes written, then token id
  std::array<bool, kPageMarker.size()> any_{};
};

UOCR_NAMESPACE_END
