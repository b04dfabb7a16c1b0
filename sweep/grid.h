// The sweep file (grid.toml) and its expansion into runs.
//
// A sweep file is a train run file ([model] [data] [optim] [train], read by train/run_config's
// strict reader, so the same keys and the same errors) plus two sections:
//   [grid]  the axes, each a value or a list: model_type, hybrid, routing, optimizer, lr,
//           lr_adamw, lr_muon (lr per optimiser, winning over lr), seed (model initialisation).
//           hybrid takes pure | r:1 | transformer, or an explicit layer pattern of L and A
//           ("LLAL": layer 2 is attention), one letter per layer.
//   [eval]  the `hla eval` settings every run is evaluated with (tasks, data_dir, limit, ...);
//           no tasks: the run is only trained.
// The grid is the product of the axes in that order (model_type outermost, seed innermost).
// The Transformer (model_type "transformer", or hybrid "transformer") has no linear layers, so
// its hybrid and routing axes collapse: it is one run per optimiser, lr and seed, kept where it
// first appears in grid order. Errors name the sweep file, the section and the key.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace hla::sweep {

// One run of the grid.
struct SweepRun {
  std::string name;           // "gla-4to1-none-adamw-lr0.001-s42": the run's directory
  nlohmann::ordered_json axes;  // {"mixer", "hybrid", "pattern", "attn_fraction", "routing", "optimizer", "lr", "seed"}
  nlohmann::json run_file;    // the run's [model] [data] [optim] [train] (train.out_dir not set)
  int64_t steps = 0;          // [train] steps
};

struct Sweep {
  std::string source;  // the sweep file, for errors
  std::vector<SweepRun> runs;  // grid order
  // `hla eval` flags of every run ("--tasks", "mqar", ...), from [eval]; empty: no evaluation.
  std::vector<std::string> eval_args;
};

// Parses and expands a sweep file's text; every run's settings are validated as `hla train`
// would (errors name `source`, the run and the setting).
Sweep parse_sweep(const std::string& text, const std::string& source);
Sweep read_sweep_file(const std::string& path);

// The runs whose names match one of the comma-separated glob patterns (`*`, `?`); an empty
// pattern keeps all. A pattern that matches no run is an error naming it.
std::vector<SweepRun> select_runs(const std::vector<SweepRun>& runs, const std::string& patterns);

// A run file's text (the sections in the order model, data, optim, train); parse_run_file of
// it gives `sections` back exactly.
std::string run_file_text(const nlohmann::json& sections);

// The grid as text for --dry-run: one line per run, its name and axis values.
std::string describe_runs(const std::vector<SweepRun>& runs);

}  // namespace hla::sweep
