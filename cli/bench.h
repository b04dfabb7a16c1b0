// Registry behind `hla bench [NAME...]` (cli/cmd_bench.cpp). A bench file registers itself:
//   static const bool reg = hla::bench::register_bench("attention", "help", [](const Options& o) { ... });
// and returns one row per measurement; the command prints them as one table with the anchor
// from shared/design/targets.md beside each row and the ratio ours / anchor.
#pragma once
#include <functional>
#include <string>
#include <vector>

namespace hla::bench {

struct Options {
  int warmup = 5;
  int repeats = 20;
};

struct Row {
  std::string name;   // "attention fwd+bwd"
  std::string shape;  // "B4 T4096 H16 D128 bf16"
  double ms = 0;      // median over the repeats
  double tflops = 0;  // achieved, from the op's FLOP count; 0 when not meaningful
  double gbps = 0;    // achieved bytes moved; 0 when not meaningful
  double anchor_ms = 0;  // the anchor's time for the same work; 0 when there is none
  std::string anchor;    // what the anchor is ("torch SDPA flash")
};

struct Entry {
  std::string name, help;
  std::function<std::vector<Row>(const Options&)> run;
};

std::vector<Entry>& registry();
bool register_bench(const std::string& name, const std::string& help,
                    std::function<std::vector<Row>(const Options&)> run);

}  // namespace hla::bench
