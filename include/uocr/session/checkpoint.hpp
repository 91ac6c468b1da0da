// Checkpoint files: the byte format, the crash-safe write, and what uocr::Session saves in them
// (its constant-size state: save_session_checkpoint / load_session_checkpoint, at the end).
//
// File: "UOCRCKPT" | u32 format version | u32 0 | u64 payload bytes | u64 FNV-1a of the payload |
// payload. Integers are little-endian as the machine writes them (checkpoints are resumed on the
// machine that wrote them; a foreign byte order fails the magic check). Written to PATH.tmp,
// fsync'ed, renamed over PATH and the folder fsync'ed: a crash leaves either the old or the new
// checkpoint, never a torn one. Anything else (truncated, flipped bits, another format version)
// is rejected with Status::io and a message saying what is wrong. The checksum does not stop a
// forged file: the reader checks every value it restores (load_session_checkpoint).
#pragma once
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include "uocr/core/error.hpp"
#include "uocr/decoder/page_groups.hpp"
#include "uocr/engine/engine.hpp"
#include "uocr/io/fingerprint.hpp"
#include "uocr/io/read_file.hpp"
#include "uocr/session/generation_state.hpp"
#include "uocr/session/output_parser.hpp"
#include "uocr/session/page_source.hpp"
#include "uocr/session/params.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

inline constexpr uint32_t kCheckpointVersion = 5;  // 2: memory peaks of the run so far; 3: group positions;
                                                   // 4: the page clock without its marker lead,
                                                   //    the window's token ids (recompute_on_slide);
                                                   // 5: markers completed

