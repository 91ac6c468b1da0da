// Byte-level BPE model (GPT-2 style), as HF tokenizers' BPE with a ByteLevel pre-tokenizer:
// every byte of a word starts as the vocabulary token of its GPT-2 "byte to unicode" character,
// then merges are applied lowest rank first (leftmost on ties) through a priority queue, with
// the same stale-entry rule as HF's Word::merge_all, so the ids agree even for odd merge lists.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <queue>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "uocr/core/error.hpp"
#include "uocr/tokenizer/utf8.hpp"
#include "uocr/version.hpp"

UOCR_NAMESPACE_BEGIN

// GPT-2's reversible byte <-> printable character mapping used by ByteLevel.
class ByteMap {
 public:
  ByteMap() {
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      to_char_[b] = printable ? char32_t(b) : next++;
    }
    for (int b = 0; b < 256; ++b) to_byte_[to_char_[b]] = uint8_t(b);
  }
  char32_t to_char(uint8_t b) const { return to_char_[b]; }
  // Byte of a mapped character, or -1 for characters outside the mapping (all are below 324).
  int to_byte(char32_t c) const { return c < to_byte_.size() && is_mapped(c) ? to_byte_[c] : -1; }
  // Raw bytes a vocabulary token stands for; a token with any unmapped character is taken as its
  // own UTF-8 text, as the ByteLevel decoder does.
  std::string token_bytes(std::string_view token) const {
    std::string out;
    size_t i = 0;
    while (i < token.size()) {
      const int b = to_byte(utf8::next(token, i));
      if (b < 0) return std::string(token);
      out += char(b);
    }
    return out;
  }

 private:
  bool is_mapped(char32_t c) const { return c >= 256 || to_char_[c] == c; }
  std::array<char32_t, 256> to_char_{};
  std::array<uint8_t, 324> to_byte_{};
};

// Token text -> id. Open addressing over entries kept in insertion order: loading the 128k
// vocabulary and looking up every merge's tokens is several times faster than with
// std::unordered_map<std::string, ...>, and lookups take a string_view without allocating.
class TokenIndex {
 public:
  // Adds a token; a repeated token takes the later id, as a repeated JSON key does.
  void insert(std::string token, int32_t id) {
    const uint64_t h = hash(token);
    const int32_t found = slot_of(token, h);
    if (slots_[size_t(found)] >= 0) {
      entries_[size_t(slots_[size_t(found)])].id = id;
      return;
    }
    slots_[size_t(found)] = int32_t(entries_.size());
    entries_.push_back(Entry{std::move(token), id, h});
    if (entries_.size() * 2 > slots_.size()) rehash(entries_.size());
  }
  int32_t find(std::string_view token) const {
    if (entries_.empty()) return -1;
    const int32_t slot = slots_[size_t(slot_of(token, hash(token)))];
    return slot < 0 ? -1 : entries_[size_t(slot)].id;
  }
  size_t size() const { return entries_.size(); }
  template <class Fn>
  void for_each(Fn&& fn) const {  // fn(const std::string& token, int32_t id)
    for (const Entry& e : entries_) fn(e.token, e.id);
  }

 private:
  struct Entry {
    std::string token;
    int32_t id;
    uint64_t hash;
  };
  static uint64_t hash(std::string_view s) { return std::hash<std::string_view>()(s); }
  // Slot holding `token`, or the empty slot where it would go.
  int32_t slot_of(std::string_view token, uint64_t h) const {
    const size_t mask = slots_.size() - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
      const int32_t e = slots_[i];
      if (e < 0 || (entries_[size_t(e)].hash == h && entries_[size_t(e)].token == token))
        return int32_t(i);
    }
  }
  void rehash(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n + 2) cap *= 2;
    if (cap <= slots_.size()) return;
    slots_.assign(cap, -1);
    for (size_t k = 0; k < entries_.size(); ++k) {
      for (size_t i = entries_[k].hash & (cap - 1);; i = (i + 1) & (cap - 1)) {
        if (slots_[i] < 0) {
          slots_[i] = int32_t(k);
          break;
        }
      }
    }
  }

  std::vector<Entry> entries_;
  std::vector<int32_t> slots_ = std::vector<int32_t>(16, -1);
};

