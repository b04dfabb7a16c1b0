// The training step without host reads (train/trainer.h, nn/ops/grad_norm.h), on the CPU: the
// one-reduction gradient norm and the device-side clip give the same bits as the per-tensor
// sq_norm and scale_ they replace; a NaN that appears between two log lines is still reported
// at its step, naming the tensor, and never reaches the weights; metrics.jsonl is the same
// whether the host reads every step or every 5 (timings aside); and the step line shows the
// tokens/s after warm-up (no MFU on the CPU). run() queues the next update before it waits for a
// window's read: its metrics.jsonl equals train_step() one step at a time bit for bit, validation
// and saves still see their step's parameters, a batch that fails then comes after the window's
// lines, and a divergence names the queued update among the zeroed ones.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "nn/ops/grad_norm.h"
#include "tensor/math.h"
#include "tests/test_train_util.h"
#include "train/checkpoint.h"
#include "train/schedule.h"
#include "train/trainer.h"

using namespace hla;
using namespace hla::testing;

namespace {

// Parameters with random gradients of awkward sizes, one without a gradient.
ParameterList random_grads(DType dtype, double grad_std) {
  ParameterList params;
  const std::vector<Shape> shapes = {{37}, {5, 129}, {3}, {8, 8, 9}, {1}};
  for (size_t i = 0; i < shapes.size(); i++) {
    Var v(Tensor::randn(shapes[i], 100 + i, 1.0, dtype), true);
    if (i != 2) v.mutable_grad() = Tensor::randn(shapes[i], 200 + i, grad_std, dtype);
    params.push_back({"p" + std::to_string(i), v});
  }
  return params;
}

// The norm as the trainer computed it before: per-tensor sq_norm in double, summed in order.
double per_tensor_norm(const ParameterList& params) {
  double sum = 0;
  for (const NamedParameter& p : params)
    if (p.var.grad().defined()) sum += sq_norm(p.var.grad());
  return std::sqrt(sum);
}

std::vector<Tensor> grad_copies(const ParameterList& params) {
  std::vector<Tensor> copies;
  for (const NamedParameter& p : params) copies.push_back(p.var.grad().defined() ? p.var.grad().clone() : Tensor());
  return copies;
}

std::vector<std::string> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// metrics.jsonl lines without the fields that time the step.
std::vector<nlohmann::json> untimed_metrics(const std::string& path) {
  std::vector<nlohmann::json> lines;
  for (const std::string& line : read_lines(path)) {
    nlohmann::json j = nlohmann::json::parse(line);
    for (const char* timing : {"ms", "tokens_per_s", "model_tflops"}) j.erase(timing);
    lines.push_back(j);
  }
  return lines;
}

bool all_parameters_finite(TrainableModel& model) {
  return first_non_finite(values_of(model.parameters())).empty();
}

// The metrics.jsonl lines that run() with options `o` writes in its first `steps` steps (timings
// aside), made with train_step() one step at a time on `model` (a TinyLM(16, 8, 5)) and
// validate() after every o.val_every-th step.
std::vector<nlohmann::json> stepped_metrics(TrainerOptions o, int64_t steps, TinyLM& model) {
  o.out_dir.clear();
  CycleSource train(16, 4, 8), val(16, 4, 8);
  std::ostringstream log;
  Trainer trainer(o, model, train, &val, log);
  std::vector<nlohmann::json> lines;
  for (int64_t step = 1; step <= steps; step++) {
    nlohmann::json line = trainer.train_step().to_json();
    for (const char* timing : {"ms", "tokens_per_s", "model_tflops"}) line.erase(timing);
    lines.push_back(nlohmann::json::parse(line.dump()));  // as the file holds it
    if (o.val_every == 0 || step % o.val_every != 0) continue;
    nlohmann::json val_line = trainer.validate().to_json();
    val_line["step"] = step;
    lines.push_back(nlohmann::json::parse(val_line.dump()));
  }
  return lines;
}

// CycleSource(16, 4, 8) whose `failing_call`-th batch cannot be read (as a damaged shard's).
class FailingSource : public CycleSource {
 public:
  explicit FailingSource(int64_t failing_call) : CycleSource(16, 4, 8), failing_call_(failing_call) {}
  TrainBatch next() override {
    if (++calls_ == failing_call_) fail("batch ", calls_, " cannot be read");
    return CycleSource::next();
  }

