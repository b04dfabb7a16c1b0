// The sweep runner: run states, child processes, results rows, progress (see runner.h).
#include "sweep/runner.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <ostream>
#include <sstream>

#include "eval/lm_tasks.h"
#include "eval/ruler.h"
#include "nn/decode.h"
#include "sweep/report.h"
#include "tensor/atomic_file.h"
#include "tensor/error.h"
#include "tensor/json.h"
#include "train/checkpoint.h"
#include "train/run_config.h"

namespace fs = std::filesystem;

namespace hla::sweep {

namespace {

using nlohmann::json;
using nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

json read_json(const std::string& path) { return parse_json(read_text(path), path); }

// The JSON lines of a file (a missing file has none).
std::vector<json> read_jsonl(const std::string& path) {
  std::vector<json> lines;
  std::ifstream in(path);
  int number = 0;
  for (std::string line; std::getline(in, line);) {
    number++;
    if (!line.empty()) lines.push_back(parse_json(line, path + ":" + std::to_string(number)));
  }
  return lines;
}

std::string seconds_text(double s) {
  char buf[32];
  if (s < 60) std::snprintf(buf, sizeof buf, "%.1f s", s);
  else if (s < 3600) std::snprintf(buf, sizeof buf, "%dm %02ds", int(s) / 60, int(s) % 60);
  else std::snprintf(buf, sizeof buf, "%dh %02dm", int(s) / 3600, int(s) / 60 % 60);
  return buf;
}

// The step of a run's checkpoint; -1 when there is none.
int64_t checkpoint_step(const std::string& run_dir) {
  const std::string dir = run_dir + "/checkpoint";
  if (!fs::exists(run_dir)) return -1;
  recover_checkpoint(dir);
  const std::string state = dir + "/trainer_state.json";
  if (!fs::exists(state)) return -1;
  const json j = read_json(state);
  HLA_CHECK_INPUT(j.contains("step") && j["step"].is_number_integer(), state, ": field 'step' must be an integer");
  return j["step"].get<int64_t>();
}

// The last line of a log, to quote in a failure.
std::string last_line(const std::string& path) {
  std::ifstream in(path);
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  return last.size() > 300 ? last.substr(0, 300) + "..." : last;
}

// Starts `args` (args[0] the binary) with stdout and stderr appended to `log_path`.
pid_t spawn(const std::vector<std::string>& args, const std::string& log_path) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::fflush(nullptr);
  const pid_t pid = fork();
  HLA_CHECK_INPUT(pid >= 0, "hla sweep: cannot start ", args[0], " (fork: ", std::strerror(errno), ")");
  if (pid == 0) {
    const int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0 || dup2(fd, 1) < 0 || dup2(fd, 2) < 0) _exit(126);
    execv(argv[0], argv.data());
    dprintf(2, "hla sweep: cannot run %s (%s)\n", argv[0], std::strerror(errno));
    _exit(127);
  }
  return pid;
}

std::string exit_text(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("was killed by signal ") + strsignal(WTERMSIG(status));
  return "stopped";
}

// ---------------------------------------------------------------- the results row

// Per LM task the paper's metric (%), and their mean.
void add_lm_columns(const json& results, ordered_json& row) {
  if (!results.contains("lm_tasks") || results["lm_tasks"].empty()) return;
  double sum = 0;
  int n = 0;
  for (const eval::LmTaskInfo& task : eval::lm_tasks()) {
    if (!results["lm_tasks"].contains(task.name)) continue;
    const double acc = 100 * results["lm_tasks"][task.name]["metrics"][task.paper_metric].get<double>();
    row["lm." + task.name] = acc;
    sum += acc;
    n++;
  }
  if (n > 0) row["lm_avg"] = sum / n;
}

// Per RULER task its mean score over the lengths, and the mean of the per-length averages.
void add_ruler_columns(const json& ruler, ordered_json& row) {
  auto mean_of = [](const json& by_length, bool scored) {
    double sum = 0;
    int n = 0;
    for (const json& v : by_length) {
      sum += scored ? v["score"].get<double>() : v.get<double>();
      n++;
    }
    return n > 0 ? sum / n : 0.0;
  };
  for (const eval::RulerTask& task : eval::ruler_tasks())  // RULER's order, not the JSON's
    if (ruler["tasks"].contains(task.name)) row["ruler." + task.name] = mean_of(ruler["tasks"][task.name], true);
  row["ruler_avg"] = mean_of(ruler["average"], false);
}

void add_mqar_columns(const json& mqar, ordered_json& row) {
  double sum = 0;
  int n = 0;
  for (const json& cell : mqar["cells"]) {
    const double acc = 100 * cell["accuracy"].get<double>();
    row["mqar." + std::to_string(cell["seq_len"].get<int64_t>()) + "x" +
        std::to_string(cell["num_kv_pairs"].get<int64_t>())] = acc;
    sum += acc;
    n++;
  }
  if (n > 0) row["mqar_avg"] = sum / n;
}

