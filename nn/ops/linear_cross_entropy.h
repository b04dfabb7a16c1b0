// The lm_head projection fused with softmax cross-entropy, in vocabulary chunks:
//   z = h W^T,  loss_row = logsumexp(z) - z_c  (0 when c == ignore_index),  loss = mean over valid rows,
// equal to cross_entropy(linear(h, W), targets) without ever holding the (N, V) logits: the
// vocabulary is taken `chunk` rows of W at a time, the logsumexp merged online across chunks
// (running max m and sum s of exp(z - m)), and the backward recomputes each chunk's logits to
// form dz = (softmax(z) - onehot(c)) * dloss / valid, accumulating dh = dz W and writing
// dW[chunk] = dz^T h. Memory beyond the inputs and gradients: one (N, chunk) block of logits.
// Gradients: dh written in full; dW added into the weight's gradient sum by the chunks' GEMMs
// themselves (autograd/var.h: gradient_sum), past a compute copy's cast: in fp32 into an fp32
// master's gradient on the GPU (no cast kernel, no add).
#pragma once
#include "autograd/var.h"
#include "tensor/ignore_index.h"

namespace hla {

// h: (..., D), weight: (V, D), targets: (...) I32 -> scalar (shape {}); chunk >= 1 vocabulary
// rows per block. All rows ignored gives loss 0.
Var linear_cross_entropy(const Var& h, const Var& weight, const Tensor& targets, int64_t chunk,
                         int32_t ignore_index = kIgnoreIndex);

namespace cpu {
// h: (N, D), w: (V, D), c: (N), lse: (N) written; returns the loss summed over the rows whose
// target is not `ignore` and sets *valid_rows to the number of those rows
template <class T>
double linear_cross_entropy_forward(T* lse, const T* h, const T* w, const int32_t* c, int64_t N, int64_t D, int64_t V,
                                    int64_t chunk, int32_t ignore, int64_t* valid_rows);
// dh: (N, D) written, dw: (V, D) in TW (T or wider) written or added into (add_dw; null: not
// wanted): dh = dz w, dw (+)= dz^T h with dz = (softmax(z) - onehot(c)) * dloss / valid (zero rows
// where c == ignore), z = h w^T recomputed chunk by chunk
template <class T, class TW>
void linear_cross_entropy_backward(T* dh, TW* dw, bool add_dw, const T* h, const T* w, const T* lse, const int32_t* c,
                                   int64_t N, int64_t D, int64_t V, int64_t chunk, int32_t ignore,
                                   double dloss_over_valid);
}  // namespace cpu
}  // namespace hla
