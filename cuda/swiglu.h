// SwiGLU on the GPU: same names and argument order as cpu::swiglu_* in nn/ops/swiglu.h.
#pragma once
#include <cstdint>
#include "tensor/dtype.h"

namespace hla::cuda {
// a, b, z, dz, da, db: (n), dtype F32 or BF16, math in fp32; da, db written
void swiglu_forward(void* z, const void* a, const void* b, int64_t n, DType dtype);
void swiglu_backward(void* da, void* db, const void* dz, const void* a, const void* b, int64_t n, DType dtype);
}  // namespace hla::cuda