// tokens/s and step time over the steps after the first (the warm-up), the GPU's peak, and the
// final training and validation numbers, from metrics.jsonl.
void add_training_columns(const std::string& run_dir, ordered_json& row) {
  double ms = 0, tokens_timed = 0, peak_gib = 0, last_loss = NAN;
  int64_t timed = 0, tokens = 0;
  json last_val;
  std::string curve;
  for (const json& line : read_jsonl(run_dir + "/metrics.jsonl")) {
    if (line.contains("val_loss")) {
      last_val = line;
      if (line["val_loss"].is_number())
        curve += (curve.empty() ? "" : " ") + std::to_string(line["step"].get<int64_t>()) + ":" +
                 json(line["val_loss"].get<double>()).dump();
      continue;
    }
    tokens += line.value("tokens", int64_t(0));
    peak_gib = std::max(peak_gib, line.value("peak_gib", 0.0));
    last_loss = line["loss"].is_number() ? line["loss"].get<double>() : NAN;
    if (line.value("step", int64_t(0)) > 1) {
      ms += line.value("ms", 0.0);
      tokens_timed += line.value("tokens", int64_t(0));
      timed++;
    }
  }
  row["train_tokens"] = tokens;
  row["final_train_loss"] = std::isfinite(last_loss) ? json(last_loss) : json();
  row["final_val_loss"] = last_val.is_null() ? json() : last_val["val_loss"];
  row["final_val_accuracy"] =
      last_val.contains("val_accuracy") ? json(100 * last_val["val_accuracy"].get<double>()) : json();
  row["tokens_per_s"] = ms > 0 ? json(tokens_timed / (ms / 1000)) : json();
  row["step_ms"] = timed > 0 ? json(ms / timed) : json();
  row["peak_gpu_gib"] = peak_gib > 0 ? json(peak_gib) : json();  // 0 on the CPU: no GPU allocator
  row["val_loss_curve"] = curve;
}

// The parameter count, from the last "params:  N in M tensors" line of train.log.
json parameter_count(const std::string& run_dir) {
  std::ifstream in(run_dir + "/train.log");
  json count;
  for (std::string line; std::getline(in, line);) {
    long long n = 0;
    if (std::sscanf(line.c_str(), "params: %lld in", &n) == 1) count = static_cast<int64_t>(n);
  }
  return count;
}

// What decoding holds per sequence (nn/decode.h): the recurrent states and tails, the KV cache
// per token of context, and all of it at 4096 tokens (MiB), in the dtype the run computed in.
void add_decode_columns(const std::string& run_dir, const std::string& dtype, ordered_json& row) {
  const ModelConfig config = ModelConfig::load(run_dir + "/checkpoint/config.json");
  const DType activation = dtype == "bf16" ? DType::BF16 : DType::F32;
  const DecodeMemory one = decode_memory(config, 1, activation);
  row["decode_state_bytes"] = one.state_bytes;
  row["decode_kv_bytes_per_token"] = one.kv_bytes;
  row["decode_mib_at_4096"] = double(decode_memory(config, 4096, activation).total()) / (1 << 20);
}

void append_segment(const std::string& run_dir, const json& segment) {
  const std::string path = run_dir + "/segments.jsonl";
  write_file_atomic(path, read_text(path) + segment.dump() + "\n");
}

// ---------------------------------------------------------------- the run loop

enum class Phase { Train, Eval };

struct Job {
  size_t index;  // into `selected`
  Phase phase;
  pid_t pid;
  Clock::time_point started;
  double eval_seconds = 0;
};

class SweepRunner {
 public:
  SweepRunner(const Sweep& sweep, const std::vector<SweepRun>& selected, const SweepOptions& options, std::ostream& log)
      : sweep_(sweep), selected_(selected), options_(options), log_(log) {
    // The binary's own path (not /proc/self/exe), so `ps` and the logs name what runs.
    options_.hla_binary = fs::canonical(options.hla_binary).string();
  }

  int run() {
    prepare_directories();
    std::vector<size_t> pending;
    for (size_t i = 0; i < selected_.size(); i++) {
      if (fs::exists(run_dir(i) + "/row.json")) {
        log_ << "sweep: " << selected_[i].name << ": done, skipped\n";
        finished_++;
      } else {
        pending.push_back(i);
      }
    }
    std::reverse(pending.begin(), pending.end());
    write_results();
    start_ = Clock::now();
    while (!pending.empty() || !jobs_.empty()) {
      while (!pending.empty() && static_cast<int>(jobs_.size()) < options_.parallel) {
        start_run(pending.back());
        pending.pop_back();
      }
      wait_for_child();
    }
    log_ << "sweep: " << finished_ << " of " << selected_.size() << " runs done, " << failed_ << " failed; results in "
         << options_.out << "/results.csv and report.md\n" << std::flush;
    return failed_;
  }

