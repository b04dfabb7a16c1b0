// What one layer carries from call to call while decoding (nn/decode.h): the linear mixer's
// recurrent state, its short-convolution and token-shift tails, and the KV cache of a softmax
// attention layer. An undefined Tensor is the state before the first token (zeros, an empty
// cache), so the first call of a layer with a fresh LayerState computes exactly the training
// forward and leaves the state behind. The model sets MixerIO::state; training leaves it null.
#pragma once
#include <array>
#include <memory>
#include <vector>

#include "autograd/var.h"

namespace hla {

// Keys (after RoPE) and values of one attention layer, a ring buffer over positions: the token
// at position p sits in slot p % capacity, so a sliding window of w keeps capacity = w.
struct KvCache {
  Tensor k, v;           // (B, capacity, Hkv, d) in the compute dtype
  int64_t capacity = 0;  // slots per sequence, set by the decoder before the first call
};

// A right-padded call (the decoder's batched prefill of prompts of different lengths):
// sequence b's tokens are the first lengths[b] of its row, the rest is padding. Causality keeps
// every real token's output exact; the state must skip the padding too, so each layer makes a
// padded token an identity step of its recurrence (no write, no decay: zero_at_padding on the
// key-side write and the log decay) and takes its tails at each sequence's own end
// (keep_last_inputs), and an attention layer caches each sequence's first lengths[b] tokens.
struct Padding {
  std::vector<int64_t> lengths;  // (B) on the host
  Tensor lengths_device;         // (B) I32 on the model's device
  Tensor valid;                  // (B * T) F32 on the device: 1 at tokens, 0 at padding
};

struct LayerState {
  Tensor recurrent;           // the mixer's S, fp32: (B, HV, dk, dv); HGRN: (B, D)
  std::array<Tensor, 3> tails;  // short-conv tails (B, C, K-1) in the layer's order (q, k, v;
                                // Mamba-2: xBC), or RWKV-6's time-mix token shift (B, D)
  Tensor ffn_tail;            // RWKV-6 channel-mix token shift (B, D)
  KvCache kv;
  Tensor positions;           // (B) I32 on the model's device: tokens each sequence has seen
                              // before this call (RoPE offsets, cache slots); set by the model
  std::shared_ptr<const Padding> padding;  // this call's right padding, null: none; set by the model
};

// Where a layer keeps a carried tensor: its recurrent state, or its i-th tail; null in training
// (no state).
inline Tensor* recurrent_slot(LayerState* s) { return s ? &s->recurrent : nullptr; }
inline Tensor* tail_slot(LayerState* s, size_t i) { return s ? &s->tails.at(i) : nullptr; }
// The carried tensor as an op's initial state, in the dtype of the op's input `like` (the ops
// take states of their input's dtype); undefined (zeros) in training and before the first call.
inline Var initial_state(const Tensor* slot, const Var& like) {
  return slot && slot->defined() ? Var(slot->to(like.dtype())) : Var();
}
// Keeps an op's final state for the next call (nothing in training).
inline void keep_state(Tensor* slot, const Var& final_state) {
  if (slot) *slot = final_state.value();
}
// The right padding of this call (null in training and in unpadded calls).
inline const Padding* padding_of(const LayerState* s) { return s ? s->padding.get() : nullptr; }

// x: (B, T, ...) with the padded tokens' entries zeroed (x itself without padding); undefined
// stays undefined. On a recurrence's write (k, beta) and log decay it makes padding an identity step.
Var zero_at_padding(const Var& x, const LayerState* s);
// Keeps a short conv's or token shift's final state: the op's own, or with padding the last
// inputs before each sequence's end (last_tokens, nn/ops/last_tokens.h) in its shape.
// input: (B, T, C) the op's input; final_state: (B, C, K-1) or (B, C).
void keep_last_inputs(Tensor* slot, const Var& final_state, const Var& input, const LayerState* s);

}  // namespace hla
