// Encode-pair tokenisation, left truncation and batched scoring (see scoring.h).
#include "eval/scoring.h"

#include <algorithm>
#include <numeric>

#include "eval/progress.h"
#include "eval/text_util.h"
#include "tensor/error.h"

namespace hla::eval {

TokenPair encode_pair(const data::Tokenizer& tokenizer, const std::string& context,
                      const std::string& continuation) {
  std::string ctx = rstrip(context);
  std::string cont = context.substr(ctx.size()) + continuation;
  // An empty (or all-whitespace) context gets the eos token as its only token, so the first
  // continuation token is still predicted from something.
  if (ctx.empty()) return {{tokenizer.eos_id()}, tokenizer.encode(cont)};
  std::vector<int32_t> whole = tokenizer.encode(ctx + cont);
  std::vector<int32_t> ctx_tokens = tokenizer.encode(ctx);
  size_t split = std::min(ctx_tokens.size(), whole.size());
  return {ctx_tokens, std::vector<int32_t>(whole.begin() + split, whole.end())};
}

ScoreRequest continuation_request(const TokenPair& pair, int max_length) {
  const int n = static_cast<int>(pair.continuation.size());
  HLA_CHECK(n >= 1, "a continuation must have at least one token");
  HLA_CHECK(n <= max_length, "a continuation of ", n, " tokens does not fit the model's ", "context of ", max_length,
            " tokens (hla eval --max-length, or [eval] max_length in a sweep, sets the context; its default is ",
            "the training seq_len)");
  // whole = ctx + cont; input = whole[-(max_length + 1):][:-1]
  std::vector<int32_t> whole = pair.context;
  whole.insert(whole.end(), pair.continuation.begin(), pair.continuation.end());
  size_t begin = whole.size() > static_cast<size_t>(max_length) + 1 ? whole.size() - max_length - 1 : 0;
  ScoreRequest request;
  request.tokens.assign(whole.begin() + begin, whole.end() - 1);
  const int T = static_cast<int>(request.tokens.size());
  for (int i = 0; i < n; i++) request.positions.push_back(T - n + i);
  request.targets = pair.continuation;
  return request;
}

namespace {

size_t token_count(const ScoreRequest& r) { return r.tokens.size(); }
size_t token_count(const GenerateRequest& r) { return r.context.size(); }

// Calls run(batch) on batches of at most batch_size requests, longest first, and returns the
// answers in request order.
template <class Request, class Answer, class Run>
std::vector<Answer> run_in_batches(const std::vector<Request>& requests,
                                   const BatchOptions& options, Run run) {
  HLA_CHECK(options.batch_size >= 1, "batch size must be positive, got ", options.batch_size);
  std::vector<size_t> order(requests.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return token_count(requests[a]) > token_count(requests[b]);
  });
  std::vector<Answer> results(requests.size());
  ProgressBar progress(options.label, static_cast<int64_t>(requests.size()), options.show_progress);
  for (size_t start = 0; start < order.size(); start += options.batch_size) {
    size_t end = std::min(order.size(), start + options.batch_size);
    std::vector<Request> batch;
    for (size_t i = start; i < end; i++) batch.push_back(requests[order[i]]);
    std::vector<Answer> answers = run(batch);
    HLA_CHECK(answers.size() == batch.size(), "the model returned ", answers.size(),
              " answers for ", batch.size(), " requests");
    for (size_t i = start; i < end; i++) results[order[i]] = std::move(answers[i - start]);
    progress.advance(static_cast<int64_t>(end - start));
  }
  progress.finish();
  return results;
}

}  // namespace

std::vector<std::vector<TargetScore>> score_in_batches(LanguageModel& model,
                                                       const std::vector<ScoreRequest>& requests,
                                                       const BatchOptions& options) {
  auto results = run_in_batches<ScoreRequest, std::vector<TargetScore>>(
      requests, options, [&](const std::vector<ScoreRequest>& batch) { return model.score(batch); });
  for (size_t i = 0; i < requests.size(); i++)
    HLA_CHECK(results[i].size() == requests[i].positions.size(),
              "model.score returned ", results[i].size(), " target scores for ",
              requests[i].positions.size(), " positions");
  return results;
}

std::vector<std::vector<int32_t>> generate_in_batches(LanguageModel& model,
                                                      const std::vector<GenerateRequest>& requests,
                                                      const BatchOptions& options) {
  return run_in_batches<GenerateRequest, std::vector<int32_t>>(
      requests, options,
      [&](const std::vector<GenerateRequest>& batch) { return model.generate(batch); });
}

std::vector<LoglikResult> loglikelihood(LanguageModel& model, const data::Tokenizer& tokenizer,
                                        const std::vector<LoglikRequest>& requests,
                                        const BatchOptions& options) {
  std::vector<ScoreRequest> score_requests;
  score_requests.reserve(requests.size());
  for (const LoglikRequest& r : requests)
    score_requests.push_back(continuation_request(
        encode_pair(tokenizer, r.context, r.continuation), model.max_length()));
  std::vector<std::vector<TargetScore>> scores = score_in_batches(model, score_requests, options);
  std::vector<LoglikResult> results;
  results.reserve(requests.size());
  for (const auto& targets : scores) {
    LoglikResult r{0.0, true};
    for (const TargetScore& t : targets) {
      r.logprob += t.logprob;
      r.is_greedy = r.is_greedy && t.is_argmax;
    }
    results.push_back(r);
  }
  return results;
}

}  // namespace hla::eval
