// `hla bench train [--models PRESET|NAME=CONFIG[@HYBRID],...] [--gpus 1,2] [--batch B] [--seq-len T]
// [--steps N] [--dtype bf16] [--device cuda] [--out DIR] [--list]`: training throughput per model
// and GPU count and the scaling efficiency, by running `hla train` itself (a child process per
// model and GPU count, so --gpus N is measured exactly as a user runs it).
//
// Presets (issue W2.3; --list prints them), the default set: the 374M Transformer, the Gated
// DeltaNet 3:1 hybrid in fla's layout (4 heads x 256) and in 8 x 128, pure Gated DeltaNet, the KDA
// 3:1 hybrid (B8 T2048, 30 updates each) and the MQAR demo model (configs/mqar-demo.toml: 2 layers,
// d 64, B32 T64, 400 updates). Each carries its anchor (targets.md's tokens/s of the reference run,
// PyTorch eager or fla, on one H200) and its target. NAME=CONFIG[@HYBRID] benches any model config
// file (.json; a .toml run file is taken whole) at B8 T2048. --batch, --seq-len and --steps, when
// given, replace every model's own.
// Weak scaling: every GPU trains `batch` sequences of `seq_len` tokens per update, so --gpus N
// trains N * batch sequences per update ([data] batch_size = N * batch, split over the ranks).
// Data: the synthetic MQAR stream (no files needed; for a model config its vocabulary is
// min(8192, the model's), and which ids the tokens are does not change the cost of a step; a run
// file keeps its own). tokens/s is the mean over the steps after the first kWarmupSteps, from the
// run's metrics.jsonl (tokens over the window wall times, as the step lines report them).
// speedup = tokens/s(N) / tokens/s(1); efficiency = speedup / N.
// Writes DIR/train_bench.json and DIR/train_bench.md; each run's log is DIR/<model>-gpus<N>.log.
// Each row also gives ms per update, MFU (--device cuda: the runs' model TFLOP/s over the H200's
// bf16 dense peak per GPU), the allocator's peak GiB and, at 1 GPU, the anchor (ratio = ours /
// anchor, above 1 is faster; --anchors FILE: the PyTorch eager run scripts/bench_train_torch.py
// measured on this GPU replaces targets.md's "torch eager") and whether the target is met.
// --json FILE writes the table with --commit (bench/train-h200.json is one).
#include "cli/bench_train.h"

#include <algorithm>
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
#include "train/trainer.h"

