// HybridLM: embeddings -> L blocks (a linear mixer or softmax attention each, by the hybrid
// pattern) -> final RMSNorm -> lm_head, with optional cross-layer routing (CLVR / CLER / CLER-H).
// Parameter names are fla's, so a state dict reads like fla's.
#pragma once
#include <memory>
#include <string>

#include "nn/config.h"
#include "nn/layers/layer_state.h"
#include "nn/module.h"

namespace hla {

// Which part of a block the training backward recomputes instead of keeping its activations
// (autograd/checkpoint.h; [train] recompute): none, the sequence mixer with its norm, the MLP with
// its norm, or the whole block. A forward with a ModelState never recomputes.
enum class Recompute { None, Mixer, Mlp, Layer };

// The choice for each layer kind, the linear-mixer blocks and the softmax-attention blocks: a
// hybrid can recompute the kind whose activations are large for their cost to run again and keep
// the other's. One Recompute converts to the same choice for both.
struct RecomputePlan {
  Recompute linear = Recompute::None;
  Recompute attention = Recompute::None;
  RecomputePlan() = default;
  RecomputePlan(Recompute every) : linear(every), attention(every) {}  // NOLINT: one choice for every block
  Recompute of(bool linear_block) const { return linear_block ? linear : attention; }
};

// One choice for every block, "none" | "mixer" | "mlp" | "layer", or a choice per layer kind as
// comma-separated KIND=CHOICE with KIND "linear" or "attention" (a kind not named: none), e.g.
// "linear=mixer,attention=layer". Anything else is an error naming `field` and the bad part.
RecomputePlan parse_recompute(const std::string& text, const std::string& field);

// Builds a model with seeded initial weights (fp32 master weights on `device`). compute_dtype
// BF16 runs the forward/backward in bf16 on the GPU (the forward reads bf16 compute copies of the
// weights, which the optimizer writes with each update: nn/module.h; fp32 grads).
// keep_chunk_states: the delta-rule, decay-attention and RWKV-6 layers' keep_states (the GPU chunked
// forward keeps its chunk-start states for the backward; [train] delta_rule_keep).
std::unique_ptr<TrainableModel> make_model(const ModelConfig& config, uint64_t seed,
                                           Device device = Device::CPU,
                                           DType compute_dtype = DType::F32,
                                           RecomputePlan recompute = Recompute::None,
                                           bool keep_chunk_states = true);

// Everything a decoder carries for a batch between forward calls (nn/decode.h).
struct ModelState {
  std::vector<LayerState> layers;  // one per block
  Tensor positions;                // (B) I32 on the model's device: tokens seen before this call
  std::vector<Var> lower_bounds;   // HGRN, HGRN-2: the per-layer forget-gate bounds, computed once
  // A right-padded call (layer_state.h, Padding): sequence b's tokens are the first lengths[b]
  // of its row of ids, the rest padding that leaves no trace in the state; empty: rows are whole.
  std::vector<int64_t> lengths;
};

// The forward that starts from and updates a ModelState: a model made by make_model is one.
class StatefulModel {
 public:
  virtual ~StatefulModel() = default;
  // ids: (B, T) I32 on the model's device -> logits (B, T, V); every layer starts from
  // state.layers[i] (fresh: zeros, empty caches) and leaves its state there.
  virtual Var logits_with_state(const Tensor& ids, ModelState& state) = 0;
  // The same, returning only the logits after each sequence's last token, (B, V): position
  // lengths[b] - 1 of a right-padded call, else T - 1. The head runs on those B rows only.
  virtual Var last_logits_with_state(const Tensor& ids, ModelState& state) = 0;
  virtual const ModelConfig& config() const = 0;
};

}  // namespace hla
