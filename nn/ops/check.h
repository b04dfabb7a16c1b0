// The operand check every op of nn/ops runs at its boundary, the same on both devices.
#pragma once
#include "tensor/tensor.h"

namespace hla {

// An operand `t` of an op whose main input is `x` must have x's dtype and live on x's device;
// an undefined `t` (an absent optional operand) passes. The message names the op and the operand.
inline void check_operand(const Tensor& t, const Tensor& x, const char* op, const char* name) {
  if (!t.defined()) return;
  check_dtype(t, x.dtype(), op, name);
  HLA_CHECK(t.device() == x.device(), op, ": ", name, " ", t.str(), " is not on the device of the input ", x.str());
}

}  // namespace hla
