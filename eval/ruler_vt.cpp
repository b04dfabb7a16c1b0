// RULER variable tracking (scripts/data/synthetic/variable_tracking.py), noise haystack:
// chains "VAR AAAAA = 54321", "VAR BBBBB = VAR AAAAA ", ... hidden among noise lines; the
// question asks for every variable that holds the chain's value. A one-shot example (3-letter
// names, value 12345, generated within 500 tokens - less in a short context, see below - then
// re-randomised per sample) is prepended.
#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "eval/ruler_detail.h"
#include "eval/text_util.h"

namespace hla::eval::ruler {

namespace {

const char* const kTemplate =
    "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n"
    "{context}\nQuestion: Find all variables that are assigned the value {query} in the text "
    "above.";
const char* const kAnswerPrefix =
    " Answer: According to the chain(s) of variable assignment in the text above, {num_v} "
    "variables are assigned the value {query}, they are: ";
constexpr int64_t kExampleLength = 500;  // token budget of the one-shot example, before token_scale

struct Chain {
  std::vector<std::string> names;  // (hops + 1) the variables, in assignment order
  std::vector<std::string> lines;  // (hops + 1) the assignment lines
};

std::vector<Chain> make_chains(int num_chains, int num_hops, bool is_example, Rng& rng) {
  const int letters = is_example ? 3 : 5;
  const int hops = is_example ? std::min(10, num_hops) : num_hops;
  std::vector<std::string> names;
  std::set<std::string> seen;
  while (static_cast<int>(names.size()) < num_chains * (hops + 1)) {
    std::string name = random_letters(rng, letters, 'A');
    if (seen.insert(name).second) names.push_back(name);
  }
  std::vector<Chain> chains(num_chains);
  for (int c = 0; c < num_chains; c++) {
    Chain& chain = chains[c];
    chain.names.assign(names.begin() + c * (hops + 1), names.begin() + (c + 1) * (hops + 1));
    std::string value = is_example ? "12345" : std::to_string(randint(rng, 10000, 99998));
    chain.lines.push_back("VAR " + chain.names[0] + " = " + value);
    for (int j = 0; j < hops; j++)
      chain.lines.push_back("VAR " + chain.names[j + 1] + " = VAR " + chain.names[j] + " ");
  }
  return chains;
}

Prompt vt_prompt(const RulerTask& task, int64_t num_noises, bool is_example, Rng& rng) {
  std::vector<Chain> chains = make_chains(task.num_chains, task.num_hops, is_example, rng);
  const std::string& first_line = chains[0].lines[0];
  std::string value = strip(first_line.substr(first_line.rfind('=') + 1));
  std::vector<std::string> lines(num_noises, kNoiseSentence);
  for (const Chain& chain : chains) {
    std::vector<int64_t> at = sample_indices(rng, static_cast<int64_t>(lines.size()),
                                             static_cast<int64_t>(chain.lines.size()));
    std::sort(at.begin(), at.end());
    for (size_t j = 0; j < chain.lines.size(); j++)
      lines.insert(lines.begin() + at[j] + j, chain.lines[j]);
  }
  std::string context = replace_all(join(lines, "\n"), ". \n", ".\n");
  Prompt prompt;
  prompt.text = format_template(std::string(kTemplate) + kAnswerPrefix,
                                {{"context", context},
                                 {"query", value},
                                 {"num_v", std::to_string(task.num_hops + 1)}});
  prompt.answers = chains[0].names;
  return prompt;
}

// New names (same lengths) for the example's answer variables and a new value for 12345.
std::string randomize_example(std::string example, int num_hops, Rng& rng) {
  std::vector<std::string> words = split_whitespace(strip(example));
  std::vector<std::string> names(words.end() - (num_hops + 1), words.end());
  for (const std::string& name : names)
    example = replace_all(example, name, random_letters(rng, static_cast<int>(name.size()), 'A'));
  return replace_all(example, "12345", std::to_string(randint(rng, 10000, 99998)));
}

}  // namespace

std::vector<RulerSample> generate_variable_tracking(const RulerTask& task,
                                                    const RulerGenOptions& options,
                                                    const TokenCounter& count_tokens, Rng& rng) {
  // 1. the one-shot example: full prompt with its answer, generated within 500 tokens, or
  //    within half of what the generation budget leaves (`room`) when that is less, so that
  //    the sample itself still fits (500 tokens times a byte tokenizer's scale of 4 are all of
  //    a 2048-token context). When even the smallest example (5 noise lines) is over 500 x
  //    token_scale tokens - a byte tokenizer at token scale 1 counts about 840 - it takes what
  //    it needs, up to `room`, with a note.
  const int64_t budget = generation_budget(task, options.token_scale);
  const int64_t room = (options.length - budget) / 2;
  const int64_t ruler_example_length = std::lround(kExampleLength * options.token_scale);
  int64_t example_length = std::min(ruler_example_length, room);
  PromptAt example_at = [&](int64_t n) { return vt_prompt(task, n, true, rng); };
  const SizeSearch example_search{5, 5, 3.0, 0};
  std::optional<int64_t> example_size =
      search_fitting_size(example_at, count_tokens, example_length, example_search);
  if (!example_size) {
    const int64_t smallest = count_tokens(example_at(example_search.incremental).text);
    if (smallest <= room) {
      example_length = std::min(room, smallest + smallest / 10);  // a BPE count varies with the names
      add_note(options, task.name + ": the one-shot example needs " + std::to_string(smallest) +
                            " tokens with this tokenizer, over RULER's 500 x token_scale = " +
                            std::to_string(ruler_example_length) + "; it takes up to " +
                            std::to_string(example_length) + " of the " + std::to_string(options.length));
    }
    example_size = example_search.incremental;
  }
  Prompt example = fit_prompt(example_at, count_tokens, example_length, *example_size,
                              example_search, task.name + " (one-shot example)");
  const std::string example_text = example.text + " " + join(example.answers, " ") + "\n";

  // 2. the samples, each with a re-randomised copy of the example in front
  const int64_t incremental = is_short_context(options) ? 5 : 10;
  PromptAt prompt_at = [&](int64_t n) { return vt_prompt(task, n, false, rng); };
  const int64_t size = search_size(
      prompt_at, count_tokens, options.length,
      {incremental, incremental, 3.0, count_tokens(example_text) + budget});
  PromptAt with_example_at = [&](int64_t n) {
    Prompt p = prompt_at(n);
    p.text = randomize_example(example_text, task.num_hops, rng) + "\n" + p.text;
    return p;
  };
  const SizeSearch fit{incremental, incremental, 3.0, budget};
  return fit_samples(with_example_at, count_tokens, options, size, fit, task.name, kAnswerPrefix);
}

}  // namespace hla::eval::ruler
