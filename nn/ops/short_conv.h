// ShortConvolution (mixers.md 2.6): causal depthwise 1-D convolution over time with an optional
// bias and SiLU, the short conv that q/k/v (DeltaNet, GDN, KDA, GDN-2, GLA option) and Mamba-2's
// xBC pass through before the recurrence.
//
//   pre_t[c] = bias[c] + sum_{i=0}^{K-1} w[c, 0, i] * x_{t-K+1+i}[c]      tap K-1 = current token
//   y_t[c]   = silu(pre_t[c])  or  pre_t[c]
//
// Weight layout is fla's / nn.Conv1d's depthwise one, (C, 1, K), so checkpoints load as they are.
// Conv state: the K-1 inputs before the first token, (B, C, K-1), state[b, c, j] = x_{j-(K-1)}[c]
// (zeros when absent). The final state holds the last K-1 inputs in the same layout, so running
// T tokens and continuing from the final state equals running all tokens at once (decoding,
// chunked prefill). fla's decoding cache (B, C, K) is this state with one unused column in front.
// Packed documents (doc_start): every document of a row is convolved as if alone (no tap reads
// an input of an earlier document), and the final state holds the last K-1 inputs of the row's
// last document (zeros before its start); the initial state must then be undefined.
// norm_width > 0: the delta-rule mixers' q/k l2norm fused into the conv (short_conv_dims.h):
// y = l2norm of each head of norm_width channels of act(conv(x)), in one kernel on the GPU; on
// the CPU bit for bit short_conv then l2norm (nn/ops/l2norm.h).
// Gradients: written in full (the caller's buffers may hold anything); null = not wanted.
#pragma once
#include "autograd/var.h"
#include "nn/ops/short_conv_dims.h"

namespace hla {

struct ShortConvOut {
  Var y;            // (B, L, C)
  Var final_state;  // (B, C, K-1)
};

// x: (B, L, C), weight: (C, 1, K), bias: (C) or undefined, initial_state: (B, C, K-1) or
// undefined (zeros). L is the number of tokens (T in mixers.md). doc_start: (B, L) I32 on x's
// device (nn/ops/attention.h: document_starts) or undefined (one document a row). norm_width:
// 0, or a divisor of C: y is l2-normalised (eps 1e-6) per token over each group of that many
// channels.
ShortConvOut short_conv(const Var& x, const Var& weight, const Var& bias = Var(),
                        const Var& initial_state = Var(), ConvAct act = ConvAct::SiLU,
                        const Tensor& doc_start = Tensor(), int64_t norm_width = 0);

namespace cpu {
// y, x: (B, L, C), w: (C, K), bias: (C) or null, state, final_state: (B, C, K-1), state may be null,
// rstd: (B, L, C / d.norm_width) (null when d.norm_width == 0)
template <class T>
void short_conv_forward(T* y, T* final_state, T* rstd, const T* x, const T* w, const T* bias, const T* state,
                        const ShortConvDims& d);
// dx: (B, L, C), dw: (C, K), dbias: (C), dstate: (B, C, K-1) written (dbias, dstate may be null);
// dy: (B, L, C), dfinal: (B, C, K-1)
template <class T>
void short_conv_backward(T* dx, T* dw, T* dbias, T* dstate, const T* dy, const T* dfinal, const T* x,
                         const T* w, const T* bias, const T* state, const ShortConvDims& d);
}  // namespace cpu
}  // namespace hla
