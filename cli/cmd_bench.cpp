// `hla bench [NAME...] [--warmup N] [--repeats N] [--list]`: runs the registered benchmarks
// (cli/bench.h; all of them without a name) and prints one table, each row with its anchor
// and ratio. Times are medians of CUDA-event timings (cuda/timer.h). Needs a GPU.
#include <algorithm>
#include <cstdio>
#include <iostream>

#include "cli/bench.h"
#include "cli/command.h"
#include "tensor/tensor.h"
#ifdef HLA_CUDA
#include "cuda/runtime.h"
#endif

namespace hla::bench {

std::vector<Entry>& registry() {
  static std::vector<Entry> entries;
  return entries;
}

bool register_bench(const std::string& name, const std::string& help,
                    std::function<std::vector<Row>(const Options&)> run) {
  registry().push_back({name, help, std::move(run)});
  return true;
}

}  // namespace hla::bench

namespace {

struct CommandOptions {
  std::vector<std::string> names;
  hla::bench::Options bench;
  bool list = false;
};

void print_rows(const std::vector<hla::bench::Row>& rows) {
  int name_width = 22;  // wide enough for the longest name (rows name the kernel that ran)
  for (const auto& r : rows) name_width = std::max(name_width, static_cast<int>(r.name.size()));
  std::printf("%-*s %-26s %9s %9s %8s %10s %7s  %s\n", name_width, "bench", "shape", "ms", "TFLOP/s", "GB/s",
              "anchor ms", "ratio", "anchor");
  for (const auto& r : rows) {
    std::printf("%-*s %-26s %9.3f %9.1f %8.0f", name_width, r.name.c_str(), r.shape.c_str(), r.ms, r.tflops, r.gbps);
    if (r.anchor_ms > 0) std::printf(" %10.3f %7.2f  %s\n", r.anchor_ms, r.ms / r.anchor_ms, r.anchor.c_str());
    else std::printf(" %10s %7s\n", "-", "-");
  }
}

void run(const CommandOptions& opt) {
  const auto& entries = hla::bench::registry();
  if (opt.list) {
    for (const auto& e : entries) std::cout << e.name << "  " << e.help << "\n";
    return;
  }
  for (const auto& n : opt.names) {
    bool known = false;
    for (const auto& e : entries) known = known || e.name == n;
    if (!known) {
      std::cerr << "bench: no benchmark named '" << n << "' (see hla bench --list)\n";
      throw hla::cli::ExitCode{1};
    }
  }
  if (!hla::cuda_available()) {
    std::cout << "*** bench SKIPPED: no CUDA GPU found; nothing was measured ***\n";
    return;
  }
#ifdef HLA_CUDA
  std::cout << "bench on " << hla::cuda::device_name(0) << ": median of " << opt.bench.repeats << " after "
            << opt.bench.warmup << " warm-up runs; ratio = ours / anchor (below 1 is faster)\n";
#endif
  std::vector<hla::bench::Row> rows;
  for (const auto& e : entries) {
    bool selected = opt.names.empty();
    for (const auto& n : opt.names) selected = selected || e.name == n;
    if (!selected) continue;
    auto r = e.run(opt.bench);
    rows.insert(rows.end(), r.begin(), r.end());
  }
  print_rows(rows);
}

const bool registered = hla::cli::register_command(
    "bench", "Time the CUDA kernels against the anchors of targets.md", [](CLI::App& sub) {
      auto opt = std::make_shared<CommandOptions>();
      sub.add_option("names", opt->names, "Benchmarks to run (default: all)");
      sub.add_option("--warmup", opt->bench.warmup, "Untimed runs first")->capture_default_str();
      sub.add_option("--repeats", opt->bench.repeats, "Timed runs (the median is reported)")->capture_default_str();
      sub.add_flag("--list", opt->list, "List the benchmarks");
      sub.callback([opt] { run(*opt); });
    });

}  // namespace
