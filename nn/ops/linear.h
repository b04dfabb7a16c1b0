// y = x W^T + b  (PyTorch nn.Linear layout: W is (out, in)). x may have any leading dims.
#pragma once
#include "autograd/var.h"

namespace hla {
// x: (..., in), weight: (out, in), bias: (out) or undefined  ->  y: (..., out)
// The backward's GEMMs sum dx and dW into their gradient sums themselves (autograd/var.h:
// gradient_sum): a weight that is the bf16 compute copy of an fp32 master gets its gradient in
// fp32, in the master's .grad, never rounded to bf16.
Var linear(const Var& x, const Var& weight, const Var& bias = Var());
}  // namespace hla
