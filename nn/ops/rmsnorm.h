// RMSNorm (mixers.md 2.1): rstd = 1 / sqrt(mean(x^2) + eps), y = x * rstd * w.
// Gradients: the backward adds them into their gradient sums itself (autograd/var.h: gradient_sum):
// dx into the sum of x's other uses (the residual stream's, in x's dtype), dw into the weight's,
// past a compute copy's cast (in fp32 into an fp32 master's gradient on the GPU). The kernels
// write each in full (the caller's buffer may hold anything) or add into it, as its flag says.
#pragma once
#include "autograd/var.h"

namespace hla {
// x: (..., C), weight: (C) -> (..., C)
Var rmsnorm(const Var& x, const Var& weight, double eps);

// The residual stream's add and the RMSNorm after it (mixers.md 3.1: r = r + h, then a norm of
// r) in one op: sum = x + h, normed = RMSNorm(sum) with weight. Its values are add's and
// rmsnorm's bit for bit; the forward reads x and h once (the norm does not read sum back), the
// backward gives x and h one gradient, d sum + the norm's dx, made by the norm's kernel.
struct ResidualNorm {
  Var sum, normed;
};
// x, h: (..., C), weight: (C)
ResidualNorm add_rmsnorm(const Var& x, const Var& h, const Var& weight, double eps);

namespace cpu {
// x, y: (N, C), w: (C), rstd: (N)
template <class T> void rmsnorm_forward(T* y, T* rstd, const T* x, const T* w, int64_t N, int64_t C, double eps);
// sum = x + h, then y = rmsnorm(sum): x, h, sum, y: (N, C), w: (C), rstd: (N)
template <class T>
void add_rmsnorm_forward(T* sum, T* y, T* rstd, const T* x, const T* h, const T* w, int64_t N, int64_t C, double eps);
// dx: (N, C) = the norm's gradient plus dx_sum (N, C) when not null (dx itself, or another
// buffer); dw: (C) in TW (T or wider), written or added into when add_dw; null: not wanted. dw is
// summed over the rows in T, then widened and added (exactly cast-then-add).
template <class T, class TW>
void rmsnorm_backward(T* dx, const T* dx_sum, TW* dw, bool add_dw, const T* dy, const T* x, const T* w, const T* rstd,
                      int64_t N, int64_t C);
}  // namespace cpu
}  // namespace hla
