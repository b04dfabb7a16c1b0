// BPE encode/decode: lookup tables, the per-thread piece cache and the merge loop.
#include "data/bpe.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstring>
#include <memory>

#include "data/pretokenize.h"
#include "data/unicode.h"
#include "tensor/error.h"

namespace hla::data {

namespace {

const char kMetaspace[] = "\xE2\x96\x81";  // U+2581 "▁", sentencepiece's visible space
constexpr size_t kMetaspaceLen = 3;
constexpr size_t kMaxCachedPiece = 256;  // bytes; longer pieces are merged every time

// A fast 64-bit hash of a short byte string (8-byte words, multiply-xorshift mixing).
uint64_t piece_hash(std::string_view s) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ s.size();
  size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    h = (h ^ w) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, s.data() + i, s.size() - i);
  h = (h ^ tail) * 0x94D049BB133111EBull;
  return h ^ (h >> 29);
}

// Pieces already encoded on this thread, for one tokenizer at a time: an open-addressing table
// (linear probing, at most half full) whose slots point into a text arena and an id arena, so
// a lookup touches one slot and one string and allocates nothing.
class PieceCache {
 public:
  uint64_t owner = 0;

  void reset(uint64_t new_owner) {
    owner = new_owner;
    slots_.assign(1 << 12, Slot{});
    used_ = 0;
    text_.clear();
    ids_.clear();
  }
  // The ids of `piece` (hash h), or nullptr; *count gets their number.
  const int32_t* find(std::string_view piece, uint64_t h, uint32_t* count) const {
    for (size_t i = h & (slots_.size() - 1);; i = (i + 1) & (slots_.size() - 1)) {
      const Slot& slot = slots_[i];
      if (slot.id_count == 0) return nullptr;
      if (slot.hash == h && slot.text_len == piece.size() &&
          std::memcmp(text_.data() + slot.text_offset, piece.data(), piece.size()) == 0) {
        *count = slot.id_count;
        return ids_.data() + slot.id_offset;
      }
    }
  }
  void insert(std::string_view piece, uint64_t h, const int32_t* piece_ids, size_t count) {
    if (used_ >= kMaxEntries) reset(owner);
    if (2 * (used_ + 1) > slots_.size()) grow();
    Slot slot{h, uint32_t(text_.size()), uint32_t(ids_.size()), uint16_t(piece.size()), uint16_t(count)};
    text_.append(piece.data(), piece.size());
    ids_.insert(ids_.end(), piece_ids, piece_ids + count);
    place(slot);
    used_++;
  }

 private:
  struct Slot {
    uint64_t hash = 0;
    uint32_t text_offset = 0, id_offset = 0;
    uint16_t text_len = 0, id_count = 0;  // id_count 0 marks an empty slot
  };
  static constexpr size_t kMaxEntries = 1 << 20;

  void place(const Slot& slot) {
    size_t i = slot.hash & (slots_.size() - 1);
    while (slots_[i].id_count != 0) i = (i + 1) & (slots_.size() - 1);
    slots_[i] = slot;
  }
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(old.size() * 2, Slot{});
    for (const Slot& s : old) {
      if (s.id_count != 0) place(s);
    }
  }

  std::vector<Slot> slots_;
  size_t used_ = 0;
  std::string text_;
  std::vector<int32_t> ids_;
};

thread_local PieceCache t_cache;
std::atomic<uint64_t> g_next_cache_owner{1};

// The 256 code points of GPT-2's byte alphabet: printable Latin-1 bytes stand for themselves,
// the other bytes get 256, 257, ... in byte order.
struct ByteAlphabet {
  uint32_t char_of_byte[256];
  std::unordered_map<uint32_t, uint8_t> byte_of_char;
  ByteAlphabet() {
    uint32_t next_extra = 256;
    for (int b = 0; b < 256; b++) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      char_of_byte[b] = printable ? b : next_extra++;
      byte_of_char[char_of_byte[b]] = static_cast<uint8_t>(b);
    }
  }
};

