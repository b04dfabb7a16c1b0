// Haystack text and word lists for the RULER generators (see load_ruler_resources in
// ruler.h). Fallbacks are taken with a warning on stderr and a note for the report.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <set>

#include "eval/ruler_detail.h"
#include "eval/text_util.h"
#include "tensor/error.h"

namespace hla::eval {

namespace {

std::string read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, ": cannot open file");
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::vector<std::string> read_lines(const std::string& path) {
  std::vector<std::string> lines;
  for (const std::string& line : split_on(read_whole_file(path), '\n')) {
    std::string word = strip(line);
    if (!word.empty()) lines.push_back(word);
  }
  return lines;
}

std::vector<std::string> sorted_unique(std::vector<std::string> words) {
  std::sort(words.begin(), words.end());
  words.erase(std::unique(words.begin(), words.end()), words.end());
  return words;
}

bool is_plain_lowercase(const std::string& word) {
  return !word.empty() &&
         std::all_of(word.begin(), word.end(), [](char c) { return c >= 'a' && c <= 'z'; });
}

std::vector<std::string> generated_words(uint64_t seed) {
  static const char* const onsets[] = {"b", "c", "d", "f", "g", "h", "k", "l", "m", "n",
                                       "p", "r", "s", "t", "v", "w", "z", "br", "st", "tr"};
  static const char* const vowels[] = {"a", "e", "i", "o", "u", "ai", "ea", "oo"};
  Rng rng(seed ^ 0x776F726473ull);
  std::set<std::string> words;
  while (words.size() < 10000) {
    std::string word;
    int syllables = 2 + static_cast<int>(rng.below(2));
    for (int s = 0; s < syllables; s++) {
      const char* vowel = vowels[rng.below(8)];  // drawn first, as in the pinned word list
      word += std::string(onsets[rng.below(20)]) + vowel;
    }
    words.insert(word);
  }
  return {words.begin(), words.end()};
}

void note(RulerResources& resources, const std::string& message) {
  std::cerr << "warning: " << message << "\n";
  resources.notes.push_back(message);
}

void load_words(RulerResources& resources, std::string path, uint64_t seed) {
  const std::string system_words = "/usr/share/dict/words";
  if (path.empty() && std::filesystem::exists(system_words)) path = system_words;
  std::vector<std::string> pool;
  if (path.empty()) {
    note(resources, "no --words list and no " + system_words +
                        ": RULER keys and common words come from generated pseudo-words");
    pool = generated_words(seed);
    resources.key_adjectives = resources.key_nouns = pool;
  } else if (std::filesystem::is_directory(path)) {
    // wonderwords layout, as RULER uses it: keys "{adjective}-{noun}", CWE pool of all three
    auto list = [&](const std::string& name) {
      return sorted_unique(read_lines((std::filesystem::path(path) / name).string()));
    };
    resources.key_adjectives = list("adjectives.txt");
    resources.key_nouns = list("nouns.txt");
    pool = resources.key_adjectives;
    pool.insert(pool.end(), resources.key_nouns.begin(), resources.key_nouns.end());
    if (std::filesystem::exists(std::filesystem::path(path) / "verbs.txt")) {
      std::vector<std::string> verbs = list("verbs.txt");
      pool.insert(pool.end(), verbs.begin(), verbs.end());
    }
  } else {
    for (const std::string& word : read_lines(path))
      if (is_plain_lowercase(word)) pool.push_back(word);
    if (pool.size() < 100) fail(path, ": a word list needs at least 100 lowercase words, found ", pool.size());
    pool = sorted_unique(pool);
    resources.key_adjectives = resources.key_nouns = pool;
  }
  pool = sorted_unique(pool);
  Rng rng(seed);
  ruler::shuffle(pool, rng);
  resources.common_words = pool;
}

}  // namespace

RulerResources load_ruler_resources(const std::string& haystack_file, const std::string& words,
                                    uint64_t seed) {
  RulerResources resources;
  if (!haystack_file.empty()) {
    resources.essay_words = split_whitespace(read_whole_file(haystack_file));
    if (resources.essay_words.empty()) fail(haystack_file, ": the haystack file has no words");
  }
  load_words(resources, words, seed);
  return resources;
}

}  // namespace hla::eval
