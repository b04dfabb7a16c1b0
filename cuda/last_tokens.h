// The last n inputs of each right-padded sequence on the GPU: same name and argument order as
// cpu::last_tokens_forward in nn/ops/last_tokens.h, plus the storage dtype (F32 or BF16).
//   out: (B, C, n);  x: (B, T, C);  lengths: (B) I32 on the device
#pragma once
#include <cstdint>

#include "tensor/dtype.h"

namespace hla::cuda {

void last_tokens_forward(void* out, const void* x, const int32_t* lengths, int64_t B, int64_t T, int64_t C, int64_t n,
                         DType dtype);

}  // namespace hla::cuda
