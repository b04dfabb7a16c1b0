// Forget-gate parameterisations on the GPU (mixers.md 2.11): same names as cpu::gate_* in
// nn/ops/gates.h. Every buffer is F32 or BF16 (dtype), math in fp32.
#pragma once
#include <cstdint>

#include "nn/ops/gates_dims.h"
#include "tensor/dtype.h"

namespace hla::cuda {
// z, g: (N, F); a_log: (H) or null; param: (F) or null, dt_bias (SSM, LowerBound) or lb (HGRN)
void gate_forward(void* g, const void* z, const void* a_log, const void* param, const GateDims& d, DType dtype);
// cpu::gate_backward's arguments less g: the kernel recomputes g from z in fp32 (a stored bf16 g
// would cost precision). dz: (N, F), da_log: (H), dparam: (F) written, da_log and dparam may be
// null; dg: (N, F)
void gate_backward(void* dz, void* da_log, void* dparam, const void* dg, const void* z, const void* a_log,
                   const void* param, const GateDims& d, DType dtype);
}  // namespace hla::cuda
