// SwiGLU MLP of every standard block.
#include "nn/layers/mlp.h"

#include "nn/ops/linear.h"
#include "nn/ops/swiglu.h"

namespace hla {

GatedMLP::GatedMLP(ParamStore& store, int64_t hidden, int64_t intermediate) : store_(store) {
  gate_ = store.normal("gate_proj.weight", {intermediate, hidden});
  up_ = store.normal("up_proj.weight", {intermediate, hidden});
  down_ = store.normal("down_proj.weight", {hidden, intermediate});
}

Var GatedMLP::forward(const Var& x) const {
  Var a = linear(x, store_.use(gate_));  // (B, T, I)
  Var b = linear(x, store_.use(up_));    // (B, T, I)
  return linear(swiglu(a, b), store_.use(down_));
}

}  // namespace hla
