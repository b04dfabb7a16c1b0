// The token moves of packed documents' chunk-aligned layout on the GPU (nn/ops/document_chunks.h):
// same names and argument order as cpu::gather_tokens_forward / scatter_tokens_forward, plus the
// storage dtype (F32 or BF16).
//   x, scatter's out: (B, T, inner);  gather's out, y: (B, Tp, inner);  index: (B, Tp) I32 on the device
#pragma once
#include <cstdint>

#include "tensor/dtype.h"

namespace hla::cuda {

void gather_tokens_forward(void* out, const void* x, const int32_t* index, int64_t B, int64_t T, int64_t Tp,
                           int64_t inner, DType dtype);
void scatter_tokens_forward(void* out, const void* y, const int32_t* index, int64_t B, int64_t T, int64_t Tp,
                            int64_t inner, DType dtype);

}  // namespace hla::cuda
