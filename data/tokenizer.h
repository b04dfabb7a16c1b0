// The one tokenizer interface every part of hla uses (training, data prep, evaluation), the
// byte-level tokenizer (256 bytes + specials, needs no file) and what works on any tokenizer.
// The other implementation, BPE from / to Hugging Face tokenizer.json, and load_tokenizer (a
// tokenizer by name: "byte" or a tokenizer.json) are in bpe.h, which builds on this header
// (never the other way: tokenizer.{h,cpp} include nothing of bpe).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace hla::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Exact for any bytes, including invalid UTF-8: decode(encode(s)) == s.
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  virtual int32_t vocab_size() const = 0;
  virtual int32_t eos_id() const = 0;
  virtual int32_t pad_id() const = 0;
  virtual std::string name() const = 0;  // "byte", "bpe:<path>", ...
  // 16 hex digits identifying the encoding: equal hashes give equal ids for every text. The
  // default hashes the vocabulary (decode of every id) and the special ids; BPE adds its merges.
  virtual std::string hash() const;
};

// Byte-level: ids 0..255 are the bytes, then the special tokens (eos = 256, pad = 257).
std::unique_ptr<Tokenizer> make_byte_tokenizer();

// Encodes many documents on `threads` threads (0 = all cores); result i is encode(docs[i]).
std::vector<std::vector<int32_t>> encode_documents(const Tokenizer& tokenizer,
                                                   const std::vector<std::string>& docs,
                                                   int threads);

// FNV-1a, 64 bit, as 16 lowercase hex digits: the hash used for tokenizers and manifests.
std::string fnv1a_hex(std::string_view bytes);

}  // namespace hla::data
