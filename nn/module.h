// What the trainer and the evaluator need from a model: named parameters and a loss.
// HybridLM (nn/model.h) implements it; tests implement it with tiny models.
#pragma once
#include <string>
#include <vector>

#include "autograd/var.h"

namespace hla {

struct NamedParameter {
  std::string name;  // fla name, e.g. "model.layers.3.attn.q_proj.weight"
  Var var;           // a leaf with requires_grad; updated in place by optimizers
};
using ParameterList = std::vector<NamedParameter>;

class TrainableModel {
 public:
  virtual ~TrainableModel() = default;
  // ids, targets: (B, T) I32 on the model's device; targets use kIgnoreIndex (-100) for
  // positions without loss. Returns the mean cross-entropy over non-ignored targets.
  virtual Var loss(const Tensor& ids, const Tensor& targets) = 0;
  // ids: (B, T) -> logits (B, T, V)
  virtual Var logits(const Tensor& ids) = 0;
  virtual ParameterList parameters() = 0;
  virtual Device device() const = 0;
};

// Total number of scalar parameters.
inline int64_t count_parameters(const ParameterList& params) {
  int64_t n = 0;
  for (const auto& p : params) n += p.var.numel();
  return n;
}

}  // namespace hla
