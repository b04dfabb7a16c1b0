// Running a sweep: each run trains and is evaluated by the hla binary itself in a child process
// (`hla train --config <run>/run.toml [--resume <run>/checkpoint]`, then `hla eval`), so runs
// are isolated from each other, a killed sweep loses at most the steps since a run's last
// checkpoint, and up to --parallel runs share one machine (or one GPU).
//
// Layout of --out DIR:
//   DIR/runs/<run>/run.toml        the run's settings (a train run file)
//   DIR/runs/<run>/train.log, eval.log, metrics.jsonl, checkpoint/, eval/results.json
//   DIR/runs/<run>/segments.jsonl  one line per train process: exit status, seconds, peak RSS
//   DIR/runs/<run>/row.json        the run's results row, written when it is done
//   DIR/results.csv, results.jsonl, report.md, *.svg   rewritten after every run (report.h)
//
// A run's state is read from its directory: row.json = done (skipped); a checkpoint at the last
// step = trained (evaluated next); an earlier checkpoint = interrupted (resumed, bit-exact);
// nothing = not started. A run that fails (a child's non-zero exit) gets a row with status
// "failed: ..." and is tried again by the next --resume.
#pragma once
#include <iosfwd>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sweep/grid.h"

namespace hla::sweep {

struct SweepOptions {
  std::string out = "runs/sweep";
  bool resume = false;  // continue the sweep in `out`; without it `out` must not hold one
  int parallel = 1;     // runs at a time
  std::string hla_binary = "/proc/self/exe";
};

// Runs `selected` (runs of `sweep`, in grid order) and keeps the results of the whole grid in
// options.out up to date. Progress lines with an ETA go to `log`. Returns the number of runs
// that failed.
int run_sweep(const Sweep& sweep, const std::vector<SweepRun>& selected, const SweepOptions& options,
              std::ostream& log);

// The results row of a finished run from its directory (metrics.jsonl, segments.jsonl,
// train.log, eval/results.json) and its settings.
nlohmann::ordered_json collect_row(const SweepRun& run, const std::string& run_dir, double eval_seconds);

}  // namespace hla::sweep
