// JSON from files a user hands us (config.json, safetensors headers, trainer_state.json,
// tokenizer.json, task JSONL): parsed with a bounded nesting depth, quoted in errors by excerpt.
//
// nlohmann's parser itself does not recurse, but copying, dumping or comparing a value does, so a
// file nested 100,000 levels deep would overflow the stack wherever it is used. parse_json stops
// at kMaxJsonDepth levels instead, naming the file. json_excerpt quotes at most ~100 characters
// of a value (excerpt, of a string), so an error message never dumps a whole (possibly huge) value.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "tensor/error.h"

namespace hla {

// Deeper than any file hla reads legitimately (tokenizer.json reaches about 6 levels).
constexpr int kMaxJsonDepth = 64;

// At most max_chars of `text` (a value from a user's file, quoted in an error), with "..." when
// cut, so that a 3,000-character value never makes a 3,000-character message.
inline std::string excerpt(const std::string& text, size_t max_chars = 100) {
  return text.size() > max_chars ? text.substr(0, max_chars) + "..." : text;
}

// At most max_chars of v.dump(), with "..." when cut.
inline std::string json_excerpt(const nlohmann::json& v, size_t max_chars = 100) {
  return excerpt(v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), max_chars);
}

// Parses `text` (the whole file, or one JSONL line); every error names `source` (the file, and
// the line for JSONL) and what broke. Depth counts nested objects and arrays: `{}` is depth 1.
inline nlohmann::json parse_json(const std::string& text, const std::string& source, int max_depth = kMaxJsonDepth) {
  auto bounded = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json&) {
    const bool opens = event == nlohmann::json::parse_event_t::object_start ||
                       event == nlohmann::json::parse_event_t::array_start;
    if (opens && depth >= max_depth) fail(source, ": JSON nested deeper than ", max_depth, " levels");
    return true;
  };
  try {
    return nlohmann::json::parse(text, bounded);
  } catch (const nlohmann::json::exception& e) {
    fail(source, ": not valid JSON (", excerpt(e.what(), 300), ")");  // it quotes the last token whole
  }
}

}  // namespace hla
