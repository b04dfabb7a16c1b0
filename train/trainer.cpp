// The training loop, validation, checkpoints and resume; run_training wires settings to it.
#include "train/trainer.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "nn/model.h"
#include "nn/ops/cross_entropy.h"
#include "nn/ops/grad_norm.h"
#include "tensor/atomic_file.h"
#include "tensor/dispatch.h"
#include "tensor/json.h"
#include "train/checkpoint.h"
#include "train/documents.h"
#include "train/upload.h"
#ifdef HLA_CUDA
#include "cuda/graph.h"
#include "cuda/runtime.h"
#endif

namespace fs = std::filesystem;

namespace hla {

namespace {

nlohmann::json finite_or_null(double x) { return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(); }

std::string format(const char* fmt, double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, value);
  return buf;
}

// state[key], an integer >= 0; errors name the file and the field.
int64_t count_field(const nlohmann::json& state, const std::string& path, const char* key) {
  const auto it = state.find(key);
  if (it == state.end() || !it->is_number_integer() || it->get<int64_t>() < 0)
    fail(path, ": field '", key, "' must be an integer >= 0, got ", it == state.end() ? "nothing" : json_excerpt(*it));
  return it->get<int64_t>();
}

// Prints what recover_checkpoint did about interrupted saves of `dir`.
void report_recovery(const std::string& dir, std::ostream& out) {
  for (const std::string& note : recover_checkpoint(dir)) out << "checkpoint: " << note << "\n";
}

// Appends `line` to the file at `path`; a write or close that fails (a full disk) stops the run
// with the file's name and the errno text.
void append_line(const std::string& path, const std::string& line) {
  std::FILE* f = std::fopen(path.c_str(), "a");
  if (!f) fail("cannot open ", path, " to append to it (", std::strerror(errno), ")");
  errno = 0;
  const bool written = std::fwrite(line.data(), 1, line.size(), f) == line.size();
  const int write_errno = errno;
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed)
    fail("cannot append to ", path, " (", std::strerror(written ? errno : write_errno), ")");
}

// Per example, the fraction of labelled positions whose argmax is the label; summed over the
// batch. logits: (B, T, V), targets: (B, T).
template <class T>
double mqar_correct_fraction_sum(const T* logits, const int32_t* targets, int64_t B, int64_t Tlen,
                                 int64_t V) {
  double sum = 0;
  for (int64_t b = 0; b < B; b++) {
    int64_t labelled = 0, correct = 0;
    for (int64_t t = 0; t < Tlen; t++) {
      int32_t label = targets[b * Tlen + t];
      if (label == kIgnoreIndex) continue;
      const T* row = logits + (b * Tlen + t) * V;
      int64_t best = 0;
      for (int64_t v = 1; v < V; v++)
        if (row[v] > row[best]) best = v;
      labelled++;
      correct += best == label;
    }
    if (labelled > 0) sum += double(correct) / double(labelled);
  }
  return sum;
}

// A batch tensor on the model's device, uploaded without a host wait (train/upload.h).
Tensor batch_on(Device device, const Tensor& t) {
  Tensor on_device = Tensor::empty(t.shape(), t.dtype(), device);
  upload_async(on_device, t.raw());
  return on_device;
}

// The weights of accumulate_gradients' header comment, one per micro-batch.
std::vector<double> micro_batch_weights(const std::vector<TrainBatch>& micro_batches, int64_t total_valid) {
  std::vector<double> weights;
  for (const TrainBatch& b : micro_batches) weights.push_back(double(b.valid) / double(total_valid));
  return weights;
}

// The part of the training step this thread is queuing, named by a failed graph capture.
thread_local std::string step_phase;

// Forward and backward of every micro-batch i that has valid targets: ids(i), targets(i) on the
// model's device (with documents[i] when documents is not empty: native packed documents), the
// backward seeded with weights[i] and weights[i] * loss_i added to records[slot][0]; weights:
// (count) F64 on the model's device, so nothing here depends on host values that change from
// step to step (a captured CUDA graph replays it). The last backward reports each completed leaf
// to on_last_leaf_ready.
void backward_micro_batches(TrainableModel& model, const std::vector<int64_t>& valid,
                            const std::function<Tensor(size_t)>& ids, const std::function<Tensor(size_t)>& targets,
                            const std::vector<Documents>& documents, const Tensor& weights, Tensor& records,
                            int64_t slot, const LeafReadyFn& on_last_leaf_ready) {
  for (size_t i = 0; i < valid.size(); i++) {
    if (valid[i] == 0) continue;
    const std::string micro = "micro-batch " + std::to_string(i + 1) + " of " + std::to_string(valid.size());
    step_phase = "the forward and loss of " + micro;
    Var micro_loss = documents.empty() ? model.loss(ids(i), targets(i))
                                       : model.loss_in_documents(ids(i), targets(i), documents[i]);
    const Tensor weight = weights.slice0(int64_t(i), int64_t(i) + 1);  // (1) F64
    const bool last = i + 1 == valid.size();
    step_phase = "the backward of " + micro;
    micro_loss.backward(weight.reshape({}).to(micro_loss.dtype()), last ? on_last_leaf_ready : LeafReadyFn());
    accumulate_loss(records, slot, micro_loss.value(), weight);
  }
}

std::vector<int64_t> valid_counts(const std::vector<TrainBatch>& micro_batches) {
  std::vector<int64_t> valid;
  for (const TrainBatch& b : micro_batches) valid.push_back(b.valid);
  return valid;
}

