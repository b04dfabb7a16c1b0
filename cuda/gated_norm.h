// Gated RMSNorm on the GPU: same names and argument order as cpu::gated_rmsnorm_* in
// nn/ops/gated_norm.h, both gate orders and activations. x, z, y, w, dx, dz, dw, dy are F32 or
// BF16 (dtype); rstd is always fp32; math in fp32.
#pragma once
#include <cstdint>
#include "nn/ops/gated_norm_dims.h"
#include "tensor/dtype.h"

namespace hla::cuda {
// x, z, y: (N, C), w: (C), rstd: (N, C / G) with G the group size
void gated_rmsnorm_forward(void* y, float* rstd, const void* x, const void* z, const void* w, const GatedNormDims& d,
                           DType dtype);
// dx, dz: (N, C), dw: (C) written; dy: (N, C)
void gated_rmsnorm_backward(void* dx, void* dz, void* dw, const void* dy, const void* x, const void* z, const void* w,
                            const float* rstd, const GatedNormDims& d, DType dtype);
}  // namespace hla::cuda
