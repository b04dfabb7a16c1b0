// UTF-8 decoding and Unicode character classes; the range tables are in unicode_tables.cpp.
#include "data/unicode.h"

#include <algorithm>

namespace hla::data {

namespace unicode_tables {
extern const CodeRange kLetterRanges[];
extern const CodeRange kNumberRanges[];
extern const int kNumLetterRanges;
extern const int kNumNumberRanges;
}  // namespace unicode_tables

namespace {

bool in_ranges(uint32_t cp, const CodeRange* ranges, int count) {
  const CodeRange* end = ranges + count;
  const CodeRange* it = std::upper_bound(
      ranges, end, cp, [](uint32_t v, const CodeRange& r) { return v < r.first; });
  return it != ranges && cp <= (it - 1)->last;
}

bool is_continuation(unsigned char b) { return (b & 0xC0) == 0x80; }

}  // namespace

Utf8Char utf8_next(const char* s, size_t n, size_t i) {
  const auto* p = reinterpret_cast<const unsigned char*>(s) + i;
  size_t left = n - i;
  unsigned char b0 = p[0];
  if (b0 < 0x80) return {b0, 1};
  int length;
  uint32_t cp, min_cp;
  if ((b0 & 0xE0) == 0xC0) {
    length = 2, cp = b0 & 0x1F, min_cp = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    length = 3, cp = b0 & 0x0F, min_cp = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    length = 4, cp = b0 & 0x07, min_cp = 0x10000;
  } else {
    return {kInvalidCodePoint, 1};
  }
  if (left < static_cast<size_t>(length)) return {kInvalidCodePoint, 1};
  for (int k = 1; k < length; k++) {
    if (!is_continuation(p[k])) return {kInvalidCodePoint, 1};
    cp = (cp << 6) | (p[k] & 0x3F);
  }
  bool surrogate = cp >= 0xD800 && cp <= 0xDFFF;
  if (cp < min_cp || cp > 0x10FFFF || surrogate) return {kInvalidCodePoint, 1};
  return {cp, length};
}

std::string valid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    Utf8Char c = utf8_next(s.data(), s.size(), i);
    if (c.code_point == kInvalidCodePoint) out += "\xEF\xBF\xBD";
    else out.append(s.data() + i, c.length);
    i += c.length;
  }
  return out;
}

std::string utf8_encode(uint32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

bool is_letter(uint32_t cp) {
  if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z';
  return in_ranges(cp, unicode_tables::kLetterRanges, unicode_tables::kNumLetterRanges);
}

bool is_number(uint32_t cp) {
  if (cp < 0x80) return cp >= '0' && cp <= '9';
  return in_ranges(cp, unicode_tables::kNumberRanges, unicode_tables::kNumNumberRanges);
}

bool is_whitespace(uint32_t cp) {
  if (cp < 0x80) return cp == ' ' || (cp >= 0x09 && cp <= 0x0D);
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) ||
         cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

CharClass char_class(uint32_t cp) {
  if (cp == kInvalidCodePoint) return CharClass::Other;
  if (is_letter(cp)) return CharClass::Letter;
  if (is_number(cp)) return CharClass::Number;
  if (is_whitespace(cp)) return CharClass::Space;
  return CharClass::Other;
}

}  // namespace hla::data
