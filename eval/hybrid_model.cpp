// LanguageModel adapter for HybridLM checkpoints (see hybrid_model.h).
#include "eval/hybrid_model.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "nn/decode.h"
#include "nn/model.h"
#include "nn/weights.h"

namespace hla::eval {
namespace {

class HybridLanguageModel : public LanguageModel {
 public:
  HybridLanguageModel(const std::string& dir, Device device, int max_length, DType compute_dtype)
      : config_(ModelConfig::load(dir + "/" + kModelConfigFile)), max_length_(max_length), device_(device) {
    model_ = make_model(config_, 0, device, compute_dtype);
    load_model_weights(dir, model_->parameters());
    std::ostringstream os;
    os << "hybrid-lm " << config_.model_type << " " << config_.pattern() << ", "
       << count_parameters(model_->parameters()) << " parameters, from " << dir;
    describe_ = os.str();
  }

  int max_length() const override { return max_length_; }
  int position_limit() const override { return 0; }  // linear mixers and RoPE attention only
  int vocab_size() const override { return config_.vocab_size; }
  std::string describe() const override { return describe_; }

  std::vector<std::vector<TargetScore>> score(const std::vector<ScoreRequest>& batch) override {
    std::vector<std::vector<int32_t>> seqs;
    for (const auto& r : batch) seqs.push_back(r.tokens);
    std::vector<std::vector<float>> logp = log_softmax_rows(seqs);  // per request: (T, V) flattened
    std::vector<std::vector<TargetScore>> out(batch.size());
    int64_t V = config_.vocab_size;
    for (size_t b = 0; b < batch.size(); b++) {
      for (size_t i = 0; i < batch[b].positions.size(); i++) {
        const float* row = logp[b].data() + batch[b].positions[i] * V;
        int32_t target = batch[b].targets[i];
        int32_t best = static_cast<int32_t>(std::max_element(row, row + V) - row);  // ties: lowest id
        out[b].push_back({row[target], best == target});
      }
    }
    return out;
  }

  // Greedy decoding on the decoding state (nn/decode.h): one prefill of every prompt, then one
  // batched step per new token for all sequences still running. A sequence that has stopped
  // keeps being fed (its token 0 is never read) so that the batch stays whole.
  std::vector<std::vector<int32_t>> generate(const std::vector<GenerateRequest>& batch) override {
    std::vector<std::vector<int32_t>> prompts, out(batch.size());
    int64_t longest_prompt = 0;
    int max_new_tokens = 0;
    for (const GenerateRequest& r : batch) {
      prompts.push_back(r.context);
      longest_prompt = std::max<int64_t>(longest_prompt, static_cast<int64_t>(r.context.size()));
      max_new_tokens = std::max(max_new_tokens, r.max_new_tokens);
    }
    const int64_t max_context = longest_prompt + max_new_tokens;  // every sequence steps as long as the longest
    NoGradGuard no_grad;
    std::unique_ptr<Decoder> decoder = make_decoder(*model_, max_context);
    Tensor logits = decoder->prefill(prompts);  // (B, V)
    std::vector<bool> running(batch.size(), true);
    for (int n = 0; n < max_new_tokens; n++) {
      const Tensor z = logits.to(Device::CPU);  // (B, V) fp32
      std::vector<int32_t> next(batch.size(), 0);
      bool any_running = false;
      for (size_t b = 0; b < batch.size(); b++) {
        if (!running[b] || n >= batch[b].max_new_tokens) {
          running[b] = false;
          continue;
        }
        const float* row = z.data<float>() + b * config_.vocab_size;
        const int32_t width = argmax_width(batch[b], config_.vocab_size);
        next[b] = static_cast<int32_t>(std::max_element(row, row + width) - row);  // ties: lowest id
        const auto& stops = batch[b].stop_tokens;
        if (std::find(stops.begin(), stops.end(), next[b]) != stops.end()) {
          running[b] = false;
          continue;
        }
        out[b].push_back(next[b]);
        any_running = true;
      }
      if (!any_running || n + 1 == max_new_tokens) break;
      logits = decoder->step(next);
    }
    return out;
  }

 private:
  // One forward over the right-padded batch; returns log-softmax rows (T_b, V) per sequence.
  std::vector<std::vector<float>> log_softmax_rows(const std::vector<std::vector<int32_t>>& seqs) {
    size_t T = 0;
    for (const auto& s : seqs) T = std::max(T, s.size());
    int64_t B = static_cast<int64_t>(seqs.size()), V = config_.vocab_size;
    std::vector<int32_t> ids(B * T, 0);
    for (int64_t b = 0; b < B; b++) std::copy(seqs[b].begin(), seqs[b].end(), ids.begin() + b * T);
    NoGradGuard no_grad;
    Tensor logits = model_->logits(Tensor::from_i32(ids, {B, static_cast<int64_t>(T)}).to(device_))
                        .value().to(Device::CPU).to(DType::F32);  // (B, T, V)
    const float* z = logits.data<float>();
    std::vector<std::vector<float>> out(B);
    for (int64_t b = 0; b < B; b++) {
      out[b].resize(seqs[b].size() * V);
      for (size_t t = 0; t < seqs[b].size(); t++) {
        const float* row = z + (b * T + t) * V;
        float m = *std::max_element(row, row + V);
        double s = 0;
        for (int64_t v = 0; v < V; v++) s += std::exp(static_cast<double>(row[v] - m));
        float lse = m + static_cast<float>(std::log(s));
        for (int64_t v = 0; v < V; v++) out[b][t * V + v] = row[v] - lse;
      }
    }
    return out;
  }

  ModelConfig config_;
  int max_length_;
  Device device_;
  std::unique_ptr<TrainableModel> model_;
  std::string describe_;
};

}  // namespace

std::unique_ptr<LanguageModel> load_hybrid_model(const std::string& checkpoint_dir, Device device, int max_length,
                                                 DType compute_dtype) {
  return std::make_unique<HybridLanguageModel>(checkpoint_dir, device, max_length, compute_dtype);
}

}  // namespace hla::eval
