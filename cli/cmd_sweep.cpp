// `hla sweep`: a grid of runs (model_type x hybrid ratio x routing x optimiser x lr x seed), each
// trained and evaluated by a child `hla train` / `hla eval`, then one results table, the papers'
// tables and plots (sweep/grid.h, runner.h, report.h).
//
//   hla sweep --config configs/sweeps/cpu-mqar.toml --out runs/cpu-sweep [--parallel 2]
//   hla sweep --config ... --out runs/cpu-sweep --resume      # continue after a kill
//   hla sweep --config ... --dry-run --only 'gla-*'           # list the runs
//   hla sweep --report runs/cpu-sweep                         # report.md again from results.csv
#include <iostream>
#include <memory>

#include "cli/command.h"
#include "sweep/report.h"
#include "sweep/runner.h"
#include "tensor/error.h"

namespace {

struct SweepCommand {
  std::string config, only, report;
  bool dry_run = false;
  hla::sweep::SweepOptions options;
};

void run(const SweepCommand& cmd) {
  if (!cmd.report.empty()) {
    hla::sweep::write_report_from_csv(cmd.report);
    std::cout << "wrote " << cmd.report << "/report.md\n";
    return;
  }
  if (cmd.config.empty()) hla::fail("hla sweep: give --config GRID.toml (or --report DIR)");
  const hla::sweep::Sweep sweep = hla::sweep::read_sweep_file(cmd.config);
  const auto selected = hla::sweep::select_runs(sweep.runs, cmd.only);
  if (cmd.dry_run) {
    std::cout << hla::sweep::describe_runs(selected);
    return;
  }
  const int failed = hla::sweep::run_sweep(sweep, selected, cmd.options, std::cout);
  if (failed > 0) throw hla::cli::ExitCode{1};
}

void setup(CLI::App& sub) {
  auto cmd = std::make_shared<SweepCommand>();
  sub.add_option("--config", cmd->config, "sweep file: [grid] [eval] and the shared [model] [data] [optim] [train]")
      ->check(CLI::ExistingFile);
  sub.add_option("--out", cmd->options.out, "sweep directory (runs/, results.csv, report.md)")
      ->default_str(cmd->options.out);
  sub.add_flag("--resume", cmd->options.resume, "continue the sweep in --out: skip finished runs, resume the rest");
  sub.add_option("--only", cmd->only, "run only the runs whose names match these comma-separated globs ('gla-*')");
  sub.add_flag("--dry-run", cmd->dry_run, "print the grid (run names and settings) and exit");
  sub.add_option("--parallel", cmd->options.parallel, "runs at a time (small runs share a GPU)")
      ->check(CLI::PositiveNumber);
  sub.add_option("--report", cmd->report, "only regenerate report.md and the plots of this sweep directory from "
                                          "its results.csv")
      ->check(CLI::ExistingDirectory);
  sub.callback([cmd] { run(*cmd); });
}

const bool registered = hla::cli::register_command(
    "sweep", "Train and evaluate a grid of runs -> results.csv, report.md with the papers' tables and plots", setup);

}  // namespace
