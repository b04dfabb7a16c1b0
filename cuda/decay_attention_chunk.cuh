// The chunked decay attention on tensor cores (mixers.md 4.3, 4.9, 4.10, 7, 10), forward and
// backward: the GPU form of the CPU chunked reference decay_chunk::forward / decay_chunk::backward
// (nn/ops/chunk_util.h, ReadAt::after_update). cuda/decay_attention.cu dispatches here when
// supported() holds (and T > 1, 16-byte aligned q, k, v, grad_o) and keeps the recurrent kernel
// of cuda/recurrence.cuh for every other case. Both directions read only the inputs and the
// initial state, so a chunked forward and a recurrent backward (or the reverse) mix freely; the
// one exception, a backward reading the chunk-start states a forward kept (`kept` below), is
// given them only where takes() held for that forward (cuda/decay_attention.cu, cuda/rwkv6.cu).
//
// Scope: BF16 storage (fp32 math and state), grouped value heads, dk and dv in {64, 128} or in
// {128, 256} (at dk = 256 the backward's chunk-local pass splits the key channels over two CTAs
// a chunk), chunks of kChunk = 64 tokens, any T, optional initial state and final-state gradient. A scalar log
// gate g: (B, T, HV) (RetNet, Mamba-2) or a vector log gate g: (B, T, HV, dk) (GLA, HGRN-2; its
// in-chunk pair terms in 16-token sub-chunks, mixers.md 4.4), forward and backward; RWKV-6
// (mixers.md 11, ReadAt::before_update), forward and backward, on the vector-gate kernels.
// Packed documents: on their chunk-aligned layout (nn/ops/document_chunks.h, chunks of kChunk)
// with d.chunk_reset, the scans zero the state entering each flagged chunk (and the gradient
// leaving it); no other pass changes.
#pragma once
#include <cstdint>

#include "nn/ops/decay_attention_dims.h"
#include "nn/ops/rwkv6_dims.h"
#include "tensor/dtype.h"

namespace hla::cuda::decay_chunk {

constexpr int kChunk = 64;

// Both directions, for either gate and RWKV-6: dk, dv in {64, 128}, and (dk, dv) = (256, 256),
// (128, 256), (256, 128).
bool supported(int64_t dk, int64_t dv, DType dtype);
// What runs at these dims (gpu-check's kernel label): "chunked fwd+bwd (mma)" or "recurrent".
const char* kernel_label(int64_t dk, int64_t dv, DType dtype);

// Whether a call runs here: supported() dims, 16-byte aligned q, k, v and vector gate (its tiles
// are copied 16 bytes at a time too; null for a scalar gate), and T > 1 (a single token, a
// decoding step, is one recurrent update, cheaper than a one-token chunk; an empty batch
// launches nothing). The fp32 states h0 and grad_ht, when given, must be 16-byte aligned as well
// (forward and backward check it).
bool takes(int64_t B, int64_t T, int64_t dk, int64_t dv, DType dtype, const void* q, const void* k, const void* v,
           const void* vector_gate);

// What the forward keeps for its backward when given `kept`: every chunk-start state, bf16
// (B, HV, NT, dk, dv), NT = ceil(T / 64), two a float in this many floats (134 MB at B4 T4096 H16
// D128). The backward then skips its pass 1, the replay of the forward's scan, with bit-identical
// results.
int64_t kept_floats(const DecayAttentionDims& d);
int64_t kept_floats(const Rwkv6Dims& d);

// cuda::decay_attention_forward for supported() dims: bf16 o, q, k, v, g (q, k, v 16-byte
// aligned), fp32 h0 (null = zeros) and ht. kept: null, or kept_floats(d) floats (16-byte
// aligned) that the forward fills for its backward. Workspace, either gate: without `kept`
// 2 B x B HV ceil(T / 64) dk dv (every chunk-start state, bf16, which the output pass reads); with
// `kept` none.
void forward(void* o, float* ht, const void* q, const void* k, const void* v, const void* g, const float* h0,
             const DecayAttentionDims& d, float* kept);

// cuda::rwkv6_forward for supported() dims (the vector-gate kernels with the exclusive query gate
// and the bonus u on the diagonal, ReadAt::before_update): bf16 o, r, k, v, w, u (r, k, v 16-byte
// aligned), fp32 h0 (null = zeros) and ht. kept: as forward's. Workspace without `kept`:
// 2 B x B H ceil(T / 64) dk dv.
void rwkv6_forward(void* o, float* ht, const void* r, const void* k, const void* v, const void* w, const void* u,
                   const float* h0, const Rwkv6Dims& d, float* kept);

// cuda::rwkv6_backward for supported() dims (the vector-gate backward kernels with RWKV-6's
// exclusive query gate and bonus): writes bf16 grad_r, grad_k, grad_v, grad_w, grad_u and fp32
// grad_h0 (null = not wanted); grad_o bf16 (16-byte aligned), grad_ht fp32 (null = no gradient on
// the final state). grad_u is summed over the batch and the chunks in a fixed order (no atomics).
// kept: null (the backward replays the chunk-start states), or the forward's `kept`, only read
// (so any number of backwards may read it). Workspace: 2 x 2 B x B H ceil(T / 64) dk dv (one of
// them where kept) + 4 B x B ceil(T / 64) H dk, and at dk = 256 the two key blocks' parts of dV,
// 2 x 4 B x B T H dv.
void rwkv6_backward(void* grad_r, void* grad_k, void* grad_v, void* grad_w, void* grad_u, float* grad_h0,
                    const void* grad_o, const float* grad_ht, const void* r, const void* k, const void* v,
                    const void* w, const void* u, const float* h0, const Rwkv6Dims& d, const float* kept);

// cuda::decay_attention_backward for supported() dims: writes bf16 grad_q, grad_k, grad_v,
// grad_g and fp32 grad_h0 (null = not wanted); grad_o bf16 (16-byte aligned), grad_ht fp32
// (null = no gradient on the final state). kept: as rwkv6_backward's. Workspace: 2 x 2 B x B HV
// ceil(T / 64) dk dv (every chunk-start state, where not kept, and its gradient, bf16) + 2 x 4 B x B T
// HV dk (per-value-head dq, dk; HV > H only), and at dk = 256 the two key blocks' parts of dV,
// 2 x 4 B x B T HV dv (and of a scalar gate's dg).
void backward(void* grad_q, void* grad_k, void* grad_v, void* grad_g, float* grad_h0, const void* grad_o,
              const float* grad_ht, const void* q, const void* k, const void* v, const void* g, const float* h0,
              const DecayAttentionDims& d, const float* kept);

}  // namespace hla::cuda::decay_chunk
