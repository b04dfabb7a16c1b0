// Zero-shot evaluation of the six LM tasks: requests, metrics, and one JSON result per task.
//
// Multiple choice: one request per choice, (context, " " + choice). acc takes the argmax of
// the summed log-likelihood, acc_norm the argmax of log-likelihood / len(choice) in
// characters; ties go to the lowest index (numpy argmax). LAMBADA: acc counts documents whose
// every target token is the greedy choice; perplexity = exp(-mean target log-likelihood).
// Accuracies carry the standard error of a mean of 0/1 outcomes, sqrt(p (1 - p) / (n - 1)).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "eval/lm_tasks.h"
#include "eval/scoring.h"

namespace hla::eval {

double binomial_stderr(double p, int64_t n);
int first_argmax(const std::vector<double>& values);

struct MultipleChoiceMetrics {
  int64_t n = 0;
  double acc = 0, acc_stderr = 0, acc_norm = 0, acc_norm_stderr = 0;
};
// choice_logprobs[d][c] is the summed log-likelihood of " " + docs[d].choices[c].
MultipleChoiceMetrics multiple_choice_metrics(
    const std::vector<MultipleChoiceDoc>& docs,
    const std::vector<std::vector<double>>& choice_logprobs);

struct LambadaMetrics {
  int64_t n = 0;
  double acc = 0, acc_stderr = 0, perplexity = 0;
};
LambadaMetrics lambada_metrics(const std::vector<LoglikResult>& results);

MultipleChoiceMetrics evaluate_multiple_choice(const std::vector<MultipleChoiceDoc>& docs,
                                               LanguageModel& model,
                                               const data::Tokenizer& tokenizer,
                                               const BatchOptions& options);
LambadaMetrics evaluate_lambada(const std::vector<LambadaDoc>& docs, LanguageModel& model,
                                const data::Tokenizer& tokenizer, const BatchOptions& options);

struct LmEvalOptions {
  int64_t limit = -1;  // evaluate only the first `limit` documents (-1: all)
  BatchOptions batch;
};

// Reads <data_dir>/<task.file_name>, evaluates, and returns
//   {"task", "title", "file", "n", "metrics": {...}, "paper_metric", "seconds"}.
nlohmann::json run_lm_task(const LmTaskInfo& task, const std::string& data_dir,
                           LanguageModel& model, const data::Tokenizer& tokenizer,
                           const LmEvalOptions& options);

}  // namespace hla::eval