int64_t sum_of(const std::vector<int64_t>& xs) {
  int64_t s = 0;
  for (int64_t x : xs) s += x;
  return s;
}

}  // namespace

nlohmann::json StepMetrics::to_json() const {
  nlohmann::json j = {{"step", step},          {"loss", finite_or_null(loss)}, {"lr", lr},
                      {"grad_norm", finite_or_null(grad_norm)}, {"ms", ms}, {"tokens_per_s", tokens_per_s},
                      {"tokens", tokens}, {"peak_gib", peak_gib}, {"model_tflops", tflops}};
  if (std::isfinite(padding)) j["padding"] = padding;
  return j;
}

nlohmann::json ValMetrics::to_json() const {
  nlohmann::json j = {{"val_loss", finite_or_null(loss)}, {"val_examples", examples}};
  if (std::isfinite(accuracy)) j["val_accuracy"] = accuracy;
  return j;
}

// ---------------------------------------------------------------- one update

double accumulate_gradients(TrainableModel& model, const std::vector<TrainBatch>& packed, Tensor& records,
                            int64_t slot, int64_t total_valid, const LeafReadyFn& on_last_leaf_ready) {
  const std::vector<TrainBatch> micro_batches = training_rows(model, packed);
  const std::vector<int64_t> valid = valid_counts(micro_batches);
  if (total_valid == 0) total_valid = sum_of(valid);
  HLA_CHECK(total_valid > 0, "accumulate_gradients: no target carries loss in ",
            micro_batches.size(), " micro-batch(es)");
  const Device device = model.device();
  const std::vector<Documents> documents = update_documents(model, packed);
  const std::vector<double> w = micro_batch_weights(micro_batches, total_valid);
  Tensor weights = Tensor::empty({int64_t(w.size())}, DType::F64, device);  // (micro-batches)
  for (size_t i = 0; i < w.size(); i++) weights.slice0(int64_t(i), int64_t(i) + 1).fill_(w[i]);  // no upload
  backward_micro_batches(
      model, valid, [&](size_t i) { return batch_on(device, micro_batches[i].ids); },
      [&](size_t i) { return batch_on(device, micro_batches[i].targets); }, documents, weights, records, slot,
      on_last_leaf_ready);
  return padding_overhead(micro_batches, packed);
}

ValMetrics evaluate(TrainableModel& model, BatchSource& source, int64_t batches, bool mqar) {
  NoGradGuard no_grad;
  ValMetrics m;
  double loss_sum = 0, accuracy_sum = 0;
  int64_t valid = 0;
  for (int64_t i = 0; i < batches; i++) {
    const TrainBatch packed = source.next();
    const TrainBatch b = training_rows(model, {packed})[0];  // [data] documents = "reset": padded rows, or native
    const std::vector<Documents> documents = update_documents(model, {packed});
    Tensor targets = b.targets.to(model.device());
    const Tensor ids = b.ids.to(model.device());
    Var logits = documents.empty() ? model.logits(ids) : model.logits_in_documents(ids, documents[0]);  // (B, T, V)
    loss_sum += cross_entropy(logits, targets).value().item() * double(b.valid);
    valid += b.valid;
    int64_t B = b.ids.size(0), T = b.ids.size(1);
    m.examples += packed.ids.size(0);
    if (!mqar) continue;
    Tensor cpu_logits = logits.value().to(Device::CPU);
    if (cpu_logits.dtype() == DType::BF16) cpu_logits = cpu_logits.to(DType::F32);
    dispatch_float(cpu_logits.dtype(), "mqar accuracy", [&](auto tag) {
      using T_ = decltype(tag);
      accuracy_sum += mqar_correct_fraction_sum(cpu_logits.data<T_>(), b.targets.data<int32_t>(),
                                                B, T, cpu_logits.size(-1));
    });
  }
  m.loss = valid > 0 ? loss_sum / double(valid) : std::numeric_limits<double>::quiet_NaN();
  if (mqar && m.examples > 0) m.accuracy = accuracy_sum / double(m.examples);
  return m;
}

// ---------------------------------------------------------------- Trainer

// The captured training step (for the batch shape of batch_: a new shape drops it).
struct Trainer::CapturedStep {
#ifdef HLA_CUDA
  cuda::Graph graph;
#endif
};

namespace {

// A point of the run's time: on the GPU a CUDA event on hla's stream (when the GPU got there),
// on the CPU the host's clock (every op there has run by the time it is queued).
class TimePoint {
 public:
  explicit TimePoint(Device device) {
#ifdef HLA_CUDA
    if (device == Device::CUDA) event_ = std::make_unique<cuda::StreamMark>();
#else
    (void)device;
#endif
  }
  void record() {
#ifdef HLA_CUDA
    if (event_) {
      event_->record();
      return;
    }
#endif
    host_ = std::chrono::steady_clock::now();
  }
  // From `start` to this point; on the GPU once the stream has passed this point.
  double seconds_since(const TimePoint& start) const {
#ifdef HLA_CUDA
    if (event_) return event_->ms_since(*start.event_) / 1000.0;
#endif
    return std::chrono::duration<double>(host_ - start.host_).count();
  }

 private:
  std::chrono::steady_clock::time_point host_;
#ifdef HLA_CUDA
  std::unique_ptr<cuda::StreamMark> event_;
#endif
};

}  // namespace

