// `hla bench ruler` (cli/cmd_bench.cpp): the wall time of RULER's tasks at one length on a
// model of the decode bench's shapes (a linear mixer's hybrid, eval/decode_bench.h), weights
// random (seeded): the time does not depend on them, except through when a sequence stops, and a
// random model does not stop (it rarely draws eos), so every sequence runs its whole generation
// budget, the worst case. It runs the evaluator's own path (run_ruler, eval/ruler.h, on the
// decoding state) and reports per task where the time went: generating and tokenizing the
// samples, the prefill of the prompts, the batched decoding steps, and the rest (scoring,
// detokenizing). The target of issue 16: 13 tasks x 100 samples at 4096 tokens, 340M 3:1
// hybrid, under 2 minutes on an H200.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "eval/decode_bench.h"

namespace hla::eval {

struct RulerBenchOptions {
  DecodeBenchOptions shape;  // config / mixer / shape / configs_dir, device, dtype, cuda_graph
  std::string hybrid = "3:1";
  std::vector<std::string> tasks;  // empty: all 13 (the essay tasks need `haystack`)
  int64_t length = 4096;
  int samples = 100;
  int batch_size = 100;           // sequences decoded together
  std::string tokenizer = "byte";  // or a tokenizer.json
  double token_scale = 0;          // 0: 4 for the byte tokenizer, else 1 (as hla eval)
  std::string haystack, words;     // load_ruler_resources; no haystack: the essay tasks are skipped
  uint64_t seed = 42;
};

struct RulerBenchRow {
  std::string task;
  std::string error;  // the task failed: its message (no times)
  int64_t samples = 0;
  double mean_length = 0;
  double seconds = 0, samples_seconds = 0, prefill_seconds = 0, steps_seconds = 0;
};

struct RulerBench {
  std::string model;  // describe() of the model
  std::vector<std::string> notes;  // tasks skipped, resource fallbacks
  std::vector<RulerBenchRow> rows;
};

// Builds the model on options.shape.device and runs the tasks; `log` (may be null) gets a line
// per task as it finishes.
RulerBench run_ruler_bench(const RulerBenchOptions& options, std::ostream* log = nullptr);

// One row per task (seconds: samples, prefill, steps, other, total) and the total.
std::string ruler_bench_table(const RulerBench& bench);

}  // namespace hla::eval
