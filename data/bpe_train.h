// Byte-level BPE training (GPT-2 style), deterministic: the same documents and options give
// the same merges on every machine and thread count.
//
// Ids 0..255 are the bytes, then one id per merge in the order learned, then the special tokens
// (the first is eos, the second pad). Each step merges the adjacent pair with the highest count
// over all pre-tokenised pieces (weighted by how often each piece occurs); ties go to the pair
// with the smallest (left id, right id). Training stops at vocab_size or when the best pair
// occurs fewer than min_frequency times.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "data/bpe.h"

namespace hla::data {

struct BpeTrainOptions {
  int32_t vocab_size = 8192;  // including the 256 bytes and the special tokens
  std::vector<std::string> special_tokens = {"<|endoftext|>", "<|pad|>"};  // eos, pad, others
  int64_t min_frequency = 2;
};

// `name` becomes the tokenizer's name() (e.g. "bpe:tok.json").
std::unique_ptr<BpeTokenizer> train_bpe(const std::vector<std::string>& docs,
                                        const BpeTrainOptions& options, const std::string& name);

}  // namespace hla::data
