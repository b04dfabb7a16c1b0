// `hla bench decode` (cli/cmd_bench.cpp): decoding speed and per-sequence decoding memory of
// one mixer as a pure linear model, as 24:1, 12:1, 6:1 and 3:1 hybrids and as a Transformer,
// all at one shape: the measured form of paper 1's "3:1 to 6:1 hybrids need 4-7x less KV
// memory". Weights are random (seeded): neither speed nor memory depends on their values.
//
// Memory per sequence at each context: decode_memory's state bytes (recurrent S, conv and
// token-shift tails) and KV bytes, and the bytes a Decoder of that capacity holds once it has
// prefilled one token (Decoder::memory), which must agree. Speed at each batch size B: B random
// prompts of speed_context tokens are prefilled, then `steps` batched steps are timed after
// `warmup` untimed ones; tokens/s = B * steps / seconds, the logits of the last step copied to
// the CPU (on the GPU that waits for every step).
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "nn/config.h"
#include "nn/decode.h"
#include "tensor/dtype.h"

namespace hla::eval {

struct DecodeBenchOptions {
  // The shape: `config` (a config.json; the Transformer row is it with every layer attention),
  // or else <configs_dir>/<mixer>-<shape>.json, whose hybrids take their attention heads from
  // <configs_dir>/transformer-<shape>.json, the Transformer row.
  std::string config;
  std::string mixer = "gated_deltanet";
  std::string shape = "340m";
  std::string configs_dir = "configs/models";
  std::vector<std::string> hybrids = {"pure", "24:1", "12:1", "6:1", "3:1", "transformer"};
  std::vector<int64_t> contexts = {1024, 4096, 16384, 65536, 131072};
  std::vector<int64_t> batches = {1, 64};
  int64_t speed_context = 4096;
  int warmup = 3, steps = 32;
  Device device = Device::CPU;
  DType dtype = DType::F32;  // compute dtype: weights, tails and KV caches (states stay fp32)
  bool measure_memory = true;  // build a decoder at every context (off: decode_memory only)
  bool cuda_graph = true;
};

struct DecodeBenchRow {
  std::string hybrid;  // "pure", "24:1", ..., "transformer"
  ModelConfig config;
  int64_t parameters = 0;
  std::vector<DecodeMemory> memory;    // per context: decode_memory, per sequence
  std::vector<DecodeMemory> measured;  // per context: Decoder::memory() of one sequence (empty: not measured)
  std::vector<double> tokens_per_second;  // per batch size
};

struct DecodeBench {
  DecodeBenchOptions options;
  std::string source;  // the config file(s) the shape came from
  std::vector<DecodeBenchRow> rows;
};

// The configs of the rows (no model is built): base config with each hybrid pattern.
std::vector<std::pair<std::string, ModelConfig>> decode_bench_configs(const DecodeBenchOptions& options,
                                                                     std::string* source = nullptr);

// Builds every row's model on options.device and measures it; `log` (may be null) gets a line per row.
DecodeBench run_decode_bench(const DecodeBenchOptions& options, std::ostream* log = nullptr);

// The printed tables: memory per sequence (MiB = 2^20 bytes; state, KV, total, measured, and the
// Transformer's KV and total over this row's), then tokens/s per batch size.
std::string decode_bench_table(const DecodeBench& bench);
// Everything in bytes and tokens/s: {"mixer", "shape", "source", "device", "dtype", "contexts",
// "batches", "speed_context", "steps", "weights": "random init", "rows": [...]}
nlohmann::json decode_bench_json(const DecodeBench& bench);
// Memory per sequence (MiB) against context (log2 axis), one line per row.
std::string decode_bench_svg(const DecodeBench& bench);

}  // namespace hla::eval
