// Shared pieces of the RULER generators: random draws, sentence splitting, essay insertion,
// the haystack-size search and the answer-prefix split (see ruler_detail.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>

#include "eval/ruler_detail.h"
#include "tensor/error.h"

namespace hla::eval::ruler {

const char* const kNoiseSentence =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";

int64_t randint(Rng& rng, int64_t lo, int64_t hi) {
  return lo + static_cast<int64_t>(rng.below(static_cast<uint64_t>(hi - lo + 1)));
}

std::vector<int64_t> sample_indices(Rng& rng, int64_t n, int64_t k) {
  HLA_CHECK(k >= 0 && k <= n, "cannot sample ", k, " distinct values from ", n);
  std::vector<int64_t> pool(n);
  for (int64_t i = 0; i < n; i++) pool[i] = i;
  for (int64_t i = 0; i < k; i++) std::swap(pool[i], pool[i + rng.below(n - i)]);
  pool.resize(k);
  return pool;
}

std::string random_letters(Rng& rng, int count, char first_letter) {
  std::string s;
  for (int i = 0; i < count; i++) s.push_back(static_cast<char>(first_letter + rng.below(26)));
  return s;
}

std::string random_uuid4(Rng& rng) {
  uint64_t hi = rng.next(), lo = rng.next();
  hi = (hi & ~uint64_t{0xF000}) | uint64_t{0x4000};              // version 4
  lo = (lo & ~(uint64_t{0xC000} << 48)) | (uint64_t{0x8000} << 48);  // RFC 4122 variant
  char buf[37];
  std::snprintf(buf, sizeof buf, "%08x-%04x-%04x-%04x-%012llx", static_cast<unsigned>(hi >> 32),
                static_cast<unsigned>((hi >> 16) & 0xFFFF), static_cast<unsigned>(hi & 0xFFFF),
                static_cast<unsigned>(lo >> 48),
                static_cast<unsigned long long>(lo & 0xFFFFFFFFFFFFull));
  return buf;
}

std::vector<std::string> split_sentences(const std::string& text) {
  std::vector<std::string> sentences;
  size_t start = 0;
  for (size_t i = 0; i < text.size(); i++) {
    if (text[i] != '.' && text[i] != '!' && text[i] != '?') continue;
    size_t end = i + 1;
    while (end < text.size() && std::string("\"')]").find(text[end]) != std::string::npos) end++;
    if (end < text.size() && text[end] == ' ') {
      sentences.push_back(text.substr(start, end - start));
      start = end + 1;
      i = end;
    }
  }
  if (start < text.size()) sentences.push_back(text.substr(start));
  return sentences;
}

std::string essay_text(const std::vector<std::string>& words, int64_t count) {
  HLA_CHECK_INPUT(!words.empty(), "the essay haystack has no words");
  std::string text;
  for (int64_t i = 0; i < count; i++) {
    if (i) text.push_back(' ');
    text.append(words[i % words.size()]);
  }
  return text;
}

std::string insert_at_depths(const std::vector<std::string>& sentences,
                             const std::vector<std::string>& items, Rng& rng) {
  std::vector<int64_t> depths;  // round(linspace(0, 100, 40)): no value is a .5 tie
  for (int i = 0; i < 40; i++) depths.push_back(std::lround(100.0 * i / 39));
  const int64_t n = static_cast<int64_t>(sentences.size());
  std::vector<int64_t> positions;
  for (int64_t d : sample_indices(rng, 40, static_cast<int64_t>(items.size())))
    positions.push_back(static_cast<int64_t>(n * (depths[d] / 100.0)));
  std::sort(positions.begin(), positions.end());
  positions.insert(positions.begin(), 0);
  positions.push_back(n);
  std::vector<std::string> pieces;
  for (size_t i = 1; i < positions.size(); i++) {
    std::vector<std::string> slice(sentences.begin() + positions[i - 1],
                                   sentences.begin() + positions[i]);
    std::string joined;
    for (size_t j = 0; j < slice.size(); j++) joined += (j ? " " : "") + slice[j];
    pieces.push_back(joined);
    if (i - 1 < items.size()) pieces.push_back(items[i - 1]);
  }
  std::string context;
  for (size_t i = 0; i < pieces.size(); i++) context += (i ? " " : "") + pieces[i];
  return context;
}

std::optional<int64_t> search_fitting_size(const PromptAt& prompt_at, const TokenCounter& count_tokens,
                                           int64_t length, const SizeSearch& search) {
  const double per_unit =
      static_cast<double>(count_tokens(prompt_at(search.estimate_size).text)) /
      static_cast<double>(search.estimate_size);
  int64_t lower = search.incremental;
  int64_t upper = std::min(std::max(static_cast<int64_t>(length / per_unit * search.slack),
                                    2 * search.incremental),
                           search.max_size);
  int64_t best = -1;
  while (lower <= upper) {
    int64_t mid = (lower + upper) / 2;
    if (count_tokens(prompt_at(mid).text) + search.extra_tokens <= length) {
      best = mid;
      lower = mid + 1;
    } else {
      upper = mid - 1;
    }
  }
  if (best < 0) return std::nullopt;
  return best;
}

int64_t search_size(const PromptAt& prompt_at, const TokenCounter& count_tokens, int64_t length,
                    const SizeSearch& search) {
  return search_fitting_size(prompt_at, count_tokens, length, search).value_or(search.incremental);
}

void add_note(const RulerGenOptions& options, const std::string& note) {
  std::cerr << "warning: RULER " << note << "\n";
  if (options.notes) options.notes->push_back(note);
}

Prompt fit_prompt(const PromptAt& prompt_at, const TokenCounter& count_tokens, int64_t length,
                  int64_t size, const SizeSearch& search, const std::string& task) {
  while (true) {
    Prompt prompt = prompt_at(size);
    int64_t total = count_tokens(prompt.text) + search.extra_tokens;
    if (total <= length) {
      prompt.length = total;
      return prompt;
    }
    if (size <= search.incremental)
      fail("RULER task ", task, ": even the smallest haystack (", size, ") gives ", total,
           " tokens, more than the length ", length, "; use a larger --length");
    size -= search.incremental;
  }
}

RulerSample split_at_answer_prefix(const Prompt& prompt, const std::string& answer_prefix) {
  size_t at = prompt.text.rfind(answer_prefix.substr(0, 10));
  HLA_CHECK(at != std::string::npos, "answer prefix \"", answer_prefix, "\" not in the prompt");
  return {prompt.text.substr(0, at), prompt.text.substr(at), prompt.answers, prompt.length};
}

std::vector<RulerSample> fit_samples(const PromptAt& prompt_at, const TokenCounter& count_tokens,
                                     const RulerGenOptions& options, int64_t size,
                                     const SizeSearch& search, const std::string& task,
                                     const std::string& answer_prefix) {
  std::vector<RulerSample> samples;
  for (int i = 0; i < options.samples; i++)
    samples.push_back(split_at_answer_prefix(
        fit_prompt(prompt_at, count_tokens, options.length, size, search, task), answer_prefix));
  return samples;
}

}  // namespace hla::eval::ruler
