// RULER-style long-context recall suite (NVIDIA/RULER, ../shared/design/eval.md section 1).
//
// 13 tasks: 8 needle-in-a-haystack variants, variable tracking, common- and frequent-words
// extraction, and two self-contained QA tasks that stand in for SQuAD / HotpotQA (synthetic
// documents of invented facts; qa_1 asks a one-document question, qa_2 a question that joins
// two documents). Each sample is generated at a target length in the model's own tokens:
// prompt tokens + the task's generation budget <= length, the haystack size found by RULER's
// binary search. The model decodes greedily after the answer prefix; the prediction is
// stripped, control characters become "\n", and it is scored by case-insensitive substring
// match: string_match_all (fraction of references found) for every task but QA, which uses
// string_match_part (any reference found). Scores are percentages.
//
// Randomness: one hla::Rng per (task, length), seeded from --seed, used in the same order as
// RULER uses Python's global generator (the haystack search draws too). RULER's fixed-seed
// shuffles (the same permutation for equal-length lists) are drawn from that Rng instead.
#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "eval/lm.h"
#include "eval/scoring.h"
#include "tensor/random.h"

namespace hla::eval {

// What the generators draw from. Missing words are replaced (with a note) by
// load_ruler_resources with a generated list; a missing haystack is not replaced: the essay
// tasks (haystack "essay") need it and are an hla::Error without it (hla eval skips them).
struct RulerResources {
  std::vector<std::string> essay_words;     // whitespace-split essay text; empty: none
  std::vector<std::string> key_adjectives;  // NIAH word keys are "{adjective}-{noun}"
  std::vector<std::string> key_nouns;
  std::vector<std::string> common_words;    // CWE pool: sorted, de-duplicated, then shuffled
  std::vector<std::string> notes;           // fallbacks taken, for the report
};

// haystack_file: text file of essays ("" = none: the essay tasks cannot run).
// words: a directory holding wonderwords-style adjectives.txt, nouns.txt (and verbs.txt), or a
// plain word list file (one word a line; only [a-z]+ entries are used); "" tries
// /usr/share/dict/words, then falls back to generated pseudo-words (with a note).
RulerResources load_ruler_resources(const std::string& haystack_file, const std::string& words,
                                    uint64_t seed);

struct RulerTask {
  enum class Kind { Niah, VariableTracking, CommonWords, FrequentWords, QaSingleHop, QaTwoHop };
  std::string name;
  Kind kind = Kind::Niah;
  int tokens_to_generate = 0;  // RULER's budget in (BPE) tokens, before token_scale
  // NIAH: haystack "noise" | "essay" | "needle"; key/value type "words" | "numbers" | "uuids"
  std::string haystack, key_type, value_type;
  int num_keys = 1, num_values = 1, num_queries = 1;
  // variable tracking
  int num_chains = 1, num_hops = 4;
  // common words extraction
  int freq_common = 30, freq_uncommon = 3, num_common = 10;
  // frequent words extraction
  double alpha = 2.0;
};

const std::vector<RulerTask>& ruler_tasks();
const RulerTask* find_ruler_task(const std::string& name);

struct RulerSample {
  std::string input;                 // the prompt up to the answer prefix
  std::string answer_prefix;         // sent right after input; generation continues from here
  std::vector<std::string> outputs;  // references
  int64_t length = 0;                // tokens(input + answer_prefix) + generation budget
};

struct RulerGenOptions {
  int64_t length = 4096;  // max tokens: prompt + generation budget
  int samples = 10;
  uint64_t seed = 42;
  // RULER's fixed token counts (generation budgets, the 500-token one-shot example of vt, the
  // 4096-token threshold for short-context settings) are counts of BPE tokens; they are
  // multiplied by this for other tokenizers (eval.md 1.9 suggests 3-4 for a byte-level model).
  double token_scale = 1.0;
  // Where a generator departs from RULER's setting so that the task fits the tokenizer (vt's
  // one-shot example over its 500 x token_scale budget, cwe's short-context word list at a
  // nominally long length), it appends a sentence here, when set.
  std::vector<std::string>* notes = nullptr;
};

using TokenCounter = std::function<int64_t(const std::string&)>;

int generation_budget(const RulerTask& task, double token_scale);

std::vector<RulerSample> generate_ruler_samples(const RulerTask& task,
                                                const RulerGenOptions& options,
                                                const RulerResources& resources,
                                                const TokenCounter& count_tokens);

// The NIAH template rewrite for a single answer (num_queries * num_values == 1):
// "Some"->"A", "are all"->"is", "are"->"is", "answers"->"answer".
std::string niah_singular_template(const std::string& tmpl);

// Scoring (RULER scripts/eval): post-processing and the two metrics, in percent, rounded to
// two decimals.
std::string ruler_postprocess(const std::string& prediction);
double string_match_all(const std::vector<std::string>& predictions,
                        const std::vector<std::vector<std::string>>& references);
double string_match_part(const std::vector<std::string>& predictions,
                         const std::vector<std::vector<std::string>>& references);

// The synthetic stand-ins for SQuAD and HotpotQA; RULER's 13-task average is also reported
// without them (the 11 tasks whose generators follow RULER's own).
bool is_qa_task(const RulerTask& task);

struct RulerRunOptions {
  std::vector<int64_t> lengths = {4096};
  int samples = 10;
  uint64_t seed = 42;
  double token_scale = 1.0;
  BatchOptions batch;
  // Called with the result so far after every task at every length (hla eval saves it).
  std::function<void(const nlohmann::json&)> on_task_done;
};

// Generates, decodes and scores every task at every length. A length beyond the model's
// position limit is an hla::Error; one beyond its max_length() (the training context) runs,
// with a warning and a note. A task that throws is recorded as {"error": message} and the
// others run. Returns
//   {"lengths": [...], "samples", "seed", "token_scale", "notes": [...],
//    "tasks": {name: {"<length>": {"score", "metric", "n", "mean_length", "seconds",
//              "seconds_samples", "seconds_prefill", "seconds_steps", "example": {...},
//              "notes": [...] where the generator departed from RULER's setting} or {"error"}}},
//    "average": {"<length>": mean over the tasks scored},
//    "average_without_qa": {"<length>": the same without qa_1 and qa_2},
//    "averaged_tasks": {"<length>": {"all": n, "without_qa": m}}}
nlohmann::json run_ruler(LanguageModel& model, const data::Tokenizer& tokenizer,
                         const std::vector<std::string>& task_names,
                         const RulerResources& resources, const RulerRunOptions& options);

}  // namespace hla::eval