// Appends plain values to a payload.
class StateWriter {
 public:
  template <class T>
  void put(const T& v) {
    static_assert(std::is_trivially_copyable<T>::value, "put() takes plain values");
    bytes_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void put(const std::string& s) {
    put(uint64_t(s.size()));
    bytes_.append(s);
  }
  template <class T>
  void put(const std::vector<T>& v) {
    put(uint64_t(v.size()));
    put_array(v.data(), v.size());
  }
  template <class T>
  void put_array(const T* data, size_t n) {
    static_assert(std::is_trivially_copyable<T>::value, "put_array() takes plain values");
    bytes_.append(reinterpret_cast<const char*>(data), n * sizeof(T));
  }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

// Reads a payload back; running past its end is a corrupt checkpoint.
class StateReader {
 public:
  StateReader(const std::string& bytes, std::string file) : bytes_(bytes), file_(std::move(file)) {}
  StateReader(std::string&&, std::string) = delete;  // it reads `bytes` where they are: they must outlive it

  template <class T>
  T get() {
    T v;
    get_array(&v, 1);
    return v;
  }
  template <class T>
  void get(T& v) { v = get<T>(); }
  void get(std::string& s) {
    const uint64_t n = get<uint64_t>();
    need(n);
    s.assign(bytes_, size_t(at_), size_t(n));
    at_ += n;
  }
  template <class T>
  void get(std::vector<T>& v) {
    const uint64_t n = get<uint64_t>();
    if (n > (bytes_.size() - at_) / sizeof(T)) corrupt("its state ends early");  // not need(n * sizeof(T)): it can wrap
    v.resize(size_t(n));
    get_array(v.data(), v.size());
  }
  template <class T>
  void get_array(T* data, size_t n) {
    static_assert(std::is_trivially_copyable<T>::value, "get_array() takes plain values");
    need(uint64_t(n) * sizeof(T));
    if (n == 0) return;  // data may be null (an empty vector): memcpy must not see it
    std::memcpy(static_cast<void*>(data), bytes_.data() + at_, n * sizeof(T));
    at_ += n * sizeof(T);
  }
  bool at_end() const { return at_ == bytes_.size(); }
  // A value that cannot be right: the file is damaged or forged (or not written by this code).
  [[noreturn]] void corrupt(const std::string& what) const {
    throw Error(Status::io, "checkpoint " + file_ + " is corrupt: " + what);
  }

 private:
  void need(uint64_t n) const {
    if (n > bytes_.size() - at_) corrupt("its state ends early");
  }
  const std::string& bytes_;
  std::string file_;
  uint64_t at_ = 0;
};

namespace detail {
inline constexpr char kCheckpointMagic[8] = {'U', 'O', 'C', 'R', 'C', 'K', 'P', 'T'};
inline void write_all(int fd, const char* p, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    require(w > 0, Status::io, [&] { return "cannot write checkpoint " + path + ": " + std::strerror(errno); });
    p += w;
    n -= size_t(w);
  }
}
}  // namespace detail

// Writes `payload` as checkpoint `path`, atomically (see the top of this file).
inline void write_checkpoint(const std::string& path, const std::string& payload) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  require(fd >= 0, Status::io, [&] { return "cannot create checkpoint " + tmp + ": " + std::strerror(errno); });
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  const uint32_t version = kCheckpointVersion, zero = 0;
  const uint64_t size = payload.size(), sum = Fnv64().add(payload.data(), payload.size()).value();
  std::string header(detail::kCheckpointMagic, 8);
  header.append(reinterpret_cast<const char*>(&version), 4).append(reinterpret_cast<const char*>(&zero), 4);
  header.append(reinterpret_cast<const char*>(&size), 8).append(reinterpret_cast<const char*>(&sum), 8);
  detail::write_all(fd, header.data(), header.size(), tmp);
  detail::write_all(fd, payload.data(), payload.size(), tmp);
  require(::fsync(fd) == 0, Status::io, [&] { return "cannot sync checkpoint " + tmp + ": " + std::strerror(errno); });
  require(std::rename(tmp.c_str(), path.c_str()) == 0, Status::io,
          [&] { return "cannot rename " + tmp + " to " + path + ": " + std::strerror(errno); });
  // The rename itself must reach the disk before the checkpoint counts as written.
  std::string dir = std::filesystem::path(path).parent_path().string();
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

// Reads and verifies checkpoint `path`; returns its payload.
inline std::string read_checkpoint(const std::string& path) {
  // Any size a regular file has: the checksum below decides whether it is ours.
  const std::vector<uint8_t> raw = read_file_capped(path, UINT64_MAX, "checkpoint");
  const std::string bytes(raw.begin(), raw.end());
  auto fail = [&](const std::string& why) { throw Error(Status::io, "checkpoint " + path + " is unusable: " + why); };
  if (bytes.size() < 32 || std::memcmp(bytes.data(), detail::kCheckpointMagic, 8) != 0)
    fail("not a uocr checkpoint (wrong magic or too short)");
  uint32_t version;
  uint64_t size, sum;
  std::memcpy(&version, bytes.data() + 8, 4);
  std::memcpy(&size, bytes.data() + 16, 8);
  std::memcpy(&sum, bytes.data() + 24, 8);
  if (version != kCheckpointVersion)
    fail("format version " + std::to_string(version) + ", this build reads version " + std::to_string(kCheckpointVersion));
  if (size != bytes.size() - 32)
    fail("it holds " + std::to_string(bytes.size() - 32) + " payload bytes, its header says " + std::to_string(size) +
         " (truncated?)");
  if (Fnv64().add(bytes.data() + 32, size_t(size)).value() != sum) fail("checksum mismatch (the file is damaged)");
  return bytes.substr(32);
}

// ---- What a session's checkpoint holds ----

// What a checkpoint must match to be resumed: model files, parameters, input pages.
struct CheckpointIdentity {
  std::string model, params, input;
};

// What a checkpoint written as `saved` was written for, when a run identified as `now` cannot
// resume it ("" when it can); the input pages are compared only when `now.input` is set.
inline std::string identity_mismatch(const CheckpointIdentity& saved, const CheckpointIdentity& now) {
  if (saved.model != now.model) return "another model (its files' fingerprint differs)";
  if (saved.params != now.params) return "other parameters: [" + saved.params + "] vs now [" + now.params + "]";
  if (!now.input.empty() && saved.input != now.input) return "other input pages (their fingerprint differs)";
  return "";
}

inline CheckpointIdentity read_identity(StateReader& r) {
  CheckpointIdentity id;
  r.get(id.model);
  r.get(id.params);
  r.get(id.input);
  return id;
}

// Writes a session's state to checkpoint `path` (crash-safe, write_checkpoint): the identity,
// the layout, the page sizes, the page groups' state and KV rows, the generation state, the
// memory peaks so far and `caller`, the caller's own state.
inline void save_session_checkpoint(const std::string& path, const CheckpointIdentity& id, const DocumentLayout& layout,
                                    const EncodedPages& visual, DecoderEngine& engine, const GenerationState& L,
                                    const MemoryStats& memory, const std::string& caller) {
  StateWriter w;
  w.put(id.model);
  w.put(id.params);
  w.put(id.input);
  w.put(layout.pages);
  w.put(layout.page_tokens);
  w.put(layout.head);
  w.put(layout.tail);
  std::vector<int32_t> sizes;
  for (const auto& wh : visual.sizes()) sizes.insert(sizes.end(), {wh.first, wh.second});
  w.put(sizes);
  const PageGroupState g = engine.state();
  w.put(g.slot_pages);
  for (int64_t v : {g.first, g.current, g.loaded, g.generated, g.slides, g.extra_boundaries}) w.put(v);
  w.put(g.peak_total_bytes);
  w.put(g.text_starts);
  w.put(g.position_base);
  w.put(g.ring_tokens);
  w.put(g.window_ids);
  w.put(uint64_t(memory.peak_scratch_bytes));  // so that a resumed run reports the whole document's peaks
  w.put(uint64_t(memory.peak_bytes));
  engine.visit_kv([&](float* data, size_t n) {
    w.put(uint64_t(n));
    w.put_array(data, n);
  });
  w.put(L.logits);
  const NoRepeatNgram::State ng = L.ngram.state();
  w.put(ng.tail);
  w.put(ng.length);
  w.put(L.sampler.rng_state());
  const LoopGuard::State lg = L.guard.state();
  w.put(lg.tail);
  w.put(uint64_t(lg.pending));
  w.put(uint8_t(lg.in_box));
  const OutputParser::State op = L.parser.state();
  w.put(op.pending);
  w.put(int64_t(op.pages));
  const PageClock::State pc = L.clock.state();
  w.put(pc.parser.pending);
  w.put(int64_t(pc.parser.pages));
  for (int64_t v : {pc.page, pc.since_marker, pc.markers, pc.forced, pc.fed, pc.hold_start}) w.put(v);
  w.put(L.stream.pending());
  w.put(std::vector<int32_t>(L.forced.begin(), L.forced.end()));
  w.put(L.generated);
  w.put(L.early_eos_replaced);
  w.put(L.markers_completed);
  w.put(L.emitted_bytes);
  w.put(uint8_t(L.visible));
  w.put(caller);
  write_checkpoint(path, w.bytes());
}

// Reads checkpoint `path` into the layout, the page source, the engine, the generation state and
// the memory peaks, and returns the caller's own state. Every value is checked against the
// model (`vocab`), the layout and the parameters before it is used: the checksum guards against
// damage, not forgery, so a value that no run can reach refuses the file (Status::io, the field
// named), never an access outside the arrays it indexes. A file written for another model,
// parameters or pages (`id`) is Status::invalid_argument.
inline std::string load_session_checkpoint(const std::string& path, const CheckpointIdentity& id,
                                           const std::vector<int32_t>& marker_ids, int64_t vocab, DocumentLayout& layout,
                                           EncodedPages& visual, DecoderEngine& engine, GenerationState& L, MemoryStats& memory) {
  const std::string payload = read_checkpoint(path);
  StateReader r(payload, path);
  auto mismatch = [&](const std::string& what) {
    throw Error(Status::invalid_argument, "checkpoint " + path + " was written for " + what +
                                              "; it cannot be resumed here (start afresh without resume)");
  };
  if (const std::string what = identity_mismatch(read_identity(r), id); !what.empty()) mismatch(what);
  int64_t pages = 0;
  r.get(pages);
  if (pages != layout.pages) mismatch("a document of " + std::to_string(pages) + " pages, not " + std::to_string(layout.pages));
  std::vector<int32_t> head, tail;
  r.get(layout.page_tokens);
  r.get(head);
  r.get(tail);
  if (head != layout.head || tail != layout.tail) mismatch("another prompt");

  auto bad = [&](const std::string& field, int64_t value, const std::string& should) {
    r.corrupt(field + " = " + std::to_string(value) + ", it should be " + should);
  };
  // The layout and the parameters match by now: a state a component's restore refuses is the file's.
  auto restoring = [&](const std::function<void()>& restore) {
    try {
      restore();
    } catch (const Error& e) {
      if (e.status() != Status::invalid_argument) throw;
      r.corrupt(e.what());
    }
  };
  const std::pair<int64_t, int64_t> page_tokens = visual.page_token_range();
  if (layout.page_tokens < page_tokens.first || layout.page_tokens > page_tokens.second)
    bad("page_tokens", layout.page_tokens,
        "a page's visual tokens, " + std::to_string(page_tokens.first) + " to " + std::to_string(page_tokens.second));
  std::vector<int32_t> flat;
  r.get(flat);
  PageGroupState g;
  r.get(g.slot_pages);
  for (int64_t* v : {&g.first, &g.current, &g.loaded, &g.generated, &g.slides, &g.extra_boundaries}) r.get(*v);
  r.get(g.peak_total_bytes);
  r.get(g.text_starts);
  r.get(g.position_base);
  r.get(g.ring_tokens);
  r.get(g.window_ids);
  memory.peak_scratch_bytes = size_t(r.get<uint64_t>());
  memory.peak_bytes = size_t(r.get<uint64_t>());
  if (flat.size() % 2 != 0 || int64_t(flat.size() / 2) != g.loaded)
    bad("the size of page_sizes", int64_t(flat.size()), "2 x the pages loaded (" + std::to_string(g.loaded) + ")");
  std::vector<std::pair<int, int>> sizes;
  for (size_t i = 0; i < flat.size(); i += 2) {
    for (size_t k : {i, i + 1})
      if (flat[k] <= 0) bad("page_sizes[" + std::to_string(k) + "]", flat[k], "a pixel size > 0");
    sizes.emplace_back(flat[i], flat[i + 1]);
  }
  visual.skip_encoded(std::move(sizes));
  restoring([&] {
    engine.resume(layout, visual, g, [&](float* data, size_t n) {
      if (r.get<uint64_t>() != n) r.corrupt("KV rows do not match the page group");
      r.get_array(data, n);
    });
  });
  r.get(L.logits);
  if (int64_t(L.logits.size()) != vocab) bad("the size of logits", int64_t(L.logits.size()), "the vocabulary " + std::to_string(vocab));
  NoRepeatNgram::State ng;
  r.get(ng.tail);
  r.get(ng.length);
  for (size_t i = 0; i < ng.tail.size(); ++i)  // the vocabulary holds the tokenizer's ids (checked by Model)
    if (ng.tail[i] < 0 || ng.tail[i] >= vocab)
      bad("n-gram history[" + std::to_string(i) + "]", ng.tail[i], "a token id of the vocabulary [0, " + std::to_string(vocab) + ")");
  if (ng.length != layout.prompt_length() + g.generated)
    bad("n-gram length", ng.length,
        "the prompt's and the generated tokens (" + std::to_string(layout.prompt_length() + g.generated) + ")");
  restoring([&] { L.ngram.restore(ng); });
  L.sampler.restore_rng_state(r.get<uint64_t>());
  LoopGuard::State lg;
  r.get(lg.tail);
  lg.pending = size_t(r.get<uint64_t>());
  lg.in_box = r.get<uint8_t>() != 0;
  L.guard.restore(lg);
  std::string parser_pending, clock_parser_pending;
  r.get(parser_pending);
  const int64_t parser_pages = r.get<int64_t>();
  PageClock::State pc;
  r.get(clock_parser_pending);
  const int64_t clock_parser_pages = r.get<int64_t>();
  for (int64_t* v : {&pc.page, &pc.since_marker, &pc.markers, &pc.forced, &pc.fed, &pc.hold_start}) r.get(*v);
  std::string stream_pending;
  r.get(stream_pending);
  if (!L.stream.feed(stream_pending).empty()) r.corrupt("the UTF-8 stream state is not an incomplete character");
  std::vector<int32_t> forced;
  r.get(forced);
  r.get(L.generated);
  r.get(L.early_eos_replaced);
  r.get(L.markers_completed);
  r.get(L.emitted_bytes);
  L.visible = r.get<uint8_t>() != 0;
  std::string caller;
  r.get(caller);
  if (!r.at_end()) r.corrupt("unexpected bytes after the state");

  // The counts agree with each other: one token stream fed the page groups, both parsers
  // (one text) and the page clock, whose page is the boundaries the page groups took.
  if (L.generated != g.generated) bad("generated", L.generated, "the page groups' " + std::to_string(g.generated));
  if (parser_pages < 0 || parser_pages > std::numeric_limits<int>::max() ||
      uint64_t(parser_pages) > L.emitted_bytes / kPageMarker.size())
    bad("the parser's pages", parser_pages, "the markers in the " + std::to_string(L.emitted_bytes) + " bytes of text");
  if (clock_parser_pages != parser_pages || clock_parser_pending != parser_pending)
    bad("the page clock's parser pages", clock_parser_pages, "the parser's, which reads the same text");
  if (pc.markers < 0 || pc.forced < 0 || pc.page != pc.markers + pc.forced || pc.page != g.current + g.extra_boundaries)
    bad("the page clock's page", pc.page, "its marker and forced boundaries, the page groups' current and extra boundaries");
  if (pc.fed != L.generated) bad("the page clock's tokens", pc.fed, "the generated tokens");
  if (pc.since_marker < 0 || pc.since_marker > pc.fed) bad("the page clock's tokens since a marker", pc.since_marker, "in [0, tokens]");
  if (pc.hold_start < 0 || pc.hold_start > pc.fed) bad("the page clock's held text start", pc.hold_start, "in [0, tokens]");
  if (L.early_eos_replaced < 0 || L.early_eos_replaced > pc.forced)
    bad("early_eos_replaced", L.early_eos_replaced, "in [0, the forced boundaries]");
  if (L.markers_completed < 0 || L.markers_completed > L.generated)
    bad("markers_completed", L.markers_completed, "in [0, generated]");
  // An early EOS writes the marker's tokens: what remains of them is a part of its end.
  if (!forced.empty() && (forced.size() >= marker_ids.size() ||
                          !std::equal(forced.begin(), forced.end(), marker_ids.end() - std::ptrdiff_t(forced.size()))))
    bad("the size of the forced tokens", int64_t(forced.size()), "those left of a page marker's tokens");
  pc.parser = {clock_parser_pending, int(clock_parser_pages)};
  L.parser.restore({parser_pending, int(parser_pages)});
  L.clock.restore(pc);
  L.forced.assign(forced.begin(), forced.end());
  return caller;
}

UOCR_NAMESPACE_END
