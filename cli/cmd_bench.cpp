// `hla bench [PATTERN...] [--warmup N] [--repeats N] [--anchors FILE] [--json FILE] [--commit SHA]
// [--list] [--table FILE]`: runs the perf mode of every registered check case (nn/check/modes.h;
// those whose name or op group contains a pattern, all without one): the Var path the model
// runs, in bf16, forward and forward+backward, and prints one table, each row with its time,
// TFLOP/s, GB/s, workspace, the kernel that ran, its anchor and the ratio ours / anchor. Anchor
// figures: shared/design/targets.md's, or with --anchors those scripts/bench_anchors.py measured
// in the same GPU run (the row says which). --json writes the table as JSON
// (nn/check/perf_report.h) with --commit, the commit measured (scripts/bench-h200.sh passes it).
// Times are medians of CUDA-event timings (cuda/timer.h). Needs a GPU; --list (with --json: the
// rows unmeasured, scripts/bench_anchors.py's input) and --table FILE (a bench JSON's table) do not.
//
// `hla bench decode [--mixer M --shape 340m | --config FILE] [--contexts ...] [--batches 1,64]
// [--device cpu|cuda] [--out DIR]`: decoding tokens/s and per-sequence memory of the mixer's
// pure, 24:1, 12:1, 6:1, 3:1 and Transformer models (eval/decode_bench.h); prints the tables,
// writes DIR/decode_bench.json and DIR/decode_bench.svg. Runs on the CPU too (a small --config).
//
// `hla bench train [--gpus 1,2] ...`: training tokens/s per GPU count and the scaling efficiency
// (cli/bench_train.cpp).
//
// `hla bench ruler [--mixer M --shape 340m --hybrid 3:1 | --config FILE] [--length 4096]
// [--samples 100] [--haystack FILE]`: the wall time of RULER's tasks on a random-init model
// (eval/ruler_bench.h), per task split into samples, prefill, steps and the rest.
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "cli/bench_train.h"
#include "cli/command.h"
#include "eval/decode_bench.h"
#include "eval/ruler_bench.h"
#include "nn/check/modes.h"
#include "nn/check/perf_report.h"
#include "nn/weights.h"
#include "tensor/atomic_file.h"
#include "tensor/tensor.h"
#ifdef HLA_CUDA
#include "cuda/runtime.h"
#endif