const ByteAlphabet& byte_alphabet() {
  static const ByteAlphabet alphabet;
  return alphabet;
}

// The bytes a ByteLevel token stands for, or the token text itself when it is not written in
// the byte alphabet (added tokens such as "<|endoftext|>" whose characters are all printable).
std::string byte_level_decode(const std::string& token) {
  const auto& alphabet = byte_alphabet();
  std::string out;
  for (size_t i = 0; i < token.size();) {
    Utf8Char c = utf8_next(token.data(), token.size(), i);
    auto it = alphabet.byte_of_char.find(c.code_point);
    if (it == alphabet.byte_of_char.end()) return token;
    out += static_cast<char>(it->second);
    i += c.length;
  }
  return out;
}

std::string byte_fallback_token(uint8_t b) {
  const char* hex = "0123456789ABCDEF";
  return std::string("<0x") + hex[b >> 4] + hex[b & 15] + ">";
}

// Metaspace tokens decode with ▁ as a space and <0xNN> as the byte.
std::string metaspace_decode(const std::string& token, bool byte_fallback) {
  bool byte_token = token.size() == 6 && token.compare(0, 3, "<0x") == 0 && token[5] == '>' &&
                    std::isxdigit(uint8_t(token[3])) && std::isxdigit(uint8_t(token[4]));
  if (byte_fallback && byte_token) {
    return std::string(1, static_cast<char>(std::stoi(token.substr(3, 2), nullptr, 16)));
  }
  std::string out;
  for (size_t i = 0; i < token.size();) {
    if (token.compare(i, kMetaspaceLen, kMetaspace) == 0) {
      out += ' ';
      i += kMetaspaceLen;
    } else {
      out += token[i++];
    }
  }
  return out;
}

}  // namespace

uint32_t byte_level_char(uint8_t b) { return byte_alphabet().char_of_byte[b]; }

std::string byte_level_token(std::string_view bytes) {
  std::string out;
  for (unsigned char b : bytes) out += utf8_encode(byte_level_char(b));
  return out;
}

BpeTokenizer::BpeTokenizer(BpeModel model, std::string name)
    : model_(std::move(model)), name_(std::move(name)), cache_owner_(g_next_cache_owner++) {
  const int32_t n = vocab_size();
  HLA_CHECK(n > 0, "tokenizer ", name_, ": empty vocabulary");
  auto in_range = [n](int32_t id) { return id >= 0 && id < n; };
  HLA_CHECK(in_range(model_.eos_id), "tokenizer ", name_, ": eos id ", model_.eos_id,
            " outside the vocabulary of ", n);
  HLA_CHECK(in_range(model_.pad_id), "tokenizer ", name_, ": pad id ", model_.pad_id,
            " outside the vocabulary of ", n);
  for (int32_t id = 0; id < n; id++) {
    if (!model_.vocab[id].empty()) id_of_token_.emplace(model_.vocab[id], id);
  }
  for (size_t rank = 0; rank < model_.merges.size(); rank++) {
    const auto& m = model_.merges[rank];
    HLA_CHECK(in_range(m.left) && in_range(m.right) && in_range(m.result), "tokenizer ", name_,
              ": merge ", rank, " refers to an id outside the vocabulary of ", n);
    merge_of_.emplace(pair_key(m.left, m.right),
                      MergeTarget{static_cast<int32_t>(rank), m.result});
  }
  bool byte_level = model_.mode == BpeModel::Mode::ByteLevel;
  id_bytes_.resize(n);
  for (int32_t id = 0; id < n; id++) {
    const std::string& token = model_.vocab[id];
    id_bytes_[id] = byte_level ? byte_level_decode(token)
                               : metaspace_decode(token, model_.byte_fallback);
  }
  for (const auto& s : model_.specials) {
    HLA_CHECK(in_range(s.id), "tokenizer ", name_, ": special token '", s.content, "' has id ",
              s.id, " outside the vocabulary of ", n);
    id_bytes_[s.id] = s.content;
  }
  for (int b = 0; b < 256; b++) {
    byte_to_id_[b] = -1;
    if (!byte_level && !model_.byte_fallback) continue;
    std::string token = byte_level ? byte_level_token(std::string(1, static_cast<char>(b)))
                                   : byte_fallback_token(static_cast<uint8_t>(b));
    auto it = id_of_token_.find(token);
    HLA_CHECK(it != id_of_token_.end(), "tokenizer ", name_, ": the vocabulary has no token '",
              token, "' for byte ", b, " (a byte-level vocabulary needs all 256)");
    byte_to_id_[b] = it->second;
  }
}

