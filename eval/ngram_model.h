// A token n-gram language model with Witten-Bell interpolation: an honest, cheap
// LanguageModel for running the whole evaluation pipeline end to end before a neural
// checkpoint exists (and a floor that any trained model should beat).
//
//   P_-1(w)       = 1 / V
//   P_k(w | h_k)  = (c(h_k, w) + T(h_k) P_{k-1}(w | h_{k-1})) / (c(h_k) + T(h_k))
// where h_k is the last k tokens, c counts training n-grams and T(h) is the number of distinct
// tokens seen after h; a history never seen falls back to P_{k-1}. k runs 0..order-1.
// Training documents are scored as [eos] + tokens, as the perplexity evaluation feeds them.
//
// Storage: per order, the (history, next) counts grouped by history in one flat array, with a
// hash map from the packed history to its group. A next-token distribution costs one lookup
// and one pass over V per order.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "data/tokenizer.h"
#include "eval/lm.h"

namespace hla::eval {

class NgramModel : public LanguageModel {
 public:
  NgramModel(int order, int vocab_size, int max_length = 1 << 20);

  // Counts every n-gram of one document (call for each, then finalize() once).
  void add_document(const std::vector<int32_t>& tokens);
  void finalize();

  // probs (V) = P(next | tokens[0..position]).
  void next_token_distribution(const std::vector<int32_t>& tokens, int position,
                               std::vector<double>& probs) const;

  int max_length() const override { return max_length_; }
  int position_limit() const override { return 0; }
  int vocab_size() const override { return vocab_size_; }
  std::string describe() const override;
  std::vector<std::vector<TargetScore>> score(const std::vector<ScoreRequest>& batch) override;
  std::vector<std::vector<int32_t>> generate(const std::vector<GenerateRequest>& batch) override;

 private:
  struct History {
    uint32_t begin = 0, end = 0;  // range in next_tokens_ / next_counts_
    uint64_t total = 0;           // c(h)
  };
  struct OrderTable {
    std::unordered_map<uint64_t, uint64_t> pending;  // packed (history, next) -> count
    std::unordered_map<uint64_t, History> histories;  // packed history -> group
    std::vector<int32_t> next_tokens;
    std::vector<uint32_t> next_counts;
  };
  uint64_t pack(const int32_t* tokens, int count) const;

  int order_, vocab_size_, max_length_, bits_;
  int64_t trained_tokens_ = 0;
  bool finalized_ = false;
  std::vector<OrderTable> tables_;  // tables_[k]: histories of k tokens
};

// Trains on the documents of a corpus file or directory (.txt, .jsonl[.zst]: data/corpus.h),
// tokenised with `tokenizer`; max_documents < 0 reads them all.
std::unique_ptr<NgramModel> train_ngram(const std::string& path, const data::Tokenizer& tokenizer,
                                        int order, int64_t max_documents = -1);

}  // namespace hla::eval
