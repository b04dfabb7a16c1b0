// The training loop: micro-batches -> loss -> backward -> clip -> optimizer step, with
// per-step console lines and JSONL metrics, periodic validation and checkpoints, and a
// bit-exact resume (weights, optimizer state, step and data position all come back).
//
// Gradient accumulation weights micro-batch i by valid_i / sum(valid), where valid counts the
// targets that carry loss, so the gradient equals that of one batch holding all micro-batches
// (the loss is a mean over valid targets) even when micro-batches differ in valid targets.
#pragma once
#include <cmath>
#include <cstdint>
#include <iosfwd>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "nn/config.h"
#include "nn/module.h"
#include "train/data_source.h"
#include "train/optim.h"
#include "train/run_config.h"
#include "train/schedule.h"

namespace hla {

struct TrainerOptions {
  OptimConfig optim;
  ScheduleConfig schedule;  // total_steps = the run's length
  double clip = 1.0;
  int64_t grad_accum = 1;
  int64_t log_every = 1;
  int64_t val_every = 0;  // 0: at the end only
  int64_t val_batches = 8;
  int64_t save_every = 0;  // 0: at the end only
  std::string out_dir;     // metrics.jsonl and checkpoint/; empty: neither is written
  bool mqar = false;       // validation also reports MQAR accuracy
  nlohmann::json model_config;  // config.json of checkpoints
  nlohmann::json settings;      // kept in trainer_state.json
  double flops_per_token = 0;   // model FLOPs per trained token (model_flops_per_token); 0: not reported
};

struct StepMetrics {
  int64_t step = 0;  // updates done, this one included
  double loss = 0, lr = 0, grad_norm = 0, ms = 0, tokens_per_s = 0;
  int64_t tokens = 0;  // input tokens of this update
  double peak_gib = 0;  // on the GPU: the allocator's high-water mark so far (GiB), else 0
  double tflops = 0;    // model TFLOP/s = flops_per_token * tokens_per_s (0 when not reported)
  nlohmann::json to_json() const;
};

struct ValMetrics {
  double loss = 0;
  double accuracy = std::numeric_limits<double>::quiet_NaN();  // MQAR only
  int64_t examples = 0;
  nlohmann::json to_json() const;
};

// Forward + backward over micro-batches (weights as above); returns the mean loss.
double accumulate_gradients(TrainableModel& model, const std::vector<TrainBatch>& micro_batches);

// Token-weighted mean loss over `batches` batches, and for MQAR the accuracy of the argmax at
// the labelled positions (mean per example, then over examples: eval.md 2.1).
ValMetrics evaluate(TrainableModel& model, BatchSource& source, int64_t batches, bool mqar);

class Trainer {
 public:
  Trainer(TrainerOptions options, TrainableModel& model, BatchSource& train, BatchSource* val,
          std::ostream& out);

  // Stops at the first update whose loss or gradient norm is NaN or Inf, naming the first
  // parameter or gradient that holds one.
  StepMetrics train_step();
  ValMetrics validate();  // from the start of the validation source every time
  void save(const std::string& dir) const;
  // Warns (on `out`) about every setting that differs from the checkpoint's, with both values.
  void resume(const std::string& dir);
  // Trains from the current step to schedule.total_steps; returns the last validation.
  ValMetrics run();

  int64_t step() const { return step_; }
  const Optimizer& optimizer() const { return optimizer_; }
  std::string checkpoint_dir() const { return options_.out_dir + "/checkpoint"; }

 private:
  void log_step(const StepMetrics& m) const;
  void append_metrics(const nlohmann::json& line) const;
  nlohmann::json state_json() const;
  std::string divergence_report(const StepMetrics& m) const;
  void warn_changed_settings(const nlohmann::json& saved) const;

  TrainerOptions options_;
  TrainableModel& model_;
  ParameterList params_;
  BatchSource& train_;
  BatchSource* val_;
  nlohmann::json val_start_;
  std::ostream& out_;
  Optimizer optimizer_;
  int64_t step_ = 0;
  int64_t tokens_seen_ = 0;
  StepMetrics last_step_;
  ValMetrics last_val_;
  std::string resumed_from_;  // the checkpoint resume() loaded, and its step
  int64_t resumed_at_ = -1;
};

// Model FLOPs per trained token as targets.md counts them: 6 N (a multiply-add per parameter,
// forward and backward) plus, per softmax-attention layer, 6 T d for QK^T and PV over the causal
// half of the T x T scores (a sliding window w < T: 12 w d). Linear mixers count through N only.
double model_flops_per_token(const ModelConfig& config, int64_t num_parameters, int64_t seq_len);

// The trainer's options for a run: its settings, the model it trains (whose config.json the
// checkpoints keep and whose FLOPs per token the step lines report), and whether its data is
// MQAR (validation then reports accuracy too).
TrainerOptions trainer_options(const RunConfig& config, const ModelConfig& model_config, int64_t num_parameters,
                               bool mqar);

// `hla train`: builds data, model and trainer from the settings, prints the start-up table,
// trains (resuming from `resume_dir` when not empty) and returns the final validation.
ValMetrics run_training(const RunConfig& config, const std::string& resume_dir, std::ostream& out);

}  // namespace hla
