// The evaluator's LanguageModel over a trained HybridLM checkpoint (config.json +
// model.safetensors). Scoring right-pads a batch to its longest request and reads the chosen
// positions from one forward pass (causal models: padding after a position never changes it).
// Greedy generation re-runs the forward over the growing sequence (no decoding cache yet).
#pragma once
#include <memory>
#include <string>

#include "eval/lm.h"
#include "tensor/dtype.h"

namespace hla::eval {

std::unique_ptr<LanguageModel> load_hybrid_model(const std::string& checkpoint_dir, Device device,
                                                 int max_length = 2048);

}  // namespace hla::eval
