// L2 normalisation over the last dim (mixers.md 2.5), the q/k normalisation of the delta-rule
// mixers (DeltaNet, GDN, KDA, GDN-2): rstd = 1 / sqrt(sum(x^2) + eps), y = x * rstd.
// eps is added to the SUM of squares (not the mean, unlike RMSNorm); fla's default is 1e-6.
// Gradients: written in full (the caller's buffers may hold anything).
#pragma once
#include "autograd/var.h"

namespace hla {
// x: (..., C) -> (..., C), each row of C channels scaled to unit length
Var l2norm(const Var& x, double eps = 1e-6);
// The backward on either device (the fused norm of short_conv shares it): dx, dy, y: (N, C),
// rstd: (N) in accum_dtype(y); dx written.
void l2norm_backward(Tensor& dx, const Tensor& dy, const Tensor& y, const Tensor& rstd, int64_t N, int64_t C);

namespace cpu {
// x, y: (N, C), rstd: (N)
template <class T> void l2norm_forward(T* y, T* rstd, const T* x, int64_t N, int64_t C, double eps);
// dx, dy, y: (N, C), rstd: (N); dx written
template <class T> void l2norm_backward(T* dx, const T* dy, const T* y, const T* rstd, int64_t N, int64_t C);
}  // namespace cpu
}  // namespace hla
