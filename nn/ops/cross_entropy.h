// Softmax cross-entropy with an ignore index (mixers.md 2.10):
//   loss_row = logsumexp(z) - z_c  (0 when c == ignore_index), loss = mean over valid rows.
#pragma once
#include "autograd/var.h"
#include "tensor/ignore_index.h"

namespace hla {

// logits: (..., V), targets: (...) I32 -> scalar (shape {}). All rows ignored gives loss 0.
Var cross_entropy(const Var& logits, const Tensor& targets, int32_t ignore_index = kIgnoreIndex);

namespace cpu {
// z: (N, V), c: (N), lse: (N) written; returns the summed loss and the valid-row count
template <class T> double cross_entropy_forward(T* lse, const T* z, const int32_t* c, int64_t N, int64_t V, int32_t ignore);
// dz: (N, V) = (softmax(z) - onehot(c)) * dloss / valid
template <class T> void cross_entropy_backward(T* dz, const T* z, const T* lse, const int32_t* c, int64_t N, int64_t V, int32_t ignore, double dloss_over_valid);
}  // namespace cpu
}  // namespace hla
