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
// Each row also gives MFU (--device cuda: the runs' model TFLOP/s over the H200's bf16 dense
// peak per GPU), the allocator's peak GiB and, at 1 GPU, an anchor (tokens/s; ratio = ours /
// anchor, above 1 is faster): targets.md's figure for the default models, or with --anchors FILE
// the PyTorch eager run scripts/bench_train_torch.py measured on this GPU (its "anchor", "torch
// eager", names the rows it serves). --json FILE writes the table with --commit
// (bench/train-h200.json is one).
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

struct BenchModel {
  std::string name, config, hybrid;  // hybrid "": the config's own
  int64_t data_vocab = 0;            // the MQAR vocabulary
};

// targets.md's throughput anchors of the default models (one H200, B8 T2048, bf16).
struct TrainAnchor {
  const char* model;
  const char* anchor;
  double tokens_per_s;
};
constexpr TrainAnchor kTrainAnchors[] = {{"transformer-374m", "torch eager", 113400},
                                         {"gdn-3:1", "fla GDN 3:1", 89400}};

struct TrainBenchOptions {
  std::vector<std::string> models = {"transformer-374m=configs/models/transformer-340m.json",
                                     "gdn-3:1=configs/models/gated_deltanet-340m.json@3:1"};
  std::vector<int> gpus = {1, 2};
  int64_t batch = 8, seq_len = 2048, steps = 30;
  std::string dtype = "bf16", device = "cuda", out = "runs/bench-train";
  std::string anchors, json, commit = "unknown";
};

// What a run's metrics.jsonl gives after the warm-up steps.
struct RunStats {
  double tokens_per_s = 0, model_tflops = 0, peak_gib = 0;
};

struct BenchRow {
  std::string model;
  int gpus = 0;
  int64_t global_batch = 0;
  double tokens_per_s = 0, speedup = 0, efficiency = 0;
  double mfu = 0, peak_gib = 0;
  std::string anchor, anchor_source;  // anchor_source: "targets.md" or "measured"
  double anchor_tokens_per_s = 0;     // 0: no anchor
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
  return run_stats(stem + "/metrics.jsonl");
}

std::string table(const std::vector<BenchRow>& rows, const TrainBenchOptions& o) {
  std::ostringstream os;
  os << "training throughput, " << o.dtype << ", " << o.batch << " x " << o.seq_len
     << " tokens per GPU and update (weak scaling), mean after step " << kWarmupSteps << "\n\n";
  os << "| model | GPUs | sequences per update | tokens/s | speedup | efficiency | MFU | peak GiB | anchor tokens/s "
        "| ratio | anchor |\n";
  os << "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n";
  char line[512];
  for (const BenchRow& r : rows) {
    std::snprintf(line, sizeof line, "| %s | %d | %lld | %.0f | %.2fx | %.1f%% | %.1f%% | %.1f |", r.model.c_str(),
                  r.gpus, (long long)r.global_batch, r.tokens_per_s, r.speedup, 100.0 * r.efficiency, 100.0 * r.mfu,
                  r.peak_gib);
    os << line;
    if (r.anchor_tokens_per_s > 0)
      std::snprintf(line, sizeof line, " %.0f | %.2f | %s (%s) |\n", r.anchor_tokens_per_s,
                    r.tokens_per_s / r.anchor_tokens_per_s, r.anchor.c_str(), r.anchor_source.c_str());
    else std::snprintf(line, sizeof line, " - | - | - |\n");
    os << line;
  }
  return os.str();
}

// A 1-GPU row's anchor (targets.md's are one H200's): the measured one where it has the name of
// the model's targets.md anchor, else targets.md's figure.
void set_anchor(BenchRow& r, const MeasuredTrainAnchor* measured) {
  for (const TrainAnchor& a : kTrainAnchors) {
    if (r.model != a.model || r.gpus != 1) continue;
    const bool use_measured = measured && measured->anchor == a.anchor;
    r.anchor = a.anchor;
    r.anchor_tokens_per_s = use_measured ? measured->tokens_per_s : a.tokens_per_s;
    r.anchor_source = use_measured ? "measured" : "targets.md";
  }
}

void run_bench(const TrainBenchOptions& o) {
  std::vector<BenchModel> models;
  for (const std::string& text : o.models) models.push_back(parse_model(text));
  const MeasuredTrainAnchor measured = o.anchors.empty() ? MeasuredTrainAnchor{} : read_train_anchor(o.anchors);
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
      const RunStats stats = run_one(o, m, gpus);
      r.tokens_per_s = stats.tokens_per_s;
      r.mfu = o.device == "cuda" ? stats.model_tflops * 1e12 / (Throughput::kPeakFlops * gpus) : 0;  // an H200 figure
      r.peak_gib = stats.peak_gib;
      if (gpus == 1) single = r.tokens_per_s;
      r.speedup = single > 0 ? r.tokens_per_s / single : 0;
      r.efficiency = r.speedup / gpus;
      set_anchor(r, o.anchors.empty() ? nullptr : &measured);
      rows.push_back(r);
      const double ratio = r.anchor_tokens_per_s > 0 ? r.tokens_per_s / r.anchor_tokens_per_s : 0;
      results.push_back({{"name", r.model}, {"model", r.model}, {"config", m.config}, {"hybrid", m.hybrid},
                         {"gpus", gpus}, {"sequences_per_update", r.global_batch}, {"seq_len", o.seq_len},
                         {"tokens_per_s", r.tokens_per_s}, {"speedup", r.speedup}, {"efficiency", r.efficiency},
                         {"mfu", r.mfu}, {"peak_gib", r.peak_gib}, {"anchor", r.anchor},
                         {"anchor_tokens_per_s", r.anchor_tokens_per_s > 0 ? nlohmann::json(r.anchor_tokens_per_s)
                                                                           : nlohmann::json(nullptr)},
                         {"anchor_source", r.anchor_source},
                         {"ratio", ratio > 0 ? nlohmann::json(ratio) : nlohmann::json(nullptr)},
                         {"commit", o.commit}});
    }
  }
  const std::string text = table(rows, o);
  std::cout << text;
  write_file_atomic(o.out + "/train_bench.json", results.dump(2) + "\n");
  write_file_atomic(o.out + "/train_bench.md", text);
  std::cerr << "wrote " << o.out << "/train_bench.json and " << o.out << "/train_bench.md\n";
  if (!o.json.empty()) {
    const nlohmann::json table = {{"commit", o.commit}, {"dtype", o.dtype}, {"batch_per_gpu", o.batch},
                                  {"seq_len", o.seq_len}, {"steps", o.steps}, {"warmup_steps", kWarmupSteps},
                                  {"anchors", o.anchors.empty() ? "targets.md" : o.anchors}, {"rows", results}};
    write_file_atomic(o.json, table.dump(2) + "\n");
    std::cerr << "wrote " << o.json << "\n";
  }
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
  sub->add_option("--anchors", o->anchors, "measured anchor (scripts/bench_train_torch.py's JSON)");
  sub->add_option("--json", o->json, "also write the table as JSON to this file, with --commit");
  sub->add_option("--commit", o->commit, "the commit measured, for --json");
  sub->callback([o] { run_bench(*o); });
}

}  // namespace hla::cli
