// y = x W^T + b  (PyTorch nn.Linear layout: W is (out, in)). x may have any leading dims.
#pragma once
#include "autograd/var.h"

namespace hla {
// x: (..., in), weight: (out, in), bias: (out) or undefined  ->  y: (..., out)
Var linear(const Var& x, const Var& weight, const Var& bias = Var());
}  // namespace hla
