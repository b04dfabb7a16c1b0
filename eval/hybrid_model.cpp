// LanguageModel adapter for HybridLM checkpoints (see hybrid_model.h).
#include "eval/hybrid_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <sstream>

#include "nn/decode.h"
#include "nn/model.h"
#include "nn/ops/pick_tokens.h"
#include "nn/weights.h"

namespace hla::eval {
namespace {

class HybridLanguageModel : public LanguageModel {
 public:
  HybridLanguageModel(std::unique_ptr<TrainableModel> model, const ModelConfig& config, int max_length,
                      const std::string& source)
      : config_(config), max_length_(max_length), device_(model->device()), model_(std::move(model)) {
    std::ostringstream os;
    os << "hybrid-lm " << config_.model_type << " " << config_.pattern() << ", "
       << count_parameters(model_->parameters()) << " parameters, " << source;
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
  // batched step per new token for all sequences still running. The argmax runs on the model's
  // device (nn/ops/pick_tokens.h), so a step brings B token ids to the host, not B x V logits. A
  // sequence that has stopped keeps being fed (its token 0 is never read) so that the batch
  // stays whole.
  std::vector<std::vector<int32_t>> generate(const std::vector<GenerateRequest>& batch) override {
    using Clock = std::chrono::steady_clock;
    std::vector<std::vector<int32_t>> prompts, out(batch.size());
    std::vector<int32_t> widths;  // per request: the ids its argmax runs over
    int64_t longest_prompt = 0;
    int max_new_tokens = 0;
    for (const GenerateRequest& r : batch) {
      prompts.push_back(r.context);
      widths.push_back(argmax_width(r, config_.vocab_size));
      longest_prompt = std::max<int64_t>(longest_prompt, static_cast<int64_t>(r.context.size()));
      max_new_tokens = std::max(max_new_tokens, r.max_new_tokens);
      times_.prefill_tokens += static_cast<int64_t>(r.context.size());
    }
    const int64_t max_context = longest_prompt + max_new_tokens;  // every sequence steps as long as the longest
    NoGradGuard no_grad;
    auto start = Clock::now();
    std::unique_ptr<Decoder> decoder = make_decoder(*model_, max_context);
    const Tensor argmax_widths = Tensor::from_i32(widths, {static_cast<int64_t>(batch.size())}).to(device_);
    Tensor logits = decoder->prefill(prompts);  // (B, V)
    std::vector<bool> running(batch.size(), true);
    for (int n = 0; n < max_new_tokens; n++) {
      const Tensor best = argmax_rows(logits, argmax_widths).to(Device::CPU);  // (B) I32
      const auto now = Clock::now();
      (n == 0 ? times_.prefill_seconds : times_.step_seconds) += std::chrono::duration<double>(now - start).count();
      start = now;
      std::vector<int32_t> next(batch.size(), 0);
      bool any_running = false;
      for (size_t b = 0; b < batch.size(); b++) {
        if (!running[b] || n >= batch[b].max_new_tokens) {
          running[b] = false;
          continue;
        }
        next[b] = best.data<int32_t>()[b];
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
      times_.steps++;
    }
    return out;
  }

  GenerateTimes generate_times() const override { return times_; }

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
  GenerateTimes times_;
};

}  // namespace

std::unique_ptr<LanguageModel> load_hybrid_model(const std::string& checkpoint_dir, Device device, int max_length,
                                                 DType compute_dtype) {
  const ModelConfig config = ModelConfig::load(checkpoint_dir + "/" + kModelConfigFile);
  std::unique_ptr<TrainableModel> model = make_model(config, 0, device, compute_dtype);
  load_model_weights(checkpoint_dir, model->parameters());
  return std::make_unique<HybridLanguageModel>(std::move(model), config, max_length, "from " + checkpoint_dir);
}

std::unique_ptr<LanguageModel> wrap_hybrid_model(std::unique_ptr<TrainableModel> model, int max_length,
                                                 const std::string& source) {
  auto* stateful = dynamic_cast<StatefulModel*>(model.get());
  HLA_CHECK_INPUT(stateful, "wrap_hybrid_model: the model is not a HybridLM made by make_model");
  const ModelConfig config = stateful->config();
  return std::make_unique<HybridLanguageModel>(std::move(model), config, max_length, source);
}

}  // namespace hla::eval
