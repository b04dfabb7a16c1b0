// RULER aggregation tasks:
//  * common words extraction (common_words_extraction.py): a numbered list where 10 words
//    repeat often and the rest rarely, after one solved few-shot example; name the 10 common.
//  * frequent words extraction (freq_words_extraction.py): coded 6-letter words with Zipf
//    counts (rank k appears floor(n k^-alpha / zeta(alpha)) times, rank 1 is the noise "...");
//    name ranks 2-4.
#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "eval/ruler_detail.h"
#include "eval/text_util.h"
#include "tensor/error.h"

namespace hla::eval::ruler {

namespace {

const char* const kCommonTemplate =
    "Below is a numbered list of words. In these words, some appear more often than others. "
    "Memorize the ones that appear most often.\n{context}\nQuestion: What are the 10 most "
    "common words in the above list?";
const char* const kCommonAnswerPrefix =
    " Answer: The top 10 words that appear most often in the list are:";
const char* const kFrequentTemplate =
    "Read the following coded text and track the frequency of each coded word. Find the three "
    "most frequently appeared coded words. {context}\nQuestion: Do not provide any "
    "explanation. Please ignore the dots '....'. What are the three most frequently appeared "
    "words in the above coded text?";
const char* const kFrequentAnswerPrefix =
    " Answer: According to the coded text above, the three most frequently appeared words are:";

std::string numbered(const std::vector<std::string>& words) {
  std::string out;
  for (size_t i = 0; i < words.size(); i++)
    out += (i ? " " : "") + std::to_string(i + 1) + ". " + words[i];
  return out;
}

struct WordListExample {
  std::string context;              // "1. w 2. w ..."
  std::vector<std::string> common;  // the words that repeat most
};

WordListExample word_list_example(const std::vector<std::string>& pool, int64_t num_words,
                                  int common_repeats, int uncommon_repeats, int num_common,
                                  Rng& rng) {
  if (num_words > static_cast<int64_t>(pool.size()))
    fail("common words extraction needs ", num_words, " distinct words but the word list has ",
         pool.size(), "; pass a longer list with --words");
  std::vector<std::string> words;
  for (int64_t i : sample_indices(rng, static_cast<int64_t>(pool.size()), num_words))
    words.push_back(pool[i]);
  std::vector<std::string> list;
  for (int r = 0; r < common_repeats; r++) list.insert(list.end(), words.begin(), words.begin() + num_common);
  for (int r = 0; r < uncommon_repeats; r++) list.insert(list.end(), words.begin() + num_common, words.end());
  shuffle(list, rng);
  return {numbered(list), std::vector<std::string>(words.begin(), words.begin() + num_common)};
}

Prompt common_words_prompt(const RulerTask& task, int64_t num_words, bool short_context,
                           const std::vector<std::string>& pool, Rng& rng) {
  WordListExample shot = short_context
                             ? word_list_example(pool, 20, 3, 1, task.num_common, rng)
                             : word_list_example(pool, 40, 10, 3, task.num_common, rng);
  WordListExample main = short_context
                             ? word_list_example(pool, num_words, 6, 1, task.num_common, rng)
                             : word_list_example(pool, num_words, task.freq_common,
                                                 task.freq_uncommon, task.num_common, rng);
  const std::string tmpl = std::string(kCommonTemplate) + kCommonAnswerPrefix;
  Prompt prompt;
  prompt.text = format_template(tmpl, {{"context", shot.context}}) + " " + numbered(shot.common) +
                "\n" + format_template(tmpl, {{"context", main.context}});
  prompt.answers = main.common;
  return prompt;
}

double riemann_zeta(double s) {
  // sum_{k<=N} k^-s plus the Euler-Maclaurin tail N^(1-s)/(s-1) - N^-s/2
  const int N = 1000;
  double sum = 0;
  for (int k = 1; k <= N; k++) sum += std::pow(k, -s);
  return sum + std::pow(N, 1 - s) / (s - 1) - std::pow(N, -s) / 2;
}

std::vector<std::string> coded_vocabulary(int64_t size, Rng& rng) {
  std::vector<std::string> vocab;
  std::set<std::string> seen;
  while (static_cast<int64_t>(vocab.size()) < size) {
    std::string word = random_letters(rng, 6, 'a');
    if (seen.insert(word).second) vocab.push_back(word);
  }
  std::sort(vocab.begin(), vocab.end());
  shuffle(vocab, rng);
  vocab[0] = "...";  // the top rank is noise
  return vocab;
}

Prompt frequent_words_prompt(const std::vector<std::string>& vocab, int64_t num_words,
                             double alpha, Rng& rng) {
  const double zeta = riemann_zeta(alpha);
  std::vector<std::string> words;
  for (size_t k = 1; k <= vocab.size(); k++) {
    int64_t count = static_cast<int64_t>(num_words * std::pow(static_cast<double>(k), -alpha) / zeta);
    words.insert(words.end(), count, vocab[k - 1]);
  }
  shuffle(words, rng);
  Prompt prompt;
  prompt.text = format_template(std::string(kFrequentTemplate) + kFrequentAnswerPrefix,
                                {{"context", join(words, " ")}});
  prompt.answers = {vocab[1], vocab[2], vocab[3]};
  return prompt;
}

}  // namespace

std::vector<RulerSample> generate_common_words(const RulerTask& task,
                                               const RulerGenOptions& options,
                                               const RulerResources& resources,
                                               const TokenCounter& count_tokens, Rng& rng) {
  const std::vector<std::string>& pool = resources.common_words;
  bool short_context = is_short_context(options);
  PromptAt prompt_at = [&](int64_t n) {
    return common_words_prompt(task, n, short_context, pool, rng);
  };
  const int64_t pool_size = static_cast<int64_t>(pool.size());
  const SizeSearch search{10, std::min<int64_t>(4096, pool_size), 2.0,
                          generation_budget(task, options.token_scale), pool_size};
  std::optional<int64_t> size = search_fitting_size(prompt_at, count_tokens, options.length, search);
  if (!size && !short_context) {
    // RULER's long-context lists (4096 of its tokens or more) hold 190 words in the example and
    // freq_common repeats of each common word: with a fine tokenizer at a small token scale
    // that is more than the whole length, so take the lists RULER uses below 4096 tokens.
    const int64_t smallest = count_tokens(prompt_at(search.incremental).text) + search.extra_tokens;
    short_context = true;
    add_note(options, task.name + ": RULER's long-context word lists need at least " +
                          std::to_string(smallest) + " tokens with this tokenizer, more than the length " +
                          std::to_string(options.length) +
                          "; it takes RULER's short-context lists (repeats 3 and 1 in the example, 6 and 1 "
                          "in the question)");
    size = search_fitting_size(prompt_at, count_tokens, options.length, search);
  }
  return fit_samples(prompt_at, count_tokens, options, size.value_or(search.incremental), search,
                     task.name, kCommonAnswerPrefix);
}

std::vector<RulerSample> generate_frequent_words(const RulerTask& task,
                                                 const RulerGenOptions& options,
                                                 const TokenCounter& count_tokens, Rng& rng) {
  const int64_t budget = generation_budget(task, options.token_scale);
  const int64_t max_prompt = options.length - budget;
  const int64_t vocab_size = max_prompt / 50;
  const int64_t incremental = std::max<int64_t>(1, max_prompt / 32);
  HLA_CHECK_INPUT(vocab_size >= 4, "RULER task ", task.name, ": length ", options.length,
            " leaves a vocabulary of ", vocab_size, " coded words; at least 4 are needed");
  // The word count: from max_prompt / 6 upwards until the prompt reaches max_prompt, then
  // one step back.
  std::vector<std::string> vocab = coded_vocabulary(vocab_size, rng);
  int64_t num_words = max_prompt / 6;
  while (count_tokens(frequent_words_prompt(vocab, num_words, task.alpha, rng).text) < max_prompt)
    num_words += incremental;
  num_words -= incremental;

  std::vector<RulerSample> samples;
  for (int i = 0; i < options.samples; i++) {
    vocab = coded_vocabulary(vocab_size, rng);
    int64_t n = num_words;
    Prompt prompt = frequent_words_prompt(vocab, n, task.alpha, rng);
    while ((prompt.length = count_tokens(prompt.text)) > max_prompt) {
      n -= incremental;
      HLA_CHECK_INPUT(n > 0, "RULER task ", task.name, ": no word count fits length ", options.length);
      prompt = frequent_words_prompt(vocab, n, task.alpha, rng);
    }
    prompt.length += budget;
    samples.push_back(split_at_answer_prefix(prompt, kFrequentAnswerPrefix));
  }
  return samples;
}

}  // namespace hla::eval::ruler
