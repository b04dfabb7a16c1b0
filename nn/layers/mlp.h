// GatedMLP (SwiGLU, mixers.md 2.8): y = W_down( silu(W_gate x) * (W_up x) ), no biases.
#pragma once
#include "nn/layers/feedforward.h"

namespace hla {

class GatedMLP : public FeedForward {
 public:
  GatedMLP(ParamStore& store, int64_t hidden, int64_t intermediate);  // creates {gate,up,down}_proj
  Var forward(const Var& x) override;  // x: (B, T, D) -> (B, T, D)

 private:
  ParamStore& store_;
  Var gate_, up_, down_;
};

}  // namespace hla
