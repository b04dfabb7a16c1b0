// The one model interface the evaluator talks to.
//
// Everything in eval/ (LM tasks, RULER, MQAR, perplexity) needs only two calls:
//   score    - run the model over a token sequence and read, at chosen positions, the log-prob
//              of a given next token and whether that token is the argmax there. This is all
//              that log-likelihood scoring (sum of continuation log-probs, is_greedy),
//              perplexity and MQAR accuracy need, and it never ships a (T, V) row back.
//   generate - greedy decoding from a prompt (RULER).
// Both take a batch of requests so that a model can run them together (pad to the longest,
// one forward pass). The evaluator sorts requests by length, longest first, before batching.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace hla::eval {

// Run the model over `tokens` and, at each position p = positions[i], read the next-token
// distribution (the model output after seeing tokens[0..p]) for the token targets[i].
struct ScoreRequest {
  std::vector<int32_t> tokens;     // (T) model input, 1 <= T <= max_length()
  std::vector<int32_t> positions;  // (n) ascending, each in [0, T)
  std::vector<int32_t> targets;    // (n) token ids in [0, vocab_size())
};

struct TargetScore {
  double logprob = 0;      // log p(target | tokens[0..position])
  bool is_argmax = false;  // target == argmax of that distribution (ties: the lowest id)
};

// Greedy decoding: append argmax tokens to `context` until max_new_tokens are produced or a
// stop token is produced (the stop token is not returned).
struct GenerateRequest {
  std::vector<int32_t> context;  // (T) prompt; T + max_new_tokens <= position_limit() if set
  int max_new_tokens = 0;
  std::vector<int32_t> stop_tokens;
  // 0: the argmax runs over every id of the model; else over ids [0, vocab_limit) only, the ids
  // the tokenizer can decode (a model may have more rows than its tokenizer has tokens).
  int32_t vocab_limit = 0;
};

// The number of ids the argmax of `request` runs over in a model of `vocab_size` ids.
inline int32_t argmax_width(const GenerateRequest& request, int32_t vocab_size) {
  return request.vocab_limit > 0 && request.vocab_limit < vocab_size ? request.vocab_limit : vocab_size;
}

// Where generation spends its time, summed over every generate() call of a model: the prefill
// of the prompts (up to the first tokens on the host) and the steps after it. Models without a
// decoding state report zeros.
struct GenerateTimes {
  double prefill_seconds = 0, step_seconds = 0;
  int64_t prefill_tokens = 0, steps = 0;  // prompt tokens prefilled; batched steps run
};

class LanguageModel {
 public:
  virtual ~LanguageModel() = default;
  // The context the evaluator uses by default (the training seq_len, or --max-length): LM
  // requests are left-truncated to it; RULER and MQAR lengths beyond it run with a warning
  // when the model has no position limit.
  virtual int max_length() const = 0;
  // The longest sequence the model can read at all; 0: none (linear layers carry no positions,
  // attention uses RoPE, an n-gram reads any length).
  virtual int position_limit() const = 0;
  virtual int vocab_size() const = 0;
  virtual std::string describe() const = 0;  // one line for reports ("hybrid-lm 12M, ...")

  // result[b][i] answers batch[b].positions[i].
  virtual std::vector<std::vector<TargetScore>> score(const std::vector<ScoreRequest>& batch) = 0;
  // result[b] holds the generated tokens of batch[b].
  virtual std::vector<std::vector<int32_t>> generate(
      const std::vector<GenerateRequest>& batch) = 0;
  virtual GenerateTimes generate_times() const { return {}; }
};

}  // namespace hla::eval
