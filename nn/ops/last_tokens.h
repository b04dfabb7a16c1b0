// The last n inputs of each sequence of a right-padded batch, in the layout of a short
// convolution's state (nn/ops/short_conv.h): sequence b's tokens are the first lengths[b] of
// its row, so its tail sits at lengths[b] - n .. lengths[b] - 1, not at the end of the row. A
// right-padded prefill (nn/decode.h) takes each layer's conv and token-shift tails (n = 1) and
// the model's last-token hidden state with it.
//
//   out[b, c, j] = x[b, lengths[b] - n + j, c]   if lengths[b] - n + j >= 0, else 0
//
// No autograd: decoding runs without a graph.
#pragma once
#include "tensor/tensor.h"

namespace hla {

// x: (B, T, C) float; lengths: (B) I32 on x's device, each in [1, T]. Returns (B, C, n).
Tensor last_tokens(const Tensor& x, const Tensor& lengths, int64_t n);

namespace cpu {
// out: (B, C, n); x: (B, T, C); lengths: (B)
template <class Real>
void last_tokens_forward(Real* out, const Real* x, const int32_t* lengths, int64_t B, int64_t T, int64_t C, int64_t n);
}  // namespace cpu

}  // namespace hla
