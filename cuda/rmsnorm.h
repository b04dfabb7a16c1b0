// RMSNorm on the GPU: same names and argument order as cpu::rmsnorm_* in nn/ops/rmsnorm.h.
// x, y, dx, dy and w are F32 or BF16 (dtype); rstd is always fp32; math in fp32.
#pragma once
#include <cstdint>
#include "tensor/dtype.h"

namespace hla::cuda {
// x, y: (N, C), w: (C), rstd: (N)
void rmsnorm_forward(void* y, float* rstd, const void* x, const void* w, int64_t N, int64_t C, double eps, DType dtype);
// sum = x + h, then y = rmsnorm(sum): x, h, sum, y: (N, C), w: (C), rstd: (N)
void add_rmsnorm_forward(void* sum, void* y, float* rstd, const void* x, const void* h, const void* w, int64_t N,
                         int64_t C, double eps, DType dtype);
// dx: (N, C) in dtype, dw: (C) in dw_dtype (dtype, or F32 for a BF16 compute copy's master); null:
// not wanted. dx = the norm's gradient plus dx_sum (N, C) when not null (dx itself, or another
// buffer); dw written, or added into when add_dw.
void rmsnorm_backward(void* dx, const void* dx_sum, void* dw, bool add_dw, const void* dy, const void* x,
                      const void* w, const float* rstd, int64_t N, int64_t C, DType dtype, DType dw_dtype);
}  // namespace hla::cuda
