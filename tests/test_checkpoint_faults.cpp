// Faults while training and checkpointing: a process killed at each point of a checkpoint's
// commit (fork + SIGKILL), leftovers of interrupted saves, NaN/Inf refused at save and load and
// named at the step it appears, damaged checkpoints told apart from a diverging run, changed
// settings on resume, and metrics.jsonl on a full disk (RLIMIT_FSIZE, as test_file_safety.cpp).
#include <doctest/doctest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "nn/ops/arith.h"
#include "tensor/safetensors.h"
#include "tests/test_train_util.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

using namespace hla;
using namespace hla::testing;
namespace fs = std::filesystem;

namespace {

const double kNaN = std::nan("");

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// Names beside `dir` that start with its name followed by ".tmp-" or ".old-".
std::vector<std::string> leftovers_beside(const std::string& dir) {
  std::vector<std::string> found;
  const std::string name = fs::path(dir).filename().string();
  for (const auto& e : fs::directory_iterator(fs::path(dir).parent_path())) {
    const std::string entry = e.path().filename().string();
    if (entry.rfind(name + ".tmp-", 0) == 0 || entry.rfind(name + ".old-", 0) == 0) found.push_back(entry);
  }
  return found;
}

// A process id that no longer runs: a child that exited and was reaped.
pid_t dead_pid() {
  pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, nullptr, 0);
  return pid;
}

// Runs save_checkpoint(dir, data) in a child process that kills itself with SIGKILL at `point`.
void save_killed_at(const std::string& dir, const CheckpointData& data, CommitPoint point) {
  pid_t pid = fork();
  if (pid == 0) {
    try {
      save_checkpoint(dir, data, [&](CommitPoint reached, const std::string&) {
        if (reached == point) raise(SIGKILL);
      });
    } catch (...) {
      _exit(2);
    }
    _exit(3);  // the point was never reached
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFSIGNALED(status));
  REQUIRE(WTERMSIG(status) == SIGKILL);
}

// A trainer on the tiny model, `steps` updates in, with its checkpoint data as Trainer::save
// writes it (trainer_state.json taken from a save to `scratch`).
struct TrainedTiny {
  TinyLM model{16, 8, 5};
  CycleSource source{16, 4, 8};
  Trainer trainer{small_options("adamw"), model, source, nullptr, std::cout};
  ParameterList params = model.parameters();
  CheckpointData data;

  TrainedTiny(int steps, const std::string& scratch) {
    for (int i = 0; i < steps; i++) trainer.train_step();
    trainer.save(scratch);
    data.params = &params;
    data.model_config = read_json_file(scratch + "/config.json");
    data.optimizer = &trainer.optimizer();
    data.trainer_state = read_json_file(scratch + "/trainer_state.json");
  }
};

int64_t resumed_step(const std::string& dir, std::ostream& log) {
  TinyLM model(16, 8, 99);
  CycleSource source(16, 4, 8);
  Trainer trainer(small_options("adamw"), model, source, nullptr, log);
  trainer.resume(dir);
  return trainer.step();
}

void set_value(Var v, int64_t index, double value) {
  Tensor& t = v.mutable_value();
  std::vector<double> values = t.to_f64_vector();
  values[index] = value;
  t.copy_(Tensor::from_f64(values, t.shape(), t.dtype()));
}

// Rewrites one value of tensor `name` in the safetensors file at `path`.
void damage_file(const std::string& path, const std::string& name, double value) {
  SafetensorsFile file = load_safetensors(path);
  for (auto& [tensor_name, t] : file.tensors) {
    if (tensor_name != name) continue;
    std::vector<double> values = t.to_f64_vector();
    values[0] = value;
    t = Tensor::from_f64(values, t.shape(), t.dtype());
  }
  save_safetensors(path, file.tensors, file.metadata);
}

}  // namespace