// The host side of a window's read (trainer.h): on the GPU a pinned buffer that step_state_ is
// copied into, followed by an event (cuda::AsyncRead); on the CPU a host copy. And the windows'
// clocks: the queued window's start, the start and end of the window being read.
struct Trainer::WindowRead {
  explicit WindowRead(const Tensor& step_state)
      : queued_start(step_state.device()), reading_start(step_state.device()), reading_end(step_state.device()) {
#ifdef HLA_CUDA
    if (step_state.device() == Device::CUDA) pinned = std::make_unique<cuda::AsyncRead>(step_state.nbytes());
#endif
  }
  void start(const Tensor& step_state) {
#ifdef HLA_CUDA
    if (pinned) {
      pinned->start(step_state.raw());
      return;
    }
#endif
    host_copy = step_state.to_f64_vector();
  }
  const double* wait() {
#ifdef HLA_CUDA
    if (pinned) return static_cast<const double*>(pinned->wait());
#endif
    return host_copy.data();
  }

  TimePoint queued_start, reading_start, reading_end;
  std::vector<double> host_copy;  // on the CPU
#ifdef HLA_CUDA
  std::unique_ptr<cuda::AsyncRead> pinned;  // on the GPU
#endif
};

Trainer::Trainer(TrainerOptions options, TrainableModel& model, BatchSource& train,
                 BatchSource* val, std::ostream& out)
    : options_(std::move(options)),
      model_(model),
      params_(model.parameters()),
      train_(train),
      val_(val),
      out_(out),
      zero_(options_.zero && options_.comm ? std::make_unique<ZeroShards>(params_, *options_.comm) : nullptr),
      optimizer_(params_, options_.optim, zero_ ? zero_->owned() : std::vector<bool>{}) {
  HLA_CHECK_INPUT(!options_.zero || options_.comm, "[train] zero = 1 shards the optimizer state over data-parallel ",
                  "ranks: it needs --gpus N > 1");
  options_.schedule.validate();
  HLA_CHECK(options_.grad_accum >= 1, "[train] grad_accum must be >= 1, got ", options_.grad_accum);
  HLA_CHECK(options_.log_every >= 1, "[train] log_every must be >= 1, got ", options_.log_every);
  if (val_) val_start_ = val_->position();
  if (options_.comm) buckets_ = std::make_unique<dist::GradBuckets>(params_, *options_.comm, options_.bucket_mb);
  window_ = std::min(options_.log_every, options_.schedule.total_steps);
  step_state_ = Tensor::zeros({kStepStatusSize + window_ * kStepRecordSize}, DType::F64, model_.device());
  status_ = step_state_.slice0(0, kStepStatusSize);
  records_ = step_state_.slice0(kStepStatusSize, kStepStatusSize + window_ * kStepRecordSize)
                 .reshape({window_, kStepRecordSize});
  step_inputs_ = Tensor::zeros({1 + options_.grad_accum}, DType::F64, model_.device());
  step_number_ = step_inputs_.slice0(0, 1);
  step_record_ = Tensor::zeros({1, kStepRecordSize}, DType::F64, model_.device());
  read_ = std::make_unique<WindowRead>(step_state_);
}

Trainer::~Trainer() = default;

StepMetrics Trainer::train_step() {
  queue_step();
  return read_steps().back();
}

void Trainer::queue_step() {
  HLA_CHECK(int64_t(queued_.size()) < window_, "queue_step: ", queued_.size(),
            " steps are queued, the window's size ([train] log_every); read_steps() first");
  if (queued_.empty()) {
    records_.zero_();
    read_->queued_start.record();
  }
  const int64_t slot = int64_t(queued_.size());
  std::vector<TrainBatch> micro;
  for (int64_t i = 0; i < options_.grad_accum; i++) micro.push_back(train_.next());
  QueuedStep q;
  q.lr = options_.optim.lr * lr_factor(options_.schedule, step_);
  optimizer_.stage(lr_factor(options_.schedule, step_));
  if (options_.comm) {
    step_number_.fill_(double(step_ + 1));
    const double padding = reduced_gradients(micro, slot);
    if (!micro[0].cu_seqlens.empty()) q.padding = padding;
    optimizer_.apply(clip_factor_(params_, options_.clip, records_, slot, status_, step_number_));
    if (zero_) zero_->gather_parameters();
    optimizer_.zero_grad();
  } else {
    const std::vector<TrainBatch> rows = training_rows(model_, micro);
    if (!micro[0].cu_seqlens.empty()) q.padding = padding_overhead(rows, micro);
    const std::vector<Documents> documents = update_documents(model_, micro);
    stage_inputs(rows);
    if (graph_ready(rows)) replay_step();
    else device_step(valid_counts(rows), documents);
    records_.slice0(slot, slot + 1).copy_(step_record_);  // d2d, queued after the step
    steps_run_++;
  }
  step_++;
  for (const TrainBatch& b : micro) q.tokens += b.ids.numel();  // real tokens: the packed windows'
  tokens_seen_ += q.tokens;
  q.step = step_;
#ifdef HLA_CUDA
  if (model_.device() == Device::CUDA) q.peak_gib = static_cast<double>(cuda::peak_bytes()) / double(1 << 30);
#endif
  queued_.push_back(q);
}

