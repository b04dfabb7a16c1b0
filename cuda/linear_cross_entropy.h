// The lm_head GEMM fused with softmax cross-entropy, in vocabulary chunks, on the GPU: same names
// and argument order as cpu::linear_cross_entropy_* in nn/ops/linear_cross_entropy.h, except that
// the loss, its row count and the loss's gradient are device scalars here (no host read).
// h, w, dh, dw are F32 or BF16 (one dtype); lse is always fp32.
#pragma once
#include <cstdint>
#include "tensor/dtype.h"

namespace hla::cuda {
// h: (N, D), w: (V, D), c: (N) device I32; lse: (N), loss: () and valid: () fp32
// written on the device, nothing read back (a training step does not wait on its loss). Logits
// z = h w^T, chunk vocabulary columns at a time; loss is the mean over rows whose target is not
// `ignore` (0 when there are none; NaN when a target lies outside [0, V)); valid counts them.
void linear_cross_entropy_forward(float* lse, float* loss, float* valid, const void* h, const void* w, const int32_t* c,
                                  int64_t N, int64_t D, int64_t V, int64_t chunk, int32_t ignore, DType dtype);
// dh: (N, D) written and dw: (V, D) in dw_dtype (dtype, or F32 for BF16: an fp32 master's gradient)
// written or added into (add_dw; null: not wanted): with dz = (softmax(z) - onehot(c)) * dloss / valid
// (zero rows where c == ignore; dloss: () and valid: () fp32, both read on the device),
// recomputed chunk by chunk, dh = dz w and dw (+)= dz^T h.
void linear_cross_entropy_backward(void* dh, void* dw, bool add_dw, const void* h, const void* w, const float* lse,
                                   const int32_t* c, int64_t N, int64_t D, int64_t V, int64_t chunk, int32_t ignore,
                                   const float* dloss, const float* valid, DType dtype, DType dw_dtype);
}  // namespace hla::cuda
