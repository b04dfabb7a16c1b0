// `hla bench [PATTERN...] [--warmup N] [--repeats N] [--list]`: runs the perf mode of every
// registered check case (nn/check/modes.h; those whose name or op group contains a pattern, all
// without one): the Var path the model runs, in bf16, forward and forward+backward, and prints
// one table, each row with its anchor (shared/design/targets.md) and the ratio ours / anchor.
// Times are medians of CUDA-event timings (cuda/timer.h). Needs a GPU; --list does not.
#include <algorithm>
#include <cstdio>
#include <iostream>

#include "cli/command.h"
#include "nn/check/modes.h"
#include "tensor/tensor.h"
#ifdef HLA_CUDA
#include "cuda/runtime.h"
#endif

namespace {

struct Options {
  std::vector<std::string> patterns;
  hla::check::PerfOptions perf;
  bool list = false;
};

void print_rows(const std::vector<hla::check::PerfRow>& rows) {
  int name_width = 4, kernel_width = 6;  // wide enough for the longest name and kernel
  for (const auto& r : rows) {
    name_width = std::max(name_width, static_cast<int>(r.name.size()));
    kernel_width = std::max(kernel_width, static_cast<int>(r.kernel.size()));
  }
  std::printf("%-*s %-*s %-7s %9s %9s %8s %10s %7s  %s\n", name_width, "bench", kernel_width, "kernel", "pass", "ms",
              "TFLOP/s", "GB/s", "anchor ms", "ratio", "anchor");
  for (const auto& r : rows) {
    std::printf("%-*s %-*s %-7s %9.3f %9.1f %8.0f", name_width, r.name.c_str(), kernel_width, r.kernel.c_str(),
                r.pass.c_str(), r.ms, r.tflops, r.gbps);
    if (r.anchor_ms > 0) std::printf(" %10.3f %7.2f  %s\n", r.anchor_ms, r.ms / r.anchor_ms, r.anchor.c_str());
    else std::printf(" %10s %7s\n", "-", "-");
  }
}

void run(const Options& opt) {
  const auto cases = hla::check::cases(hla::check::kPerf, opt.patterns);
  if (cases.empty()) {
    std::cerr << "bench: no perf case matches the given names (see hla bench --list)\n";
    throw hla::cli::ExitCode{1};
  }
  if (opt.list) return hla::check::print_list(hla::check::kPerf, cases);
  if (!hla::cuda_available()) {
    std::cout << "*** bench SKIPPED: no CUDA GPU found; nothing was measured ***\n";
    return;
  }
#ifdef HLA_CUDA
  std::cout << "bench on " << hla::cuda::device_name(0) << ", bf16: median of " << opt.perf.repeats << " after "
            << opt.perf.warmup << " warm-up runs; ratio = ours / anchor (below 1 is faster)\n";
#endif
  std::vector<hla::check::PerfRow> rows;
  for (const hla::check::Case* c : cases) {
    auto r = hla::check::run_perf(*c, opt.perf);
    rows.insert(rows.end(), r.begin(), r.end());
  }
  print_rows(rows);
}

const bool registered = hla::cli::register_command(
    "bench", "Time the Var path of the ops against the anchors of targets.md", [](CLI::App& sub) {
      auto opt = std::make_shared<Options>();
      sub.add_option("names", opt->patterns, "Only cases whose name or op group contains one of these (default: all)");
      sub.add_option("--warmup", opt->perf.warmup, "Untimed runs first")->capture_default_str();
      sub.add_option("--repeats", opt->perf.repeats, "Timed runs (the median is reported)")->capture_default_str();
      sub.add_flag("--list", opt->list, "List the perf cases (no GPU needed)");
      sub.callback([opt] { run(*opt); });
    });

}  // namespace
