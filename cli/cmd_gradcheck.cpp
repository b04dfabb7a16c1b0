// `hla gradcheck [--op NAME] [--tol T] [--list]`: runs the grad mode of every registered check
// case (nn/check/modes.h: float64 central differences) and prints one row per (case, input);
// exits 1 if any fails. --list prints the cases and their row counts without running them.
#include <cstdio>

#include "cli/check_selection.h"
#include "cli/command.h"
#include "nn/check/modes.h"

namespace {

struct Options {
  hla::cli::CaseSelection selection;
  double tol = 0;  // 0: each case's own tolerance
};

void run(const Options& opt) {
  const auto cases = hla::cli::selected_cases("gradcheck", hla::check::kGrad, opt.selection);
  if (opt.selection.list) return hla::check::print_list(hla::check::kGrad, cases);
  int passed = 0, failed = 0;
  std::printf("%-28s %-14s %12s %12s  %s\n", "op", "input", "max abs err", "max rel err", "result");
  for (const hla::check::Case* c : cases) {
    for (const auto& r : hla::check::run_grad(*c, opt.tol)) {
      r.pass ? passed++ : failed++;
      std::printf("%-28s %-14s %12.3e %12.3e  %s\n", r.op.c_str(), r.input.c_str(), r.max_abs_err, r.max_rel_err,
                  r.pass ? "PASS" : "FAIL");
    }
  }
  std::printf("%d passed, %d failed\n", passed, failed);
  if (failed) throw hla::cli::ExitCode{1};
}

const bool registered = hla::cli::register_check_command<Options>(
    "gradcheck", "Check every op's analytic gradient against float64 finite differences",
    "List the cases and their row counts without running them",
    [](CLI::App& sub, Options& opt) {
      sub.add_option("--tol", opt.tol, "Maximum relative error to pass (default: each case's, 1e-6)");
    },
    run);

}  // namespace
