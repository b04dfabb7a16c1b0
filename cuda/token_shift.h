// RWKV-6 token shift, static lerp and data-dependent lerp on the GPU: same names and argument
// order as the cpu:: functions in nn/ops/token_shift.h. Every buffer is F32 or BF16 (dtype),
// math in fp32.
#pragma once
#include <cstdint>

#include "tensor/dtype.h"

namespace hla::cuda {
// x, delta: (B, L, D), state, last: (B, D), state may be null; doc_start: (B, L) or null
void token_shift_forward(void* delta, void* last, const void* x, const void* state, const int32_t* doc_start,
                         int64_t B, int64_t L, int64_t D, DType dtype);
// dx: (B, L, D) and dstate: (B, D) written (dstate may be null); ddelta: (B, L, D), dlast: (B, D)
void token_shift_backward(void* dx, void* dstate, const void* ddelta, const void* dlast, const int32_t* doc_start,
                          int64_t B, int64_t L, int64_t D, DType dtype);

// x, delta, y: (M, D), mu: (D)
void lerp_forward(void* y, const void* x, const void* delta, const void* mu, int64_t M, int64_t D, DType dtype);
// dx, ddelta: (M, D), dmu: (D) written; dy: (M, D)
void lerp_backward(void* dx, void* ddelta, void* dmu, const void* dy, const void* delta, const void* mu, int64_t M,
                   int64_t D, DType dtype);

// xi: (N, M, D); x, delta: (M, D); zz: (M, N*R); w2: (D, N*R); bias: (N, D); M = B*L
void ddlerp_forward(void* xi, const void* x, const void* delta, const void* zz, const void* w2, const void* bias,
                    int64_t M, int64_t D, int64_t N, int64_t R, DType dtype);
// dx, ddelta: (M, D), dzz: (M, N*R), dw2: (D, N*R), dbias: (N, D) written; dxi: (N, M, D)
void ddlerp_backward(void* dx, void* ddelta, void* dzz, void* dw2, void* dbias, const void* dxi, const void* delta,
                     const void* zz, const void* w2, const void* bias, int64_t M, int64_t D, int64_t N, int64_t R,
                     DType dtype);
}  // namespace hla::cuda
