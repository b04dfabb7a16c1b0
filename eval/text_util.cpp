// Python string operations for prompt rendering (see text_util.h).
#include "eval/text_util.h"

#include "tensor/error.h"

namespace hla::eval {

bool is_python_space(char c) {
  return c == ' ' || (c >= '\t' && c <= '\r') || (c >= '\x1c' && c <= '\x1f');
}

std::string strip(std::string_view s) {
  size_t begin = 0, end = s.size();
  while (begin < end && is_python_space(s[begin])) begin++;
  while (end > begin && is_python_space(s[end - 1])) end--;
  return std::string(s.substr(begin, end - begin));
}

std::string rstrip(std::string_view s) {
  size_t end = s.size();
  while (end > 0 && is_python_space(s[end - 1])) end--;
  return std::string(s.substr(0, end));
}

std::string to_lower_ascii(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  if (from.empty()) return std::string(s);
  std::string out;
  out.reserve(s.size());
  size_t pos = 0;
  while (true) {
    size_t hit = s.find(from, pos);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(pos, hit - pos)).append(to);
    pos = hit + from.size();
  }
  out.append(s.substr(pos));
  return out;
}

std::string python_capitalize(std::string_view s) {
  std::string out = to_lower_ascii(s);
  if (!out.empty() && out[0] >= 'a' && out[0] <= 'z') out[0] = static_cast<char>(out[0] - 'a' + 'A');
  return out;
}

// re.sub(r"\[.*?\]", "", s): at each '[' the match ends at the first ']' unless a newline
// ('.' does not match it) comes first, in which case this '[' is kept. One pass: when a '['
// meets a newline (or the end) first, so does every '[' before that newline, so the whole run up
// to it is kept at once (a per-'[' search would be quadratic on "[[[[...").
static std::string remove_bracket_groups(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    size_t open = s.find('[', i);
    if (open == std::string_view::npos) open = s.size();
    out.append(s.substr(i, open - i));
    if (open == s.size()) break;
    size_t stop = s.find_first_of("]\n", open + 1);
    if (stop == std::string_view::npos) stop = s.size();
    if (stop < s.size() && s[stop] == ']') {
      i = stop + 1;
      continue;
    }
    out.append(s.substr(open, stop - open));
    i = stop;
  }
  return out;
}

std::string hellaswag_preprocess(std::string_view text) {
  std::string t = strip(text);
  t = replace_all(t, " [title]", ". ");
  t = remove_bracket_groups(t);
  return replace_all(t, "  ", " ");
}

int64_t utf8_length(std::string_view s) {
  int64_t n = 0;
  for (unsigned char c : s)
    if ((c & 0xC0) != 0x80) n++;
  return n;
}

std::vector<std::string> split_whitespace(std::string_view s) {
  std::vector<std::string> parts;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && is_python_space(s[i])) i++;
    size_t start = i;
    while (i < s.size() && !is_python_space(s[i])) i++;
    if (i > start) parts.emplace_back(s.substr(start, i - start));
  }
  return parts;
}

std::vector<std::string> split_on(std::string_view s, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t hit = s.find(sep, start);
    if (hit == std::string_view::npos) break;
    parts.emplace_back(s.substr(start, hit - start));
    start = hit + 1;
  }
  parts.emplace_back(s.substr(start));
  return parts;
}

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); i++) {
    if (i) out.append(sep);
    out.append(parts[i]);
  }
  return out;
}

std::string format_template(std::string_view tmpl, const TemplateFields& fields) {
  std::string out;
  size_t pos = 0;
  while (true) {
    size_t open = tmpl.find('{', pos);
    if (open == std::string_view::npos) break;
    size_t close = tmpl.find('}', open);
    if (close == std::string_view::npos) fail("template has an unterminated '{': ", tmpl);
    std::string_view name = tmpl.substr(open + 1, close - open - 1);
    const std::string* value = nullptr;
    for (const auto& [field, v] : fields)
      if (field == name) value = &v;
    if (!value) fail("template field {", name, "} has no value; template: ", tmpl);
    out.append(tmpl.substr(pos, open - pos)).append(*value);
    pos = close + 1;
  }
  out.append(tmpl.substr(pos));
  return out;
}

}  // namespace hla::eval