TEST_CASE("a save killed at each point of its commit: the next start recovers the good checkpoint") {
  struct Case {
    CommitPoint point;
    int64_t step;  // the checkpoint that must come back
    bool dir_missing;  // what the kill leaves: no directory named `checkpoint`
  };
  for (Case c : {Case{CommitPoint::FilesWritten, 1, false}, Case{CommitPoint::OldMovedAside, 2, true},
                 Case{CommitPoint::NewInPlace, 2, false}}) {
    CAPTURE(int(c.point));
    const std::string root = temp_dir("killed_commit");
    const std::string dir = root + "/checkpoint";
    TrainedTiny tiny(1, root + "/scratch");
    tiny.trainer.save(dir);
    const std::string weights_at_1 = slurp(dir + "/model.safetensors");
    tiny.trainer.train_step();
    tiny.trainer.save(root + "/scratch");
    tiny.data.trainer_state = read_json_file(root + "/scratch/trainer_state.json");
    const std::string weights_at_2 = slurp(root + "/scratch/model.safetensors");

    save_killed_at(dir, tiny.data, c.point);
    CHECK(fs::exists(dir) == !c.dir_missing);
    CHECK(leftovers_beside(dir).size() >= 1);

    std::ostringstream log;
    CHECK(resumed_step(dir, log) == c.step);
    CHECK(slurp(dir + "/model.safetensors") == (c.step == 1 ? weights_at_1 : weights_at_2));
    CHECK(leftovers_beside(dir).empty());
    CHECK(log.str().find("checkpoint: ") != std::string::npos);
    if (c.dir_missing) CHECK(log.str().find("restored " + dir + " from " + dir + ".tmp-") != std::string::npos);
    fs::remove_all(root);
  }
}

TEST_CASE("a save whose second rename fails gives the previous checkpoint its name back") {
  const std::string root = temp_dir("failed_rename");
  const std::string dir = root + "/checkpoint";
  TrainedTiny tiny(1, dir);
  tiny.trainer.train_step();
  const std::string before = slurp(dir + "/model.safetensors");
  std::string err = error_of([&] {
    save_checkpoint(dir, tiny.data, [](CommitPoint point, const std::string&) {
      if (point == CommitPoint::OldMovedAside) throw std::runtime_error("simulated rename failure");
    });
  });
  CHECK(err.find("not written (any previous checkpoint there is kept): simulated rename failure") != std::string::npos);
  CHECK(slurp(dir + "/model.safetensors") == before);
  CHECK(leftovers_beside(dir).empty());
  fs::remove_all(root);
}

TEST_CASE("leftovers of dead processes are removed at the next start; a running process's are kept") {
  const std::string root = temp_dir("leftovers");
  const std::string dir = root + "/checkpoint";
  TrainedTiny tiny(1, dir);
  const std::string dead = dir + ".tmp-" + std::to_string(dead_pid());
  const std::string own = dir + ".old-" + std::to_string(getpid());  // a restarted container's pid
  const std::string running = dir + ".tmp-" + std::to_string(getppid());
  const std::string unrelated = dir + ".tmp-notes";
  for (const std::string& d : {dead, own, running, unrelated}) fs::create_directories(d + "/partial");
  std::vector<std::string> notes = recover_checkpoint(dir + "/");
  std::sort(notes.begin(), notes.end());
  std::vector<std::string> expected = {"removed " + dead + " (left by a save that did not finish)",
                                       "removed " + own + " (left by a save that did not finish)"};
  std::sort(expected.begin(), expected.end());
  CHECK(notes == expected);
  CHECK_FALSE(fs::exists(dead));
  CHECK_FALSE(fs::exists(own));
  CHECK(fs::exists(running));
  CHECK(fs::exists(unrelated));
  CHECK(fs::exists(dir + "/model.safetensors"));
  fs::remove_all(root);
}

