// Decay linear attention (mixers.md 4.3, sections 7-10): per value head, a dk x dv state that
// forgets by a log gate g_t <= 0 and adds one outer product per token, read by the query after
// the update:
//   S_t = Diag(exp(g_t)) S_{t-1} + k_t v_t^T,      o_t = scale * S_t^T q_t
// The gate (DecayAttentionDims::vector_gate, a template flag inside the reference): a scalar per
// head (RetNet's constant ln(1 - 2^(-5-h)), Mamba-2's Delta_t * A) or a vector over dk (GLA,
// HGRN-2). Grouped value heads (HV = G * H) are supported because Mamba-2 uses them: its q = C
// and k = B are shared by the heads of a group while v = Delta * x and the gate are per head;
// value head j reads q/k head floor(j / G). The gate therefore lives on the value heads.
// RetNet/GLA's GQA (fewer k/v than q heads) is the layer's business: it repeats k, v, g to H heads.
//
// chunk_size = 0 runs the token recurrence (the readable reference); chunk_size > 0 runs the
// chunked algorithm of nn/ops/chunk_util.h that the CUDA chunk kernel follows. Both give the
// same numbers up to rounding (tests/test_decay_attention.cpp).
//
// Gradient buffers, on both devices: the backward WRITES every element of every buffer it is
// given (callers pass uninitialised buffers); a null grad_h0 means "not wanted".
#pragma once
#include "autograd/var.h"
#include "nn/ops/decay_attention_dims.h"
#include "nn/ops/document_chunks.h"

namespace hla {

struct DecayAttentionOutput {
  Var o;            // (B, T, HV, dv)
  Var final_state;  // (B, HV, dk, dv), in DecayAttentionDims::state_dtype (fp32 on the GPU)
};

// q, k: (B, T, H, dk); v: (B, T, HV, dv); g: (B, T, HV) scalar gate or (B, T, HV, dk) vector
// gate, in natural-log space; initial_state: (B, HV, dk, dv) of q's dtype, or undefined (zeros).
// keep_states (GPU chunked kernels, when a backward follows): the forward keeps every chunk-start
// state for the backward (cuda::decay_attention_kept_floats x 4 bytes, B HV ceil(T / 64) dk dv
// bf16: 134 MB at B4 T4096 H16 D128) instead of the backward replaying the forward's scan; same
// results bit for bit ([train] delta_rule_keep covers both families). The CPU ignores it.
// documents: undefined (one document a row) or doc_start (B, T) I32 on q's device with its chunk
// layouts (nn/ops/document_chunks.h): the state is zero before each document's first token, so
// each document gets the outputs and gradients of the document run alone; the final state is
// the state at the end of each row's last document; initial_state must be undefined. The token
// recurrence resets at each document start (on the GPU: its recurrent kernels, where the chunked
// ones do not run); the chunked forms (the CPU's, and the GPU's chunked kernels where they run)
// take the chunk layout, resetting the chunks that start one.
DecayAttentionOutput decay_attention(const Var& q, const Var& k, const Var& v, const Var& g,
                                     const Var& initial_state, double scale, int64_t chunk_size = 0,
                                     bool keep_states = true, const DocumentStarts& documents = {});

namespace cpu {
// Shapes as above; o: (B, T, HV, dv); h0, ht: (B, HV, dk, dv), h0 null = zeros.
template <class Real>
void decay_attention_forward(Real* o, Real* ht, const Real* q, const Real* k, const Real* v, const Real* g,
                             const Real* h0, const DecayAttentionDims& d);
// grad_o: (B, T, HV, dv); grad_ht: (B, HV, dk, dv), null = no gradient on the final state.
// Writes grad_q, grad_k (like q), grad_v (like v), grad_g (like g) and grad_h0 (like h0; null =
// not wanted).
template <class Real>
void decay_attention_backward(Real* grad_q, Real* grad_k, Real* grad_v, Real* grad_g, Real* grad_h0,
                              const Real* grad_o, const Real* grad_ht, const Real* q, const Real* k, const Real* v,
                              const Real* g, const Real* h0, const DecayAttentionDims& d);
}  // namespace cpu

}  // namespace hla
