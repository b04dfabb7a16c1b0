// Differentiable dtype cast: y = x in another dtype (bf16 rounds to nearest even); the
// gradient is cast back to x's dtype. Used to run the forward in bf16 from fp32 master weights.
#pragma once
#include "autograd/var.h"

namespace hla {
Var cast(const Var& x, DType dtype);
// The same op where the cast is already made: cast_value must hold exactly x cast to its dtype
// (a parameter's compute copy, nn/module.h); the node is cast's, with no kernel in the forward.
Var cast_made(const Var& x, const Tensor& cast_value);
}  // namespace hla
