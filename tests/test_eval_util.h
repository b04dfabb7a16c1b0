// Test doubles for the evaluator tests: a byte tokenizer (ids 0..255 = bytes, eos 256,
// pad 257, like data's byte tokenizer) and a LanguageModel whose next-token log-probs are
// given by a function, so expected scores can be computed by hand.
#pragma once
#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "eval/lm.h"
#include "nn/config.h"
#include "nn/model.h"
#include "nn/weights.h"

namespace hla::eval::testing {

class TestByteTokenizer : public data::Tokenizer {
 public:
  std::vector<int32_t> encode(std::string_view text) const override {
    std::vector<int32_t> ids;
    for (unsigned char c : text) ids.push_back(c);
    return ids;
  }
  std::string decode(const std::vector<int32_t>& ids) const override {
    std::string text;
    for (int32_t id : ids)
      if (id < 256) text.push_back(static_cast<char>(id));
    return text;
  }
  int32_t vocab_size() const override { return 258; }
  int32_t eos_id() const override { return 256; }
  int32_t pad_id() const override { return 257; }
  std::string name() const override { return "test-byte"; }
};

// log p(next | prefix) = logprob(prefix, next); the values need not be normalised, the
// argmax is taken over them (first maximum wins). Records every batch it is given.
class FunctionModel : public LanguageModel {
 public:
  using LogprobFn = std::function<double(const std::vector<int32_t>& prefix, int32_t next)>;
  FunctionModel(LogprobFn fn, int max_length = 1 << 16, int vocab = 258, int position_limit = 0)
      : fn_(std::move(fn)), max_length_(max_length), vocab_(vocab), position_limit_(position_limit) {}

  int max_length() const override { return max_length_; }
  int position_limit() const override { return position_limit_; }
  int vocab_size() const override { return vocab_; }
  std::string describe() const override { return "function model"; }

  std::vector<std::vector<TargetScore>> score(const std::vector<ScoreRequest>& batch) override {
    batches.push_back(batch);
    std::vector<std::vector<TargetScore>> out;
    for (const ScoreRequest& r : batch) {
      std::vector<TargetScore> scores;
      for (size_t i = 0; i < r.positions.size(); i++) {
        std::vector<int32_t> prefix(r.tokens.begin(), r.tokens.begin() + r.positions[i] + 1);
        scores.push_back({fn_(prefix, r.targets[i]), argmax(prefix) == r.targets[i]});
      }
      out.push_back(scores);
    }
    return out;
  }

  std::vector<std::vector<int32_t>> generate(const std::vector<GenerateRequest>& batch) override {
    std::vector<std::vector<int32_t>> out;
    for (const GenerateRequest& r : batch) {
      std::vector<int32_t> tokens = r.context, generated;
      for (int step = 0; step < r.max_new_tokens; step++) {
        int32_t next = argmax(tokens);
        if (std::count(r.stop_tokens.begin(), r.stop_tokens.end(), next)) break;
        tokens.push_back(next);
        generated.push_back(next);
      }
      out.push_back(generated);
    }
    return out;
  }

  std::vector<std::vector<ScoreRequest>> batches;

 private:
  int32_t argmax(const std::vector<int32_t>& prefix) const {
    int32_t best = 0;
    for (int32_t t = 1; t < vocab_; t++)
      if (fn_(prefix, t) > fn_(prefix, best)) best = t;
    return best;
  }
  LogprobFn fn_;
  int max_length_, vocab_, position_limit_;
};

// A small HybridLM config: 2 heads, an MLP of 1.5 x hidden, the hybrid pattern given.
inline ModelConfig small_model_config(const std::string& model_type, int hidden, int layers, int vocab,
                                      const std::string& hybrid) {
  ModelConfig c;
  c.model_type = model_type;
  c.hidden_size = hidden, c.intermediate_size = hidden * 3 / 2;
  c.num_hidden_layers = layers, c.num_heads = 2;
  c.vocab_size = vocab;
  c.set_hybrid(hybrid);
  return c;
}

// config.json + model.safetensors of `config` with seeded random weights: a checkpoint `hla eval` loads.
inline void write_checkpoint(const std::string& dir, const ModelConfig& config, uint64_t seed = 1) {
  config.save(dir + "/" + kModelConfigFile);
  save_model_weights(dir, make_model(config, seed)->parameters());
}

inline std::vector<int32_t> bytes(const std::string& s) {
  std::vector<int32_t> ids;
  for (unsigned char c : s) ids.push_back(c);
  return ids;
}

}  // namespace hla::eval::testing
