// RULER needle-in-a-haystack generator (scripts/data/synthetic/niah.py): needles
// "One of the special magic {values} for {key} is: {value}." hidden in a noise, essay or
// distractor-needle haystack; the question asks for every value of the queried keys.
#include <algorithm>

#include "eval/ruler_detail.h"
#include "eval/text_util.h"
#include "tensor/error.h"

namespace hla::eval::ruler {

namespace {

const char* const kNeedle = "One of the special magic {type_needle_v} for {key} is: {value}.";
const char* const kTemplate =
    "Some special magic {type_needle_v} are hidden within the following text. Make sure to "
    "memorize it. I will quiz you about the {type_needle_v} afterwards.\n{context}\nWhat are "
    "all the special magic {type_needle_v} for {query} mentioned in the provided text?";
const char* const kAnswerPrefix =
    " The special magic {type_needle_v} for {query} mentioned in the provided text are";

std::string random_item(const std::string& type, Rng& rng, const RulerResources& resources) {
  if (type == "numbers") return std::to_string(randint(rng, 1000000, 9999999));
  if (type == "uuids") return random_uuid4(rng);
  HLA_CHECK(type == "words", "unknown NIAH needle type \"", type, "\"");
  const auto& adjectives = resources.key_adjectives;
  const auto& nouns = resources.key_nouns;
  HLA_CHECK(!adjectives.empty() && !nouns.empty(), "NIAH word keys need a word list");
  // Two draws in one expression would be unsequenced (gcc and clang order them differently);
  // the noun is drawn first, the order the pinned samples were made with.
  const std::string& noun = nouns[rng.below(nouns.size())];
  const std::string& adjective = adjectives[rng.below(adjectives.size())];
  return adjective + "-" + noun;
}

std::string needle_sentence(const std::string& type_v, const std::string& key,
                            const std::string& value) {
  return format_template(kNeedle, {{"type_needle_v", type_v}, {"key", key}, {"value", value}});
}

std::string line_haystack(const RulerTask& task, const std::string& haystack, int64_t size,
                          const std::vector<std::string>& needles, Rng& rng,
                          const RulerResources& resources) {
  std::vector<std::string> lines;
  for (int64_t i = 0; i < size; i++) {
    if (haystack == "noise") {
      lines.push_back(kNoiseSentence);
    } else {  // "needle": every filler line is a distractor needle
      std::string key = random_item(task.key_type, rng, resources);
      lines.push_back(needle_sentence(task.value_type, key, random_item(task.value_type, rng, resources)));
    }
  }
  std::vector<int64_t> at = sample_indices(rng, size, static_cast<int64_t>(needles.size()));
  std::sort(at.rbegin(), at.rend());
  for (size_t i = 0; i < needles.size(); i++) lines.insert(lines.begin() + at[i], needles[i]);
  return join(lines, "\n");
}

Prompt niah_prompt(const RulerTask& task, const std::string& haystack, int64_t size, Rng& rng,
                   const RulerResources& resources) {
  const int num_keys = std::max(task.num_keys, task.num_queries);
  std::vector<std::string> keys, needles;
  std::vector<std::vector<std::string>> values(num_keys);
  for (int k = 0; k < num_keys; k++) {
    keys.push_back(random_item(task.key_type, rng, resources));
    for (int v = 0; v < task.num_values; v++) {
      values[k].push_back(random_item(task.value_type, rng, resources));
      needles.push_back(needle_sentence(task.value_type, keys[k], values[k].back()));
    }
  }
  shuffle(needles, rng);

  std::string context;
  if (haystack == "essay") {
    std::vector<std::string> sentences = split_sentences(strip(essay_text(resources.essay_words, size)));
    context = insert_at_depths(sentences, needles, rng);
  } else {
    context = line_haystack(task, haystack, size, needles, rng, resources);
  }

  Prompt prompt;
  std::vector<std::string> queries;
  for (int64_t k : sample_indices(rng, num_keys, task.num_queries)) {
    queries.push_back(keys[k]);
    prompt.answers.insert(prompt.answers.end(), values[k].begin(), values[k].end());
  }
  std::string query = queries.back();
  if (queries.size() > 1)
    query = join(std::vector<std::string>(queries.begin(), queries.end() - 1), ", ") + ", and " +
            queries.back();

  std::string tmpl = std::string(kTemplate) + kAnswerPrefix;
  std::string type_v = task.value_type;
  if (task.num_queries * task.num_values == 1) {
    tmpl = niah_singular_template(tmpl);
    type_v.pop_back();
  }
  prompt.text = format_template(tmpl, {{"type_needle_v", type_v}, {"context", context}, {"query", query}});
  return prompt;
}

}  // namespace

std::vector<RulerSample> generate_niah(const RulerTask& task, const RulerGenOptions& options,
                                       const RulerResources& resources,
                                       const TokenCounter& count_tokens, Rng& rng) {
  const std::string& haystack = task.haystack;
  if (haystack == "essay" && resources.essay_words.empty())
    fail("RULER task ", task.name, " needs the essay haystack (--haystack FILE); without one it ",
         "is skipped, never run on the noise haystack under its name");
  // RULER's search steps: 500 essay words, 25 lines; for short contexts 5 lines, and (our
  // addition: a 500-word step is most of a short context) 50 essay words.
  int64_t incremental = haystack == "essay" ? 500 : 25;
  if (is_short_context(options)) incremental = haystack == "essay" ? 50 : 5;
  const SizeSearch search{incremental, incremental, 3.0,
                          generation_budget(task, options.token_scale)};
  PromptAt prompt_at = [&](int64_t size) { return niah_prompt(task, haystack, size, rng, resources); };
  const int64_t size = search_size(prompt_at, count_tokens, options.length, search);
  return fit_samples(prompt_at, count_tokens, options, size, search, task.name, kAnswerPrefix);
}

}  // namespace hla::eval::ruler

namespace hla::eval {

std::string niah_singular_template(const std::string& tmpl) {
  std::string t = replace_all(tmpl, "Some", "A");
  t = replace_all(t, "are all", "is");
  t = replace_all(t, "are", "is");
  return replace_all(t, "answers", "answer");
}

}  // namespace hla::eval
