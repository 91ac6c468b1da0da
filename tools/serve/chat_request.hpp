// POST /v1/chat/completions as the real clients send it (docs/SERVING.md has the field list):
//  - Baidu's infer.py (SGLang): a text part "document parsing." and an image_url data URI,
//    temperature 0, skip_special_tokens false, stream true, images_config.image_mode,
//    custom_params {ngram_size, window_size}, custom_logit_processor (accepted, never read);
//  - the vLLM recipe: text starting with a literal "<image>", vllm_xargs {ngram_size,
//    window_size}, max_tokens, fields of the OpenAI client's extra_body (merged into the body by
//    the client; a literal "extra_body" object is merged here);
//  - several image_url parts in one message: one document of that many pages (base views, the
//    multi-page prompt, one session with page groups).
// Fields of the OpenAI API that change nothing here (user, presence_penalty, ...) are ignored as
// vLLM does; those whose meaning uocr cannot give (n > 1, tools, logprobs) are refused.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api_error.hpp"
#include "data_uri.hpp"
#include "uocr/session/params.hpp"
#include "uocr/session/prompt.hpp"

namespace uocr_serve {

struct ChatRequest {
  std::string model;
  std::vector<std::string> images;  // encoded image files, in page order
  std::string prompt;               // with exactly one "<image>"
  bool stream = false;
  bool include_usage = false;       // stream_options.include_usage: a last chunk with usage and no choices
  bool mode_given = false;          // images_config.image_mode was sent; else the server picks (gundam where the model can)
  uocr::SessionParams params;       // mode, prompt, sampling, n-gram rule, max tokens (the server sets the rest)
};

namespace detail {

using json = nlohmann::json;

inline const json* field(const json& obj, const char* name) {
  auto it = obj.find(name);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

template <class Check>
const json* typed(const json& obj, const char* name, Check ok, const char* what, const std::string& prefix = "") {
  const json* v = field(obj, name);
  if (v != nullptr && !ok(*v)) throw ApiError(400, "'" + prefix + name + "' must be " + what, prefix + name);
  return v;
}

inline int64_t integer(const json& obj, const char* name, int64_t lo, int64_t hi, int64_t fallback, const std::string& prefix = "") {
  const json* v = typed(obj, name, [](const json& j) { return j.is_number_integer(); }, "an integer", prefix);
  if (v == nullptr) return fallback;
  const int64_t n = v->get<int64_t>();
  if (n < lo || n > hi)
    throw ApiError(400, "'" + prefix + name + "' must be in " + std::to_string(lo) + ".." + std::to_string(hi) + ", got " + std::to_string(n),
                   prefix + name);
  return n;
}

inline double number(const json& obj, const char* name, double lo, double hi, double fallback) {
  const json* v = typed(obj, name, [](const json& j) { return j.is_number(); }, "a number");
  if (v == nullptr) return fallback;
  const double x = v->get<double>();
  if (!(x >= lo && x <= hi)) throw ApiError(400, "'" + std::string(name) + "' is out of range", name);
  return x;
}

inline bool boolean(const json& obj, const char* name, bool fallback) {
  const json* v = typed(obj, name, [](const json& j) { return j.is_boolean(); }, "true or false");
  return v == nullptr ? fallback : v->get<bool>();
}

// The prompt with its one "<image>": where the client put it (several tags, e.g. one per page,
// become the first one: every page's visual tokens go there, as upstream's multi-page prompt),
// else in front of the text as SGLang's processor places the image; no text: upstream's prompt.
inline std::string prompt_with_image_tag(const std::string& text, size_t pages) {
  static const std::string tag = "<image>";
  if (text.find_first_not_of(" \t\r\n") == std::string::npos) return pages > 1 ? uocr::kMultiPagePrompt : uocr::kSinglePagePrompt;
  const size_t first = text.find(tag);
  if (first == std::string::npos) return tag + text;
  std::string out = text.substr(0, first + tag.size());
  for (size_t at = first + tag.size(); at < text.size();) {
    const size_t next = text.find(tag, at);
    out += text.substr(at, next == std::string::npos ? std::string::npos : next - at);
    at = next == std::string::npos ? text.size() : next + tag.size();
  }
  return out;
}

// ngram_size / window_size from SGLang's custom_params or vLLM's vllm_xargs.
inline void read_ngram_args(const json& body, const char* name, uocr::SessionParams& p) {
  const json* args = typed(body, name, [](const json& j) { return j.is_object(); }, "an object");
  if (args == nullptr) return;
  const std::string prefix = std::string(name) + ".";
  p.ngram_size = int(integer(*args, "ngram_size", 0, 1 << 20, p.ngram_size, prefix));
  p.ngram_window = int(integer(*args, "window_size", 1, 1 << 24, p.ngram_window, prefix));
}

}  // namespace detail

// The request in `body`; an ApiError(400) naming the field that is wrong, or 413 past
// `max_pages` images.
inline ChatRequest parse_chat_request(const std::string& body_text, int max_pages) {
  using detail::json;
  json body = json::parse(body_text, nullptr, false);
  if (body.is_discarded()) throw ApiError(400, "the request body is not valid JSON");
  if (!body.is_object()) throw ApiError(400, "the request body must be a JSON object");
  if (const json* extra = detail::typed(body, "extra_body", [](const json& j) { return j.is_object(); }, "an object"))
    for (auto it = extra->begin(); it != extra->end(); ++it) body[it.key()] = it.value();

  ChatRequest r;
  const json* model = detail::typed(body, "model", [](const json& j) { return j.is_string(); }, "a string");
  if (model != nullptr) r.model = model->get<std::string>();
  if (detail::integer(body, "n", 1, 1, 1) != 1) throw ApiError(400, "'n' must be 1", "n");
  for (const char* refused : {"tools", "functions", "response_format"})
    if (detail::field(body, refused) != nullptr) throw ApiError(400, std::string("'") + refused + "' is not supported by an OCR model", refused);
  if (detail::boolean(body, "logprobs", false)) throw ApiError(400, "'logprobs' is not supported", "logprobs");

  const json* messages = detail::typed(body, "messages", [](const json& j) { return j.is_array(); }, "a list of messages");
  if (messages == nullptr || messages->empty()) throw ApiError(400, "'messages' must hold one user message with the page images", "messages");
  std::string text;
  int users = 0;
  for (size_t m = 0; m < messages->size(); ++m) {
    const json& msg = (*messages)[m];
    const std::string where = "messages[" + std::to_string(m) + "]";
    if (!msg.is_object()) throw ApiError(400, "'" + where + "' must be an object", where);
    const json* role = detail::typed(msg, "role", [](const json& j) { return j.is_string(); }, "a string", where + ".");
    if (role == nullptr || role->get<std::string>() != "user")
      throw ApiError(400, "'" + where + ".role' must be \"user\": the model reads one user message (text and images), it has no chat template",
                     where + ".role");
    if (++users > 1) throw ApiError(400, "send the pages of a document in one user message", where);
    const json* content = detail::field(msg, "content");
    if (content == nullptr) throw ApiError(400, "'" + where + ".content' is missing", where + ".content");
    if (content->is_string()) {
      text += content->get<std::string>();
      continue;
    }
    if (!content->is_array()) throw ApiError(400, "'" + where + ".content' must be a string or a list of parts", where + ".content");
    for (size_t k = 0; k < content->size(); ++k) {
      const json& part = (*content)[k];
      const std::string at = where + ".content[" + std::to_string(k) + "]";
      if (!part.is_object()) throw ApiError(400, "'" + at + "' must be an object", at);
      const json* type = detail::typed(part, "type", [](const json& j) { return j.is_string(); }, "a string", at + ".");
      const std::string t = type ? type->get<std::string>() : "";
      if (t == "text") {
        const json* s = detail::typed(part, "text", [](const json& j) { return j.is_string(); }, "a string", at + ".");
        if (s != nullptr) text += s->get<std::string>();
      } else if (t == "image_url") {
        const json* url = detail::field(part, "image_url");
        if (url != nullptr && url->is_object()) url = detail::field(*url, "url");
        if (url == nullptr || !url->is_string()) throw ApiError(400, "'" + at + ".image_url.url' must be a data: URI", at + ".image_url.url");
        if (int64_t(r.images.size()) >= max_pages)
          throw ApiError(413, "a request takes at most " + std::to_string(max_pages) + " pages (max_pages_per_request)", "messages");
        r.images.push_back(decode_image_data_uri(url->get<std::string>(), at + ".image_url.url"));
      } else {
        throw ApiError(400, "'" + at + ".type' must be \"text\" or \"image_url\", got \"" + t + "\"", at + ".type");
      }
    }
  }
  if (r.images.empty()) throw ApiError(400, "the message has no image: add image_url parts (data: URIs), one per page", "messages");

  r.stream = detail::boolean(body, "stream", false);
  if (const json* so = detail::typed(body, "stream_options", [](const json& j) { return j.is_object(); }, "an object"))
    r.include_usage = detail::boolean(*so, "include_usage", false);
  (void)detail::boolean(body, "skip_special_tokens", false);  // uocr's text holds no special tokens either way
  (void)detail::typed(body, "custom_logit_processor", [](const json& j) { return j.is_string(); }, "a string");  // never deserialized

  uocr::SessionParams& p = r.params;
  p.prompt = detail::prompt_with_image_tag(text, r.images.size());
  if (const json* ic = detail::typed(body, "images_config", [](const json& j) { return j.is_object(); }, "an object")) {
    const json* mode = detail::typed(*ic, "image_mode", [](const json& j) { return j.is_string(); }, "a string", "images_config.");
    const std::string m = mode ? mode->get<std::string>() : "gundam";
    if (m != "gundam" && m != "base")
      throw ApiError(400, "'images_config.image_mode' must be \"gundam\" or \"base\", got \"" + m + "\"", "images_config.image_mode");
    p.mode = m == "base" ? uocr::ImageMode::base : uocr::ImageMode::gundam;
    r.mode_given = mode != nullptr;
  }
  const int64_t max_tokens = detail::integer(body, "max_tokens", 1, INT32_MAX, 0);
  p.max_new_tokens = detail::integer(body, "max_completion_tokens", 1, INT32_MAX, max_tokens);
  p.sampling.temperature = float(detail::number(body, "temperature", 0, 100, 0));
  p.sampling.top_p = float(detail::number(body, "top_p", 1e-6, 1, 1));
  p.sampling.seed = uint64_t(detail::integer(body, "seed", 0, INT64_MAX, 0));
  detail::read_ngram_args(body, "custom_params", p);
  detail::read_ngram_args(body, "vllm_xargs", p);
  return r;
}

}  // namespace uocr_serve
