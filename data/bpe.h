// Byte-pair-encoding tokenizer: the model behind every tokenizer.json hla reads or writes.
//
// Two flavours of the same merge machinery, as in Hugging Face `tokenizers`:
//  * ByteLevel (GPT-2, hla's own trained tokenizers): text is split by the GPT-2 pre-tokenizer
//    (pretokenize.h), every byte starts as its own symbol, written in tokenizer.json with GPT-2's
//    printable byte alphabet ("Ġ" for a space). Exact for any bytes, invalid UTF-8 included.
//  * Metaspace with byte fallback (Llama-2, Mistral): spaces become "▁", every UTF-8 character
//    starts as its own symbol, characters missing from the vocabulary become <0xNN> byte tokens.
//    Reproduces HF's behaviour, including what it loses: a literal "▁" in the text decodes as a
//    space, and under a Metaspace pre-tokenizer a leading space is dropped.
// Merging always applies the lowest-rank adjacent pair first, the leftmost on ties.
// Special (added) tokens are never matched inside text: encode() only produces them if the
// caller appends them (e.g. eos between documents).
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "data/tokenizer.h"

namespace hla::data {

struct BpeModel {
  enum class Mode { ByteLevel, Metaspace };
  struct Merge {
    int32_t left, right, result;
  };
  struct Special {
    int32_t id;
    std::string content;
  };

  Mode mode = Mode::ByteLevel;
  std::vector<std::string> vocab;  // id -> token as written in tokenizer.json; "" for unused ids
  std::vector<Merge> merges;       // in rank order: merges[0] applies first
  std::vector<Special> specials;   // added tokens; their ids index `vocab` too
  int32_t eos_id = -1;
  int32_t pad_id = -1;
  bool ignore_merges = false;  // a piece that is itself in the vocabulary becomes that token

  // Metaspace flavour only.
  bool byte_fallback = false;
  int32_t unk_id = -1;               // for characters with no token and no byte fallback
  bool prepend_always = false;       // normalizer Prepend("▁"): every non-empty text
  bool prepend_if_missing = false;   // Metaspace pre-tokenizer: unless it already starts with ▁
  bool split_on_metaspace = false;   // Metaspace pre-tokenizer split=true: pieces start at ▁
  bool strip_leading_space = false;  // decoder Strip / Metaspace: drop one leading space
};

class BpeTokenizer : public Tokenizer {
 public:
  // Checks the model (every merge result and special id in range, the byte alphabet complete
  // for ByteLevel) and builds the lookup tables. `name` is what name() returns.
  BpeTokenizer(BpeModel model, std::string name);

  std::vector<int32_t> encode(std::string_view text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int32_t vocab_size() const override { return static_cast<int32_t>(model_.vocab.size()); }
  int32_t eos_id() const override { return model_.eos_id; }
  int32_t pad_id() const override { return model_.pad_id; }
  std::string name() const override { return name_; }
  std::string hash() const override;

  const BpeModel& model() const { return model_; }

 private:
  struct MergeTarget {
    int32_t rank, result;
  };
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }

  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;
  void initial_symbols(std::string_view piece, std::vector<int32_t>& symbols) const;
  void apply_merges(std::vector<int32_t>& symbols) const;
  std::string metaspace_normalize(std::string_view text) const;

  BpeModel model_;
  std::string name_;
  uint64_t cache_owner_;  // identifies this tokenizer to the per-thread piece caches
  int32_t byte_to_id_[256];  // ByteLevel: the token of each single byte; Metaspace: <0xNN>
  std::unordered_map<uint64_t, MergeTarget> merge_of_;   // (left, right) -> rank, result
  std::unordered_map<std::string, int32_t> id_of_token_;  // vocab string -> id
  std::vector<std::string> id_bytes_;                     // id -> the bytes it decodes to
};

// GPT-2's printable alphabet for bytes: byte b is written as this code point in tokenizer.json.
uint32_t byte_level_char(uint8_t b);
std::string byte_level_token(std::string_view bytes);  // bytes -> tokenizer.json token text

// Hugging Face tokenizer.json. Reads model type BPE with a ByteLevel pre-tokenizer (GPT-2 style)
// or the Metaspace / byte-fallback layout (Llama-2, Mistral); anything else is an hla::Error
// naming the file and the part that is not understood. Every id (vocabulary and added tokens)
// must be an integer in [0, vocabulary entries + added tokens); two tokens at one id, or an added
// token listed twice, are errors. save_tokenizer_json replaces the file atomically.
std::unique_ptr<BpeTokenizer> load_tokenizer_json(const std::string& path);
void save_tokenizer_json(const BpeTokenizer& tokenizer, const std::string& path);

// A tokenizer by name: "byte" gives the byte tokenizer; otherwise a path to a tokenizer.json. An
// unsupported file is an hla::Error naming the file and what was not understood.
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& spec);

}  // namespace hla::data
