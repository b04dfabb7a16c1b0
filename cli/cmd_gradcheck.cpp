// `hla gradcheck [--op NAME]`: runs every registered finite-difference check (float64) and
// prints one row per (op, input); exits 1 if any fails.
#include <cstdio>
#include <iostream>

#include "autograd/gradcheck.h"
#include "cli/command.h"

namespace {

struct Options {
  std::string op;
  double tol = 1e-6;
};

void run(const Options& opt) {
  int passed = 0, failed = 0, ran_cases = 0;
  std::printf("%-28s %-14s %12s %12s  %s\n", "op", "input", "max abs err", "max rel err", "result");
  for (const auto& c : hla::gradcheck_registry()) {
    if (!opt.op.empty() && c.op.find(opt.op) == std::string::npos) continue;
    ran_cases++;
    for (const auto& r : c.run()) {
      bool ok = r.pass && r.max_rel_err <= opt.tol;
      ok ? passed++ : failed++;
      std::printf("%-28s %-14s %12.3e %12.3e  %s\n", r.op.c_str(), r.input.c_str(), r.max_abs_err,
                  r.max_rel_err, ok ? "PASS" : "FAIL");
    }
  }
  if (ran_cases == 0) {
    std::cerr << "gradcheck: no registered op matches --op " << opt.op << "\n";
    throw hla::cli::ExitCode{1};
  }
  std::printf("%d passed, %d failed\n", passed, failed);
  if (failed) throw hla::cli::ExitCode{1};
}

const bool registered = hla::cli::register_command(
    "gradcheck", "Check every op's analytic gradient against float64 finite differences",
    [](CLI::App& sub) {
      auto opt = std::make_shared<Options>();
      sub.add_option("--op", opt->op, "Only ops whose name contains this string");
      sub.add_option("--tol", opt->tol, "Maximum relative error to pass")->capture_default_str();
      sub.callback([opt] { run(*opt); });
    });

}  // namespace
