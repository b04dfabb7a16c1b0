// The chunked delta rule on tensor cores (mixers.md 4.6-4.9), forward and backward: the GPU form
// of the CPU chunked reference nn/ops/delta_rule.cpp (prepare_chunk / scan_chunks /
// chunk_forward / chunk_backward / chunk_backward_local). Declarations
// for cuda/delta_rule.cu, which dispatches here when supported() holds and keeps the recurrent
// kernel of cuda/recurrence.cuh for every other case.
//
// Scope: BF16 storage (fp32 accumulation, fp32 state), no gate or a scalar gate (DeltaNet, GDN),
// scalar erase gate beta and scalar write gate w (w = b for DeltaNet/GDN), grouped value heads,
// dk and dv in {64, 128, 256} (any pair), chunks of kChunk = 64 tokens, any T, optional initial state.
// KDA (a vector gate over dk, scalar beta) at the same widths. GDN-2 (a vector gate, a vector
// erase gate b over dk and a vector write gate w over dv) at those but dk = 128 with dv = 256:
// KDA's kernels with E = b (.) K in place of beta K and Y = w (.) V in place of w V, per-channel
// db = k (.) dE and dw = v (.) dY. KDA and GDN-2 at dk = 256 have a shared-memory layout of
// their own (kWide: the scans hold G's last row alone, the local backward one 128-wide key block
// of q, k and G at a time). Other mixes of vector and scalar b, w (and GDN-2 at dk = 128,
// dv = 256) run on the recurrent kernel.
// Packed documents: on their chunk-aligned layout (nn/ops/document_chunks.h, chunks of kChunk)
// with d.chunk_reset, the scans zero the state entering each flagged chunk (and the gradient
// leaving it); no other pass changes.
#pragma once
#include "cuda/delta_rule.h"

namespace hla::cuda::delta_chunk {

constexpr int kChunk = 64;

// Whether the chunked forward and backward (and kept_floats, packed documents) cover these dims
// and storage dtype.
bool supported(const DeltaRuleDims& d, DType dtype);

// The buffers passes 3-4 read from passes 1-2 (Aqk, G, A = (I + L)^{-1} in fp32, W and every
// chunk-start state h[n] as two bf16 planes, hi and lo; a vector gate from dk = 128 on also the
// scans' gated K and Q, two bf16 planes each), as one allocation of this many floats:
//   B HV NT (64 (dk + 2 64 + 1) + dk dv),  NT = ceil(T / 64) (a vector gate's G: 64 dk, not 64;
//   its gated K and Q from dk = 128 on: 2 64 dk more).
int64_t kept_floats(const DeltaRuleDims& d);

// The forward of cuda::delta_rule_forward for supported() dims, with bf16 buffers (q, k, v, g,
// b, w, o, residual; 16-byte aligned q, k, v) and fp32 states. The residual output u is what the
// backward reads of the forward besides its inputs (pass 4's Vnew, which it rounds to bf16 as u
// is). kept: null, or kept_floats(d) floats (16-byte aligned) where the forward keeps what its
// backward reads.
void forward(void* o, float* final_state, void* residual, const void* q, const void* k, const void* v, const void* g,
             const void* b, const void* w, const float* h0, const DeltaRuleDims& d, float* kept);

// The backward of cuda::delta_rule_backward for supported() dims, with the same contract (bf16
// gradients written, not added; grad_g, grad_h0 and d_final_state may be null; 16-byte aligned
// d_o and residual, the forward's residual output u). kept: null (passes 1-2 are replayed), or
// the forward's `kept`, which replaces the replay (bit-identical results) and is consumed: pass 4
// writes dW over its W, so one backward per keeping forward.
void backward(void* grad_q, void* grad_k, void* grad_v, void* grad_g, void* grad_b, void* grad_w, float* grad_h0,
              const void* d_o, const float* d_final_state, const void* d_residual, const void* q, const void* k,
              const void* v, const void* g, const void* b, const void* w, const float* h0, const DeltaRuleDims& d,
              const void* residual, float* kept);

}  // namespace hla::cuda::delta_chunk
