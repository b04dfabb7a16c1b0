// The HGRN recurrence's descriptor (nn/ops/hgrn.h): the sizes cpu::hgrn_* (nn/ops/hgrn.cpp)
// and cuda::hgrn_* (cuda/hgrn.cu) both take. Knows nothing of Var.
#pragma once
#include <cstdint>

#include "tensor/dtype.h"

namespace hla {

struct HgrnDims {
  int64_t B, T, D;    // x, g, o: (B, T, D);  h0, ht: (B, D)
  DType state_dtype;  // h0, ht and their gradients: fp32 on the GPU, the storage dtype on the CPU
};

}  // namespace hla