namespace hla::cli {

namespace {

constexpr int64_t kWarmupSteps = 5;  // steps left out of the mean (allocator and cuBLAS warm-up)

// A model to bench: the settings `hla train` builds it from, the shape of an update, and what
// it is compared with at 1 GPU.
struct BenchModel {
  std::string name;
  std::string run_args;  // the model (and for a run file, data) settings of `hla train`
  int64_t batch = 8, seq_len = 2048, steps = 30;
  int64_t data_vocab = 0;  // the MQAR vocabulary to pass (0: the run file's own)
  std::string anchor;      // targets.md's reference run ("": none)
  double anchor_tokens_per_s = 0;
  std::string target;  // the goal, e.g. "torch.compile" ("": none)
  double target_tokens_per_s = 0;
};

// The presets: targets.md's anchors (one H200, bf16), issue W2.3's targets.
struct TrainPreset {
  const char *name, *config, *model_args;
  int64_t batch, seq_len, steps;
  const char* anchor;
  double anchor_tokens_per_s;
  const char* target;
  double target_tokens_per_s;
};
constexpr TrainPreset kPresets[] = {
    {"transformer-374m", "configs/models/transformer-340m.json", "", 8, 2048, 30, "torch eager", 113400,
     "torch.compile", 177600},
    {"gdn-3:1-4x256", "configs/models/gated_deltanet-340m.json", "--model.hybrid 3:1", 8, 2048, 30, "fla GDN 3:1",
     89400, "1.2x fla", 107000},
    {"gdn-3:1-8x128", "configs/models/gated_deltanet-340m.json",
     "--model.hybrid 3:1 --model.num_heads 8 --model.head_dim 128", 8, 2048, 30, "fla GDN 3:1 (4 x 256)", 89400,
     "1.2x fla", 107000},
    {"gdn-pure", "configs/models/gated_deltanet-340m.json", "", 8, 2048, 30, "fla GDN pure", 76000, "1.2x fla",
     91000},
    {"kda-3:1", "configs/models/kda-340m.json", "--model.hybrid 3:1", 8, 2048, 30, "", 0, "", 0},
    {"mqar-small", "configs/mqar-demo.toml", "", 32, 64, 400, "", 0, "1000 updates/s", 1000.0 * 32 * 64},
};

struct TrainBenchOptions {
  std::vector<std::string> models;  // empty: every preset
  std::vector<int> gpus = {1};
  int64_t batch = 0, seq_len = 0, steps = 0;  // 0: each model's own
  std::string dtype = "bf16", device = "cuda", out = "runs/bench-train";
  std::string anchors, json, commit = "unknown";
  bool list = false;
};

// What a run's metrics.jsonl gives after the warm-up steps.
struct RunStats {
  double tokens_per_s = 0, model_tflops = 0, peak_gib = 0;
};

struct BenchRow {
  std::string model;
  int gpus = 0;
  int64_t global_batch = 0, seq_len = 0;
  double tokens_per_s = 0, ms_per_update = 0, speedup = 0, efficiency = 0;
  double mfu = 0, peak_gib = 0;
  std::string anchor, anchor_source;  // anchor_source: "targets.md" or "measured"
  double anchor_tokens_per_s = 0;     // 0: no anchor
  std::string target;
  double target_tokens_per_s = 0;  // 0: no target
};

struct MeasuredTrainAnchor {
  std::string anchor;  // "torch eager": the rows whose targets.md anchor has this name take it
  double tokens_per_s = 0;
};

// The measured anchor of --anchors (scripts/bench_train_torch.py's JSON); errors name the file and field.
MeasuredTrainAnchor read_train_anchor(const std::string& path) {
  const nlohmann::json j = read_json_file(path);
  HLA_CHECK_INPUT(j.is_object(), path, ": must be an object (scripts/bench_train_torch.py's output), got ",
                  json_excerpt(j));
  const auto name = j.find("anchor"), tps = j.find("tokens_per_s");
  HLA_CHECK_INPUT(name != j.end() && name->is_string(), path, ": field 'anchor' must be a string (e.g. \"torch eager\")");
  HLA_CHECK_INPUT(tps != j.end() && tps->is_number() && tps->get<double>() > 0, path,
                  ": field 'tokens_per_s' must be a positive number, got ",
                  tps == j.end() ? std::string("nothing") : json_excerpt(*tps));
  return {name->get<std::string>(), tps->get<double>()};
}

// s in single quotes for the shell.
std::string shell_quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

bool is_run_file(const std::string& path) {
  return path.size() > 5 && path.compare(path.size() - 5, 5, ".toml") == 0;
}

// `hla train`'s settings for a config file: a run file whole, or a model config file with the
// MQAR vocabulary its vocab_size allows. `what` names the model in errors.
BenchModel from_config(const std::string& name, const std::string& config, const std::string& what) {
  HLA_CHECK_INPUT(std::filesystem::exists(config), what, ": no config file ", config);
  BenchModel m;
  m.name = name;
  if (is_run_file(config)) {
    m.run_args = "--config " + shell_quoted(config);
    return m;
  }
  m.run_args = "--model.config " + shell_quoted(config);
  const nlohmann::json j = read_json_file(config);
  const auto vocab = j.find("vocab_size");
  HLA_CHECK_INPUT(vocab != j.end() && vocab->is_number_integer() && vocab->get<int64_t>() >= 2, config,
                  ": field 'vocab_size' must be an integer >= 2 for the bench's data");
  m.data_vocab = std::min<int64_t>(8192, vocab->get<int64_t>());
  return m;
}

std::filesystem::path this_executable() { return std::filesystem::read_symlink("/proc/self/exe"); }

// A preset's file: from the working directory, else from the source tree the binary was built
// in (build*/hla sits in it), so the presets work from anywhere in a checkout.
std::string preset_file(const std::string& relative) {
  if (std::filesystem::exists(relative)) return relative;
  const std::filesystem::path beside = this_executable().parent_path().parent_path() / relative;
  return std::filesystem::exists(beside) ? beside.string() : relative;
}

BenchModel from_preset(const TrainPreset& p) {
  BenchModel m = from_config(p.name, preset_file(p.config), std::string("preset ") + p.name);
  if (*p.model_args) m.run_args += std::string(" ") + p.model_args;
  m.batch = p.batch, m.seq_len = p.seq_len, m.steps = p.steps;
  m.anchor = p.anchor, m.anchor_tokens_per_s = p.anchor_tokens_per_s;
  m.target = p.target, m.target_tokens_per_s = p.target_tokens_per_s;
  return m;
}

std::string preset_names() {
  std::string names;
  for (const TrainPreset& p : kPresets) names += (names.empty() ? "" : ", ") + std::string(p.name);
  return names;
}

// A --models entry: a preset's name, or NAME=CONFIG[@HYBRID].
BenchModel parse_model(const std::string& text) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos) {
    for (const TrainPreset& p : kPresets)
      if (text == p.name) return from_preset(p);
    HLA_CHECK_INPUT(false, "--models: '", text, "' is neither a preset (", preset_names(), ") nor NAME=CONFIG[@HYBRID]");
  }
  HLA_CHECK_INPUT(eq > 0, "--models: '", text, "' has no NAME before '=' (NAME=CONFIG[@HYBRID])");
  std::string config = text.substr(eq + 1), hybrid;
  const size_t at = config.find('@');
  if (at != std::string::npos) hybrid = config.substr(at + 1), config = config.substr(0, at);
  BenchModel m = from_config(text.substr(0, eq), config, "--models: " + text.substr(0, eq));
  if (!hybrid.empty()) m.run_args += " --model.hybrid " + shell_quoted(hybrid);
  return m;
}

