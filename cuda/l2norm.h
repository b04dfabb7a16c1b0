// L2 normalisation on the GPU: same names and argument order as cpu::l2norm_* in nn/ops/l2norm.h.
// x, y, dx, dy are F32 or BF16 (dtype); rstd is always fp32; math in fp32.
#pragma once
#include <cstdint>
#include "tensor/dtype.h"

namespace hla::cuda {
// x, y: (N, C), rstd: (N)
void l2norm_forward(void* y, float* rstd, const void* x, int64_t N, int64_t C, double eps, DType dtype);
// dx, dy, y: (N, C), rstd: (N); dx written
void l2norm_backward(void* dx, const void* dy, const void* y, const float* rstd, int64_t N, int64_t C, DType dtype);
}  // namespace hla::cuda
