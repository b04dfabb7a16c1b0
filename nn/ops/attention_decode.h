// One decoding step of causal softmax attention against a KV cache: one query token per
// sequence, its keys and values appended to a ring buffer, then attention over what the
// sequence may see. The decoder (nn/decode.h) calls it for every attention layer at every step;
// the prefill runs the training attention (nn/ops/attention.h) over the prompt instead.
//
//   p = positions[b] (tokens before this one);  slot(tau) = tau % capacity
//   K[b, slot(p)] = k[b],  V[b, slot(p)] = v[b]                     (the write comes first)
//   lo = max(0, p - capacity + 1, window > 0 ? p - window + 1 : 0)   (the positions the query sees)
//   s[tau] = scale * q[b, h] . K[b, slot(tau), m],  m = floor(h / (H / Hkv)),  tau = lo .. p
//   o[b, h] = sum_tau softmax(s)[tau] V[b, slot(tau), m]
// A ring of `capacity` slots forgets the oldest position: with capacity >= window it is the
// sliding window exactly; for full attention the caller keeps p < capacity. Keys are stored as
// given (the caller applies RoPE at the token's position first). Positions live in a device
// tensor, so a captured CUDA graph replays the step at whatever positions the buffer holds.
//
// No autograd: decoding runs without a graph, and the op writes into the caches in place.
#pragma once
#include "nn/ops/attention_decode_dims.h"
#include "tensor/tensor.h"

namespace hla {

// q: (B, H, D), k: (B, Hkv, D), v: (B, Hkv, Dv), one dtype and device; k_cache: (B, C, Hkv, D),
// v_cache: (B, C, Hkv, Dv) of the same dtype and device, written at slot positions[b] % C;
// positions: (B) I32 on that device. Returns o: (B, H, Dv).
Tensor attention_decode(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& k_cache, Tensor& v_cache,
                        const Tensor& positions, double scale, int64_t window = 0);

namespace cpu {
// Shapes as above; o written; the caches' slot positions[b] % capacity written.
template <class Real>
void attention_decode_forward(Real* o, Real* k_cache, Real* v_cache, const Real* q, const Real* k, const Real* v,
                              const int32_t* positions, const AttentionDecodeDims& d);
}  // namespace cpu

}  // namespace hla
