// The RWKV-6 recurrence (mixers.md section 11): the decay family with a vector gate, but the
// output reads the state BEFORE the current token's update, and the current token enters only
// through the bonus u:
//   o_t = scale * ( S_{t-1}^T r_t + (r_t . (u * k_t)) v_t )
//   S_t = Diag(exp(w_t)) S_{t-1} + k_t v_t^T
// so token s < t reaches o_t with weight prod_{j=s+1}^{t-1} exp(w_j). w_t <= 0 is the log decay
// (the layer's -exp(lora)); the layer passes scale = 1, fla's op default is 1/sqrt(dk).
// No grouped value heads: RWKV-6 has as many value heads as key heads (mixers.md 11).
//
// chunk_size = 0 runs the token recurrence; chunk_size > 0 the chunked algorithm of
// nn/ops/chunk_util.h (ReadAt::before_update), which the CUDA chunk kernel follows.
//
// Gradient buffers, on both devices: the backward WRITES every element of every buffer it is
// given (callers pass uninitialised buffers); a null grad_h0 means "not wanted".
#pragma once
#include "autograd/var.h"
#include "nn/ops/rwkv6_dims.h"
#include "nn/ops/document_chunks.h"

namespace hla {

struct Rwkv6Output {
  Var o;            // (B, T, H, dv)
  Var final_state;  // (B, H, dk, dv), in Rwkv6Dims::state_dtype (fp32 on the GPU)
};

// r, k, w: (B, T, H, dk); v: (B, T, H, dv); u: (H, dk); initial_state: (B, H, dk, dv) of r's
// dtype, or undefined (zeros). keep_states: as decay_attention's (nn/ops/decay_attention.h; the
// same kernels, B H ceil(T / 64) dk dv fp32 kept). documents: as decay_attention's (packed
// documents; the bonus u reads only the current token, so only the state resets).
Rwkv6Output rwkv6(const Var& r, const Var& k, const Var& v, const Var& w, const Var& u, const Var& initial_state,
                  double scale, int64_t chunk_size = 0, bool keep_states = true, const DocumentStarts& documents = {});

namespace cpu {
// Shapes as above; o: (B, T, H, dv); h0, ht: (B, H, dk, dv), h0 null = zeros.
template <class Real>
void rwkv6_forward(Real* o, Real* ht, const Real* r, const Real* k, const Real* v, const Real* w, const Real* u,
                   const Real* h0, const Rwkv6Dims& d);
// grad_o: (B, T, H, dv); grad_ht: (B, H, dk, dv), null = no gradient on the final state. Writes
// grad_r, grad_k, grad_w (like r), grad_v (like v), grad_u (H, dk) and grad_h0 (like h0; null =
// not wanted).
template <class Real>
void rwkv6_backward(Real* grad_r, Real* grad_k, Real* grad_v, Real* grad_w, Real* grad_u, Real* grad_h0,
                    const Real* grad_o, const Real* grad_ht, const Real* r, const Real* k, const Real* v,
                    const Real* w, const Real* u, const Real* h0, const Rwkv6Dims& d);
}  // namespace cpu

}  // namespace hla