void BpeTokenizer::initial_symbols(std::string_view piece, std::vector<int32_t>& symbols) const {
  symbols.clear();
  if (model_.mode == BpeModel::Mode::ByteLevel) {
    for (unsigned char b : piece) symbols.push_back(byte_to_id_[b]);
    return;
  }
  for (size_t i = 0; i < piece.size();) {
    Utf8Char c = utf8_next(piece.data(), piece.size(), i);
    auto it = c.code_point == kInvalidCodePoint
                  ? id_of_token_.end()
                  : id_of_token_.find(std::string(piece.substr(i, c.length)));
    if (it != id_of_token_.end()) {
      symbols.push_back(it->second);
    } else if (model_.byte_fallback) {
      for (int k = 0; k < c.length; k++) symbols.push_back(byte_to_id_[uint8_t(piece[i + k])]);
    } else {
      HLA_CHECK(model_.unk_id >= 0, "tokenizer ", name_, ": character at byte ", i,
                " is not in the vocabulary and there is neither byte fallback nor unk token");
      symbols.push_back(model_.unk_id);
    }
    i += c.length;
  }
}

// Merges the lowest-rank adjacent pair first (the leftmost on ties) until no pair has a merge.
// Symbols form a linked list over positions; a min-heap holds candidate merges, and a candidate
// whose two symbols have changed since it was pushed is skipped when popped.
void BpeTokenizer::apply_merges(std::vector<int32_t>& symbols) const {
  const int32_t n = static_cast<int32_t>(symbols.size());
  if (n < 2) return;
  struct Candidate {
    int32_t rank, pos, left, right, result;
  };
  auto later = [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  thread_local std::vector<int32_t> prev, next;
  thread_local std::vector<Candidate> heap;
  prev.resize(n);
  next.resize(n);
  heap.clear();
  for (int32_t i = 0; i < n; i++) prev[i] = i - 1, next[i] = i + 1 < n ? i + 1 : -1;
  auto push_pair_at = [&](int32_t pos) {
    int32_t right = next[pos];
    if (right < 0) return;
    auto it = merge_of_.find(pair_key(symbols[pos], symbols[right]));
    if (it == merge_of_.end()) return;
    heap.push_back({it->second.rank, pos, symbols[pos], symbols[right], it->second.result});
    std::push_heap(heap.begin(), heap.end(), later);
  };
  for (int32_t i = 0; i + 1 < n; i++) push_pair_at(i);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    Candidate c = heap.back();
    heap.pop_back();
    int32_t right = next[c.pos];
    if (symbols[c.pos] != c.left || right < 0 || symbols[right] != c.right) continue;
    symbols[c.pos] = c.result;
    symbols[right] = -1;
    next[c.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = c.pos;
    if (prev[c.pos] >= 0) push_pair_at(prev[c.pos]);
    push_pair_at(c.pos);
  }
  int32_t count = 0;
  for (int32_t i = 0; i >= 0; i = next[i]) symbols[count++] = symbols[i];
  symbols.resize(count);
}

void BpeTokenizer::encode_piece(std::string_view piece, std::vector<int32_t>& out) const {
  bool cacheable = piece.size() <= kMaxCachedPiece;
  uint64_t h = 0;
  if (cacheable) {
    if (t_cache.owner != cache_owner_) t_cache.reset(cache_owner_);
    h = piece_hash(piece);
    uint32_t count;
    if (const int32_t* ids = t_cache.find(piece, h, &count)) {
      out.insert(out.end(), ids, ids + count);
      return;
    }
  }
  thread_local std::vector<int32_t> symbols;
  auto whole = model_.ignore_merges ? id_of_token_.find(model_.mode == BpeModel::Mode::ByteLevel
                                                            ? byte_level_token(piece)
                                                            : std::string(piece))
                                    : id_of_token_.end();
  if (whole != id_of_token_.end()) {
    symbols.assign(1, whole->second);
  } else {
    initial_symbols(piece, symbols);
    apply_merges(symbols);
  }
  if (cacheable && !symbols.empty()) t_cache.insert(piece, h, symbols.data(), symbols.size());
  out.insert(out.end(), symbols.begin(), symbols.end());
}

std::string BpeTokenizer::metaspace_normalize(std::string_view text) const {
  std::string out;
  out.reserve(text.size() + text.size() / 4 + kMetaspaceLen);
  if (model_.prepend_always && !text.empty()) out += kMetaspace;
  for (char c : text) {
    if (c == ' ') {
      out += kMetaspace;
    } else {
      out += c;
    }
  }
  if (model_.prepend_if_missing && !out.empty() && out.compare(0, kMetaspaceLen, kMetaspace) != 0) {
    out.insert(0, kMetaspace);
  }
  return out;
}

std::vector<int32_t> BpeTokenizer::encode(std::string_view text) const {
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 1);
  if (model_.mode == BpeModel::Mode::ByteLevel) {
    thread_local std::vector<std::string_view> pieces;
    pieces.clear();
    split_gpt2(text, pieces);
    for (std::string_view piece : pieces) encode_piece(piece, ids);
    return ids;
  }
  std::string normalized = metaspace_normalize(text);
  std::string_view rest = normalized;
  if (!model_.split_on_metaspace) {
    if (!rest.empty()) encode_piece(rest, ids);
    return ids;
  }
  while (!rest.empty()) {
    size_t cut = rest.find(kMetaspace, 1);
    if (cut == std::string_view::npos) cut = rest.size();
    encode_piece(rest.substr(0, cut), ids);
    rest.remove_prefix(cut);
  }
  return ids;
}

