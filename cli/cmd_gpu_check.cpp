// `hla gpu-check [--op NAME] [--seed N]`: runs every registered CUDA-vs-CPU case
// (autograd/gpucheck.h) and prints one row per (op, dtype, tensor), then a short summary per
// case and dtype (worst output and gradient errors), then the totals: the last thing printed.
// Exits 1 on any failure. Without a GPU it says so loudly and exits 0.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <random>

#include "autograd/gpucheck.h"
#include "cli/command.h"
#include "tensor/tensor.h"
#ifdef HLA_CUDA
#include "cuda/runtime.h"
#endif

namespace {

struct Options {
  std::string op;
  uint64_t seed = 0;  // 0: draw a fresh one
};

void print_table(const std::vector<hla::GpucheckResult>& rows) {
  std::printf("%-28s %-5s %-12s %-10s %11s %9s  %s\n", "op", "dtype", "kernel", "tensor", "rel err", "tol", "result");
  for (const auto& r : rows)
    std::printf("%-28s %-5s %-12s %-10s %11.3e %9.0e  %s\n", r.op.c_str(), r.dtype.c_str(), r.kernel.c_str(),
                r.tensor.c_str(), r.rel_err, r.tol, r.pass ? "PASS" : "FAIL");
}

// One line per (case, dtype): rows, the worst output and gradient errors, failures.
struct CaseSummary {
  std::string name, dtype;
  int rows = 0, failed = 0;
  double worst_out = 0, worst_grad = 0;
};

void print_summary(const std::vector<CaseSummary>& cases) {
  int name_width = 4;
  for (const auto& c : cases) name_width = std::max(name_width, static_cast<int>(c.name.size()));
  std::printf("\n%-*s %-5s %5s %13s %13s  %s\n", name_width, "case", "dtype", "rows", "worst out", "worst grad",
              "result");
  for (const auto& c : cases)
    std::printf("%-*s %-5s %5d %13.3e %13.3e  %s\n", name_width, c.name.c_str(), c.dtype.c_str(), c.rows,
                c.worst_out, c.worst_grad, c.failed ? "FAIL" : "PASS");
}

void add_to_summary(std::vector<CaseSummary>& cases, const std::string& name, const hla::GpucheckResult& r) {
  auto it = std::find_if(cases.begin(), cases.end(),
                         [&](const CaseSummary& c) { return c.name == name && c.dtype == r.dtype; });
  if (it == cases.end()) it = cases.insert(cases.end(), CaseSummary{name, r.dtype});
  it->rows++;
  it->failed += !r.pass;
  const bool gradient = r.tensor.size() > 1 && r.tensor[0] == 'd';  // "dx", "dweight"; outputs: "out", "m", ...
  double& worst = gradient ? it->worst_grad : it->worst_out;
  worst = std::isnan(r.rel_err) ? r.rel_err : std::max(worst, r.rel_err);
}

void run(const Options& opt) {
  if (!hla::cuda_available()) {
    std::cout << "\n*** gpu-check SKIPPED: no CUDA GPU "
#ifdef HLA_CUDA
                 "was found (this build has the CUDA backend) ***\n"
#else
                 "backend in this build (hla was built without nvcc) ***\n"
#endif
                 "*** nothing was checked; run it on a machine with a GPU ***\n\n";
    return;
  }
  const uint64_t seed = opt.seed ? opt.seed : std::random_device{}() | 1;
#ifdef HLA_CUDA
  std::cout << "gpu-check on " << hla::cuda::device_name(0) << ", seed " << seed << " (rerun with --seed " << seed
            << ")\n";
#endif
  std::vector<hla::GpucheckResult> rows;
  std::vector<CaseSummary> summary;
  int cases = 0;
  for (const auto& c : hla::gpucheck_registry()) {
    if (!opt.op.empty() && c.op.find(opt.op) == std::string::npos) continue;
    cases++;
    std::cout << "  " << c.op << " ..." << std::flush;
    try {
      auto r = c.run(seed);
      rows.insert(rows.end(), r.begin(), r.end());
      for (const auto& row : r) add_to_summary(summary, c.op, row);
      std::cout << " " << r.size() << " rows\n";
    } catch (const std::exception& e) {
      std::cout << " ERROR\n";
      std::cerr << "gpu-check " << c.op << ": " << e.what() << "\n";
      rows.push_back({c.op, "-", "-", "error", NAN, 0, false});
      add_to_summary(summary, c.op, rows.back());
    }
  }
  if (cases == 0) {
    std::cerr << "gpu-check: no registered case matches --op " << opt.op << "\n";
    throw hla::cli::ExitCode{1};
  }
  int failed = 0;
  for (const auto& r : rows) failed += !r.pass;
  std::printf("\n");
  print_table(rows);
  print_summary(summary);
  std::printf("\ngpu-check: %zu rows, %zu PASS, %d FAIL\n", rows.size(), rows.size() - failed, failed);
  if (failed) throw hla::cli::ExitCode{1};
}

const bool registered = hla::cli::register_command(
    "gpu-check", "Check every CUDA op (F32 and BF16) against the CPU reference, outputs and gradients",
    [](CLI::App& sub) {
      auto opt = std::make_shared<Options>();
      sub.add_option("--op", opt->op, "Only cases whose name contains this string");
      sub.add_option("--seed", opt->seed, "Input seed (default: a fresh one, printed)");
      sub.callback([opt] { run(*opt); });
    });

}  // namespace
