// RWKV-6 token shift and the lerps built on it (mixers.md 2.7 and 11).
//
// token_shift:  delta_t = x_{t-1} - x_t  with x_0 = the given state (the previous chunk's last
//               token when decoding) or zeros; also returns the last token as the next state.
//               Like fla it returns delta, not x_{t-1}. Packed documents (doc_start): x_{t-1} = 0
//               at each document's first token (the state must then be undefined), so every
//               document shifts as if alone; the last token is the row's.
// lerp:         y = x + mu * delta  with a static per-channel mu (D): the time-mix x_proj.0 input
//               and the channel-mix key/receptance inputs; a lerp between x_t and x_{t-1}.
// ddlerp:       RWKV-6's data-dependent lerp: for n = 0..N-1 (r, w, k, v, g, so N = 5)
//                   m^n_t  = W2[:, nR:(n+1)R] tanh(zz_t[nR:(n+1)R]) + bias[n]      (block-diagonal low rank)
//                   xi^n_t = x_t + m^n_t * delta_t
//               with zz = W_x0 lerp(x, delta, mu_x) computed by the caller (linear + lerp).
// L is the number of tokens (T in mixers.md), D the model width.
// Gradients: written in full (the caller's buffers may hold anything); null = not wanted.
#pragma once
#include <vector>

#include "autograd/var.h"

namespace hla {

struct TokenShiftOut {
  Var delta;       // (B, L, D)
  Var last_token;  // (B, D): x_L, the state for the next chunk
};

// x: (B, L, D), state: (B, D) or undefined (zeros), doc_start: (B, L) I32 on x's device
// (nn/ops/attention.h: document_starts) or undefined (one document a row)
TokenShiftOut token_shift(const Var& x, const Var& state = Var(), const Tensor& doc_start = Tensor());
// x, delta: (..., D), mu: (D)  ->  (..., D)
Var lerp(const Var& x, const Var& delta, const Var& mu);
// x, delta: (B, L, D), zz: (B, L, N*R), w2: (D, N*R) (x_proj.2.weight), bias: (N, D) (x_bias)
//   ->  N Vars xi^n: (B, L, D), in bias-row order (RWKV-6: r, w, k, v, g)
std::vector<Var> ddlerp(const Var& x, const Var& delta, const Var& zz, const Var& w2, const Var& bias);

namespace cpu {
// x, delta: (B, L, D), state, last: (B, D), state may be null; doc_start: (B, L) or null
template <class T>
void token_shift_forward(T* delta, T* last, const T* x, const T* state, const int32_t* doc_start, int64_t B,
                         int64_t L, int64_t D);
// dx: (B, L, D) and dstate: (B, D) written (dstate may be null); ddelta: (B, L, D), dlast: (B, D)
template <class T>
void token_shift_backward(T* dx, T* dstate, const T* ddelta, const T* dlast, const int32_t* doc_start, int64_t B,
                          int64_t L, int64_t D);

// x, delta, y: (M, D), mu: (D)
template <class T> void lerp_forward(T* y, const T* x, const T* delta, const T* mu, int64_t M, int64_t D);
// dx, ddelta: (M, D), dmu: (D) written; dy: (M, D)
template <class T>
void lerp_backward(T* dx, T* ddelta, T* dmu, const T* dy, const T* delta, const T* mu, int64_t M, int64_t D);

// xi: (N, M, D); x, delta: (M, D); zz: (M, N*R); w2: (D, N*R); bias: (N, D); M = B*L
template <class T>
void ddlerp_forward(T* xi, const T* x, const T* delta, const T* zz, const T* w2, const T* bias, int64_t M,
                    int64_t D, int64_t N, int64_t R);
// dx, ddelta: (M, D), dzz: (M, N*R), dw2: (D, N*R), dbias: (N, D) written; dxi: (N, M, D)
template <class T>
void ddlerp_backward(T* dx, T* ddelta, T* dzz, T* dw2, T* dbias, const T* dxi, const T* delta, const T* zz,
                     const T* w2, const T* bias, int64_t M, int64_t D, int64_t N, int64_t R);
}  // namespace cpu
}  // namespace hla
