// Decoding with a fixed-size state: a Decoder prefills a batch of prompts through the model's
// own forward (the chunked kernels) with every layer's state captured, then advances all
// sequences one token per step: each linear mixer carries its recurrent state S (fp32) and its
// short-convolution / token-shift tails, each softmax-attention layer a KV cache (GQA: Hkv
// heads; a sliding window is a ring buffer of window slots; RoPE at each sequence's absolute
// position). Nothing is recorded for autograd while decoding.
//
// Mixed prompt lengths: prefill sorts the prompts by length and cuts them into groups of at most
// prefill_tokens padded tokens; each group is one right-padded forward (ModelState::lengths):
// causality keeps every prompt token's output exact, and each layer keeps its padding out of the
// state (a padded token is an identity step of the recurrence, tails and KV caches are taken at
// each prompt's own end; nn/layers/layer_state.h). The head runs on each prompt's last token
// only. The per-sequence states are then stacked into one batch in the prompts' order; every
// step is batched, each sequence at its own position.
//
// decode_memory is the arithmetic of what a decoder holds, per sequence, so a memory table for
// long contexts needs no allocation; Decoder::memory() counts the bytes it actually holds.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "nn/config.h"
#include "nn/module.h"

namespace hla {

struct DecodeMemory {
  int64_t state_bytes = 0;  // recurrent states (fp32) + conv and token-shift tails
  int64_t kv_bytes = 0;     // attention KV caches
  int64_t total() const { return state_bytes + kv_bytes; }
};

// Per-sequence bytes at `context` tokens: every linear layer's S in fp32 and its tails in
// `activation` (the compute dtype the tails and caches are stored in), and every attention
// layer's K and V cache, 2 * Hkv * head_dim * min(context, window) elements in `activation`.
// Counts the state tensors only (not the weights, not the per-step activations).
DecodeMemory decode_memory(const ModelConfig& config, int64_t context, DType activation = DType::F32);

class Decoder {
 public:
  virtual ~Decoder() = default;
  // Starts a new batch (forgetting the previous one): one prompt per sequence, each at least
  // one token, any lengths. Returns (B, V) fp32 logits after each prompt's last token, on the
  // model's device.
  virtual Tensor prefill(const std::vector<std::vector<int32_t>>& prompts) = 0;
  // Feeds one token per sequence (tokens.size() == B of the last prefill); returns (B, V) fp32
  // logits after it, on the model's device.
  virtual Tensor step(const std::vector<int32_t>& tokens) = 0;
  // Tokens each sequence has seen (prompt + steps).
  virtual const std::vector<int64_t>& lengths() const = 0;
  // Bytes held now for the whole batch: B * decode_memory(config, max_context, dtype) once a
  // batch is prefilled (the caches are allocated at full capacity), zero before.
  virtual DecodeMemory memory() const = 0;
};

// A decoder over a model made by make_model (nn/model.h); any other model is an error.
// max_context bounds prompt + generated tokens when the model has a full-attention layer (its
// cache has that many slots); models without one (linear layers, sliding windows) decode past
// it. cuda_graph: on the GPU, capture the step for the batch in a CUDA graph and replay it
// (off: launch the kernels of every step, as on the CPU). prefill_tokens bounds the padded tokens
// (group size x longest prompt) of one prefill forward; a prompt longer than it runs alone. The
// model must outlive the decoder.
constexpr int64_t kPrefillTokens = 1 << 17;
std::unique_ptr<Decoder> make_decoder(TrainableModel& model, int64_t max_context, bool cuda_graph = true,
                                      int64_t prefill_tokens = kPrefillTokens);

}  // namespace hla