std::string BpeTokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) {
    HLA_CHECK(id >= 0 && id < vocab_size(), "tokenizer ", name_, ": cannot decode id ", id,
              " (vocabulary size ", vocab_size(), ")");
    out += id_bytes_[id];
  }
  if (model_.strip_leading_space && !out.empty() && out[0] == ' ') out.erase(0, 1);
  return out;
}

std::string BpeTokenizer::hash() const {
  std::string canonical = model_.mode == BpeModel::Mode::ByteLevel ? "bpe-bytelevel" : "bpe-meta";
  auto add_int = [&](int64_t v) { canonical += std::to_string(v) + ","; };
  add_int(model_.eos_id);
  add_int(model_.pad_id);
  add_int(model_.unk_id);
  for (bool flag : {model_.ignore_merges, model_.byte_fallback, model_.prepend_always,
                    model_.prepend_if_missing, model_.split_on_metaspace,
                    model_.strip_leading_space}) {
    add_int(flag);
  }
  for (const auto& token : model_.vocab) add_int(token.size()), canonical += token;
  for (const auto& m : model_.merges) add_int(m.left), add_int(m.right), add_int(m.result);
  for (const auto& s : model_.specials) add_int(s.id), add_int(s.content.size()), canonical += s.content;
  return fnv1a_hex(canonical);
}

}  // namespace hla::data
