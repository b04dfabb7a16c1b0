// Fuzz target: the files RULER reads (load_ruler_resources, eval/ruler.h). The input is split
// at NUL bytes: part 0 is the haystack file; with three parts or more, parts 1-3 are the
// adjectives.txt, nouns.txt and verbs.txt of a words directory; else part 1 is a word list file.
#include <filesystem>

#include "eval/ruler.h"
#include "tests/fuzz/fuzz_util.h"

namespace {

std::vector<std::string> split_at_nul(const uint8_t* data, size_t size) {
  std::vector<std::string> parts(1);
  for (size_t i = 0; i < size; i++) {
    if (data[i] == 0) parts.emplace_back();
    else parts.back() += static_cast<char>(data[i]);
  }
  return parts;
}

std::string write_part(const std::string& name, const std::string& text) {
  return hla::fuzz::write_input(name, reinterpret_cast<const uint8_t*>(text.data()), text.size());
}

// The --words argument: a words directory or a word list file.
std::string write_words(const std::vector<std::string>& parts) {
  if (parts.size() < 3) return write_part("words.txt", parts.size() > 1 ? parts[1] : "");
  std::filesystem::create_directories(hla::fuzz::scratch_dir() + "/words");
  const char* names[] = {"words/adjectives.txt", "words/nouns.txt", "words/verbs.txt"};
  std::filesystem::remove(hla::fuzz::scratch_dir() + "/" + names[2]);
  for (size_t i = 1; i < parts.size() && i <= 3; i++) write_part(names[i - 1], parts[i]);
  return hla::fuzz::scratch_dir() + "/words";
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> parts = split_at_nul(data, size);
  std::string haystack = write_part("haystack.txt", parts[0]);
  std::string words = write_words(parts);
  hla::fuzz::expect_only_hla_errors([&] { (void)hla::eval::load_ruler_resources(haystack, words, 7); });
  return 0;
}