// One upload each for the update's batches, (2, grad_accum, B, T) I32 (ids, then targets), and
// for step_inputs_ (the update's number, then each micro-batch's loss weight), into tensors that
// stay where they are from step to step, so a captured graph reads every update's inputs.
void Trainer::stage_inputs(const std::vector<TrainBatch>& micro) {
  const int64_t count = int64_t(micro.size());
  const Shape shape = micro[0].ids.shape();
  for (const TrainBatch& b : micro)
    HLA_CHECK(b.ids.shape() == shape && b.targets.shape() == shape, "training step: micro-batches of one update ",
              "must share a shape, got ", b.ids.str(), " and ", micro[0].ids.str());
  const Shape staged = {2, count, shape[0], shape[1]};
  if (!batch_.defined() || batch_.shape() != staged) {
    captured_.reset();  // captured for the old shape, reading the old batch_
    batch_ = Tensor::empty(staged, DType::I32, model_.device());
  }
  std::vector<int32_t> host;  // (2, count, B, T)
  host.reserve(size_t(batch_.numel()));
  for (int which = 0; which < 2; which++)
    for (const TrainBatch& b : micro) {
      const Tensor& t = which == 0 ? b.ids : b.targets;
      host.insert(host.end(), t.data<int32_t>(), t.data<int32_t>() + t.numel());
    }
  upload_async(batch_, host.data());
  const int64_t total_valid = sum_of(valid_counts(micro));
  HLA_CHECK(total_valid > 0, "training step ", step_ + 1, ": no target carries loss in ", count, " micro-batch(es)");
  std::vector<double> inputs = {double(step_ + 1)};
  for (double w : micro_batch_weights(micro, total_valid)) inputs.push_back(w);
  upload_f64_async(step_inputs_, inputs);
}

// The update's device work from the staged inputs: forward and backward of the micro-batches,
// clipping, the optimizer (its values staged already), zero_grad. This is what the graph captures.
void Trainer::device_step(const std::vector<int64_t>& valid, const std::vector<Documents>& documents) {
  step_record_.zero_();
  const Tensor weights = step_inputs_.slice0(1, step_inputs_.numel());  // (grad_accum)
  const int64_t count = int64_t(valid.size());
  const int64_t B = batch_.size(2), T = batch_.size(3);
  const Tensor rows = batch_.reshape({2 * count, B, T});  // ids of every micro-batch, then targets
  auto part = [&](int64_t which, size_t i) {              // (B, T)
    const int64_t row = which * count + int64_t(i);
    return rows.slice0(row, row + 1).reshape({B, T});
  };
  backward_micro_batches(
      model_, valid, [&](size_t i) { return part(0, i); }, [&](size_t i) { return part(1, i); }, documents, weights,
      step_record_, 0, LeafReadyFn());
  step_phase = "gradient clipping";
  const Tensor clip_factor = clip_factor_(params_, options_.clip, step_record_, 0, status_, step_number_);
  step_phase = "the optimizer update";
  optimizer_.apply(clip_factor);  // the clipped gradients are never written
  step_phase = "zero_grad";
  optimizer_.zero_grad();
}

// Whether this update replays the captured graph: on the GPU with options.cuda_graph, one
// process, after kEagerStepsBeforeGraph eager steps (every lazily built buffer exists then), and
// only for updates whose every micro-batch has a valid target (the eager step skips the others'
// work, a graph cannot; such an update runs eagerly). A new batch shape drops the graph
// (stage_inputs), and the next update captures one for it. Document rows never replay: their
// shape changes from update to update, so a graph would be captured for one update only.
bool Trainer::graph_ready(const std::vector<TrainBatch>& micro) const {
  if (!options_.cuda_graph || model_.device() != Device::CUDA || options_.comm) return false;
  if (steps_run_ < kEagerStepsBeforeGraph || !micro[0].cu_seqlens.empty()) return false;
  for (const TrainBatch& b : micro)
    if (b.valid == 0) return false;
  return true;
}

// Captures the step on the first call (nothing runs during a capture), then replays it. A capture
// that fails (an op reads the device from the host, blocks, or uploads inside the step) stops the
// run naming the call; it never trains on a partly captured step.
void Trainer::replay_step() {
#ifdef HLA_CUDA
  if (!captured_) {
    auto captured = std::make_unique<CapturedStep>();
    captured->graph.begin_capture();
    try {
      device_step(std::vector<int64_t>(size_t(batch_.size(1)), 1), {});  // graph_ready: targets, no documents
    } catch (const std::exception& e) {
      captured->graph.abandon_capture();
      fail("training step ", step_ + 1, ": capturing the step in a CUDA graph failed in ", step_phase, ": ", e.what(),
           " (--train.cuda_graph false trains without the graph)");
    }
    captured->graph.end_capture();
    captured_ = std::move(captured);
  }
  captured_->graph.replay();
#else
  fail("training step ", step_ + 1, ": --train.cuda_graph needs a CUDA build of hla");
#endif
}

