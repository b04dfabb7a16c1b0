// Differentiable dtype cast: y = x in another dtype (bf16 rounds to nearest even); the
// gradient is cast back to x's dtype. Used to run the forward in bf16 from fp32 master weights.
#pragma once
#include "autograd/var.h"

namespace hla {
Var cast(const Var& x, DType dtype);
}  // namespace hla
