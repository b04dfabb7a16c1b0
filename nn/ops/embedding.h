// Token embedding lookup: y[b, t] = W[ids[b, t]].
// Gradients: written in full (the caller's buffers may hold anything).
#pragma once
#include "autograd/var.h"

namespace hla {
// ids: (...) I32 in [0, V), weight: (V, D)  ->  (..., D)
Var embedding(const Tensor& ids, const Var& weight);

namespace cpu {
// ids: (N), w: (V, D), y: (N, D)
template <class T> void embedding_forward(T* y, const int32_t* ids, const T* w, int64_t N, int64_t V, int64_t D);
// dw: (V, D) written: the sum of the rows of dy: (N, D) whose token is that row's
template <class T> void embedding_backward(T* dw, const T* dy, const int32_t* ids, int64_t N, int64_t V, int64_t D);
}  // namespace cpu
}  // namespace hla
