// The per-block feed-forward: SwiGLU (GatedMLP) in every model but RWKV-6, whose blocks use
// the RWKV channel mix. Both map (B, T, D) -> (B, T, D).
#pragma once
#include <memory>

#include "nn/config.h"
#include "nn/layers/layer_state.h"
#include "nn/layers/params.h"
#include "nn/module.h"

namespace hla {

class FeedForward {
 public:
  virtual ~FeedForward() = default;
  virtual Var forward(const Var& x) = 0;
  // The same carrying a decoding state (RWKV-6's channel mix keeps its token shift in
  // state->ffn_tail) and packed documents (its token shift reads 0 before each document); a
  // per-token feed-forward ignores both.
  virtual Var forward_with_state(const Var& x, LayerState* state, const Documents& documents) { return forward(x); }
};

// Creates "mlp.*" (GatedMLP) or "ffn.*" (RWKV-6 channel mix) parameters under the block scope.
std::unique_ptr<FeedForward> make_feedforward(const ModelConfig& c, ParamStore& store);
std::unique_ptr<FeedForward> make_rwkv6_channel_mix(const ModelConfig& c, ParamStore& store);

}  // namespace hla
