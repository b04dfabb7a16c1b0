// HGRN / HGRN-2 forget-gate lower bounds (mixers.md section 6), computed once per forward:
//   P    = softmax(lower_bounds, over the layer axis)      (L, D)
//   lb_i = sum_{j=1..i} P_j      (lb_0 = 0), monotone in depth, in [0, 1)
#pragma once
#include <vector>

#include "autograd/var.h"

namespace hla {
// lower_bounds: (L, D) -> L vectors lb_i of shape (D)
std::vector<Var> lower_bounds(const Var& lower_bounds);
}  // namespace hla
