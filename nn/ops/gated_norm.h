// Gated RMSNorm: the output norm + gate of most mixers, both flavours in one op.
//
//   NormThenGate (mixers.md 2.3, FusedRMSNormGated):  y = RMSNorm_group(x) * w * act(z)
//       RetNet, GLA, HGRN, DeltaNet, GDN (act = swish); KDA, GDN-2 (act = sigmoid).
//       Per head: x, z (B, T, H, dv), w (dv) shared by the heads, group = dv.
//   GateThenNorm (mixers.md 2.4, Mamba-2 RMSNormGated, norm_before_gate=False):
//       x' = x * act(z);  y = RMSNorm_group(x') * w          (Mamba-2: act = swish = silu)
//       x, z (B, T, d_inner), w (d_inner), group = d_inner / n_groups.
// RMSNorm_group: rstd = 1 / sqrt(mean over the group of its channels^2 + eps), per group of
// group_size consecutive channels of the last dim (group_size 0 = the whole last dim).
// mixers.md 2.4's norm_before_gate=True is NormThenGate with a group size.
// Gradients: written in full (the caller's buffers may hold anything).
#pragma once
#include "autograd/var.h"
#include "nn/ops/gated_norm_dims.h"

namespace hla {

// x, z: (..., C), weight: (C) -> (..., C); group_size divides C (0 means C)
Var gated_rmsnorm(const Var& x, const Var& z, const Var& weight, double eps, GateAct act = GateAct::Swish,
                  GateOrder order = GateOrder::NormThenGate, int64_t group_size = 0);

namespace cpu {
// x, z, y: (N, C), w: (C), rstd: (N, C / G) with G the group size
template <class T>
void gated_rmsnorm_forward(T* y, T* rstd, const T* x, const T* z, const T* w, const GatedNormDims& d);
// dx, dz: (N, C), dw: (C) written; dy: (N, C)
template <class T>
void gated_rmsnorm_backward(T* dx, T* dz, T* dw, const T* dy, const T* x, const T* z, const T* w, const T* rstd,
                            const GatedNormDims& d);
}  // namespace cpu
}  // namespace hla
