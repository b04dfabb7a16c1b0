// The GPT-2 pre-tokenizer regex as a hand-written scanner; see pretokenize.h for the pattern.
// At each position the alternatives are tried in the regex's order:
//   1. a contraction ('s 't 'm 'd 're 've 'll, case-sensitive);
//   2. an optional ' ' and then a run of one class: letters, numbers or "other";
//   3. whitespace: the whole run if it ends the text, otherwise the run minus its last
//      character (\s+(?!\S) backtracks one character so that the last space can prefix the next
//      word), or a single whitespace character when the run is one character long (\s+).
#include "data/pretokenize.h"

#include "data/unicode.h"

namespace hla::data {

namespace {

// Classes of the ASCII characters, so that plain English text never leaves this file.
struct AsciiClasses {
  CharClass of[128];
  AsciiClasses() {
    for (uint32_t c = 0; c < 128; c++) of[c] = char_class(c);
  }
};
const AsciiClasses kAscii;

struct ClassedChar {
  CharClass cls;
  int length;
};

struct Scanner {
  std::string_view text;

  ClassedChar at(size_t i) const {
    auto b = static_cast<unsigned char>(text[i]);
    if (b < 0x80) return {kAscii.of[b], 1};
    Utf8Char c = utf8_next(text.data(), text.size(), i);
    return {char_class(c.code_point), c.length};
  }

  // Length of the contraction starting at i, or 0.
  size_t contraction(size_t i) const {
    if (text[i] != '\'' || i + 1 >= text.size()) return 0;
    char c1 = text[i + 1];
    if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
    if (i + 2 >= text.size()) return 0;
    char c2 = text[i + 2];
    if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) return 3;
    return 0;
  }

  // End of the run of characters of class `cls` that starts at i.
  size_t run_end(size_t i, CharClass cls) const {
    while (i < text.size()) {
      ClassedChar c = at(i);
      if (c.cls != cls) break;
      i += c.length;
    }
    return i;
  }

  // End of the piece that starts with whitespace at i.
  size_t whitespace_piece_end(size_t i) const {
    size_t end = i, last_start = i;
    int count = 0;
    while (end < text.size()) {
      ClassedChar c = at(end);
      if (c.cls != CharClass::Space) break;
      last_start = end;
      end += c.length;
      count++;
    }
    if (end == text.size() || count == 1) return end;
    return last_start;
  }

  size_t piece_end(size_t i) const {
    if (size_t n = contraction(i)) return i + n;
    size_t word_start = i;
    if (text[i] == ' ' && i + 1 < text.size()) word_start = i + 1;
    CharClass cls = at(word_start).cls;
    if (cls != CharClass::Space) return run_end(word_start, cls);
    return whitespace_piece_end(i);
  }
};

}  // namespace

void split_gpt2(std::string_view text, std::vector<std::string_view>& pieces) {
  Scanner scanner{text};
  size_t i = 0;
  while (i < text.size()) {
    size_t end = scanner.piece_end(i);
    pieces.push_back(text.substr(i, end - i));
    i = end;
  }
}

}  // namespace hla::data
