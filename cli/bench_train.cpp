// `hla bench train [--models NAME=CONFIG[@HYBRID],...] [--gpus 1,2] [--batch 8] [--seq-len 2048]
// [--steps 30] [--dtype bf16] [--device cuda] [--out DIR]`: training throughput per GPU count and
// the scaling efficiency, by running `hla train` itself (a child process per model and GPU count,
// so --gpus N is measured exactly as a user runs it).
//
// Weak scaling: every GPU trains --batch sequences of --seq-len tokens per update, so --gpus N
// trains N * batch sequences per update ([data] batch_size = N * batch, split over the ranks).
// Data: the synthetic MQAR stream (no files needed; its vocabulary is min(8192, the model's), and
// which ids the tokens are does not change the cost of a step). tokens/s is the mean over the steps after
// the first kWarmupSteps, from the run's metrics.jsonl (tokens over the window wall times, as the
// step lines report them). speedup = tokens/s(N) / tokens/s(1); efficiency = speedup / N.
// Default models: the 374M Transformer and the Gated DeltaNet 3:1 hybrid (shared/design/targets.md).
// Writes DIR/train_bench.json and DIR/train_bench.md; each run's log is DIR/<model>-gpus<N>.log.
#include "cli/bench_train.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "cli/command.h"
#include "nn/weights.h"
#include "tensor/atomic_file.h"
#include "tensor/json.h"