TEST_CASE("a save refuses NaN or Inf in parameters and optimizer state, naming the tensor") {
  const std::string root = temp_dir("non_finite_save");
  const std::string dir = root + "/checkpoint";
  TinyLM model(16, 8, 5);
  ParameterList params = model.parameters();
  Optimizer optimizer(params, small_options("adamw").optim);
  CheckpointData data;
  data.params = &params;
  data.optimizer = &optimizer;
  data.trainer_state = {{"step", 0}};
  save_checkpoint(dir, data);
  const std::string good = slurp(dir + "/model.safetensors");

  const Tensor kept = params[1].var.value().clone();
  set_value(params[1].var, 3, INFINITY);
  std::string err = error_of([&] { save_checkpoint(dir, data); });
  CHECK(err.find("checkpoint " + dir + " not written (any previous checkpoint there is kept): parameter "
                 "'model.layers.0.proj.weight' holds NaN or Inf values") != std::string::npos);
  params[1].var.mutable_value().copy_(kept);

  set_grad(params[2].var, std::vector<double>(8, kNaN));  // NaN moments for model.norm.weight
  const Tensor norm_before = params[2].var.value().clone();
  optimizer.step(1.0);
  params[2].var.mutable_value().copy_(norm_before);  // only the optimizer state is non-finite
  err = error_of([&] { save_checkpoint(dir, data); });
  CHECK(err.find("optimizer state 'model.norm.weight.exp_avg' holds NaN or Inf values") != std::string::npos);
  CHECK(slurp(dir + "/model.safetensors") == good);
  CHECK(leftovers_beside(dir).empty());
  fs::remove_all(root);
}

TEST_CASE("NaN in training is reported at the step it appears, naming the gradient or parameter") {
  TrainerOptions o = small_options("adamw");
  o.grad_accum = 1;
  PoisonedGradientLM model(/*index=*/2, /*from_call=*/3);
  CycleSource source(16, 4, 8);
  Trainer trainer(o, model, source, nullptr, std::cout);
  trainer.train_step();
  trainer.train_step();
  std::string err = error_of([&] { trainer.train_step(); });
  CHECK(err.rfind("training diverged at step 3 (loss ", 0) == 0);
  CHECK(err.find("): the gradient of 'model.norm.weight' holds NaN or Inf values; lower [optim] lr or set "
                 "[optim] clip") != std::string::npos);

  TinyLM nan_at_start(16, 8, 5);
  set_value(nan_at_start.parameters()[0].var, 0, kNaN);
  Trainer from_start(o, nan_at_start, source, nullptr, std::cout);
  CHECK(error_of([&] { from_start.train_step(); }).find("): parameter 'model.embeddings.weight' holds NaN or Inf "
                                                        "values from the start") != std::string::npos);

  TinyLM plain(16, 8, 5);
  Trainer second(o, plain, source, nullptr, std::cout);
  second.train_step();
  set_value(plain.parameters()[3].var, 0, kNaN);  // as if the update of step 1 had produced it
  err = error_of([&] { second.train_step(); });
  CHECK(err.find("training diverged at step 2 (") == 0);
  CHECK(err.find("): parameter 'lm_head.weight' holds NaN or Inf values since the update of step 1") !=
        std::string::npos);
}

