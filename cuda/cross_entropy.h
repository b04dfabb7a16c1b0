// Softmax cross-entropy on the GPU, fused: same names and argument order as
// cpu::cross_entropy_* in nn/ops/cross_entropy.h. z, dz are F32 or BF16; lse is always fp32.
#pragma once
#include <cstdint>
#include "tensor/dtype.h"

namespace hla::cuda {
// z: (N, V), c: (N) device I32, lse: (N) written; returns the loss summed over rows whose
// target is not `ignore` (NaN when a target lies outside [0, V)), and sets *valid_rows to the
// number of those rows (counted on the device: the targets never travel to the host).
double cross_entropy_forward(float* lse, const void* z, const int32_t* c, int64_t N, int64_t V, int32_t ignore,
                             int64_t* valid_rows, DType dtype);
// dz: (N, V) written, = (softmax(z) - onehot(c)) * dloss / valid; zero rows where c == ignore
void cross_entropy_backward(void* dz, const void* z, const float* lse, const int32_t* c, int64_t N, int64_t V,
                            int32_t ignore, double dloss_over_valid, DType dtype);
}  // namespace hla::cuda
