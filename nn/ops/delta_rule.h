// The general delta rule (mixers.md 4.5): one op for DeltaNet, GDN, KDA and GDN-2.
//
// Per (batch, value head), with a (dk, dv) matrix state S:
//   S'_t = Diag(exp(g_t)) S_{t-1}          decay; g: absent / a scalar per head / a vector over dk
//   r_t  = S'_t^T (b_t * k_t)              what the decayed state returns for the erase key
//   u_t  = w_t * v_t - r_t                 the "new value" (fla: v_new): the delta-rule error
//   S_t  = S'_t + k_t u_t^T                = (I - k_t (b_t*k_t)^T) Diag(exp(g_t)) S_{t-1} + k_t (w_t*v_t)^T
//   o_t  = scale * S_t^T q_t               read after the update
//
//   mixer      gate g          erase b           write w
//   DeltaNet   absent          beta (scalar)     = b
//   GDN        scalar          beta (scalar)     = b
//   KDA        vector (dk)     beta (scalar)     = b
//   GDN-2      vector (dk)     vector (dk)       vector (dv)
//
// Two algorithms, equal up to rounding: the token recurrence (chunk_size = 0, the readable
// ground truth) and the chunked WY/UT form of 4.6-4.9 (chunk_size = C > 0, the algorithm of the
// CUDA chunk kernel). Grouped value heads: value head j reads query/key head j / (HV / H).
// Besides o and the final state the op returns u_t, the per-token delta-rule error that
// cross-layer error routing (CLER / CLER-H, papers.md 3.5) routes: for DeltaNet/GDN it is
// beta_t (v_t - S'_t^T k_t), fla's v_new.
//
// Packed documents (doc_start): the state becomes zero before each document's first token, so
// every document of a row gives the outputs and gradients of the document run alone; the final
// state is the state at the end of each row's last document, and initial_state must be
// undefined. The token recurrence resets at each document start; the chunked forms (CPU, and
// the GPU's chunked kernels where they run) run on the chunk-aligned layout of
// nn/ops/document_chunks.h (every document starts a chunk, whose incoming state is reset).
//
// Gradient buffers, on both devices: the backward WRITES every element of every buffer it is
// given (callers pass uninitialised buffers); a null grad_g (no gate) or grad_h0 means "not
// wanted". Every buffer is its own: with w = b (DeltaNet, GDN, KDA) the caller passes b twice as
// an input and gets grad_b and grad_w separately, then sums them.
#pragma once
#include "autograd/var.h"
#include "nn/ops/delta_rule_dims.h"
#include "nn/ops/document_chunks.h"

namespace hla {

struct DeltaRuleOptions {
  double scale = 0;        // query scale; 0 means 1 / sqrt(dk)
  int64_t chunk_size = 0;  // 0: token recurrence; C > 0: chunked WY form with chunks of C tokens
  // GPU chunked kernels, when a backward follows: the forward keeps its chunk-start states and
  // workspaces for the backward (cuda::delta_rule_kept_floats x 4 bytes) instead of the backward
  // replaying passes 1-2; same results bit for bit ([train] delta_rule_keep). The CPU ignores it.
  bool keep_states = true;
};

struct DeltaRuleOutputs {
  Var o;            // (B, T, HV, dv)
  Var final_state;  // (B, HV, dk, dv)  S_T, in DeltaRuleDims::state_dtype (fp32 on the GPU)
  Var residual;     // (B, T, HV, dv)   u_t = w_t * v_t - S'_t^T (b_t * k_t)
};

// q, k: (B, T, H, dk);  v: (B, T, HV, dv) with HV a multiple of H
// g: undefined (no decay), (B, T, HV) scalar or (B, T, HV, dk) vector log decay (g <= 0)
// b: (B, T, HV) scalar beta or (B, T, HV, dk) erase gate
// w: undefined (w = b, which must then be a scalar beta), (B, T, HV) or (B, T, HV, dv) write gate
// initial_state: undefined (zeros) or (B, HV, dk, dv)
// documents: undefined (one document a row) or doc_start (B, T) I32 on q's device
// (document_starts) with its chunk layouts (nn/ops/document_chunks.h: DocumentStarts)
// All inputs of one dtype (CPU: F32 or F64; GPU: F32 or BF16) on one device; gradients flow to
// every defined input.
DeltaRuleOutputs delta_rule(const Var& q, const Var& k, const Var& v, const Var& g, const Var& b,
                            const Var& w, const Var& initial_state,
                            const DeltaRuleOptions& options = {}, const DocumentStarts& documents = {});

namespace cpu {

// o, residual: (B, T, HV, dv);  final_state, h0: (B, HV, dk, dv), h0 null = zeros.
// q, k: (B, T, H, dk);  v: (B, T, HV, dv);  g, b, w as in DeltaRuleDims (g null when absent).
template <class T>
void delta_rule_forward(T* o, T* final_state, T* residual, const T* q, const T* k, const T* v,
                        const T* g, const T* b, const T* w, const T* h0, const DeltaRuleDims& d);

// Gradients have the shapes of their inputs and are WRITTEN; grad_g and grad_h0 may be null
// (not wanted). d_o, d_residual: (B, T, HV, dv); d_final_state: (B, HV, dk, dv), null = no
// gradient on the final state.
template <class T>
void delta_rule_backward(T* grad_q, T* grad_k, T* grad_v, T* grad_g, T* grad_b, T* grad_w,
                         T* grad_h0, const T* d_o, const T* d_final_state, const T* d_residual,
                         const T* q, const T* k, const T* v, const T* g, const T* b, const T* w,
                         const T* h0, const DeltaRuleDims& d);

}  // namespace cpu
}  // namespace hla