TEST_CASE("a damaged checkpoint is reported as damaged, naming the file and tensor, not as divergence") {
  const std::string root = temp_dir("damaged");
  const std::string dir = root + "/checkpoint";
  TrainedTiny tiny(2, dir);
  damage_file(dir + "/model.safetensors", "model.norm.weight", kNaN);
  std::ostringstream log;
  std::string err = error_of([&] { resumed_step(dir, log); });
  CHECK(err == dir + "/model.safetensors: tensor 'model.norm.weight' holds nan at index 0 of 8: the file is "
                     "damaged (hla never saves non-finite weights)");

  tiny.trainer.save(dir);
  damage_file(dir + "/optimizer.safetensors", "lm_head.weight.exp_avg", INFINITY);
  err = error_of([&] { resumed_step(dir, log); });
  CHECK(err == dir + "/optimizer.safetensors: tensor 'lm_head.weight.exp_avg' holds NaN or Inf values: the file "
                     "is damaged (a save never writes them)");

  // trainer_state.json: the field that is wrong, with what it holds.
  tiny.trainer.save(dir);
  nlohmann::json state = read_json_file(dir + "/trainer_state.json");
  state["step"] = "two";
  write_json_file(dir + "/trainer_state.json", state);
  err = error_of([&] { resumed_step(dir, log); });
  CHECK(err == dir + "/trainer_state.json: field 'step' must be an integer >= 0, got \"two\"");
  state["step"] = 2;
  state["data"] = {{"val", {{"next", 0}}}};
  write_json_file(dir + "/trainer_state.json", state);
  err = error_of([&] { resumed_step(dir, log); });
  CHECK(err == dir + "/trainer_state.json: field 'data.train' is missing");

  // Finite but impossible: a negative second moment is refused at load, before any update.
  tiny.trainer.save(dir);
  damage_file(dir + "/optimizer.safetensors", "lm_head.weight.exp_avg_sq", -1.0);
  err = error_of([&] { resumed_step(dir, log); });
  CHECK(err == dir + "/optimizer.safetensors: tensor 'lm_head.weight.exp_avg_sq' holds -1 at index 0 of 128: a "
                     "second moment (a mean of squares) is never negative, the file is damaged");
  // Finite and loadable but absurd: a first moment of 3e38 overflows the first update.
  tiny.trainer.save(dir);
  damage_file(dir + "/optimizer.safetensors", "lm_head.weight.exp_avg", 3e38);
  TinyLM model(16, 8, 99);
  CycleSource source(16, 4, 8);
  Trainer resumed(small_options("adamw"), model, source, nullptr, log);
  resumed.resume(dir);
  resumed.train_step();
  err = error_of([&] { resumed.train_step(); });
  CHECK(err.find("parameter 'lm_head.weight' holds NaN or Inf values since the update of step 3; the first "
                 "update after resuming from " + dir + " brought them: its model.safetensors or "
                 "optimizer.safetensors is probably damaged") != std::string::npos);
  CHECK(err.find("lower [optim] lr") == std::string::npos);
  fs::remove_all(root);
}

TEST_CASE("resuming with changed settings warns with both values") {
  const std::string dir = temp_dir("changed_settings");
  TinyLM model(16, 8, 5);
  CycleSource source(16, 4, 8);
  TrainerOptions o = small_options("adamw");
  o.settings = {{"optim", {{"lr", 0.02}, {"warmup_steps", 2}}}, {"train", {{"steps", 10}}}};
  Trainer first(o, model, source, nullptr, std::cout);
  first.train_step();
  first.save(dir);

  o.settings["optim"]["lr"] = 0.005;
  o.settings["train"]["steps"] = 20;
  std::ostringstream log;
  TinyLM restored(16, 8, 99);
  CycleSource restored_source(16, 4, 8);
  Trainer second(o, restored, restored_source, nullptr, log);
  second.resume(dir);
  CHECK(log.str() ==
        "warning: resuming with [optim] lr = 0.005; the checkpoint was trained with 0.02\n"
        "warning: resuming with [train] steps = 20; the checkpoint was trained with 10\n");
  fs::remove_all(dir);
}

TEST_CASE("metrics.jsonl on a full disk: the run stops, naming the file and the errno text") {
  const std::string out_dir = temp_dir("metrics_full_disk");
  fs::create_directories(out_dir);
  const rlim_t limit = 64 * 1024;
  std::ofstream(out_dir + "/metrics.jsonl") << std::string(limit - 10, ' ');  // 10 bytes left
  TinyLM model(16, 8, 5);
  CycleSource source(16, 4, 8);
  TrainerOptions o = small_options("adamw");
  o.out_dir = out_dir;
  Trainer trainer(o, model, source, nullptr, std::cout);
  rlimit saved{};
  REQUIRE(getrlimit(RLIMIT_FSIZE, &saved) == 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = saved;
  small.rlim_cur = limit;
  REQUIRE(setrlimit(RLIMIT_FSIZE, &small) == 0);
  std::string err = error_of([&] { trainer.run(); });
  setrlimit(RLIMIT_FSIZE, &saved);
  std::signal(SIGXFSZ, old_handler);
  CHECK(err == "cannot append to " + out_dir + "/metrics.jsonl (File too large)");
  // the first step's line did not fit; run() had queued step 2 before writing it (the read of a
  // window overlaps the next update), and stopped there
  CHECK(trainer.step() == 2);
  fs::remove_all(out_dir);
}