// A file name from a model name ("gdn-3:1" -> "gdn-3_1").
std::string file_stem(const std::string& name) {
  std::string s = name;
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.') c = '_';
  return s;
}

// tokens/s and model TFLOP/s of the steps after kWarmupSteps in a run's metrics.jsonl (tokens
// and TFLOP-seconds over the windows' wall times), and the largest peak GiB of any step.
RunStats run_stats(const std::string& metrics_path) {
  std::ifstream in(metrics_path);
  HLA_CHECK_INPUT(in, metrics_path, ": missing: the run wrote no metrics");
  double tokens = 0, seconds = 0, tflop_seconds = 0, peak_gib = 0;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = parse_json(line, metrics_path);
    if (!j.contains("tokens")) continue;
    peak_gib = std::max(peak_gib, j.value("peak_gib", 0.0));
    if (j.value("step", int64_t(0)) <= kWarmupSteps) continue;
    const double s = j["ms"].get<double>() / 1000.0;
    tokens += j["tokens"].get<double>();
    seconds += s;
    tflop_seconds += j.value("model_tflops", 0.0) * s;
  }
  HLA_CHECK_INPUT(seconds > 0, metrics_path, ": no step after step ", kWarmupSteps, " (give --steps > ", kWarmupSteps,
                  ")");
  return {tokens / seconds, tflop_seconds / seconds, peak_gib};
}

RunStats run_one(const TrainBenchOptions& o, const BenchModel& m, int gpus) {
  const std::string stem = o.out + "/" + file_stem(m.name) + "-gpus" + std::to_string(gpus);
  std::ostringstream cmd;
  cmd << shell_quoted(this_executable().string()) << " train " << m.run_args << " --gpus "
      << gpus << " --device " << o.device << " --train.dtype " << o.dtype << " --data.source mqar";
  if (m.data_vocab > 0) cmd << " --data.mqar_vocab " << m.data_vocab;
  // warm-up over the first fifth: any run file's schedule fits the run (the lr does not change a step's cost)
  cmd << " --data.seq_len " << m.seq_len << " --data.batch_size " << m.batch * gpus << " --train.steps " << m.steps
      << " --optim.warmup_steps " << m.steps / 5 << " --train.log_every 5 --train.val_every 0 --train.val_batches 0"
      << " --train.out_dir " << shell_quoted(stem) << " > " << shell_quoted(stem + ".log") << " 2>&1";
  std::cerr << "bench train: " << m.name << " on " << gpus << " GPU(s): log " << stem << ".log" << std::endl;
  const int status = std::system(cmd.str().c_str());
  if (status != 0) {
    std::cerr << "bench train: " << m.name << " --gpus " << gpus << " failed; the end of " << stem << ".log:\n";
    std::system(("tail -n 20 " + shell_quoted(stem + ".log") + " >&2").c_str());
    throw ExitCode{1};
  }
  return run_stats(stem + "/metrics.jsonl");
}

