// Forget-gate parameterisations of mixers.md 2.11: each maps a projection z to a log-space
// gate g <= 0 (decay exp(g)), with its parameters, as one differentiable op per kind sharing
// one kernel (GateKind picks the line):
//
//   GLA         g = logsigmoid(z) / normalizer                     normalizer = 16 (GLA layer)
//   HGRN        g = log(lb + (1 - lb) sigma(z)),  lb in [0, 1)     HGRN, HGRN-2 (lb = 0: logsigmoid)
//   SSM         g = -exp(A_log) * softplus(z + dt_bias)            Mamba-2, GDN (scalar per head),
//                                                                  KDA, GDN-2 (per head x channel)
//   LowerBound  g = lb * sigma(exp(A_log) * (z + dt_bias))         KDA / GDN-2 op option, lb in [-5, 0);
//                                                                  without A_log: lb * sigma(z + dt_bias)
//   RWKV        g = -exp(z)                                        RWKV-6 (z = the w LoRA output)
//   RetNet      g_h = ln(1 - 2^(-5-h))                             a constant, not an op
//
// Per-channel parameters (dt_bias, the HGRN lower bound) have F entries where F is the product
// of z's trailing dims that covers them: z (B, T, HV) with dt_bias (HV) for GDN / Mamba-2, z
// (B, T, HV, dk) or (B, T, HV*dk) with dt_bias (HV*dk) for KDA. A_log has one entry per head:
// channel f of F uses A_log[f / (F / H)] (heads are consecutive blocks, "(h d)").
// Gradients: written in full (the caller's buffers may hold anything); null = not wanted.
#pragma once
#include "autograd/var.h"
#include "nn/ops/gates_dims.h"

namespace hla {

// z: any shape -> same shape
Var gla_gate(const Var& z, double normalizer = 16.0);
// z: (..., F), lower_bound: (F) with values in [0, 1) (HGRN's lb of this layer)
Var hgrn_gate(const Var& z, const Var& lower_bound);
// z: (..., F), a_log: (H) with F % H == 0, dt_bias: (F)
Var ssm_gate(const Var& z, const Var& a_log, const Var& dt_bias);
// z: (..., F), a_log: (H) or undefined, dt_bias: (F), lower_bound < 0 a constant
Var lower_bound_gate(const Var& z, const Var& a_log, const Var& dt_bias, double lower_bound);
// z: any shape -> same shape
Var rwkv_gate(const Var& z);
// RetNet's constant per-head log decay: (H), g_h = ln(1 - 2^(-5-h)).
Tensor retnet_gate(int64_t H, DType dtype = DType::F32);

namespace cpu {
// z, g: (N, F); a_log: (H) or null; param: (F) or null, dt_bias (SSM, LowerBound) or lb (HGRN)
template <class T>
void gate_forward(T* g, const T* z, const T* a_log, const T* param, const GateDims& d);
// dz: (N, F), da_log: (H), dparam: (F) written, da_log and dparam may be null; dg, g: (N, F)
template <class T>
void gate_backward(T* dz, T* da_log, T* dparam, const T* dg, const T* g, const T* z, const T* a_log, const T* param,
                   const GateDims& d);
}  // namespace cpu
}  // namespace hla
