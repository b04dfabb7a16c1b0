// RMSNorm (mixers.md 2.1): rstd = 1 / sqrt(mean(x^2) + eps), y = x * rstd * w.
// Gradients: written in full (the caller's buffers may hold anything).
#pragma once
#include "autograd/var.h"

namespace hla {
// x: (..., C), weight: (C) -> (..., C)
Var rmsnorm(const Var& x, const Var& weight, double eps);

namespace cpu {
// x, y: (N, C), w: (C), rstd: (N)
template <class T> void rmsnorm_forward(T* y, T* rstd, const T* x, const T* w, int64_t N, int64_t C, double eps);
// dx: (N, C), dw: (C) written
template <class T> void rmsnorm_backward(T* dx, T* dw, const T* dy, const T* x, const T* w, const T* rstd, int64_t N, int64_t C);
}  // namespace cpu
}  // namespace hla
