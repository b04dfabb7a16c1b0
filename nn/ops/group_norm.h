// LayerNorm and GroupNorm with affine weight and bias (mixers.md 2.2), used by RWKV-6: the
// per-head output norm g_norm (GroupNorm with num_groups = H over H*dv channels) and the
// block norms (LayerNorm with bias, norm_bias True).
//
//   per group of C / num_groups consecutive channels:
//     mu = mean(x), rstd = 1 / sqrt(mean((x - mu)^2) + eps), x_hat = (x - mu) * rstd
//   y = x_hat * w + b          w, b per channel over the full width (not shared by the groups)
// Gradients: written in full (the caller's buffers may hold anything); null = not wanted.
#pragma once
#include "autograd/var.h"

namespace hla {
// x: (..., C), weight: (C), bias: (C) or undefined (no bias) -> (..., C); num_groups divides C
Var group_norm(const Var& x, const Var& weight, const Var& bias, int64_t num_groups, double eps);
// LayerNorm over the last dim: GroupNorm with one group.
inline Var layer_norm(const Var& x, const Var& weight, const Var& bias, double eps) {
  return group_norm(x, weight, bias, 1, eps);
}

namespace cpu {
// x, y: (N, C), w: (C), b: (C) or null, mean, rstd: (N, C / G) with G the group size
template <class T>
void group_norm_forward(T* y, T* mean, T* rstd, const T* x, const T* w, const T* b, int64_t N, int64_t C, int64_t G,
                        double eps);
// dx: (N, C), dw, db: (C) written (db may be null); dy: (N, C)
template <class T>
void group_norm_backward(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, const T* mean, const T* rstd,
                         int64_t N, int64_t C, int64_t G);
}  // namespace cpu
}  // namespace hla