 private:
  int64_t failing_call_, calls_ = 0;
};

}  // namespace

TEST_CASE("the one-reduction gradient norm and clip equal per-tensor sq_norm and scale_ bit for bit") {
  for (DType dtype : {DType::F32, DType::F64}) {
    CAPTURE(dtype_name(dtype));
    ParameterList params = random_grads(dtype, 0.7);
    const double old_norm = per_tensor_norm(params);
    CHECK(grad_norm(params) == old_norm);

    // under the limit: nothing changes
    std::vector<Tensor> before = grad_copies(params);
    CHECK(clip_grad_norm(params, 2 * old_norm) == old_norm);
    for (size_t i = 0; i < params.size(); i++)
      if (before[i].defined()) CHECK(bit_equal(params[i].var.grad(), before[i]));

    // over it: scaled by max_norm / (norm + 1e-6), as scale_ did
    const double max_norm = 0.25 * old_norm;
    std::vector<Tensor> expected = grad_copies(params);
    for (Tensor& g : expected)
      if (g.defined()) scale_(g, max_norm / (old_norm + 1e-6));
    CHECK(clip_grad_norm(params, max_norm) == old_norm);
    for (size_t i = 0; i < params.size(); i++) {
      CAPTURE(params[i].name);
      CHECK(params[i].var.grad().defined() == expected[i].defined());
      if (expected[i].defined()) CHECK(bit_equal(params[i].var.grad(), expected[i]));
    }
    CHECK(std::abs(grad_norm(params) - max_norm) <= 1e-5 * max_norm);
  }
}

TEST_CASE("multi_sq_norm gives each tensor's sum of squares and the total; a NaN gradient is zeroed") {
  ParameterList params = random_grads(DType::F32, 1.0);
  Tensor sums = multi_sq_norm(gradients(params), Device::CPU);
  REQUIRE(sums.numel() == int64_t(params.size()) + 1);
  std::vector<double> s = sums.to_f64_vector();
  double total = 0;
  for (size_t i = 0; i < params.size(); i++) {
    CHECK(s[i] == (params[i].var.grad().defined() ? sq_norm(params[i].var.grad()) : 0.0));
    total += s[i];
  }
  CHECK(s.back() == total);

  // a NaN in p3's gradient: the status names step 7 and tensor 3, the factor is 0, gradients are 0
  Tensor g3 = params[3].var.grad();
  std::vector<double> v = g3.to_f64_vector();
  v[5] = std::nan("");
  params[3].var.mutable_grad() = Tensor::from_f64(v, g3.shape(), g3.dtype());
  Tensor records = Tensor::zeros({2, kStepRecordSize}, DType::F64);
  Tensor status = Tensor::zeros({kStepStatusSize}, DType::F64);
  clip_grad_norm_(params, 1.0, records, 1, status, Tensor::full({1}, 7.0, DType::F64));
  CHECK(std::isnan(records.to_f64_vector()[3]));
  CHECK(status.to_f64_vector() == std::vector<double>{7, 3, 0});
  for (const NamedParameter& p : params)
    if (p.var.grad().defined()) CHECK(max_abs(p.var.grad()) == 0.0);
  // a later finite step keeps the first step and goes on zeroing
  params[3].var.mutable_grad() = Tensor::full(g3.shape(), 1.0, g3.dtype());
  clip_grad_norm_(params, 1.0, records, 0, status, Tensor::full({1}, 8.0, DType::F64));
  CHECK(status.to_f64_vector() == std::vector<double>{7, 3, 0});
  CHECK(max_abs(params[3].var.grad()) == 0.0);
}

