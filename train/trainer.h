// The training loop: micro-batches -> loss -> backward -> clip -> optimizer step, with
// per-step console lines and JSONL metrics, periodic validation and checkpoints, and a
// bit-exact resume (weights, optimizer state, step and data position all come back).
//
// Gradient accumulation weights micro-batch i by valid_i / sum(valid), where valid counts the
// targets that carry loss, so the gradient equals that of one batch holding all micro-batches
// (the loss is a mean over valid targets) even when micro-batches differ in valid targets.
//
// No host read inside a step: the batches go up through a pinned staging ring (cuda/staging.h),
// the loss adds up in a device scalar, the gradient norm and the clip factor stay on the device
// (train/schedule.h; the optimizer multiplies each gradient by the factor as it reads it), and the
// host reads the window of steps since its last read in one copy, at the log lines (and before
// validation, saves, the end, and once at the end of warm-up). metrics.jsonl still gets one line
// per step, written then. run() does not let the GPU wait for that read: it queues the copy (into
// a pinned buffer, followed by an event, on hla's stream), queues the next update, and only then
// waits for the copy and reports the window, so the GPU runs that update while the host prints and
// loads batches. The copy runs in stream order after the window's steps and before the next one
// clears the records, so the device records need no second buffer. Where the next update must
// wait, the read is synchronous: before validation and saves (they see that step's parameters) and
// at the end. A window is timed on the GPU by CUDA events (its first step queued, its last step
// done), on the CPU by the host's clock at the same points; the time of validation or a save
// between two windows counts in neither.
// A step whose loss or gradient norm is not finite is kept on the device (its number and first
// non-finite gradient); its gradients and those of every later step are read as zeros, so the
// optimizer never applies a NaN or Inf, and the next read stops the run naming that step and every
// update that ran zeroed (the one queued while the window was read included).
//
// CUDA graph (options.cuda_graph, on the GPU in one process): after kEagerStepsBeforeGraph eager
// steps the whole update (forward and backward of every micro-batch, clipping, the optimizer,
// zero_grad) is captured once and replayed at every later update. What changes between updates
// comes from device memory, uploaded before each replay: the batches (one (2, grad_accum, B, T)
// tensor), the update's number and micro-batch weights (step_inputs_), and the optimizer's lr and
// bias corrections (Optimizer::stage); the step's loss and norm land in a fixed record, copied to
// the window's slot after the replay. An update with a micro-batch without targets runs eagerly; a
// new batch shape drops the graph and captures another. A capture that meets a host read or a
// blocking copy fails naming it (cuda/graph.h). With [data] documents = "reset" every update runs
// eagerly: its padded document rows (train/documents.h) change shape from update to update.
//
// [data] documents = "reset": each micro-batch's document fragments run as the rows of a
// right-padded batch (train/documents.h), so a step equals running every document alone; the
// step lines and the final summary show the padded tokens per real token (tokens and tok/s count
// the real tokens only).
//
// Data parallel (options.comm, one rank per GPU or per test thread): each rank trains on its
// share of every update's sequences (train/data_parallel.h), its gradients are summed over the
// ranks in buckets while the last backward runs (dist/grad_buckets.h), the loss record too, and
// clipping and the optimizer then run on identical reduced gradients on every rank. Rank 0
// alone prints, writes metrics.jsonl and checkpoints, and validates. Every rank reads its windows
// at the same steps and queues the next update before waiting for the read, as one process does
// (the collectives come in the same order on every rank either way).
#pragma once
#include <cmath>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dist/communicator.h"
#include "dist/grad_buckets.h"
#include "nn/config.h"
#include "nn/module.h"
#include "nn/ops/grad_norm_dims.h"
#include "train/data_parallel.h"
#include "train/data_source.h"
#include "train/optim.h"
#include "train/run_config.h"
#include "train/schedule.h"
#include "train/zero.h"

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
  dist::Communicator* comm = nullptr;  // data parallel over its ranks; null: this process alone
  double bucket_mb = 25;               // with comm: gradient bucket size (MB)
  bool zero = false;                   // with comm: ZeRO-1, the optimizer state sharded (train/zero.h)
  bool cuda_graph = true;              // on the GPU without comm: capture the step, replay it (above)
};

