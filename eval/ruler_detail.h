// Internals shared by the RULER generators (eval/ruler_*.cpp): random draws in the style of
// Python's `random` module, RULER's haystack-size search, and the prompt split at the answer
// prefix. Not part of the eval API.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "eval/ruler.h"
#include "tensor/random.h"

namespace hla::eval::ruler {

// RULER switches to smaller search steps (and, for cwe, a lighter word list) below 4096 of its
// tokens; in our tokens that is 4096 * token_scale.
inline bool is_short_context(const RulerGenOptions& options) {
  return options.length < 4096 * options.token_scale;
}

// ---- random draws ----
int64_t randint(Rng& rng, int64_t lo, int64_t hi);  // uniform in [lo, hi], both included
// k distinct values of [0, n), in random order (random.sample(range(n), k)).
std::vector<int64_t> sample_indices(Rng& rng, int64_t n, int64_t k);
template <class T>
void shuffle(std::vector<T>& items, Rng& rng) {
  for (size_t i = items.size(); i > 1; i--) std::swap(items[i - 1], items[rng.below(i)]);
}
std::string random_letters(Rng& rng, int count, char first_letter);  // 'A' or 'a'
std::string random_uuid4(Rng& rng);  // str(uuid.UUID(int=getrandbits(128), version=4))

// ---- text ----
extern const char* const kNoiseSentence;
// Splits single-spaced text after '.', '!' or '?' (and any closing quotes or brackets) that
// is followed by a space: the stand-in for NLTK sent_tokenize.
std::vector<std::string> split_sentences(const std::string& text);
// The first `count` haystack words, cycling through them when more are needed.
std::string essay_text(const std::vector<std::string>& words, int64_t count);
// Inserts items into sentences at depths drawn from round(linspace(0, 100, 40)) and joins all
// with " " (RULER's essay haystack insertion).
std::string insert_at_depths(const std::vector<std::string>& sentences,
                             const std::vector<std::string>& items, Rng& rng);

// ---- the haystack search and sample fitting ----
struct Prompt {
  std::string text;  // full prompt including the answer prefix
  std::vector<std::string> answers;
  int64_t length = 0;  // tokens(text) + extra tokens, set by fit_prompt
};
using PromptAt = std::function<Prompt(int64_t size)>;

struct SizeSearch {
  int64_t incremental;    // search step and smallest size
  int64_t estimate_size;  // size of the probe prompt that estimates tokens per unit
  double slack;           // upper bound = slack * length / (tokens per unit)
  int64_t extra_tokens;   // added to the prompt's tokens (generation budget, few-shot example)
  int64_t max_size = INT64_MAX;  // the search never goes above this (e.g. distinct words held)
};

// RULER's binary search for the largest size whose prompt fits `length`; nullopt when not even
// search.incremental fits.
std::optional<int64_t> search_fitting_size(const PromptAt& prompt_at, const TokenCounter& count_tokens,
                                           int64_t length, const SizeSearch& search);
// The same, search.incremental when nothing fits (RULER's own fallback: fit_prompt then fails
// with the sizes in its message).
int64_t search_size(const PromptAt& prompt_at, const TokenCounter& count_tokens, int64_t length,
                    const SizeSearch& search);
// A generator that departs from RULER's setting to fit the tokenizer says so: a warning on
// stderr and a note in options.notes (the task's "notes" in the results).
void add_note(const RulerGenOptions& options, const std::string& note);
// Generates at `size`, shrinking by `incremental` until it fits (RULER's per-sample loop);
// an hla::Error when even the smallest size does not fit.
Prompt fit_prompt(const PromptAt& prompt_at, const TokenCounter& count_tokens, int64_t length,
                  int64_t size, const SizeSearch& search, const std::string& task);

// Splits at the last occurrence of the first 10 characters of the answer prefix.
RulerSample split_at_answer_prefix(const Prompt& prompt, const std::string& answer_prefix);
// The tail of every haystack generator: options.samples prompts, each from fit_prompt at `size`
// (the search's result) and split at `answer_prefix`.
std::vector<RulerSample> fit_samples(const PromptAt& prompt_at, const TokenCounter& count_tokens,
                                     const RulerGenOptions& options, int64_t size,
                                     const SizeSearch& search, const std::string& task,
                                     const std::string& answer_prefix);

// ---- the generators, one per RULER script ----
std::vector<RulerSample> generate_niah(const RulerTask& task, const RulerGenOptions& options,
                                       const RulerResources& resources,
                                       const TokenCounter& count_tokens, Rng& rng);
std::vector<RulerSample> generate_variable_tracking(const RulerTask& task,
                                                    const RulerGenOptions& options,
                                                    const TokenCounter& count_tokens, Rng& rng);
std::vector<RulerSample> generate_common_words(const RulerTask& task,
                                               const RulerGenOptions& options,
                                               const RulerResources& resources,
                                               const TokenCounter& count_tokens, Rng& rng);
std::vector<RulerSample> generate_frequent_words(const RulerTask& task,
                                                 const RulerGenOptions& options,
                                                 const TokenCounter& count_tokens, Rng& rng);
std::vector<RulerSample> generate_qa(const RulerTask& task, const RulerGenOptions& options,
                                     const TokenCounter& count_tokens, Rng& rng);

}  // namespace hla::eval::ruler
