// SwiGLU MLP of every standard block.
#include "nn/layers/mlp.h"

#include "nn/layers/mixers.h"
#include "nn/ops/linear.h"
#include "nn/ops/swiglu.h"

namespace hla {

GatedMLP::GatedMLP(ParamStore& store, int64_t hidden, int64_t intermediate) : store_(store) {
  gate_ = store.normal("gate_proj.weight", {intermediate, hidden});
  up_ = store.normal("up_proj.weight", {intermediate, hidden});
  down_ = store.normal("down_proj.weight", {hidden, intermediate});
}

Var GatedMLP::forward(const Var& x) {
  Var a = linear(x, store_.use(gate_));  // (B, T, I)
  Var b = linear(x, store_.use(up_));    // (B, T, I)
  return linear(swiglu(a, b), store_.use(down_));
}

}  // namespace hla

namespace hla {

std::unique_ptr<FeedForward> make_feedforward(const ModelConfig& c, ParamStore& store) {
  if (c.mixer().block == BlockStyle::Rwkv6) return make_rwkv6_channel_mix(c, store);
  ParamStore::Scope s(store, "mlp.");
  return std::make_unique<GatedMLP>(store, c.hidden_size, c.mlp_intermediate_size());
}

}  // namespace hla
