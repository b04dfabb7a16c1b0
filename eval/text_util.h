// Small string helpers that reproduce the Python string operations the reference evaluators
// (lm-evaluation-harness, RULER) apply to prompts, so that prompts match them byte for byte.
//
// Whitespace is Python's ASCII set (" \t\n\r\v\f" and \x1c-\x1f). Case mapping is ASCII only:
// non-ASCII letters keep their case where Python would map them too. Of the six LM tasks only
// HellaSwag's ctx_b.capitalize() is affected, and only for a record with non-ASCII letters.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hla::eval {

bool is_python_space(char c);
std::string strip(std::string_view s);
std::string rstrip(std::string_view s);
std::string to_lower_ascii(std::string_view s);

// str.replace(from, to): left to right, non-overlapping, the result is not rescanned.
std::string replace_all(std::string_view s, std::string_view from, std::string_view to);

// str.capitalize(): first character upper case, the rest lower case.
std::string python_capitalize(std::string_view s);

// lm-evaluation-harness hellaswag `preprocess`: strip; " [title]" -> ". "; delete every
// "\[.*?\]" (the shortest bracket group, never across a newline); "  " -> " ".
std::string hellaswag_preprocess(std::string_view text);

// len(s) of a Python str: the number of UTF-8 code points (continuation bytes not counted).
int64_t utf8_length(std::string_view s);

// str.split() (runs of whitespace, no empty pieces) and str.split(sep) (every separator).
std::vector<std::string> split_whitespace(std::string_view s);
std::vector<std::string> split_on(std::string_view s, char sep);
std::string join(const std::vector<std::string>& parts, std::string_view sep);

// str.format with named fields only: "{name}" is replaced by its value; the values are not
// rescanned. An unknown or unterminated field is an hla::Error naming the template.
using TemplateFields = std::vector<std::pair<std::string, std::string>>;
std::string format_template(std::string_view tmpl, const TemplateFields& fields);

}  // namespace hla::eval
