// The evaluator's LanguageModel over a trained HybridLM checkpoint (config.json +
// model.safetensors). Scoring right-pads a batch to its longest request and reads the chosen
// positions from one forward pass (causal models: padding after a position never changes it).
// Greedy generation runs on the decoding state (nn/decode.h): one batched prefill, then one
// batched step per token, with a fixed-size state per linear layer and a KV cache per attention
// layer; the argmax runs on the model's device, so a step brings B token ids to the host. The
// model reports where generation spent its time (generate_times, eval/lm.h).
#pragma once
#include <memory>
#include <string>

#include "eval/lm.h"
#include "nn/module.h"
#include "tensor/dtype.h"

namespace hla::eval {

// compute_dtype BF16 (CUDA) runs the forward and the decoder in bf16 (make_model, nn/model.h).
std::unique_ptr<LanguageModel> load_hybrid_model(const std::string& checkpoint_dir, Device device,
                                                 int max_length = 2048, DType compute_dtype = DType::F32);
// The same over a model already built by make_model (random weights for a timing run, say);
// `source` ends the describe() line ("random init, seed 0").
std::unique_ptr<LanguageModel> wrap_hybrid_model(std::unique_ptr<TrainableModel> model, int max_length,
                                                 const std::string& source);

}  // namespace hla::eval
