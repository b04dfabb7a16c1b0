// Witten-Bell interpolated token n-gram model (see ngram_model.h).
#include "eval/ngram_model.h"

#include <algorithm>
#include <cmath>

#include "data/corpus.h"
#include "tensor/error.h"

namespace hla::eval {

NgramModel::NgramModel(int order, int vocab_size, int max_length)
    : order_(order), vocab_size_(vocab_size), max_length_(max_length), bits_(1) {
  HLA_CHECK(order >= 1, "n-gram order must be at least 1, got ", order);
  HLA_CHECK(vocab_size >= 2, "n-gram vocabulary must have at least 2 tokens, got ", vocab_size);
  while ((int64_t{1} << bits_) < vocab_size) bits_++;
  HLA_CHECK(order * bits_ <= 64, "n-gram order ", order, " is too high for a vocabulary of ",
            vocab_size, " (", bits_, " bits per token; order * bits must be <= 64)");
  tables_.resize(order);
}

uint64_t NgramModel::pack(const int32_t* tokens, int count) const {
  uint64_t key = 0;
  for (int i = 0; i < count; i++) key = (key << bits_) | static_cast<uint64_t>(tokens[i]);
  return key;
}

void NgramModel::add_document(const std::vector<int32_t>& tokens) {
  HLA_CHECK(!finalized_, "add_document after finalize");
  const int T = static_cast<int>(tokens.size());
  for (int i = 0; i < T; i++) {
    HLA_CHECK(tokens[i] >= 0 && tokens[i] < vocab_size_, "token ", tokens[i],
              " is outside the vocabulary of ", vocab_size_);
    // the n-gram ending at token i has k history tokens and the next token tokens[i]
    for (int k = 0; k < order_ && k <= i; k++) tables_[k].pending[pack(&tokens[i - k], k + 1)]++;
  }
  trained_tokens_ += T;
}

void NgramModel::finalize() {
  for (OrderTable& table : tables_) {
    std::vector<std::pair<uint64_t, uint64_t>> counts(table.pending.begin(), table.pending.end());
    table.pending = {};
    std::sort(counts.begin(), counts.end());  // groups each history's next tokens together
    const uint64_t token_mask = (uint64_t{1} << bits_) - 1;
    for (const auto& [key, count] : counts) {
      History& h = table.histories[key >> bits_];
      if (h.end == 0) h.begin = h.end = static_cast<uint32_t>(table.next_tokens.size());
      table.next_tokens.push_back(static_cast<int32_t>(key & token_mask));
      table.next_counts.push_back(static_cast<uint32_t>(count));
      h.end++;
      h.total += count;
    }
  }
  finalized_ = true;
}

void NgramModel::next_token_distribution(const std::vector<int32_t>& tokens, int position,
                                         std::vector<double>& probs) const {
  HLA_CHECK(finalized_, "n-gram model used before finalize()");
  probs.assign(vocab_size_, 1.0 / vocab_size_);
  for (int k = 0; k < order_ && k <= position + 1; k++) {
    const OrderTable& table = tables_[k];
    auto it = table.histories.find(pack(tokens.data() + (position + 1 - k), k));
    if (it == table.histories.end()) break;  // longer histories are unseen too
    const History& h = it->second;
    const double types = h.end - h.begin;
    const double denom = static_cast<double>(h.total) + types;
    const double keep = types / denom;
    for (double& p : probs) p *= keep;
    for (uint32_t j = h.begin; j < h.end; j++)
      probs[table.next_tokens[j]] += table.next_counts[j] / denom;
  }
}

std::string NgramModel::describe() const {
  return "ngram order " + std::to_string(order_) + " (Witten-Bell), vocab " +
         std::to_string(vocab_size_) + ", trained on " + std::to_string(trained_tokens_) +
         " tokens";
}

static int first_argmax(const std::vector<double>& probs) {
  return static_cast<int>(std::max_element(probs.begin(), probs.end()) - probs.begin());
}

std::vector<std::vector<TargetScore>> NgramModel::score(const std::vector<ScoreRequest>& batch) {
  std::vector<std::vector<TargetScore>> results;
  std::vector<double> probs;  // (V)
  for (const ScoreRequest& request : batch) {
    std::vector<TargetScore> scores;
    for (size_t i = 0; i < request.positions.size(); i++) {
      next_token_distribution(request.tokens, request.positions[i], probs);
      const int32_t target = request.targets[i];
      scores.push_back({std::log(probs[target]), first_argmax(probs) == target});
    }
    results.push_back(std::move(scores));
  }
  return results;
}

std::vector<std::vector<int32_t>> NgramModel::generate(const std::vector<GenerateRequest>& batch) {
  std::vector<std::vector<int32_t>> results;
  std::vector<double> probs;  // (V)
  for (const GenerateRequest& request : batch) {
    std::vector<int32_t> tokens = request.context;
    std::vector<int32_t> generated;
    for (int step = 0; step < request.max_new_tokens; step++) {
      next_token_distribution(tokens, static_cast<int>(tokens.size()) - 1, probs);
      probs.resize(argmax_width(request, static_cast<int32_t>(probs.size())));
      const int32_t next = first_argmax(probs);
      if (std::count(request.stop_tokens.begin(), request.stop_tokens.end(), next)) break;
      tokens.push_back(next);
      generated.push_back(next);
    }
    results.push_back(std::move(generated));
  }
  return results;
}

std::unique_ptr<NgramModel> train_ngram(const std::string& path, const data::Tokenizer& tokenizer,
                                        int order, int64_t max_documents) {
  auto model = std::make_unique<NgramModel>(order, tokenizer.vocab_size());
  data::CorpusReader reader(data::expand_corpus_inputs({path}), {});
  std::string doc;
  for (int64_t n = 0; (max_documents < 0 || n < max_documents) && reader.next(doc); n++) {
    std::vector<int32_t> tokens = {tokenizer.eos_id()};
    std::vector<int32_t> body = tokenizer.encode(doc);
    tokens.insert(tokens.end(), body.begin(), body.end());
    model->add_document(tokens);
  }
  model->finalize();
  return model;
}

}  // namespace hla::eval
