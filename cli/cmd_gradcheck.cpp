// `hla gradcheck [--op NAME] [--tol T] [--list]`: runs the grad mode of every registered check
// case (nn/check/modes.h: float64 central differences) and prints one row per (case, input);
// exits 1 if any fails. --list prints the cases and their row counts without running them.
#include <cstdio>
#include <iostream>

#include "cli/command.h"
#include "nn/check/modes.h"

namespace {

struct Options {
  std::string op;
  double tol = 0;  // 0: each case's own tolerance
  bool list = false;
};

void run(const Options& opt) {
  const auto cases = hla::check::cases(hla::check::kGrad, {opt.op});
  if (cases.empty()) {
    std::cerr << "gradcheck: no case matches --op " << opt.op << "\n";
    throw hla::cli::ExitCode{1};
  }
  if (opt.list) return hla::check::print_list(hla::check::kGrad, cases);
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

const bool registered = hla::cli::register_command(
    "gradcheck", "Check every op's analytic gradient against float64 finite differences",
    [](CLI::App& sub) {
      auto opt = std::make_shared<Options>();
      sub.add_option("--op", opt->op, "Only cases whose name or op group contains this string");
      sub.add_option("--tol", opt->tol, "Maximum relative error to pass (default: each case's, 1e-6)");
      sub.add_flag("--list", opt->list, "List the cases and their row counts without running them");
      sub.callback([opt] { run(*opt); });
    });

}  // namespace