// This rank's share of the update, its gradients summed over the ranks (bucket by bucket while
// the last backward runs), and the loss record summed too: every rank then holds the gradients
// and the loss of the whole update.
double Trainer::reduced_gradients(const std::vector<TrainBatch>& update, int64_t slot) {
  int64_t total_valid = 0;
  for (const TrainBatch& b : update) total_valid += b.valid;
  share_ = rank_share(update[0].ids.size(0), int64_t(update.size()), options_.comm->world());
  const std::vector<TrainBatch> mine = rank_micro_batches(update, share_, options_.comm->rank());
  const double padding = accumulate_gradients(model_, mine, records_, slot, total_valid, buckets_->hook());
  buckets_->finish();
  // after the buckets on every rank: a rank whose last micro-batch had no valid target issues
  // them all in finish(), and the collectives must come in the same order everywhere
  Tensor record = records_.slice0(slot, slot + 1);  // (1, kStepRecordSize): the loss so far, the norm still 0
  dist::all_reduce_(*options_.comm, record, dist::ReduceOp::Sum);
  options_.comm->wait();  // clipping reads and writes the record on hla's stream
  return padding;
}

std::vector<StepMetrics> Trainer::read_steps(const std::function<void(const StepMetrics&)>& good) {
  begin_read();
  return finish_read(good);
}

// Queues the window's one host read behind its steps on hla's stream and marks the window's end;
// the next queue_step starts a new window (its records_.zero_() comes after the copy).
void Trainer::begin_read() {
  HLA_CHECK(!queued_.empty(), "read_steps: no step is queued");
  HLA_CHECK(reading_.empty(), "read_steps: the window of steps ", reading_.front().step, "-", reading_.back().step,
            " is still being read");
  read_->reading_end.record();
  read_->start(step_state_);
  std::swap(read_->reading_start, read_->queued_start);
  reading_.swap(queued_);
}

// Waits for begin_read's copy and reports its window. When the window diverged, the report names
// every update up to step_ as zeroed: the updates queued since begin_read ran after the failure too.
std::vector<StepMetrics> Trainer::finish_read(const std::function<void(const StepMetrics&)>& good) {
  HLA_CHECK(!reading_.empty(), "finish_read: no window is being read");
  const double* state = read_->wait();
  const double seconds = read_->reading_end.seconds_since(read_->reading_start);
  const double* status = state;
  const double* records = state + kStepStatusSize;
  const int64_t first_bad = static_cast<int64_t>(status[0]), window_end = reading_.back().step;
  auto stop = [&](const std::string& message) {
    reading_.clear();
    queued_.clear();
    fail(message);
  };
  if (first_bad != 0 && first_bad < reading_.front().step)  // a caller went on after the failure
    stop("training diverged at step " + std::to_string(first_bad) +
         " (reported then): every later update runs with zeroed gradients");
  int64_t window_tokens = 0;
  for (const QueuedStep& q : reading_) window_tokens += q.tokens;
  // throughput first, so this window's step lines show it (the window that reaches
  // kWarmupSteps is the last one it skips)
  if (throughput_.after_step > 0) {
    timed_seconds_ += seconds;
    timed_tokens_ += window_tokens;
    throughput_.tokens_per_s = timed_seconds_ > 0 ? double(timed_tokens_) / timed_seconds_ : 0.0;
    if (model_.device() == Device::CUDA)
      throughput_.mfu = options_.flops_per_token * throughput_.tokens_per_s /
                        (Throughput::kPeakFlops * (options_.comm ? options_.comm->world() : 1));
  } else if (window_end >= Throughput::kWarmupSteps) {
    throughput_.after_step = window_end;
  }
  std::vector<StepMetrics> steps;
  for (size_t i = 0; i < reading_.size(); i++) {
    const QueuedStep& q = reading_[i];
    StepMetrics m;
    m.step = q.step;
    m.lr = q.lr;
    m.tokens = q.tokens;
    m.peak_gib = q.peak_gib;
    m.padding = q.padding;
    if (std::isfinite(m.padding)) {
      padding_sum_ += m.padding;
      padding_steps_++;
    }
    m.loss = records[i * kStepRecordSize];
    m.grad_norm = records[i * kStepRecordSize + 1];
    m.ms = seconds * 1000.0 / double(reading_.size());  // the window's time, shared evenly
    m.tokens_per_s = m.ms > 0 ? double(m.tokens) / (m.ms / 1000.0) : 0.0;
    m.tflops = options_.flops_per_token * m.tokens_per_s / 1e12;
    if (first_bad != 0 && m.step == first_bad) stop(divergence_report(m, static_cast<int64_t>(status[1]), step_));
    if (good) good(m);
    steps.push_back(m);
  }
  reading_.clear();
  last_step_ = steps.back();
  return steps;
}

ValMetrics Trainer::validate() {
  HLA_CHECK(val_, "validate: this run has no validation data");
  val_->set_position(val_start_);
  last_val_ = evaluate(model_, *val_, options_.val_batches, options_.mqar);
  return last_val_;
}

nlohmann::json Trainer::state_json() const {
  nlohmann::json j = {{"step", step_},
                      {"tokens_seen", tokens_seen_},
                      {"data", {{"train", train_.position()}}},
                      {"schedule", options_.schedule.to_json()},
                      {"optimizer", options_.optim.name},
                      {"settings", options_.settings},
                      {"last_step", last_step_.to_json()}};
  if (last_val_.examples > 0) j["last_val"] = last_val_.to_json();
  if (options_.comm) j["data_parallel"] = data_parallel_json();
  return j;
}

