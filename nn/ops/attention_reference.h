// The CPU reference of causal softmax attention (nn/ops/attention.h has the math and the Var
// function), apart in nn/ops/attention_reference.cpp so that a program without autograd (the
// host emulator's test, tests/emu) links it alone.
#pragma once
#include "nn/ops/attention_dims.h"

namespace hla {

namespace cpu {
// q: (B, T, H, D), k: (B, T, Hkv, D), v: (B, T, Hkv, Dv); o: (B, T, H, Dv) and lse: (B, H, T) written.
template <class Real>
void attention_forward(Real* o, Real* lse, const Real* q, const Real* k, const Real* v, const AttentionDims& d);
// dout, o: (B, T, H, Dv), lse: (B, H, T) from the forward; dq: (B, T, H, D), dk: (B, T, Hkv, D),
// dv: (B, T, Hkv, Dv) written (dk, dv summed over the H / Hkv query heads of each kv head).
template <class Real>
void attention_backward(Real* dq, Real* dk, Real* dv, const Real* dout, const Real* q, const Real* k, const Real* v,
                        const Real* o, const Real* lse, const AttentionDims& d);
}  // namespace cpu

}  // namespace hla