namespace hla::cli {

namespace {

constexpr int64_t kWarmupSteps = 5;  // steps left out of the mean (allocator and cuBLAS warm-up)

struct BenchModel {
  std::string name, config, hybrid;  // hybrid "": the config's own
  int64_t data_vocab = 0;            // the MQAR vocabulary
};

struct TrainBenchOptions {
  std::vector<std::string> models = {"transformer-374m=configs/models/transformer-340m.json",
                                     "gdn-3:1=configs/models/gated_deltanet-340m.json@3:1"};
  std::vector<int> gpus = {1, 2};
  int64_t batch = 8, seq_len = 2048, steps = 30;
  std::string dtype = "bf16", device = "cuda", out = "runs/bench-train";
};

struct BenchRow {
  std::string model;
  int gpus = 0;
  int64_t global_batch = 0;
  double tokens_per_s = 0, speedup = 0, efficiency = 0;
};

BenchModel parse_model(const std::string& text) {
  const size_t eq = text.find('=');
  HLA_CHECK_INPUT(eq != std::string::npos && eq > 0, "--models: '", text, "' is not NAME=CONFIG[@HYBRID]");
  BenchModel m{text.substr(0, eq), text.substr(eq + 1), ""};
  const size_t at = m.config.find('@');
  if (at != std::string::npos) m.hybrid = m.config.substr(at + 1), m.config = m.config.substr(0, at);
  HLA_CHECK_INPUT(std::filesystem::exists(m.config), "--models: ", m.name, ": no config file ", m.config);
  const nlohmann::json config = read_json_file(m.config);
  const auto vocab = config.find("vocab_size");
  HLA_CHECK_INPUT(vocab != config.end() && vocab->is_number_integer() && vocab->get<int64_t>() >= 2, m.config,
                  ": field 'vocab_size' must be an integer >= 2 for the bench's data");
  m.data_vocab = std::min<int64_t>(8192, vocab->get<int64_t>());
  return m;
}

// A file name from a model name ("gdn-3:1" -> "gdn-3_1").
std::string file_stem(const std::string& name) {
  std::string s = name;
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.') c = '_';
  return s;
}

std::string quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// Mean tokens/s of the steps after kWarmupSteps in a run's metrics.jsonl.
double mean_tokens_per_s(const std::string& metrics_path) {
  std::ifstream in(metrics_path);
  HLA_CHECK_INPUT(in, metrics_path, ": missing: the run wrote no metrics");
  double tokens = 0, seconds = 0;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = parse_json(line, metrics_path);
    if (!j.contains("tokens") || j.value("step", int64_t(0)) <= kWarmupSteps) continue;
    tokens += j["tokens"].get<double>();
    seconds += j["ms"].get<double>() / 1000.0;
  }
  HLA_CHECK_INPUT(seconds > 0, metrics_path, ": no step after step ", kWarmupSteps, " (give --steps > ", kWarmupSteps,
                  ")");
  return tokens / seconds;
}

double run_one(const TrainBenchOptions& o, const BenchModel& m, int gpus) {
  const std::string stem = o.out + "/" + file_stem(m.name) + "-gpus" + std::to_string(gpus);
  std::ostringstream cmd;
  cmd << quoted(std::filesystem::read_symlink("/proc/self/exe").string()) << " train --model.config "
      << quoted(m.config);
  if (!m.hybrid.empty()) cmd << " --model.hybrid " << quoted(m.hybrid);
  cmd << " --gpus " << gpus << " --device " << o.device << " --train.dtype " << o.dtype
      << " --data.source mqar --data.mqar_vocab " << m.data_vocab << " --data.seq_len " << o.seq_len << " --data.batch_size " << o.batch * gpus
      << " --train.steps " << o.steps << " --train.log_every 5 --train.val_every 0 --train.val_batches 0"
      << " --train.out_dir " << quoted(stem) << " > " << quoted(stem + ".log") << " 2>&1";
  std::cerr << "bench train: " << m.name << " on " << gpus << " GPU(s): log " << stem << ".log" << std::endl;
  const int status = std::system(cmd.str().c_str());
  if (status != 0) {
    std::cerr << "bench train: " << m.name << " --gpus " << gpus << " failed; the end of " << stem << ".log:\n";
    std::system(("tail -n 20 " + quoted(stem + ".log") + " >&2").c_str());
    throw ExitCode{1};
  }
  return mean_tokens_per_s(stem + "/metrics.jsonl");
}

std::string table(const std::vector<BenchRow>& rows, const TrainBenchOptions& o) {
  std::ostringstream os;
  os << "training throughput, " << o.dtype << ", " << o.batch << " x " << o.seq_len
     << " tokens per GPU and update (weak scaling), mean after step " << kWarmupSteps << "\n\n";
  os << "| model | GPUs | sequences per update | tokens/s | speedup | efficiency |\n";
  os << "|---|---:|---:|---:|---:|---:|\n";
  char line[256];
  for (const BenchRow& r : rows) {
    std::snprintf(line, sizeof line, "| %s | %d | %lld | %.0f | %.2fx | %.1f%% |\n", r.model.c_str(), r.gpus,
                  (long long)r.global_batch, r.tokens_per_s, r.speedup, 100.0 * r.efficiency);
    os << line;
  }
  return os.str();
}

void run_bench(const TrainBenchOptions& o) {
  std::vector<BenchModel> models;
  for (const std::string& text : o.models) models.push_back(parse_model(text));
  std::filesystem::create_directories(o.out);
  std::vector<BenchRow> rows;
  nlohmann::json results = nlohmann::json::array();
  for (const BenchModel& m : models) {
    double single = 0;
    for (int gpus : o.gpus) {
      BenchRow r;
      r.model = m.name;
      r.gpus = gpus;
      r.global_batch = o.batch * gpus;
      r.tokens_per_s = run_one(o, m, gpus);
      if (gpus == 1) single = r.tokens_per_s;
      r.speedup = single > 0 ? r.tokens_per_s / single : 0;
      r.efficiency = r.speedup / gpus;
      rows.push_back(r);
      results.push_back({{"model", r.model}, {"config", m.config}, {"hybrid", m.hybrid}, {"gpus", gpus},
                         {"sequences_per_update", r.global_batch}, {"seq_len", o.seq_len},
                         {"tokens_per_s", r.tokens_per_s}, {"speedup", r.speedup}, {"efficiency", r.efficiency}});
    }
  }
  const std::string text = table(rows, o);
  std::cout << text;
  write_file_atomic(o.out + "/train_bench.json", results.dump(2) + "\n");
  write_file_atomic(o.out + "/train_bench.md", text);
  std::cerr << "wrote " << o.out << "/train_bench.json and " << o.out << "/train_bench.md\n";
}

}  // namespace

void setup_bench_train(CLI::App& bench) {
  auto o = std::make_shared<TrainBenchOptions>();
  CLI::App* sub = bench.add_subcommand("train", "Training tokens/s on 1, 2, ... GPUs and the scaling efficiency");
  sub->option_defaults()->always_capture_default();
  sub->add_option("--models", o->models, "NAME=CONFIG[@HYBRID], comma-separated")->delimiter(',');
  sub->add_option("--gpus", o->gpus, "GPU counts, comma-separated (speedups are against 1: list it first)")
      ->delimiter(',');
  sub->add_option("--batch", o->batch, "sequences per GPU and update");
  sub->add_option("--seq-len", o->seq_len, "tokens per sequence");
  sub->add_option("--steps", o->steps, "updates per run (the first 5 are not timed)");
  sub->add_option("--dtype", o->dtype, "compute dtype")->check(CLI::IsMember({"f32", "bf16"}));
  sub->add_option("--device", o->device, "cuda (or cpu, --gpus 1 only, to try the command)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  sub->add_option("--out", o->out, "directory for the runs, train_bench.json and train_bench.md");
  sub->callback([o] { run_bench(*o); });
}

}  // namespace hla::cli
