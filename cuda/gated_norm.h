// Gated RMSNorm on the GPU: same names and argument order as cpu::gated_rmsnorm_* in
// nn/ops/gated_norm.h, both gate orders and activations. x, z, y, w, dx, dz, dw, dy are F32 or
// BF16 (dtype); rstd is always fp32; math in fp32.
#pragma once
#include <cstdint>
#include "nn/ops/gated_norm.h"

namespace hla::cuda {
// x, z, y: (N, C), w: (C), rstd: (N, C / G) with G the group size
void gated_rmsnorm_forward(void* y, float* rstd, const void* x, const void* z, const void* w, int64_t N, int64_t C,
                           int64_t G, double eps, GateAct act, GateOrder order, DType dtype);
// dx, dz: (N, C) written; dw: (C) accumulated (+=); dy: (N, C)
void gated_rmsnorm_backward(void* dx, void* dz, void* dw, const void* dy, const void* x, const void* z, const void* w,
                            const float* rstd, int64_t N, int64_t C, int64_t G, GateAct act, GateOrder order,
                            DType dtype);
}  // namespace hla::cuda