std::string table(const std::vector<BenchRow>& rows, const TrainBenchOptions& o) {
  std::ostringstream os;
  os << "training throughput, " << o.dtype << ", weak scaling (sequences per update = GPUs x the model's batch), "
     << "mean after update " << kWarmupSteps << "\n\n";
  os << "| model | GPUs | sequences x tokens | ms/update | tokens/s | speedup | efficiency | MFU | peak GiB "
        "| anchor tokens/s | ratio | anchor | target tokens/s | target met |\n";
  os << "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|\n";
  char line[512];
  for (const BenchRow& r : rows) {
    std::snprintf(line, sizeof line, "| %s | %d | %lld x %lld | %.2f | %.0f | %.2fx | %.1f%% | %.1f%% | %.1f |",
                  r.model.c_str(), r.gpus, (long long)r.global_batch, (long long)r.seq_len, r.ms_per_update,
                  r.tokens_per_s, r.speedup, 100.0 * r.efficiency, 100.0 * r.mfu, r.peak_gib);
    os << line;
    if (r.anchor_tokens_per_s > 0)
      std::snprintf(line, sizeof line, " %.0f | %.2f | %s (%s) |", r.anchor_tokens_per_s,
                    r.tokens_per_s / r.anchor_tokens_per_s, r.anchor.c_str(), r.anchor_source.c_str());
    else std::snprintf(line, sizeof line, " - | - | - |");
    os << line;
    if (r.target_tokens_per_s > 0)
      std::snprintf(line, sizeof line, " %.0f (%s) | %s |\n", r.target_tokens_per_s, r.target.c_str(),
                    r.tokens_per_s >= r.target_tokens_per_s ? "yes" : "no");
    else std::snprintf(line, sizeof line, " - | - |\n");
    os << line;
  }
  return os.str();
}

std::string preset_table() {
  std::ostringstream os;
  os << "| preset | model | sequences x tokens | updates | anchor tokens/s | target tokens/s |\n"
        "|---|---|---:|---:|---|---|\n";
  for (const TrainPreset& p : kPresets) {
    os << "| " << p.name << " | " << p.config << (*p.model_args ? std::string(" ") + p.model_args : "") << " | "
       << p.batch << " x " << p.seq_len << " | " << p.steps << " | ";
    os << (p.anchor_tokens_per_s > 0 ? std::to_string(int64_t(p.anchor_tokens_per_s)) + " (" + p.anchor + ")" : "-")
       << " | ";
    os << (p.target_tokens_per_s > 0 ? std::to_string(int64_t(p.target_tokens_per_s)) + " (" + p.target + ")" : "-")
       << " |\n";
  }
  return os.str();
}

// The row for one model and GPU count; the anchor and target are one GPU's.
BenchRow make_row(const BenchModel& m, int gpus, const RunStats& stats, double single_tokens_per_s,
                  const MeasuredTrainAnchor* measured, const TrainBenchOptions& o) {
  BenchRow r;
  r.model = m.name;
  r.gpus = gpus;
  r.global_batch = m.batch * gpus;
  r.seq_len = m.seq_len;
  r.tokens_per_s = stats.tokens_per_s;
  r.ms_per_update = 1000.0 * double(r.global_batch * r.seq_len) / r.tokens_per_s;
  r.mfu = o.device == "cuda" ? stats.model_tflops * 1e12 / (Throughput::kPeakFlops * gpus) : 0;  // an H200 figure
  r.peak_gib = stats.peak_gib;
  r.speedup = single_tokens_per_s > 0 ? r.tokens_per_s / single_tokens_per_s : 0;
  r.efficiency = r.speedup / gpus;
  if (gpus != 1) return r;
  if (m.anchor_tokens_per_s > 0) {
    const bool use_measured = measured && measured->anchor == m.anchor;
    r.anchor = m.anchor;
    r.anchor_tokens_per_s = use_measured ? measured->tokens_per_s : m.anchor_tokens_per_s;
    r.anchor_source = use_measured ? "measured" : "targets.md";
  }
  r.target = m.target;
  r.target_tokens_per_s = m.target_tokens_per_s;
  return r;
}

nlohmann::json or_null(double x) { return x > 0 ? nlohmann::json(x) : nlohmann::json(nullptr); }

nlohmann::json row_json(const BenchRow& r, const BenchModel& m, const TrainBenchOptions& o) {
  return {{"name", r.model},
          {"model", r.model},
          {"run_args", m.run_args},
          {"gpus", r.gpus},
          {"sequences_per_update", r.global_batch},
          {"seq_len", r.seq_len},
          {"ms_per_update", r.ms_per_update},
          {"tokens_per_s", r.tokens_per_s},
          {"speedup", r.speedup},
          {"efficiency", r.efficiency},
          {"mfu", r.mfu},
          {"peak_gib", r.peak_gib},
          {"anchor", r.anchor},
          {"anchor_tokens_per_s", or_null(r.anchor_tokens_per_s)},
          {"anchor_source", r.anchor_source},
          {"ratio", or_null(r.anchor_tokens_per_s > 0 ? r.tokens_per_s / r.anchor_tokens_per_s : 0)},
          {"target", r.target},
          {"target_tokens_per_s", or_null(r.target_tokens_per_s)},
          {"commit", o.commit}};
}

