// Zero-shot LM task evaluation (see lm_eval.h).
#include "eval/lm_eval.h"

#include <chrono>
#include <cmath>
#include <filesystem>

#include "eval/text_util.h"
#include "tensor/error.h"

namespace hla::eval {

double binomial_stderr(double p, int64_t n) {
  if (n < 2) return 0.0;
  return std::sqrt(p * (1 - p) / static_cast<double>(n - 1));
}

int first_argmax(const std::vector<double>& values) {
  HLA_CHECK(!values.empty(), "argmax of an empty list");
  int best = 0;
  for (int i = 1; i < static_cast<int>(values.size()); i++)
    if (values[i] > values[best]) best = i;
  return best;
}

MultipleChoiceMetrics multiple_choice_metrics(
    const std::vector<MultipleChoiceDoc>& docs,
    const std::vector<std::vector<double>>& choice_logprobs) {
  HLA_CHECK(docs.size() == choice_logprobs.size(), "got log-likelihoods for ",
            choice_logprobs.size(), " documents, expected ", docs.size());
  MultipleChoiceMetrics m;
  m.n = static_cast<int64_t>(docs.size());
  if (m.n == 0) return m;
  int64_t hits = 0, norm_hits = 0;
  for (size_t d = 0; d < docs.size(); d++) {
    const std::vector<double>& ll = choice_logprobs[d];
    HLA_CHECK(ll.size() == docs[d].choices.size(), "document ", d, " has ",
              docs[d].choices.size(), " choices but ", ll.size(), " log-likelihoods");
    std::vector<double> normalized(ll.size());
    for (size_t c = 0; c < ll.size(); c++)
      normalized[c] = ll[c] / static_cast<double>(utf8_length(docs[d].choices[c]));
    hits += first_argmax(ll) == docs[d].gold;
    norm_hits += first_argmax(normalized) == docs[d].gold;
  }
  m.acc = static_cast<double>(hits) / m.n;
  m.acc_norm = static_cast<double>(norm_hits) / m.n;
  m.acc_stderr = binomial_stderr(m.acc, m.n);
  m.acc_norm_stderr = binomial_stderr(m.acc_norm, m.n);
  return m;
}

LambadaMetrics lambada_metrics(const std::vector<LoglikResult>& results) {
  LambadaMetrics m;
  m.n = static_cast<int64_t>(results.size());
  if (m.n == 0) return m;
  int64_t hits = 0;
  double total_logprob = 0;
  for (const LoglikResult& r : results) {
    hits += r.is_greedy;
    total_logprob += r.logprob;
  }
  m.acc = static_cast<double>(hits) / m.n;
  m.acc_stderr = binomial_stderr(m.acc, m.n);
  m.perplexity = std::exp(-total_logprob / m.n);
  return m;
}

MultipleChoiceMetrics evaluate_multiple_choice(const std::vector<MultipleChoiceDoc>& docs,
                                               LanguageModel& model,
                                               const data::Tokenizer& tokenizer,
                                               const BatchOptions& options) {
  std::vector<LoglikRequest> requests;
  for (const MultipleChoiceDoc& doc : docs)
    for (const std::string& choice : doc.choices) requests.push_back({doc.context, " " + choice});
  std::vector<LoglikResult> results = loglikelihood(model, tokenizer, requests, options);
  std::vector<std::vector<double>> choice_logprobs;
  size_t next = 0;
  for (const MultipleChoiceDoc& doc : docs) {
    std::vector<double> ll;
    for (size_t c = 0; c < doc.choices.size(); c++) ll.push_back(results[next++].logprob);
    choice_logprobs.push_back(std::move(ll));
  }
  return multiple_choice_metrics(docs, choice_logprobs);
}

LambadaMetrics evaluate_lambada(const std::vector<LambadaDoc>& docs, LanguageModel& model,
                                const data::Tokenizer& tokenizer, const BatchOptions& options) {
  std::vector<LoglikRequest> requests;
  for (const LambadaDoc& doc : docs) requests.push_back({doc.context, doc.target});
  return lambada_metrics(loglikelihood(model, tokenizer, requests, options));
}

namespace {

template <class Doc>
void keep_first(std::vector<Doc>& docs, int64_t limit) {
  if (limit >= 0 && static_cast<int64_t>(docs.size()) > limit) docs.resize(limit);
}

}  // namespace

nlohmann::json run_lm_task(const LmTaskInfo& task, const std::string& data_dir,
                           LanguageModel& model, const data::Tokenizer& tokenizer,
                           const LmEvalOptions& options) {
  const std::string path = (std::filesystem::path(data_dir) / task.file_name).string();
  if (options.limit == 0)
    fail("task ", task.name, ": --limit 0 leaves no documents to evaluate (-1 evaluates all)");
  if (!std::filesystem::exists(path))
    fail("task ", task.name, " needs ", path, ", which does not exist (export the data set ",
         "as JSONL there, or leave ", task.name, " out of --tasks)");
  auto start = std::chrono::steady_clock::now();
  BatchOptions batch = options.batch;
  batch.label = task.name;
  nlohmann::json metrics;
  int64_t n = 0;
  if (task.format == TaskFormat::Lambada) {
    std::vector<LambadaDoc> docs = read_lambada(path);
    keep_first(docs, options.limit);
    LambadaMetrics m = evaluate_lambada(docs, model, tokenizer, batch);
    n = m.n;
    metrics = {{"acc", m.acc}, {"acc_stderr", m.acc_stderr}, {"perplexity", m.perplexity}};
  } else {
    std::vector<MultipleChoiceDoc> docs = read_multiple_choice(task.name, path);
    keep_first(docs, options.limit);
    MultipleChoiceMetrics m = evaluate_multiple_choice(docs, model, tokenizer, batch);
    n = m.n;
    metrics = {{"acc", m.acc},
               {"acc_stderr", m.acc_stderr},
               {"acc_norm", m.acc_norm},
               {"acc_norm_stderr", m.acc_norm_stderr}};
  }
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return {{"task", task.name},       {"title", task.title},
          {"file", path},            {"n", n},
          {"metrics", metrics},      {"paper_metric", task.paper_metric},
          {"seconds", seconds}};
}

}  // namespace hla::eval