struct StepMetrics {
  int64_t step = 0;  // updates done, this one included
  double loss = 0, lr = 0, grad_norm = 0, ms = 0, tokens_per_s = 0;
  int64_t tokens = 0;  // input tokens of this update
  double peak_gib = 0;  // on the GPU: the allocator's high-water mark so far (GiB), else 0
  double tflops = 0;    // model TFLOP/s = flops_per_token * tokens_per_s (0 when not reported)
  // [data] documents = "reset": padded tokens per real token of the rows the update ran (data
  // parallel: of rank 0's rows; train/documents.h); NaN without document boundaries.
  double padding = std::numeric_limits<double>::quiet_NaN();
  nlohmann::json to_json() const;
};

struct ValMetrics {
  double loss = 0;
  double accuracy = std::numeric_limits<double>::quiet_NaN();  // MQAR only
  int64_t examples = 0;
  nlohmann::json to_json() const;
};

// Forward + backward over micro-batches (weights as above); adds the mean loss to
// records[slot][0] on the model's device (records: (W, kStepRecordSize) F64, nn/ops/grad_norm.h).
// Data parallel: total_valid counts the valid targets of the whole update over every rank (0: those
// of micro_batches), and the last backward reports each completed leaf to on_last_leaf_ready.
// Micro-batches with document boundaries run as their padded rows, or as they are where the model
// takes documents natively (train/documents.h); returns the padded tokens per real token of the
// rows run (0 without boundaries or padding).
double accumulate_gradients(TrainableModel& model, const std::vector<TrainBatch>& micro_batches, Tensor& records,
                            int64_t slot, int64_t total_valid = 0, const LeafReadyFn& on_last_leaf_ready = {});

// Tokens per second after warm-up: the window of steps read at or after step kWarmupSteps is
// the last one skipped; the tokens of the later windows over their time (CUDA events on the GPU,
// the host's clock on the CPU; a running mean, so 0 until one such window was read). mfu: model
// FLOPs per second over the H200's bf16 dense peak (times the ranks, data parallel), on the GPU
// only (0 on the CPU).
struct Throughput {
  static constexpr int64_t kWarmupSteps = 3;
  static constexpr double kPeakFlops = 989e12;  // H200 bf16 dense (targets.md)
  double tokens_per_s = 0, mfu = 0;
  int64_t after_step = 0;  // the steps it counts come after this one
};

// Token-weighted mean loss over `batches` batches, and for MQAR the accuracy of the argmax at
// the labelled positions (mean per example, then over examples: eval.md 2.1).
ValMetrics evaluate(TrainableModel& model, BatchSource& source, int64_t batches, bool mqar);

class Trainer {
 public:
  Trainer(TrainerOptions options, TrainableModel& model, BatchSource& train, BatchSource* val,
          std::ostream& out);
  ~Trainer();
  // Eager steps before the step is captured in a CUDA graph (the first builds the gradients, the
  // grad-norm table and every lazily made buffer; the second runs on them as every later one does).
  static constexpr int64_t kEagerStepsBeforeGraph = 2;

  // One update, read back at once (queue_step then read_steps): stops at an update whose loss
  // or gradient norm is NaN or Inf, naming the first parameter or gradient that holds one.
  StepMetrics train_step();
  // Queues one update on the model's device and reads nothing back; at most log_every of them
  // (the window) between two read_steps.
  void queue_step();
  // The queued steps' metrics in one host read, waited for at once (begin_read, then finish_read);
  // stops the run (naming the step, the first parameter or gradient holding a NaN or Inf, and which
  // updates were zeroed) when one of them had a non-finite loss or gradient norm, after handing the
  // steps before it to `good`.
  std::vector<StepMetrics> read_steps(const std::function<void(const StepMetrics&)>& good = {});
  const Throughput& throughput() const { return throughput_; }
  // The mean of StepMetrics::padding over the steps read so far (NaN: none had document rows).
  double mean_padding() const {
    return padding_steps_ > 0 ? padding_sum_ / double(padding_steps_) : std::numeric_limits<double>::quiet_NaN();
  }
  ValMetrics validate();  // from the start of the validation source every time
  void save(const std::string& dir) const;
  // Warns (on `out`) about every setting that differs from the checkpoint's, with both values.
  void resume(const std::string& dir);
  // Trains from the current step to schedule.total_steps; returns the last validation.
  ValMetrics run();