// (left id, right id) -> (rank, merged id), open addressing: this lookup is the inner loop of BPE.
class MergeTable {
 public:
  struct Merge {
    uint32_t rank;
    int32_t new_id;
  };
  void reserve(size_t n) { grow(n); }
  void insert(int32_t a, int32_t b, Merge m) {  // a repeated pair takes the later merge
    if ((count_ + 1) * 2 > keys_.size()) grow(count_ + 1);
    const size_t i = slot_of(key(a, b));
    if (keys_[i] == kEmpty) ++count_;
    keys_[i] = key(a, b);
    values_[i] = m;
  }
  const Merge* find(int32_t a, int32_t b) const {
    const size_t i = slot_of(key(a, b));
    return keys_[i] == kEmpty ? nullptr : &values_[i];
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t(0);  // ids are non-negative, so never a real key
  static uint64_t key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
  static size_t mix(uint64_t k) {  // splitmix64 finalizer
    k ^= k >> 30;
    k *= 0xbf58476d1ce4e5b9ULL;
    k ^= k >> 27;
    k *= 0x94d049bb133111ebULL;
    return size_t(k ^ (k >> 31));
  }
  size_t slot_of(uint64_t k) const {
    const size_t mask = keys_.size() - 1;
    size_t i = mix(k) & mask;
    while (keys_[i] != kEmpty && keys_[i] != k) i = (i + 1) & mask;
    return i;
  }
  void grow(size_t n) {
    size_t cap = 16;
    while (cap < 2 * n + 2) cap *= 2;
    if (cap <= keys_.size()) return;
    std::vector<uint64_t> old_keys(cap, kEmpty);
    std::vector<Merge> old_values(cap);
    old_keys.swap(keys_);
    old_values.swap(values_);
    for (size_t i = 0; i < old_keys.size(); ++i) {
      if (old_keys[i] != kEmpty) {
        const size_t j = slot_of(old_keys[i]);
        keys_[j] = old_keys[i];
        values_[j] = old_values[i];
      }
    }
  }

  std::vector<uint64_t> keys_ = std::vector<uint64_t>(16, kEmpty);
  std::vector<Merge> values_ = std::vector<Merge>(16);
  size_t count_ = 0;
};

class Bpe {
 public:
  using MergeList = std::vector<std::pair<std::string, std::string>>;

  // Builds the model from the "model" object of tokenizer.json (its options), its vocabulary and
  // its merges in rank order; `file` names the file in error messages.
  static Bpe build(const nlohmann::json& model, TokenIndex vocab, const MergeList& merges,
                   const std::string& file) {
    const auto refuse = [&](const std::string& what) {
      return Error(Status::unsupported, file + ": BPE option not supported by uocr: " + what);
    };
    if (!model.is_object() || model.value("type", "BPE") != "BPE")
      throw refuse("model.type must be BPE");
    const auto is_off = [&](const char* key) {
      return !model.contains(key) || model[key].is_null();
    };
    if (!is_off("continuing_subword_prefix")) throw refuse("continuing_subword_prefix");
    if (!is_off("end_of_word_suffix")) throw refuse("end_of_word_suffix");
    if (!is_off("dropout") &&
        !(model["dropout"].is_number() && model["dropout"].get<double>() == 0.0)) {
      throw refuse("dropout");
    }
    if (model.value("byte_fallback", false)) throw refuse("byte_fallback");

    Bpe bpe;
    bpe.vocab_ = std::move(vocab);
    bpe.read_merges(merges, file);

    bpe.ignore_merges_ = model.value("ignore_merges", false);
    bpe.fuse_unk_ = model.value("fuse_unk", false);
    if (!is_off("unk_token")) {
      const auto& unk = model["unk_token"];
      if (!unk.is_string())
        throw Error(Status::invalid_model, file + ": malformed key model.unk_token");
      bpe.unk_id_ = bpe.vocab_.find(unk.get<std::string>());
      if (bpe.unk_id_ < 0) {
        throw Error(Status::invalid_model, file + ": model.unk_token is not in the vocabulary");
      }
    }
    for (int b = 0; b < 256; ++b) {
      std::string ch;
      utf8::append(ch, bpe.bytes_.to_char(uint8_t(b)));
      bpe.byte_id_[b] = bpe.vocab_.find(ch);
    }
    return bpe;
  }

  const TokenIndex& vocab() const { return vocab_; }
  const ByteMap& byte_map() const { return bytes_; }

  // Appends the ids of one pre-tokenized word (raw bytes).
  void encode_word(std::string_view word, std::vector<int32_t>& out) const {
    if (ignore_merges_) {  // a word that is itself a token is never split
      const int32_t id = vocab_.find(to_mapped(word));
      if (id >= 0) {
        out.push_back(id);
        return;
      }
    }
    std::vector<Symbol> symbols;
    symbols.reserve(word.size());
    initial_symbols(word, symbols);
    merge_all(symbols);
    for (const Symbol& s : symbols) {
      if (s.len != 0) out.push_back(s.id);
    }
  }

