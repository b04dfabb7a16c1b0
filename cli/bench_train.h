// `hla bench train`: training tokens/s on 1, 2, ... GPUs and the scaling efficiency (cli/bench_train.cpp).
#pragma once
#include <CLI/CLI.hpp>

namespace hla::cli {

// Adds the `train` subcommand to `hla bench`.
void setup_bench_train(CLI::App& bench);

}  // namespace hla::cli
