// Helpers shared by the data tests: a scratch directory removed at scope exit, file writing,
// a small generated corpus, and checks that an expression throws a message containing a phrase.
#pragma once
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "data/file_io.h"
#include "tensor/error.h"
#include "tensor/random.h"

namespace hla::data::testing {

struct ScratchDir {
  std::filesystem::path path;
  explicit ScratchDir(const std::string& name)
      : path(std::filesystem::temp_directory_path() /
             ("hla-test-" + name + "-" + std::to_string(getpid()))) {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() { std::filesystem::remove_all(path); }
  std::string operator/(const std::string& file) const { return (path / file).string(); }
};

// Writes bytes; a name ending in .zst is compressed.
inline void write_file(const std::string& path, const std::string& bytes) {
  FileWriter out(path, ends_with(path, ".zst") ? 3 : 0);
  out.write(bytes.data(), bytes.size());
  out.close();
}

inline std::string random_bytes(uint64_t seed, size_t n) {
  Rng rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng.below(256));
  return s;
}

// English-like documents from a small word list, with punctuation, digits and some UTF-8.
inline std::vector<std::string> make_documents(uint64_t seed, int count, int words_per_doc) {
  static const char* words[] = {"the", "cell", "membrane", "is", "a", "barrier", "of", "lipids",
                                "and", "proteins", "that", "controls", "what", "enters", "it's",
                                "energy", "café", "naïve", "42", "1,000", "(see", "Figure)", "—",
                                "über", "日本", "data", "model", "recall", "linear", "attention"};
  Rng rng(seed);
  std::vector<std::string> docs;
  for (int d = 0; d < count; d++) {
    std::string doc;
    for (int w = 0; w < words_per_doc; w++) {
      if (w) doc += rng.below(12) == 0 ? ".\n\n" : rng.below(8) == 0 ? ", " : " ";
      doc += words[rng.below(std::size(words))];
    }
    docs.push_back(doc + ".");
  }
  return docs;
}

}  // namespace hla::data::testing

// CHECK that `expr` throws an hla::Error whose message contains `phrase`.
#define CHECK_THROWS_CONTAINING(expr, phrase)                                  \
  do {                                                                          \
    std::string hla_message_;                                                   \
    try {                                                                       \
      (void)(expr);                                                             \
    } catch (const hla::Error& e) {                                             \
      hla_message_ = e.what();                                                  \
    }                                                                           \
    INFO("message: ", hla_message_);                                            \
    CHECK(hla_message_.find(phrase) != std::string::npos);                      \
  } while (0)