// Every rank's share of each update and data position: each reads the whole stream, so all stand
// at the data position; rank r trained on sequences [first, first + sequences) of each update.
nlohmann::json Trainer::data_parallel_json() const {
  const int world = options_.comm->world();
  nlohmann::json ranks = nlohmann::json::array();
  for (int r = 0; r < world; r++)
    ranks.push_back({{"rank", r}, {"first_sequence", r * share_.sequences}, {"sequences", share_.sequences},
                     {"micro_batch", share_.micro_batch}, {"grad_accum", share_.grad_accum},
                     {"data_position", train_.position()}});
  return {{"world", world}, {"ranks", ranks}};
}

// Names the first parameter holding a NaN or an Inf (one of them poisons every gradient), else
// the first gradient whose sum of squares was not finite at that step (bad_tensor, an index in
// params_; -1: none), and says which updates ran with zeroed gradients. The parameters are as
// they were at that step: the zeroed updates keep finite ones finite.
std::string Trainer::divergence_report(const StepMetrics& m, int64_t bad_tensor, int64_t last_queued) const {
  const int64_t before = m.step - 1;  // updates done before the step that diverged
  std::ostringstream os;
  os << "training diverged at step " << m.step << " (loss " << m.loss << ", grad norm " << m.grad_norm << ", lr "
     << m.lr << "): ";
  const std::string param = first_non_finite(values_of(params_));
  if (!param.empty())
    os << "parameter '" << param << "' holds NaN or Inf values "
       << (before > 0 ? "since the update of step " + std::to_string(before) : std::string("from the start"));
  else if (bad_tensor >= 0 && bad_tensor < int64_t(params_.size()))
    os << "the gradient of '" << params_[bad_tensor].name << "' holds NaN or Inf values";
  else os << "the loss is not finite";
  // A resumed checkpoint holds no NaN or Inf (load_checkpoint checks), but damaged finite values
  // show up within the first update: that is the checkpoint's fault, not the lr's.
  const bool first_after_resume = before == resumed_at_ || (!param.empty() && before == resumed_at_ + 1);
  if (!resumed_from_.empty() && first_after_resume)
    os << "; the first update after resuming from " << resumed_from_
       << " brought them: its model.safetensors or optimizer.safetensors is probably damaged";
  else
    os << "; lower [optim] lr or set [optim] clip";
  os << " (the optimizer update" << (last_queued > m.step ? "s of steps " + std::to_string(m.step) + "-" : " of step ")
     << last_queued << " ran with zeroed gradients: no NaN or Inf gradient was applied)";
  return os.str();
}

void Trainer::save(const std::string& dir) const {
  const NamedTensors gathered = zero_ ? zero_->gather_state(optimizer_) : NamedTensors{};  // every rank takes part
  if (!writes()) return;
  CheckpointData data;
  data.params = &params_;
  data.model_config = options_.model_config;
  data.optimizer = &optimizer_;
  if (zero_) data.optimizer_state = &gathered;
  data.trainer_state = state_json();
  save_checkpoint(dir, data);
}

void Trainer::resume(const std::string& dir) {
  if (writes()) report_recovery(dir, out_);
  if (options_.comm) options_.comm->barrier();  // the other ranks read what rank 0 recovered
  const std::string state_path = dir + "/trainer_state.json";
  const nlohmann::json state = read_json_file(state_path);
  step_ = count_field(state, state_path, "step");
  tokens_seen_ = count_field(state, state_path, "tokens_seen");
  load_checkpoint(dir, params_, optimizer_);
  const auto data = state.find("data");
  if (data == state.end() || !data->is_object() || !data->contains("train"))
    fail(state_path, ": field 'data.train' is missing");
  const nlohmann::json& position = data->at("train");
  try {
    train_.set_position(position);
  } catch (const std::exception& e) {
    fail(state_path, ": field 'data.train' (", json_excerpt(position), ") is not a position in this run's data: ",
         e.what());
  }
  if (optimizer_.steps_taken() != step_)
    fail(dir, ": optimizer.safetensors is at step ", optimizer_.steps_taken(), " but trainer_state.json at step ",
         step_);
  if (step_ > options_.schedule.total_steps)
    fail(dir, ": checkpoint is at step ", step_, ", past [train] steps = ", options_.schedule.total_steps);
  warn_changed_settings(state.value("settings", nlohmann::json()));
  resumed_from_ = dir;
  resumed_at_ = step_;
  captured_.reset();  // a graph captured before would replay into the tensors the checkpoint replaced
}

// One line per setting that differs from the checkpoint's (settings are {section: {key: value}}).
void Trainer::warn_changed_settings(const nlohmann::json& saved) const {
  if (!saved.is_object() || !options_.settings.is_object()) return;
  for (const auto& [section, keys] : options_.settings.items()) {
    if (!keys.is_object() || !saved.contains(section) || !saved[section].is_object()) continue;
    for (const auto& [key, now] : keys.items()) {
      const nlohmann::json& before = saved[section].contains(key) ? saved[section][key] : nlohmann::json();
      if (before != now)
        out_ << "warning: resuming with [" << section << "] " << key << " = " << now.dump()
             << "; the checkpoint was trained with " << (before.is_null() ? "no such setting" : before.dump())
             << "\n";
    }
  }
}