namespace {

struct Options {
  std::vector<std::string> patterns;
  hla::check::PerfOptions perf;
  bool list = false;
  std::string anchors, json, commit = "unknown", table;
};

void write_json(const std::string& path, const std::vector<hla::check::PerfRow>& rows,
                const hla::check::PerfRunInfo& info) {
  hla::write_file_atomic(path, hla::check::perf_json(rows, info).dump(2) + "\n");
  std::cerr << "bench: wrote " << path << "\n";
}

void run(const Options& opt) {
  if (!opt.table.empty()) {
    std::cout << hla::check::perf_table(hla::check::perf_rows_from_json(hla::read_json_file(opt.table), opt.table));
    return;
  }
  const auto cases = hla::check::cases(hla::check::kPerf, opt.patterns);
  if (cases.empty()) {
    std::cerr << "bench: no perf case matches the given names (see hla bench --list)\n";
    throw hla::cli::ExitCode{1};
  }
  hla::check::PerfRunInfo info;
  const hla::check::MeasuredAnchors anchors = opt.anchors.empty()
                                                  ? hla::check::MeasuredAnchors{}
                                                  : hla::check::read_measured_anchors(opt.anchors, &info.anchor_run);
  info.commit = opt.commit;
  info.anchors = opt.anchors.empty() ? "targets.md" : opt.anchors;
  info.warmup = opt.perf.warmup;
  info.repeats = opt.perf.repeats;
  auto finish = [&](std::vector<hla::check::PerfRow> rows) {
    if (!opt.anchors.empty()) hla::check::apply_measured_anchors(rows, anchors, opt.anchors, std::cerr);
    return rows;
  };
  if (opt.list) {
    hla::check::print_list(hla::check::kPerf, cases);
    if (opt.json.empty()) return;
    std::vector<hla::check::PerfRow> rows;
    for (const hla::check::Case* c : cases) {
      auto r = hla::check::perf_rows_unmeasured(*c);
      rows.insert(rows.end(), r.begin(), r.end());
    }
    return write_json(opt.json, finish(rows), info);
  }
  if (!hla::cuda_available()) {
    std::cout << "*** bench SKIPPED: no CUDA GPU found; nothing was measured ***\n";
    return;
  }
#ifdef HLA_CUDA
  info.device = hla::cuda::device_name(0);
  std::cout << "bench on " << info.device << ", bf16: median of " << opt.perf.repeats << " after " << opt.perf.warmup
            << " warm-up runs; ratio = ours / anchor (below 1 is faster); work MiB = temporary device memory of one"
               " call (fwd+bwd: the larger of the two calls')\n";
#endif
  // A case that throws is reported and left out; the others still run, and the exit status is 1.
  std::vector<hla::check::PerfRow> rows;
  std::vector<std::string> failures;
  for (const hla::check::Case* c : cases) {
    try {
      auto r = hla::check::run_perf(*c, opt.perf);
      rows.insert(rows.end(), r.begin(), r.end());
    } catch (const std::exception& e) {
      failures.push_back(c->name + ": " + e.what());
      std::cerr << "bench: " << failures.back() << "\n";
    }
  }
  rows = finish(rows);
  std::cout << hla::check::perf_table(rows);
  if (!opt.json.empty()) write_json(opt.json, rows, info);
  if (failures.empty()) return;
  std::cout << "bench: " << failures.size() << " case(s) FAILED and are not in the table:\n";
  for (const std::string& f : failures) std::cout << "  " << f << "\n";
  throw hla::cli::ExitCode{1};
}

struct DecodeSettings {
  hla::eval::DecodeBenchOptions bench;
  std::string device = "auto", dtype = "auto", out = "runs/bench-decode";
  bool no_memory_check = false;
};

// --device auto|cpu|cuda and --dtype auto|f32|bf16 into o.device and o.dtype.
void resolve_device(hla::eval::DecodeBenchOptions& o, const std::string& device, const std::string& dtype) {
  const bool cuda = device == "cuda" || (device == "auto" && hla::cuda_available());
  o.device = cuda ? hla::Device::CUDA : hla::Device::CPU;
  o.dtype = dtype == "bf16" || (dtype == "auto" && cuda) ? hla::DType::BF16 : hla::DType::F32;
}

void run_decode(const DecodeSettings& s) {
  hla::eval::DecodeBenchOptions o = s.bench;
  resolve_device(o, s.device, s.dtype);
  o.measure_memory = !s.no_memory_check;
  const hla::eval::DecodeBench bench = hla::eval::run_decode_bench(o, &std::cerr);
  std::cout << hla::eval::decode_bench_table(bench);
  std::filesystem::create_directories(s.out);
  hla::write_file_atomic(s.out + "/decode_bench.json", hla::eval::decode_bench_json(bench).dump(2) + "\n");
  hla::write_file_atomic(s.out + "/decode_bench.svg", hla::eval::decode_bench_svg(bench));
  std::cerr << "wrote " << s.out << "/decode_bench.json and " << s.out << "/decode_bench.svg\n";
}

// The model shape options of both decode and ruler benches.
void add_shape_options(CLI::App* app, hla::eval::DecodeBenchOptions& b) {
  app->add_option("--mixer", b.mixer, "linear mixer (configs/models/<mixer>-<shape>.json)");
  app->add_option("--shape", b.shape, "model shape: configs/models/<mixer>-<shape>.json and transformer-<shape>.json");
  app->add_option("--config", b.config, "instead of --mixer/--shape: one config.json (a small shape for the CPU)");
  app->add_option("--configs-dir", b.configs_dir, "where the <mixer>-<shape>.json files are");
}

void add_device_options(CLI::App* app, std::string& device, std::string& dtype) {
  app->add_option("--device", device, "auto (cuda when there is a GPU), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app->add_option("--dtype", dtype, "auto (bf16 on cuda, f32 on cpu), f32 or bf16")
      ->check(CLI::IsMember({"auto", "f32", "bf16"}));
}

void setup_decode(CLI::App& sub) {
  auto s = std::make_shared<DecodeSettings>();
  CLI::App* decode = sub.add_subcommand(
      "decode", "Decode tokens/s and per-sequence memory: pure, 24:1 ... 3:1 hybrids, Transformer");
  decode->option_defaults()->always_capture_default();
  hla::eval::DecodeBenchOptions& b = s->bench;
  add_shape_options(decode, b);
  decode->add_option("--hybrids", b.hybrids, "patterns, comma-separated")->delimiter(',');
  decode->add_option("--contexts", b.contexts, "contexts for the memory table, comma-separated")->delimiter(',');
  decode->add_option("--batches", b.batches, "batch sizes for tokens/s, comma-separated")->delimiter(',');
  decode->add_option("--speed-context", b.speed_context, "prompt tokens prefilled before the timed steps");
  decode->add_option("--warmup", b.warmup, "untimed steps first");
  decode->add_option("--steps", b.steps, "timed steps");
  add_device_options(decode, s->device, s->dtype);
  decode->add_flag("--no-cuda-graph", [s](int64_t) { s->bench.cuda_graph = false; }, "launch every step's kernels");
  decode->add_flag("--no-memory-check", s->no_memory_check,
                   "only decode_memory's arithmetic (no decoder of each context is allocated)");
  decode->add_option("--out", s->out, "directory for decode_bench.json and decode_bench.svg");
  decode->callback([s] { run_decode(*s); });
}

struct RulerSettings {
  hla::eval::RulerBenchOptions bench;
  std::string device = "auto", dtype = "auto";
};

void setup_ruler(CLI::App& sub) {
  auto s = std::make_shared<RulerSettings>();
  CLI::App* ruler = sub.add_subcommand(
      "ruler", "Wall time of RULER's tasks on a random-init hybrid: samples, prefill, steps, per task and in total");
  ruler->option_defaults()->always_capture_default();
  hla::eval::RulerBenchOptions& b = s->bench;
  add_shape_options(ruler, b.shape);
  ruler->add_option("--hybrid", b.hybrid, "the pattern: pure, r:1 or transformer");
  ruler->add_option("--tasks", b.tasks, "RULER tasks, comma-separated (default: all 13)")->delimiter(',');
  ruler->add_option("--length", b.length, "RULER length: prompt + generation budget, in tokens");
  ruler->add_option("--samples", b.samples, "samples per task");
  ruler->add_option("--batch-size", b.batch_size, "sequences decoded together");
  ruler->add_option("--tokenizer", b.tokenizer, "byte or a tokenizer.json");
  ruler->add_option("--token-scale", b.token_scale, "RULER's token budgets times this (0: 4 for byte, else 1)");
  ruler->add_option("--haystack", b.haystack, "essay haystack text; without it the 5 essay tasks are skipped");
  ruler->add_option("--words", b.words, "word lists (as hla eval --words)");
  ruler->add_option("--seed", b.seed, "sample seed");
  add_device_options(ruler, s->device, s->dtype);
  ruler->callback([s] {
    hla::eval::RulerBenchOptions o = s->bench;
    resolve_device(o.shape, s->device, s->dtype);
    std::cout << hla::eval::ruler_bench_table(hla::eval::run_ruler_bench(o, &std::cerr));
  });
}

const bool registered = hla::cli::register_command(
    "bench", "Time the Var path of the ops beside their anchors (fla, torch SDPA)", [](CLI::App& sub) {
      auto opt = std::make_shared<Options>();
      sub.add_option("names", opt->patterns, "Only cases whose name or op group contains one of these (default: all)");
      sub.add_option("--warmup", opt->perf.warmup, "Untimed runs first")->capture_default_str();
      sub.add_option("--repeats", opt->perf.repeats, "Timed runs (the median is reported)")->capture_default_str();
      sub.add_flag("--list", opt->list, "List the perf cases (no GPU needed; with --json, write them unmeasured)");
      sub.add_option("--anchors", opt->anchors, "Measured anchor times (scripts/bench_anchors.py's JSON)");
      sub.add_option("--json", opt->json, "Also write the table as JSON to this file");
      sub.add_option("--commit", opt->commit, "The commit measured, for --json")->capture_default_str();
      sub.add_option("--table", opt->table, "Print the table of a bench JSON (--json's file) and exit");
      setup_decode(sub);
      hla::cli::setup_bench_train(sub);
      setup_ruler(sub);
      sub.callback([opt, &sub] {
        if (!sub.got_subcommand("decode") && !sub.got_subcommand("train") && !sub.got_subcommand("ruler")) run(*opt);
      });
    });

}  // namespace
