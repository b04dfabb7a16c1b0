// GroupNorm / LayerNorm on the GPU: same names and argument order as cpu::group_norm_* in
// nn/ops/group_norm.h. x, y, w, b, dx, dw, db, dy are F32 or BF16 (dtype); mean and rstd are
// always fp32; math in fp32.
#pragma once
#include <cstdint>
#include "tensor/dtype.h"

namespace hla::cuda {
// x, y: (N, C), w: (C), b: (C) or null, mean, rstd: (N, C / G) with G the group size
void group_norm_forward(void* y, float* mean, float* rstd, const void* x, const void* w, const void* b, int64_t N,
                        int64_t C, int64_t G, double eps, DType dtype);
// dx: (N, C), dw, db: (C) written (db may be null); dy: (N, C)
void group_norm_backward(void* dx, void* dw, void* db, const void* dy, const void* x, const void* w, const float* mean,
                         const float* rstd, int64_t N, int64_t C, int64_t G, DType dtype);
}  // namespace hla::cuda
