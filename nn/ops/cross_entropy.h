// Softmax cross-entropy with an ignore index (mixers.md 2.10):
//   loss_row = logsumexp(z) - z_c  (0 when c == ignore_index), loss = mean over valid rows.
// Gradients: written in full (the caller's buffers may hold anything).
#pragma once
#include "autograd/var.h"
#include "tensor/ignore_index.h"

namespace hla {

// logits: (..., V), targets: (...) I32 -> scalar (shape {}). All rows ignored gives loss 0.
Var cross_entropy(const Var& logits, const Tensor& targets, int32_t ignore_index = kIgnoreIndex);

// The target checks of both losses (this one and linear_cross_entropy): `targets` holds N I32
// values on x's device; errors name the op and x (`what`: "logits", "hidden states").
void check_loss_targets(const Tensor& targets, int64_t N, const Tensor& x, const char* op, const char* what);

namespace cpu {
// z: (N, V), c: (N), lse: (N) written; returns the loss summed over the rows whose target is not
// `ignore` and sets *valid_rows to the number of those rows
template <class T>
double cross_entropy_forward(T* lse, const T* z, const int32_t* c, int64_t N, int64_t V, int32_t ignore,
                             int64_t* valid_rows);
// dz: (N, V) written, = (softmax(z) - onehot(c)) * dloss / valid; zero rows where c == ignore
template <class T> void cross_entropy_backward(T* dz, const T* z, const T* lse, const int32_t* c, int64_t N, int64_t V, int32_t ignore, double dloss_over_valid);
}  // namespace cpu
}  // namespace hla
