// GPU pointwise activations (same kinds and formulas as nn/ops/activation.cpp).
#pragma once
#include <cstdint>
#include "nn/ops/activation_dims.h"
#include "tensor/dtype.h"

namespace hla::cuda {
// x, y, dx, dy: (n), dtype F32 or BF16, math in fp32; dx written
void activation_forward(void* y, const void* x, int64_t n, Activation kind, DType dtype);
void activation_backward(void* dx, const void* dy, const void* x, int64_t n, Activation kind, DType dtype);
}  // namespace hla::cuda