 private:
  std::string run_dir(size_t i) const { return options_.out + "/runs/" + selected_[i].name; }
  std::string run_toml(size_t i) const {
    json file = selected_[i].run_file;
    file["train"]["out_dir"] = run_dir(i);
    return run_file_text(file);
  }

  // A new sweep needs an empty --out; --resume needs every existing run's settings unchanged.
  void prepare_directories() {
    const std::string runs = options_.out + "/runs";
    HLA_CHECK_INPUT(options_.resume || !fs::exists(runs) || fs::is_empty(runs), options_.out,
                    " already holds a sweep (", runs, "); pass --resume to continue it, or choose another --out");
    for (size_t i = 0; i < selected_.size(); i++) {
      const std::string path = run_dir(i) + "/run.toml";
      if (fs::exists(path))
        HLA_CHECK_INPUT(read_text(path) == run_toml(i), path, ": the run's settings differ from what ", sweep_.source,
                        " gives now; a changed grid needs another --out (or remove ", run_dir(i), ")");
    }
    fs::create_directories(runs);
  }

  void start_run(size_t i) {
    const std::string dir = run_dir(i);
    fs::create_directories(dir);
    fs::remove(dir + "/failed.json");
    write_file_atomic(dir + "/run.toml", run_toml(i));
    const int64_t step = checkpoint_step(dir);
    const SweepRun& run = selected_[i];
    if (step >= run.steps) {
      progress(i, "trained, evaluating");
      start_eval(i);
      return;
    }
    std::vector<std::string> args = {options_.hla_binary, "train", "--config", dir + "/run.toml"};
    if (step > 0) {
      args.push_back("--resume");
      args.push_back(dir + "/checkpoint");
    }
    progress(i, step > 0 ? "resuming at step " + std::to_string(step) + " of " + std::to_string(run.steps)
                         : "training " + std::to_string(run.steps) + " steps");
    jobs_.push_back({i, Phase::Train, spawn(args, dir + "/train.log"), Clock::now()});
  }

  void start_eval(size_t i) {
    const std::string dir = run_dir(i);
    if (sweep_.eval_args.empty()) {
      finish(i, 0);
      return;
    }
    std::vector<std::string> args = {options_.hla_binary, "eval", "--checkpoint", dir + "/checkpoint", "--out",
                                     dir + "/eval", "--no-progress", "--device",
                                     selected_[i].run_file["train"].value("device", "cpu")};
    args.insert(args.end(), sweep_.eval_args.begin(), sweep_.eval_args.end());
    jobs_.push_back({i, Phase::Eval, spawn(args, dir + "/eval.log"), Clock::now()});
  }

  void wait_for_child() {
    int status = 0;
    rusage usage{};
    pid_t pid;
    do pid = wait4(-1, &status, 0, &usage);
    while (pid < 0 && errno == EINTR);
    HLA_CHECK(pid > 0, "hla sweep: wait4 failed (", std::strerror(errno), ")");
    auto it = std::find_if(jobs_.begin(), jobs_.end(), [&](const Job& j) { return j.pid == pid; });
    if (it == jobs_.end()) return;  // not one of ours
    const Job job = *it;
    jobs_.erase(it);
    const double seconds = std::chrono::duration<double>(Clock::now() - job.started).count();
    const std::string dir = run_dir(job.index);
    const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (job.phase == Phase::Train) {
      append_segment(dir, {{"exit", exit_text(status)}, {"seconds", seconds}, {"max_rss_mib", usage.ru_maxrss / 1024.0}});
      if (ok) start_eval(job.index);
      else fail_run(job.index, "train " + exit_text(status) + " (" + dir + "/train.log: " + last_line(dir + "/train.log") + ")");
    } else if (ok) {
      finish(job.index, seconds);
    } else {
      fail_run(job.index, "eval " + exit_text(status) + " (" + dir + "/eval.log: " + last_line(dir + "/eval.log") + ")");
    }
  }

  void finish(size_t i, double eval_seconds) {
    const ordered_json row = collect_row(selected_[i], run_dir(i), eval_seconds);
    write_file_atomic(run_dir(i) + "/row.json", row.dump(2) + "\n");
    finished_++;
    session_done_++;
    std::string summary = "done";
    if (row["final_val_loss"].is_number()) {
      char loss[32];
      std::snprintf(loss, sizeof loss, "%.4f", row["final_val_loss"].get<double>());
      summary += std::string(", val loss ") + loss;
    }
    progress(i, summary);
    write_results();
  }

