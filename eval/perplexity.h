// Held-out perplexity: per-token loss, perplexity, bits per byte and word perplexity.
//
// Input: text (.txt, .jsonl[.zst], a directory or glob: data/corpus.h) or token shards
// (.bin[.zst]: data/shard.h, documents split at eos). Each document is scored as
// [eos] + tokens, every token predicted once, in windows of `window` predictions; a window's
// input is the window_len tokens before its last prediction, the lm-evaluation-harness rolling
// windows (each full window sees only its own tokens; the last one sees up to window tokens).
//   loss = -sum log p / tokens     perplexity = exp(loss)
//   bits_per_byte = -sum log p / (ln 2 * UTF-8 bytes)     word_perplexity = exp(-sum / words)
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "eval/lm.h"
#include "eval/scoring.h"

namespace hla::eval {

// The requests that score `tokens` (a document without its leading eos) once each.
std::vector<ScoreRequest> rolling_window_requests(const std::vector<int32_t>& tokens,
                                                  int32_t eos, int window);

struct PerplexityOptions {
  int64_t max_documents = -1;  // -1: all
  int window = 0;              // 0: min(model.max_length(), 8192)
  BatchOptions batch;
};

struct PerplexityTotals {
  double logprob = 0;  // summed over every token
  int64_t tokens = 0, bytes = 0, words = 0, documents = 0;
};

PerplexityTotals score_documents(LanguageModel& model, const data::Tokenizer& tokenizer,
                                 const std::vector<std::string>& documents,
                                 const PerplexityOptions& options);

// {"file", "documents", "tokens", "bytes", "loss", "perplexity", "bits_per_byte",
//  "word_perplexity"}
nlohmann::json run_perplexity(LanguageModel& model, const data::Tokenizer& tokenizer,
                              const std::string& path, const PerplexityOptions& options);

}  // namespace hla::eval