  int64_t step() const { return step_; }
  const Optimizer& optimizer() const { return optimizer_; }
  const ZeroShards* zero() const { return zero_.get(); }
  std::string checkpoint_dir() const { return options_.out_dir + "/checkpoint"; }

 private:
  void log_step(const StepMetrics& m) const;
  void append_metrics(const nlohmann::json& line) const;
  nlohmann::json state_json() const;
  std::string divergence_report(const StepMetrics& m, int64_t bad_tensor, int64_t last_queued) const;
  void report_step(const StepMetrics& m) const;
  bool due(int64_t n) const;
  bool reads_now() const;
  bool validates_now() const;
  bool saves_now() const;
  // read_steps in two halves, between which run() queues the next update: begin_read queues the
  // copy of the window's records and status (the window becomes reading_), finish_read waits for
  // it and reports reading_ as read_steps says.
  void begin_read();
  std::vector<StepMetrics> finish_read(const std::function<void(const StepMetrics&)>& good);
  bool writes() const { return !options_.comm || options_.comm->rank() == 0; }  // rank 0 prints and writes
  double reduced_gradients(const std::vector<TrainBatch>& update, int64_t slot);
  void stage_inputs(const std::vector<TrainBatch>& micro);
  void device_step(const std::vector<int64_t>& valid, const std::vector<Documents>& documents);
  bool graph_ready(const std::vector<TrainBatch>& micro) const;
  void replay_step();
  nlohmann::json data_parallel_json() const;

  struct QueuedStep {
    int64_t step = 0, tokens = 0;
    double lr = 0, peak_gib = 0;
    double padding = std::numeric_limits<double>::quiet_NaN();  // StepMetrics::padding
  };
  void warn_changed_settings(const nlohmann::json& saved) const;

  TrainerOptions options_;
  TrainableModel& model_;
  ParameterList params_;
  BatchSource& train_;
  BatchSource* val_;
  nlohmann::json val_start_;
  std::ostream& out_;
  std::unique_ptr<ZeroShards> zero_;  // with options.zero
  Optimizer optimizer_;
  RankShare share_;                             // with comm: of the latest update
  std::unique_ptr<dist::GradBuckets> buckets_;  // with comm
  int64_t step_ = 0;
  int64_t tokens_seen_ = 0;
  StepMetrics last_step_;
  // The window: one record per queued step, and the run's status (kStepStatusSize values), in
  // one device tensor so a read is one copy.
  int64_t window_ = 1;
  Tensor step_state_;  // (kStepStatusSize + window_ * kStepRecordSize) F64 on the model's device
  Tensor status_, records_;  // views of step_state_: (kStepStatusSize), (window_, kStepRecordSize)
  // The update's inputs and record at fixed addresses (a captured graph reads and writes them):
  Tensor batch_;        // (2, grad_accum, B, T) I32: ids of every micro-batch, then targets
  Tensor step_inputs_;  // (1 + grad_accum) F64: the update's number, then each micro-batch's loss weight
  Tensor step_number_;  // (1) view of step_inputs_
  Tensor step_record_;  // (1, kStepRecordSize) F64: the update's loss and grad norm
  struct CapturedStep;
  std::unique_ptr<CapturedStep> captured_;
  int64_t steps_run_ = 0;  // updates this trainer ran in one process (the graph's warm-up counts them)
  std::vector<QueuedStep> queued_;
  std::vector<QueuedStep> reading_;  // the window between begin_read and finish_read
  struct WindowRead;                 // the copy's host side and the windows' clocks (trainer.cpp)
  std::unique_ptr<WindowRead> read_;
  Throughput throughput_;
  double padding_sum_ = 0;    // mean_padding(): the sum of the read steps' padding, and their count
  int64_t padding_steps_ = 0;
  double timed_seconds_ = 0;  // after warm-up (throughput_)
  int64_t timed_tokens_ = 0;
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
// comm: data parallel over its ranks (hla train --gpus N; cli/cmd_train.cpp makes it); null: one process.
ValMetrics run_training(const RunConfig& config, const std::string& resume_dir, std::ostream& out,
                        dist::Communicator* comm = nullptr);

}  // namespace hla
