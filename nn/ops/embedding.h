// Token embedding lookup: y[b, t] = W[ids[b, t]].
// Gradients: dW added into the weight's gradient sum by the backward itself (autograd/var.h:
// gradient_sum), past a compute copy's cast: in fp32 into an fp32 master's gradient on the GPU (no
// cast kernel, no add; a tied lm_head's dW already there). The kernels write dw in full (the
// caller's buffer may hold anything) or add into it, as their flag says.
#pragma once
#include "autograd/var.h"

namespace hla {
// ids: (...) I32 in [0, V), weight: (V, D)  ->  (..., D)
Var embedding(const Tensor& ids, const Var& weight);

namespace cpu {
// ids: (N), w: (V, D), y: (N, D)
template <class T> void embedding_forward(T* y, const int32_t* ids, const T* w, int64_t N, int64_t V, int64_t D);
// dw: (V, D) in TW (T or wider) written, or added into (add_dw): the sum in T of the rows of
// dy: (N, D) whose token is that row's, widened (exactly cast-then-add)
template <class T, class TW>
void embedding_backward(TW* dw, bool add_dw, const T* dy, const int32_t* ids, int64_t N, int64_t V, int64_t D);
}  // namespace cpu
}  // namespace hla
