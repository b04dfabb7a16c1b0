// Rotary position embedding, GPT-NeoX "rotate-half" layout (mixers.md 2.9), applied to q and k
// of softmax attention and RetNet.
//
//   inv_freq_i = theta^(-2i/D),  phi_{p,i} = p * inv_freq_i,  i < D/2,  p = position_offset + t
//   y_i       = x_i cos(phi) - x_{i+D/2} sin(phi)
//   y_{i+D/2} = x_i sin(phi) + x_{i+D/2} cos(phi)
// Each channel pair is rotated by phi, so the backward is the rotation by -phi. The angles are
// computed in the op's type (float reproduces fla's fp32 tables).
// Gradients: written in full (the caller's buffers may hold anything).
#pragma once
#include "autograd/var.h"

namespace hla {

// x: (B, T, H, D), D even -> (B, T, H, D); token t sits at position position_offset + t.
Var rope(const Var& x, double theta, int64_t position_offset = 0);
// The same with an offset per sequence (decoding a batch whose prompts differ in length): token t
// of sequence b sits at position positions[b] + t. positions: (B) I32 on x's device, read by the
// kernel (a CUDA graph replays the rotation at the positions the buffer holds then). Or, with
// positions (B, T) I32, token t of sequence b at positions[b, t] (packed documents: each token's
// place in its own document).
Var rope(const Var& x, double theta, const Tensor& positions);

namespace cpu {
// x, y: (B, T, H, D)
template <class Real>
void rope_forward(Real* y, const Real* x, int64_t B, int64_t T, int64_t H, int64_t D, double theta,
                  int64_t position_offset);
// dy, dx: (B, T, H, D); dx written
template <class Real>
void rope_backward(Real* dx, const Real* dy, int64_t B, int64_t T, int64_t H, int64_t D, double theta,
                   int64_t position_offset);
// As above with token t of sequence b at positions[b] + t, positions (B); or, per_token, at
// positions[b * T + t], positions (B, T)
template <class Real>
void rope_forward_at(Real* y, const Real* x, const int32_t* positions, bool per_token, int64_t B, int64_t T, int64_t H,
                     int64_t D, double theta);
template <class Real>
void rope_backward_at(Real* dx, const Real* dy, const int32_t* positions, bool per_token, int64_t B, int64_t T,
                      int64_t H, int64_t D, double theta);
}  // namespace cpu

}  // namespace hla