 private:
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    uint32_t len;  // bytes covered; 0 marks a symbol merged into its left neighbour
  };
  using Merge = MergeTable::Merge;
  struct Candidate {
    uint32_t rank;
    uint32_t pos;
    int32_t new_id;
    // priority_queue pops the largest: make that the lowest rank, then the leftmost position.
    bool operator<(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };

  std::string to_mapped(std::string_view bytes) const {
    std::string s;
    for (unsigned char b : bytes) utf8::append(s, bytes_.to_char(b));
    return s;
  }

  // Rank = position in the list. A later duplicate pair replaces the earlier one, as in HF's map.
  // Both tokens and the result must be in the vocabulary, as HF requires.
  void read_merges(const MergeList& merges, const std::string& file) {
    merges_.reserve(merges.size());
    std::string joined;
    for (size_t rank = 0; rank < merges.size(); ++rank) {
      const auto& [a, b] = merges[rank];
      joined.assign(a).append(b);
      const int32_t ia = vocab_.find(a), ib = vocab_.find(b), ij = vocab_.find(joined);
      if (ia < 0 || ib < 0 || ij < 0) {
        const std::string what = ia < 0 ? "token \"" + a : ib < 0 ? "token \"" + b : "result \"" + joined;
        throw Error(Status::invalid_model, file + ": model.merges[" + std::to_string(rank) + "] \"" + a + " " + b + "\": its " +
                                               what + "\" is not in model.vocab");
      }
      merges_.insert(ia, ib, Merge{uint32_t(rank), ij});
    }
  }

  // One symbol per byte; a byte whose character is not in the vocabulary becomes the unknown
  // token (consecutive ones fused if fuse_unk) or, without one, is dropped, as HF does.
  void initial_symbols(std::string_view word, std::vector<Symbol>& symbols) const {
    uint32_t unk_len = 0;
    const auto push = [&](int32_t id, uint32_t len) {
      const int32_t n = int32_t(symbols.size());
      if (n > 0) symbols.back().next = n;
      symbols.push_back(Symbol{id, n - 1, -1, len});
    };
    for (unsigned char b : word) {
      const int32_t id = byte_id_[b];
      if (id >= 0) {
        if (unk_len) push(unk_id_, unk_len);
        unk_len = 0;
        push(id, 1);
      } else if (unk_id_ >= 0) {
        if (unk_len && !fuse_unk_) push(unk_id_, unk_len), unk_len = 0;
        unk_len += 1;
      }
    }
    if (unk_len) push(unk_id_, unk_len);
  }

  const Merge* find_merge(int32_t a, int32_t b) const { return merges_.find(a, b); }

  void merge_all(std::vector<Symbol>& sym) const {
    std::priority_queue<Candidate> queue;
    for (size_t i = 0; i + 1 < sym.size(); ++i) {
      if (const Merge* m = find_merge(sym[i].id, sym[i + 1].id)) {
        queue.push(Candidate{m->rank, uint32_t(i), m->new_id});
      }
    }
    while (!queue.empty()) {
      const Candidate top = queue.top();
      queue.pop();
      Symbol& left = sym[top.pos];
      if (left.len == 0 || left.next < 0) continue;
      const Symbol right = sym[size_t(left.next)];
      // A stale entry: the pair at this position changed since it was queued.
      const Merge* m = find_merge(left.id, right.id);
      if (!m || m->new_id != top.new_id) continue;
      left.id = top.new_id;
      left.len += right.len;
      sym[size_t(left.next)].len = 0;
      left.next = right.next;
      if (right.next >= 0) sym[size_t(right.next)].prev = int32_t(top.pos);
      if (left.prev >= 0) {
        if (const Merge* p = find_merge(sym[size_t(left.prev)].id, left.id)) {
          queue.push(Candidate{p->rank, uint32_t(left.prev), p->new_id});
        }
      }
      if (left.next >= 0) {
        if (const Merge* n = find_merge(left.id, sym[size_t(left.next)].id)) {
          queue.push(Candidate{n->rank, top.pos, n->new_id});
        }
      }
    }
  }

  TokenIndex vocab_;
  MergeTable merges_;
  ByteMap bytes_;
  std::array<int32_t, 256> byte_id_{};
  int32_t unk_id_ = -1;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
};

UOCR_NAMESPACE_END