void run_bench(const TrainBenchOptions& o) {
  if (o.list) {
    std::cout << preset_table();
    return;
  }
  std::vector<BenchModel> models;
  for (const std::string& text : o.models) models.push_back(parse_model(text));
  if (o.models.empty())
    for (const TrainPreset& p : kPresets) models.push_back(from_preset(p));
  for (BenchModel& m : models) {
    const bool same_shape = (o.batch == 0 || o.batch == m.batch) && (o.seq_len == 0 || o.seq_len == m.seq_len);
    if (!same_shape) m.anchor_tokens_per_s = 0, m.target_tokens_per_s = 0;  // both are of the preset's shape
    if (o.batch > 0) m.batch = o.batch;
    if (o.seq_len > 0) m.seq_len = o.seq_len;
    if (o.steps > 0) m.steps = o.steps;
  }
  const MeasuredTrainAnchor measured = o.anchors.empty() ? MeasuredTrainAnchor{} : read_train_anchor(o.anchors);
  std::filesystem::create_directories(o.out);
  std::vector<BenchRow> rows;
  nlohmann::json results = nlohmann::json::array();
  for (const BenchModel& m : models) {
    double single = 0;
    for (int gpus : o.gpus) {
      const RunStats stats = run_one(o, m, gpus);
      if (gpus == 1) single = stats.tokens_per_s;
      const BenchRow r = make_row(m, gpus, stats, single, o.anchors.empty() ? nullptr : &measured, o);
      rows.push_back(r);
      results.push_back(row_json(r, m, o));
    }
  }
  const std::string text = table(rows, o);
  std::cout << text;
  write_file_atomic(o.out + "/train_bench.json", results.dump(2) + "\n");
  write_file_atomic(o.out + "/train_bench.md", text);
  std::cerr << "wrote " << o.out << "/train_bench.json and " << o.out << "/train_bench.md\n";
  if (!o.json.empty()) {
    const nlohmann::json table = {{"commit", o.commit}, {"dtype", o.dtype}, {"warmup_steps", kWarmupSteps},
                                  {"anchors", o.anchors.empty() ? "targets.md" : o.anchors}, {"rows", results}};
    write_file_atomic(o.json, table.dump(2) + "\n");
    std::cerr << "wrote " << o.json << "\n";
  }
}

}  // namespace

void setup_bench_train(CLI::App& bench) {
  auto o = std::make_shared<TrainBenchOptions>();
  CLI::App* sub = bench.add_subcommand("train", "Training tokens/s of the presets (or any model) on 1, 2, ... GPUs");
  sub->option_defaults()->always_capture_default();
  sub->add_option("--models", o->models, "presets (--list) or NAME=CONFIG[@HYBRID], comma-separated; default: every preset")
      ->delimiter(',');
  sub->add_option("--gpus", o->gpus, "GPU counts, comma-separated (speedups are against 1: list it first)")
      ->delimiter(',');
  sub->add_option("--batch", o->batch, "sequences per GPU and update (0: each model's own)")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 30));
  sub->add_option("--seq-len", o->seq_len, "tokens per sequence (0: each model's own)")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 30));
  sub->add_option("--steps", o->steps, "updates per run, the first 5 not timed (0: each model's own)")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 30));
  sub->add_option("--dtype", o->dtype, "compute dtype")->check(CLI::IsMember({"f32", "bf16"}));
  sub->add_option("--device", o->device, "cuda (or cpu, --gpus 1 only, to try the command)")
      ->check(CLI::IsMember({"cpu", "cuda"}));
  sub->add_option("--out", o->out, "directory for the runs, train_bench.json and train_bench.md");
  sub->add_option("--anchors", o->anchors, "measured anchor (scripts/bench_train_torch.py's JSON)");
  sub->add_option("--json", o->json, "also write the table as JSON to this file, with --commit");
  sub->add_option("--commit", o->commit, "the commit measured, for --json");
  sub->add_flag("--list", o->list, "print the presets and exit");
  sub->callback([o] { run_bench(*o); });
}

}  // namespace hla::cli
