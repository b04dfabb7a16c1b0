// HybridLM: embeddings -> L blocks (a linear mixer or softmax attention each, by the hybrid
// pattern) -> final RMSNorm -> lm_head, with optional cross-layer routing (CLVR / CLER / CLER-H).
// Parameter names are fla's, so a state dict reads like fla's.
#pragma once
#include <memory>

#include "nn/config.h"
#include "nn/module.h"

namespace hla {

// Builds a model with seeded initial weights (fp32 master weights on `device`). compute_dtype
// BF16 runs the forward/backward in bf16 on the GPU (weights cast per step, fp32 grads).
std::unique_ptr<TrainableModel> make_model(const ModelConfig& config, uint64_t seed,
                                           Device device = Device::CPU,
                                           DType compute_dtype = DType::F32);

}  // namespace hla
