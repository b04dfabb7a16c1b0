// GPT-2 byte-level pre-tokenisation: splits text into the pieces that BPE merges never cross,
// exactly as the regex of GPT-2 / Hugging Face ByteLevel(use_regex=true) does,
//
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// written out by hand (one left-to-right scan, no regex engine). Bytes that are not valid UTF-8
// count as [^\s\p{L}\p{N}] characters. The pieces cover the text exactly, in order.
#pragma once
#include <string_view>
#include <vector>

namespace hla::data {

// Appends the pieces of `text` to `pieces` (views into `text`).
void split_gpt2(std::string_view text, std::vector<std::string_view>& pieces);

}  // namespace hla::data
