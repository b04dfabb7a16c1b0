// The lm_head GEMM fused with softmax cross-entropy, in vocabulary chunks, on the GPU: same names
// and argument order as cpu::linear_cross_entropy_* in nn/ops/linear_cross_entropy.h.
// h, w, dh, dw are F32 or BF16 (one dtype); lse is always fp32.
#pragma once
#include <cstdint>
#include "tensor/dtype.h"

namespace hla::cuda {
// h: (N, D), w: (V, D), c: (N) device I32, lse: (N) written. Logits z = h w^T, chunk vocabulary
// columns at a time; returns the loss summed over rows whose target is not `ignore` (NaN when a
// target lies outside [0, V)) and sets *valid_rows to the number of those rows.
double linear_cross_entropy_forward(float* lse, const void* h, const void* w, const int32_t* c, int64_t N, int64_t D,
                                    int64_t V, int64_t chunk, int32_t ignore, int64_t* valid_rows, DType dtype);
// dh: (N, D) and dw: (V, D) written: with dz = (softmax(z) - onehot(c)) * dloss / valid (zero rows
// where c == ignore), recomputed chunk by chunk, dh = dz w and dw = dz^T h.
void linear_cross_entropy_backward(void* dh, void* dw, const void* h, const void* w, const float* lse,
                                   const int32_t* c, int64_t N, int64_t D, int64_t V, int64_t chunk, int32_t ignore,
                                   double dloss_over_valid, DType dtype);
}  // namespace hla::cuda