void Trainer::log_step(const StepMetrics& m) const {
  int width = int(std::to_string(options_.schedule.total_steps).size());
  char line[256];
  std::snprintf(line, sizeof line,
                "step %*lld/%lld | loss %.6f | lr %.3e | gnorm %.4f | %7.1f ms | %8.0f tok/s",
                width, (long long)m.step, (long long)options_.schedule.total_steps, m.loss, m.lr,
                m.grad_norm, m.ms, m.tokens_per_s);
  out_ << line;
  if (m.tflops >= 1) out_ << format(" | %.1f TFLOP/s", m.tflops);
  else if (m.tflops > 0) out_ << format(" | %.2f GFLOP/s", m.tflops * 1e3);
  if (m.peak_gib > 0) out_ << format(" | peak %.2f GiB", m.peak_gib);
  if (std::isfinite(m.padding)) out_ << format(" | padding %.1f%%", 100.0 * m.padding);
  if (throughput_.tokens_per_s > 0)
    out_ << format(" | mean %.0f tok/s", throughput_.tokens_per_s) << " after step " << throughput_.after_step;
  if (throughput_.mfu > 0) out_ << format(" | MFU %.1f%%", 100.0 * throughput_.mfu);
  out_ << std::endl;
}

// The step's line in metrics.jsonl, and on the console at log lines.
void Trainer::report_step(const StepMetrics& m) const {
  if (!writes()) return;
  if (m.step % options_.log_every == 0 || m.step == options_.schedule.total_steps) log_step(m);
  append_metrics(m.to_json());
}

// Whether the run is at a step that comes every n steps (the last step always is; n <= 0: only it).
bool Trainer::due(int64_t n) const { return step_ == options_.schedule.total_steps || (n > 0 && step_ % n == 0); }

// Whether run() reads the window after this step: at log lines, before validation and saves, at
// the end, and at the end of warm-up (the throughput counts from there).
bool Trainer::reads_now() const {
  return due(options_.log_every) || step_ == Throughput::kWarmupSteps || validates_now() || saves_now();
}

// Whether run() validates or saves after this step (on every rank alike: their reads stay in step).
bool Trainer::validates_now() const { return val_ && options_.val_batches > 0 && due(options_.val_every); }
bool Trainer::saves_now() const { return !options_.out_dir.empty() && due(options_.save_every); }

void Trainer::append_metrics(const nlohmann::json& line) const {
  if (writes() && !options_.out_dir.empty()) append_line(options_.out_dir + "/metrics.jsonl", line.dump() + "\n");
}

ValMetrics Trainer::run() {
  if (writes() && !options_.out_dir.empty()) {
    fs::create_directories(options_.out_dir);
    report_recovery(checkpoint_dir(), out_);
  }
  const auto report = [&](const StepMetrics& m) { report_step(m); };
  bool next_queued = false;  // the update after a read, queued while the host waited for the read
  while (next_queued || step_ < options_.schedule.total_steps) {
    if (!next_queued) queue_step();
    next_queued = false;
    if (!reads_now()) continue;
    // The next update runs on the device while the host waits for this window's read and reports
    // it, unless validation or a save needs this step's parameters or this was the last step.
    const bool validates = validates_now(), saves = saves_now();
    begin_read();
    if (!validates && !saves && step_ < options_.schedule.total_steps) {
      try {
        queue_step();
      } catch (...) {
        finish_read(report);  // the window's lines come out first (or its divergence, the earlier error)
        throw;
      }
      next_queued = true;
    }
    finish_read(report);
    if (writes() && validates) {
      ValMetrics v = validate();
      out_ << "val  step " << step_ << " | loss " << format("%.6f", v.loss);
      if (options_.mqar) out_ << " | MQAR accuracy " << format("%.4f", v.accuracy);
      out_ << " | " << v.examples << " examples" << std::endl;
      nlohmann::json line = v.to_json();
      line["step"] = step_;
      append_metrics(line);
    }
    if (saves) {
      save(checkpoint_dir());
      if (writes()) out_ << "saved " << checkpoint_dir() << " (step " << step_ << ")" << std::endl;
    }
  }
  return last_val_;
}

// ---------------------------------------------------------------- hla train

namespace {

// Keeps the metrics of steps up to `step` (a resumed run rewrites what came after).
void truncate_metrics(const std::string& path, int64_t step) {
  std::ifstream in(path);
  if (!in) return;
  std::string kept;
  for (std::string line; std::getline(in, line);) {
    nlohmann::json j;
    try {
      j = parse_json(line, path);
    } catch (const Error&) {
      continue;  // a torn or foreign line is not one of ours: drop it
    }
    if (j.is_object() && j.value("step", int64_t(0)) <= step) kept += line + "\n";
  }
  in.close();
  write_file_atomic(path, kept);
}

void check_same_model(const std::string& dir, const ModelConfig& config) {
  nlohmann::json saved = ModelConfig::load(dir + "/config.json").to_json();  // older formats read as today's
  nlohmann::json now = config.to_json();
  if (saved == now) return;
  std::ostringstream diff;
  for (auto it = now.begin(); it != now.end(); ++it)
    if (!saved.contains(it.key()) || saved[it.key()] != it.value())
      diff << " " << it.key() << ": " << (saved.contains(it.key()) ? saved[it.key()].dump() : "-")
           << " -> " << it.value().dump() << ";";
  fail(dir, "/config.json differs from this run's model:", diff.str(),
       " resume with the run config the checkpoint was trained with");
}

}  // namespace

double model_flops_per_token(const ModelConfig& config, int64_t num_parameters, int64_t seq_len) {
  const double T = static_cast<double>(seq_len), width = config.hidden_size;  // attention width H * (D / H)
  const int window = config.attn.window_size;
  double attention = 0;
  for (int i = 0; i < config.num_hidden_layers; i++)
    if (config.is_attention_layer(i)) attention += window > 0 && window < T ? 12.0 * window * width : 6.0 * T * width;
  return 6.0 * static_cast<double>(num_parameters) + attention;
}

