// RMSNorm on the GPU: same names and argument order as cpu::rmsnorm_* in nn/ops/rmsnorm.h.
// x, y, dx, dy and w are F32 or BF16 (dtype); rstd is always fp32; math in fp32.
#pragma once
#include <cstdint>
#include "tensor/dtype.h"

namespace hla::cuda {
// x, y: (N, C), w: (C), rstd: (N)
void rmsnorm_forward(void* y, float* rstd, const void* x, const void* w, int64_t N, int64_t C, double eps, DType dtype);
// dx: (N, C) in dtype, dw: (C) in dw_dtype (dtype, or F32 for a BF16 compute copy's master): each
// written, or added into when its flag says so; null: not wanted
void rmsnorm_backward(void* dx, bool add_dx, void* dw, bool add_dw, const void* dy, const void* x, const void* w,
                      const float* rstd, int64_t N, int64_t C, DType dtype, DType dw_dtype);
}  // namespace hla::cuda
