// GPU embedding lookup and its scatter-add backward (same arguments as nn/ops/embedding.cpp).
#pragma once
#include <cstdint>
#include "tensor/dtype.h"

namespace hla::cuda {
// ids: (N) device I32, w: (V, D), y: (N, D)
void embedding_forward(void* y, const int32_t* ids, const void* w, int64_t N, int64_t V, int64_t D, DType dtype);
// dw: (V, D) in dw_dtype (dtype, or F32 for BF16: an fp32 master's gradient) written, or added into
// (add_dw): each row the fp32 sum, in position order, of the rows of dy: (N, D) at its token's
// positions (deterministic; ids outside [0, V) add nowhere)
void embedding_backward(void* dw, bool add_dw, const void* dy, const int32_t* ids, int64_t N, int64_t V, int64_t D,
                        DType dtype, DType dw_dtype);
}  // namespace hla::cuda
