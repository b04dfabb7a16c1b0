// The HGRN recurrence (mixers.md section 6, fla's naive_recurrent_hgrn): every channel is an
// independent scalar state that decays by exp(g_t) and adds its input.
//
//   h_t = exp(g_t) * h_{t-1} + x_t,   o_t = h_t,   h_0 = initial state (zeros if none)
// g is the forget gate in log space (g <= 0). The gate parameterisation (logsigmoid, lower
// bound) and the tied input x = silu(i) * (1 - exp(g)) belong to the HGRN layer; this op is
// only the recurrence, with the initial state in and the final state h_T out.
// Packed documents (doc_start): h = 0 before each document's first token, so every document of
// a row gives the outputs and gradients of the document alone; the final state is the row's last
// document's, and the initial state must be undefined.
//
// Gradient buffers, on both devices: the backward WRITES every element of every buffer it is
// given (callers pass uninitialised buffers); a null dh0 means "not wanted".
#pragma once
#include "autograd/var.h"
#include "nn/ops/hgrn_dims.h"

namespace hla {

struct HgrnOutput {
  Var o;            // (B, T, D): h_1 .. h_T
  Var final_state;  // (B, D): h_T, in HgrnDims::state_dtype (fp32 on the GPU)
};

// x, g: (B, T, D); initial_state: (B, D) of x's dtype, or undefined (zeros); doc_start: (B, T)
// I32 on x's device (nn/ops/attention.h: document_starts) or undefined (one document a row).
HgrnOutput hgrn(const Var& x, const Var& g, const Var& initial_state = Var(), const Tensor& doc_start = Tensor());

namespace cpu {
// x, g, o: (B, T, D); h0, ht: (B, D); h0 may be null (zeros).
template <class Real>
void hgrn_forward(Real* o, Real* ht, const Real* x, const Real* g, const Real* h0, const HgrnDims& d);
// dout, g, o, dx, dg: (B, T, D); dht, h0, dh0: (B, D). dx, dg, dh0 written; dht null = no
// gradient on the final state, h0 null = zeros, dh0 null = not wanted.
template <class Real>
void hgrn_backward(Real* dx, Real* dg, Real* dh0, const Real* dout, const Real* dht, const Real* g, const Real* h0,
                   const Real* o, const HgrnDims& d);
}  // namespace cpu

}  // namespace hla
