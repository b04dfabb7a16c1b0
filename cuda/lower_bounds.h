// HGRN / HGRN-2 forget-gate lower bounds on the GPU: same names and argument order as
// cpu::lower_bounds_* in nn/ops/lower_bounds.h. z, lb, dz, dlb are F32 or BF16 (dtype); P is fp32.
#pragma once
#include <cstdint>
#include "tensor/dtype.h"

namespace hla::cuda {
// lb, P, z: (L, D)
void lower_bounds_forward(void* lb, float* P, const void* z, int64_t L, int64_t D, DType dtype);
// dz, dlb, P: (L, D); dz written
void lower_bounds_backward(void* dz, const void* dlb, const float* P, int64_t L, int64_t D, DType dtype);
}  // namespace hla::cuda
