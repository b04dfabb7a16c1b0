// `hla gpu-check [--op NAME] [--seed N]`: runs every registered CUDA-vs-CPU case
// (autograd/gpucheck.h) and prints one row per (op, dtype, tensor); the table is the last
// thing printed. Exits 1 on any failure. Without a GPU it says so loudly and exits 0.
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
  int cases = 0;
  for (const auto& c : hla::gpucheck_registry()) {
    if (!opt.op.empty() && c.op.find(opt.op) == std::string::npos) continue;
    cases++;
    std::cout << "  " << c.op << " ..." << std::flush;
    try {
      auto r = c.run(seed);
      rows.insert(rows.end(), r.begin(), r.end());
      std::cout << " " << r.size() << " rows\n";
    } catch (const std::exception& e) {
      std::cout << " ERROR\n";
      std::cerr << "gpu-check " << c.op << ": " << e.what() << "\n";
      rows.push_back({c.op, "-", "-", "error", NAN, 0, false});
    }
  }
  if (cases == 0) {
    std::cerr << "gpu-check: no registered case matches --op " << opt.op << "\n";
    throw hla::cli::ExitCode{1};
  }
  int failed = 0;
  for (const auto& r : rows) failed += !r.pass;
  std::printf("\ngpu-check: %zu rows, %zu PASS, %d FAIL\n", rows.size(), rows.size() - failed, failed);
  print_table(rows);
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
