// UTF-8 decoding and the character classes the GPT-2 pre-tokenizer needs (\p{L}, \p{N}, \s).
// Decoding never fails: a byte that does not start a valid UTF-8 sequence (overlong, surrogate,
// truncated, > U+10FFFF) is one character of its own with the code point kInvalidCodePoint, so
// invalid text still splits into pieces that cover every byte exactly once.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace hla::data {

struct CodeRange {
  uint32_t first, last;  // inclusive
};

constexpr uint32_t kInvalidCodePoint = 0xFFFFFFFFu;

struct Utf8Char {
  uint32_t code_point;  // kInvalidCodePoint for a byte that starts no valid sequence
  int length;           // bytes, 1..4
};

// The character that starts at s[i] (i < n).
Utf8Char utf8_next(const char* s, size_t n, size_t i);
std::string utf8_encode(uint32_t code_point);
// s with every byte that starts no valid UTF-8 sequence replaced by U+FFFD ("\xEF\xBF\xBD"); valid
// text comes back unchanged. For anything shown or stored as text (JSON must be valid UTF-8):
// model output, data-file excerpts.
std::string valid_utf8(std::string_view s);

enum class CharClass : uint8_t { Letter, Number, Space, Other };

bool is_letter(uint32_t code_point);      // \p{L}
bool is_number(uint32_t code_point);      // \p{N}
bool is_whitespace(uint32_t code_point);  // \s: the Unicode White_Space property
CharClass char_class(uint32_t code_point);  // kInvalidCodePoint is Other

}  // namespace hla::data