TrainerOptions trainer_options(const RunConfig& config, const ModelConfig& model_config, int64_t num_parameters,
                               bool mqar) {
  TrainerOptions options;
  options.optim = config.optim.optim;
  options.schedule = config.schedule();
  options.clip = config.optim.clip;
  options.grad_accum = config.train.grad_accum;
  options.log_every = config.train.log_every;
  options.val_every = config.train.val_every;
  options.val_batches = config.train.val_batches;
  options.save_every = config.train.save_every;
  options.out_dir = config.train.out_dir;
  options.mqar = mqar;
  options.model_config = model_config.to_json();
  options.settings = config.to_json();
  options.flops_per_token = model_flops_per_token(model_config, num_parameters, config.data.seq_len);
  options.bucket_mb = config.train.bucket_mb;
  options.zero = config.train.zero == 1;
  options.cuda_graph = config.train.cuda_graph;
  return options;
}

ValMetrics run_training(const RunConfig& config, const std::string& resume_dir, std::ostream& console,
                        dist::Communicator* comm) {
  config.validate();
  const int world = comm ? comm->world() : 1;
  HLA_CHECK_INPUT(world == config.train.gpus, "[train] gpus = ", config.train.gpus, " but ", world,
                  " rank(s) run: --gpus N runs through `hla train`, which starts one process per GPU");
  const RankShare share = rank_share(config.data.batch_size, config.train.grad_accum, world);
  const bool writer = !comm || comm->rank() == 0;  // prints, writes metrics and checkpoints
  std::ostream silent(nullptr);
  std::ostream& out = writer ? console : silent;
  DataSources data = make_data_sources(config.data);
  ModelConfig model_config = config.model_config(data.vocab_size);
  if (!resume_dir.empty()) {
    if (writer) report_recovery(resume_dir, out);
    check_same_model(resume_dir, model_config);
  }
  Device device = config.train.device == "cuda" ? Device::CUDA : Device::CPU;
  HLA_CHECK(device == Device::CPU || cuda_available(),
            "--device cuda: no GPU found, or hla was built without CUDA");
  DType compute = config.train.dtype == "bf16" ? DType::BF16 : DType::F32;
  auto model = make_model(model_config, config.train.seed, device, compute,
                          parse_recompute(config.train.recompute, "[train] recompute"), config.train.delta_rule_keep);
  ParameterList params = model->parameters();
  HLA_CHECK_INPUT(!comm || comm->device() == device, "data parallel: the ranks exchange buffers on another device ",
                  "than [train] device = ", config.train.device, " (", comm ? comm->describe() : "", ")");

  out << "hla train\n" << config.table();
  out << "data:    " << data.description << "\n";
  out << "model:   " << model_config.model_type << ", " << model_config.num_hidden_layers
      << " layers, hidden " << model_config.hidden_size << ", pattern " << model_config.pattern()
      << " (L linear, A attention), routing " << model_config.routing << "\n";
  out << "params:  " << count_parameters(params) << " in " << params.size() << " tensors\n";

  TrainerOptions options = trainer_options(config, model_config, count_parameters(params), data.mqar);
  options.comm = comm;
  Trainer trainer(options, *model, *data.train, data.val.get(), out);
  out << "optimizer groups:\n" << trainer.optimizer().describe();
  out << "tokens per update: " << config.data.batch_size * config.data.seq_len * config.train.grad_accum
      << " (" << config.train.grad_accum << " x " << config.data.batch_size << " x "
      << config.data.seq_len << ")\n";
  if (comm)
    out << "data parallel: " << comm->describe() << "; " << share.describe() << ", gradients in buckets of "
        << config.train.bucket_mb << " MB\n";
  if (trainer.zero()) out << trainer.zero()->describe() << "\n";

  if (writer) fs::create_directories(config.train.out_dir);
  std::string metrics = config.train.out_dir + "/metrics.jsonl";
  if (!resume_dir.empty()) {
    trainer.resume(resume_dir);
    if (writer) truncate_metrics(metrics, trainer.step());
    out << "resumed from " << resume_dir << " at step " << trainer.step() << "\n";
  } else if (writer) {
    write_file_atomic(metrics, "");
  }
  out << std::flush;
  auto start = std::chrono::steady_clock::now();
  int64_t first_step = trainer.step();
  ValMetrics final_val = trainer.run();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out << "done: " << trainer.step() - first_step << " steps in " << format("%.1f", seconds) << " s ("
      << format("%.2f", double(trainer.step() - first_step) / std::max(seconds, 1e-9))
      << " steps/s)";
  const Throughput& tp = trainer.throughput();
  if (tp.tokens_per_s > 0) out << "; mean " << format("%.0f", tp.tokens_per_s) << " tok/s after step " << tp.after_step;
  if (tp.mfu > 0) out << ", MFU " << format("%.1f%%", 100.0 * tp.mfu);
  if (std::isfinite(trainer.mean_padding()))
    out << "; document rows padded by " << format("%.1f%%", 100.0 * trainer.mean_padding())
        << " of the real tokens";
  out << "; checkpoint " << trainer.checkpoint_dir() << "\n";
  return final_val;
}

}  // namespace hla