  void fail_run(size_t i, const std::string& why) {
    write_file_atomic(run_dir(i) + "/failed.json", json({{"status", "failed: " + why}}).dump() + "\n");
    failed_++;
    session_done_++;
    progress(i, "FAILED: " + why);
    write_results();
  }

  // "sweep: [3/12] gla-...: done, val loss 1.23 | 40.2 s elapsed, ETA 1m 10s"
  void progress(size_t i, const std::string& what) {
    const double elapsed = std::chrono::duration<double>(Clock::now() - start_).count();
    const size_t left = selected_.size() - finished_ - failed_;
    log_ << "sweep: [" << finished_ + failed_ << "/" << selected_.size() << "] " << selected_[i].name << ": " << what;
    if (session_done_ > 0) {
      log_ << " | " << seconds_text(elapsed) << " elapsed";
      if (left > 0) log_ << ", ETA " << seconds_text(elapsed / session_done_ * left);
    }
    log_ << std::endl;
  }

  // The rows of the whole grid that are done or failed, in grid order.
  void write_results() {
    std::vector<ordered_json> rows;
    for (const SweepRun& run : sweep_.runs) {
      const std::string dir = options_.out + "/runs/" + run.name;
      if (fs::exists(dir + "/row.json")) {
        rows.push_back(ordered_json::parse(read_text(dir + "/row.json")));
      } else if (fs::exists(dir + "/failed.json")) {
        ordered_json row = {{"run", run.name}, {"status", read_json(dir + "/failed.json")["status"]}};
        for (auto it = run.axes.begin(); it != run.axes.end(); ++it) row[it.key()] = *it;
        rows.push_back(row);
      }
    }
    write_sweep_results(rows, options_.out);
  }

  const Sweep& sweep_;
  const std::vector<SweepRun>& selected_;
  SweepOptions options_;
  std::ostream& log_;
  std::vector<Job> jobs_;
  size_t finished_ = 0, failed_ = 0, session_done_ = 0;
  Clock::time_point start_ = Clock::now();
};

}  // namespace

ordered_json collect_row(const SweepRun& run, const std::string& run_dir, double eval_seconds) {
  ordered_json row = {{"run", run.name}, {"status", "done"}};
  for (auto it = run.axes.begin(); it != run.axes.end(); ++it) row[it.key()] = *it;
  row["params"] = parameter_count(run_dir);
  row["steps"] = run.steps;
  add_training_columns(run_dir, row);
  double train_seconds = 0, rss = 0;
  const std::vector<json> segments = read_jsonl(run_dir + "/segments.jsonl");
  for (const json& segment : segments) {
    train_seconds += segment["seconds"].get<double>();
    rss = std::max(rss, segment["max_rss_mib"].get<double>());
  }
  add_decode_columns(run_dir, run.run_file["train"].value("dtype", "f32"), row);
  // A sweep killed after a training finished but before it was recorded resumes straight into
  // the evaluation: no segment knows that training's time or memory, so the cells stay empty
  // rather than claiming 0.
  row["peak_rss_mib"] = nullptr;
  row["train_seconds"] = nullptr;
  if (!segments.empty()) row["peak_rss_mib"] = rss, row["train_seconds"] = train_seconds;
  row["eval_seconds"] = eval_seconds;
  const std::string results_path = run_dir + "/eval/results.json";
  if (fs::exists(results_path)) {
    const json results = read_json(results_path);
    add_lm_columns(results, row);
    if (results.contains("ruler")) add_ruler_columns(results["ruler"], row);
    if (results.contains("mqar")) add_mqar_columns(results["mqar"], row);
    if (results.contains("ppl"))
      for (const char* key : {"loss", "perplexity", "bits_per_byte", "word_perplexity"})
        if (results["ppl"].contains(key)) row[std::string("ppl.") + key] = results["ppl"][key];
  }
  // Every setting of the run, as hla train resolved it (its output directory aside).
  RunConfig config;
  config.apply_run_file(run.run_file, run.name + "/run.toml");
  const json settings = config.to_json();
  for (auto section = settings.begin(); section != settings.end(); ++section)
    for (auto item = section->begin(); item != section->end(); ++item)
      if (section.key() + "." + item.key() != "train.out_dir")
        row[section.key() + "." + item.key()] = item->is_array() ? json(item->dump()) : *item;
  return row;
}

int run_sweep(const Sweep& sweep, const std::vector<SweepRun>& selected, const SweepOptions& options,
              std::ostream& log) {
  HLA_CHECK_INPUT(options.parallel >= 1, "--parallel must be >= 1, got ", options.parallel);
  return SweepRunner(sweep, selected, options, log).run();
}

}  // namespace hla::sweep
