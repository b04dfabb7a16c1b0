// `hla gpu-check [--op NAME] [--seed N] [--list]`: runs the gpu mode of every registered check
// case (nn/check/modes.h) and prints one row per (case, dtype, tensor), then a summary per op
// group, dtype and kernel (worst output and gradient errors), then the totals: the last thing
// printed. Exits 1 on any failure. Without a GPU it says so loudly and exits 0. --list needs no
// GPU: it prints every case and its row count, from the float64 CPU reference's outputs.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <random>

#include "cli/check_selection.h"
#include "cli/command.h"
#include "nn/check/modes.h"
#include "tensor/tensor.h"
#ifdef HLA_CUDA
#include "cuda/runtime.h"
#endif

namespace {

using hla::check::GpuRow;

struct Options {
  hla::cli::CaseSelection selection;
  uint64_t seed = 0;  // 0: draw a fresh one
};

void print_table(const std::vector<GpuRow>& rows) {
  std::printf("%-28s %-5s %-12s %-10s %11s %9s  %s\n", "op", "dtype", "kernel", "tensor", "rel err", "tol", "result");
  for (const auto& r : rows)
    std::printf("%-28s %-5s %-12s %-10s %11.3e %9.0e  %s\n", r.op.c_str(), r.dtype.c_str(), r.kernel.c_str(),
                r.tensor.c_str(), r.rel_err, r.tol, r.pass ? "PASS" : "FAIL");
}

// One line per (group, dtype, kernel): rows, the worst output and gradient errors, failures.
struct Summary {
  std::string group, dtype, kernel;
  int rows = 0, failed = 0;
  double worst_out = 0, worst_grad = 0;
};

void print_summary(const std::vector<Summary>& lines) {
  int group_width = 2, kernel_width = 6;
  for (const auto& s : lines) {
    group_width = std::max(group_width, static_cast<int>(s.group.size()));
    kernel_width = std::max(kernel_width, static_cast<int>(s.kernel.size()));
  }
  std::printf("\n%-*s %-5s %-*s %5s %13s %13s  %s\n", group_width, "op", "dtype", kernel_width, "kernel", "rows",
              "worst out", "worst grad", "result");
  for (const auto& s : lines)
    std::printf("%-*s %-5s %-*s %5d %13.3e %13.3e  %s\n", group_width, s.group.c_str(), s.dtype.c_str(), kernel_width,
                s.kernel.c_str(), s.rows, s.worst_out, s.worst_grad, s.failed ? "FAIL" : "PASS");
}

void add_to_summary(std::vector<Summary>& lines, const std::string& group, const GpuRow& r) {
  auto it = std::find_if(lines.begin(), lines.end(), [&](const Summary& s) {
    return s.group == group && s.dtype == r.dtype && s.kernel == r.kernel;
  });
  if (it == lines.end()) it = lines.insert(lines.end(), Summary{group, r.dtype, r.kernel});
  it->rows++;
  it->failed += !r.pass;
  double& worst = r.gradient ? it->worst_grad : it->worst_out;
  worst = std::isnan(r.rel_err) ? r.rel_err : std::max(worst, r.rel_err);
}

void run(const Options& opt) {
  const auto cases = hla::cli::selected_cases("gpu-check", hla::check::kGpu, opt.selection);
  if (opt.selection.list) return hla::check::print_list(hla::check::kGpu, cases);
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
  std::vector<GpuRow> rows;
  std::vector<Summary> summary;
  for (const hla::check::Case* c : cases) {
    std::cout << "  " << c->name << " ..." << std::flush;
    try {
      auto r = hla::check::run_gpu(*c, seed);
      rows.insert(rows.end(), r.begin(), r.end());
      for (const auto& row : r) add_to_summary(summary, c->group, row);
      std::cout << " " << r.size() << " rows\n";
    } catch (const std::exception& e) {
      std::cout << " ERROR\n";
      std::cerr << "gpu-check " << c->name << ": " << e.what() << "\n";
      rows.push_back({c->name, "-", "-", "error", false, NAN, 0, false});
      add_to_summary(summary, c->group, rows.back());
    }
  }
  int failed = 0;
  for (const auto& r : rows) failed += !r.pass;
  std::printf("\n");
  print_table(rows);
  print_summary(summary);
  std::printf("\ngpu-check: %zu rows, %zu PASS, %d FAIL\n", rows.size(), rows.size() - failed, failed);
  if (failed) throw hla::cli::ExitCode{1};
}

const bool registered = hla::cli::register_check_command<Options>(
    "gpu-check", "Check every CUDA op (F32 and BF16) against the CPU reference, outputs and gradients",
    "List the cases and their row counts (no GPU needed)",
    [](CLI::App& sub, Options& opt) { sub.add_option("--seed", opt.seed, "Input seed (default: a fresh one, printed)"); },
    run);

}  // namespace
