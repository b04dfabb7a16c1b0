// Log-likelihood scoring the lm-evaluation-harness way, on any LanguageModel.
//
// A (context, continuation) string pair is tokenised with the encode-pair rule of the harness
// HF adapter: trailing whitespace of the context moves to the continuation, the pair is
// encoded whole, and the continuation tokens are the tail after len(encode(context)) tokens.
// The model input is (ctx + cont)[-(max_length + 1):][:-1] (left truncation), and the
// continuation's log-probs are read at its last len(cont) positions.
#pragma once
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "eval/lm.h"

namespace hla::eval {

struct TokenPair {
  std::vector<int32_t> context;       // (Tc) never empty: an empty context is [eos]
  std::vector<int32_t> continuation;  // (Tn)
};

TokenPair encode_pair(const data::Tokenizer& tokenizer, const std::string& context,
                      const std::string& continuation);

// The model request that scores `pair.continuation`; fails when the continuation alone does
// not fit into max_length.
ScoreRequest continuation_request(const TokenPair& pair, int max_length);

struct BatchOptions {
  int batch_size = 32;
  bool show_progress = true;
  std::string label = "score";  // progress bar label
};

// Runs requests through model.score in batches of similar length (longest first) and returns
// the answers in the order of `requests`.
std::vector<std::vector<TargetScore>> score_in_batches(LanguageModel& model,
                                                       const std::vector<ScoreRequest>& requests,
                                                       const BatchOptions& options);

// The same for greedy generation: batches of similar prompt length, answers in request order.
std::vector<std::vector<int32_t>> generate_in_batches(LanguageModel& model,
                                                      const std::vector<GenerateRequest>& requests,
                                                      const BatchOptions& options);

struct LoglikRequest {
  std::string context;
  std::string continuation;
};

struct LoglikResult {
  double logprob = 0;      // sum over the continuation tokens
  bool is_greedy = false;  // every continuation token is the argmax
};

std::vector<LoglikResult> loglikelihood(LanguageModel& model, const data::Tokenizer& tokenizer,
                                        const std::vector<LoglikRequest>& requests,
                                        const BatchOptions& options);

}  // namespace hla::eval