TEST_CASE("a NaN between log lines is reported at its step, naming the tensor, and never applied") {
  const std::string dir = temp_dir("nan_between_logs");
  TrainerOptions o = small_options("adamw");
  o.grad_accum = 1;
  o.log_every = 5;
  o.out_dir = dir;
  PoisonedGradientLM model(/*index=*/2, /*from_call=*/7);  // step 7: after the read at step 5
  CycleSource source(16, 4, 8);
  std::ostringstream log;
  Trainer trainer(o, model, source, nullptr, log);
  std::string err = error_of([&] { trainer.run(); });
  CHECK(err.rfind("training diverged at step 7 (loss ", 0) == 0);
  CHECK(err.find("): the gradient of 'model.norm.weight' holds NaN or Inf values; lower [optim] lr or set "
                 "[optim] clip (the optimizer updates of steps 7-10 ran with zeroed gradients: no NaN or Inf "
                 "gradient was applied)") != std::string::npos);
  CHECK(all_parameters_finite(model));
  std::vector<nlohmann::json> lines = untimed_metrics(dir + "/metrics.jsonl");
  REQUIRE(lines.size() == 6);  // steps 1-6, written at the read after step 10
  for (int i = 0; i < 6; i++) CHECK(lines[i]["step"] == i + 1);
  CHECK(log.str().find("step  5/10") != std::string::npos);
  CHECK(log.str().find("step  6/10") == std::string::npos);  // not a log line

  // a NaN parameter, queued without reads: named, with the update that brought it
  TinyLM plain(16, 8, 5);
  TrainerOptions q = small_options("adamw");
  q.log_every = 4;
  Trainer queued(q, plain, source, nullptr, log);
  queued.queue_step();
  queued.queue_step();
  ParameterList params = plain.parameters();
  Tensor& head = params[3].var.mutable_value();
  std::vector<double> values = head.to_f64_vector();
  values[0] = std::nan("");
  head.copy_(Tensor::from_f64(values, head.shape(), head.dtype()));  // as if the update of step 2 had produced it
  queued.queue_step();
  std::vector<int64_t> good;
  err = error_of([&] { queued.read_steps([&](const StepMetrics& m) { good.push_back(m.step); }); });
  CHECK(good == std::vector<int64_t>{1, 2});
  CHECK(err.rfind("training diverged at step 3 (", 0) == 0);
  CHECK(err.find("): parameter 'lm_head.weight' holds NaN or Inf values since the update of step 2; lower [optim] "
                 "lr or set [optim] clip (the optimizer update of step 3 ran with zeroed gradients") !=
        std::string::npos);
  CHECK(error_of([&] { queued.queue_step(); queued.read_steps(); })
            .find("training diverged at step 3 (reported then)") != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("metrics.jsonl is the same with log_every 1 and 5, timings aside; the step line shows tok/s") {
  std::vector<std::vector<nlohmann::json>> runs;
  std::string log5;
  for (int64_t log_every : {1, 5}) {
    CAPTURE(log_every);
    const std::string dir = temp_dir("log_every_" + std::to_string(log_every));
    TrainerOptions o = small_options("muon");
    o.schedule.total_steps = 12;  // not a multiple of 5: the last window is short
    o.log_every = log_every;
    o.val_every = 4;
    o.val_batches = 2;
    o.out_dir = dir;
    TinyLM model(16, 8, 5);
    CycleSource train(16, 4, 8), val(16, 4, 8);
    std::ostringstream log;
    Trainer trainer(o, model, train, &val, log);
    trainer.run();
    runs.push_back(untimed_metrics(dir + "/metrics.jsonl"));
    CHECK(trainer.throughput().after_step == 3);
    CHECK(trainer.throughput().tokens_per_s > 0);
    CHECK(trainer.throughput().mfu == 0);  // the CPU has no MFU
    if (log_every == 5) log5 = log.str();
    std::filesystem::remove_all(dir);
  }
  REQUIRE(runs[0].size() == 12 + 3);  // 12 steps, validation at 4, 8, 12
  CHECK(runs[0] == runs[1]);
  CHECK(log5.find("step  5/12") != std::string::npos);
  CHECK(log5.find("step  4/12") == std::string::npos);
  CHECK(log5.find("tok/s after step 3") != std::string::npos);
  CHECK(log5.find("MFU") == std::string::npos);
}

TEST_CASE("run() reads a window while the next update runs: metrics.jsonl equals train_step() step by step") {
  for (int64_t log_every : {1, 3}) {
    CAPTURE(log_every);
    const std::string dir = temp_dir("overlap_" + std::to_string(log_every));
    TrainerOptions o = small_options("muon");
    o.schedule.total_steps = 12;
    o.log_every = log_every;
    o.val_every = 4;   // validation after steps 4, 8 and 12, saves after 6 and 12: these reads
    o.save_every = 6;  // wait before the next update; the others (1, 2, 3, 5, ... or 3, 9) do not
    o.val_batches = 2;
    TinyLM stepped(16, 8, 5);
    const std::vector<nlohmann::json> expected = stepped_metrics(o, 12, stepped);
    REQUIRE(expected.size() == 12 + 3);

    o.out_dir = dir;
    TinyLM model(16, 8, 5);
    CycleSource train(16, 4, 8), val(16, 4, 8);
    std::ostringstream log;
    Trainer trainer(o, model, train, &val, log);
    trainer.run();
    CHECK(untimed_metrics(dir + "/metrics.jsonl") == expected);  // losses, grad norms, lr, val losses: every bit
    CHECK(params_bit_equal(model, stepped));
    CHECK(log.str().find("saved " + dir + "/checkpoint (step 6)") != std::string::npos);
    for (const std::string& line : read_lines(dir + "/metrics.jsonl")) {
      const nlohmann::json j = nlohmann::json::parse(line);
      if (j.contains("ms")) CHECK(j["ms"].get<double>() > 0);  // every window timed
    }
    CHECK(trainer.throughput().after_step == 3);
    CHECK(trainer.throughput().tokens_per_s > 0);
    std::filesystem::remove_all(dir);
  }
}

TEST_CASE("a batch that fails while a window is read comes after that window's lines; the save before holds its step") {
  const std::string dir = temp_dir("overlap_failing_batch");
  TrainerOptions o = small_options("adamw");  // grad_accum 2: two batches a step
  o.schedule.total_steps = 12;
  o.log_every = 3;
  o.save_every = 6;  // reads after 3 (step 4 queued first), 6 (saved), 9 (step 10 queued first: it fails)
  o.out_dir = dir;
  TinyLM model(16, 8, 5);
  FailingSource source(/*failing_call=*/19);  // the first batch of step 10
  std::ostringstream log;
  Trainer trainer(o, model, source, nullptr, log);
  CHECK(error_of([&] { trainer.run(); }).find("batch 19 cannot be read") != std::string::npos);
  TinyLM nine_steps(16, 8, 5);
  CHECK(untimed_metrics(dir + "/metrics.jsonl") == stepped_metrics(o, 9, nine_steps));
  CHECK(log.str().find("step  9/12") != std::string::npos);

  // the checkpoint of step 6: that step's parameters and data position, not one update more
  TinyLM six_steps(16, 8, 5), resumed(16, 8, 5);
  stepped_metrics(o, 6, six_steps);
  TrainerOptions plain = o;
  plain.out_dir.clear();
  CycleSource resumed_source(16, 4, 8);
  Trainer from_checkpoint(plain, resumed, resumed_source, nullptr, log);
  from_checkpoint.resume(dir + "/checkpoint");
  CHECK(from_checkpoint.step() == 6);
  CHECK(resumed_source.position() == nlohmann::json{{"next", 12}});
  CHECK(params_bit_equal(resumed, six_steps));
  std::filesystem::remove_all(dir);
}

TEST_CASE("a window that diverged, read while the next update runs: that update is named among the zeroed ones") {
  struct Case {
    int nan_step;
    std::string zeroed;  // the updates the report names
  };
  // log_every 3 of 10 steps: reads after 3, 6 and 9 with the next update queued first, after 10 alone
  for (const Case& c : {Case{5, "updates of steps 5-7"}, Case{7, "updates of steps 7-10"}}) {
    CAPTURE(c.nan_step);
    const std::string dir = temp_dir("overlap_diverged");
    TrainerOptions o = small_options("adamw");
    o.grad_accum = 1;
    o.log_every = 3;
    o.out_dir = dir;
    PoisonedGradientLM model(/*index=*/2, /*from_call=*/c.nan_step);
    CycleSource source(16, 4, 8);
    std::ostringstream log;
    Trainer trainer(o, model, source, nullptr, log);
    const std::string err = error_of([&] { trainer.run(); });
    CHECK(err.rfind("training diverged at step " + std::to_string(c.nan_step) + " (loss ", 0) == 0);
    CHECK(err.find("): the gradient of 'model.norm.weight' holds NaN or Inf values; lower [optim] lr or set [optim] "
                   "clip (the optimizer " + c.zeroed + " ran with zeroed gradients: no NaN or Inf gradient was "
                   "applied)") != std::string::npos);
    CHECK(all_parameters_finite(model));
    const std::vector<nlohmann::json> lines = untimed_metrics(dir + "/metrics.jsonl");
    REQUIRE(lines.size() == size_t(c.nan_step - 1));  // the steps before it, written at the read
    for (size_t i = 0; i < lines.size(); i++) CHECK(lines[i]["step"] == i + 1);
    std::filesystem::remove_all(dir);
  }
}
