// The chunked decay-attention forward on tensor cores (mixers.md 4.3, 7, 10): the GPU form of the
// CPU chunked reference decay_chunk::forward (nn/ops/chunk_util.h, ReadAt::after_update).
// cuda/decay_attention.cu dispatches here when supported() holds and keeps the recurrent
// kernel of cuda/recurrence.cuh for every other case and for the backward (which reads only
// the inputs and the initial state, so the two kernels mix freely).
//
// Scope: BF16 storage (fp32 math and state), a scalar log gate g: (B, T, HV) (RetNet, Mamba-2),
// grouped value heads, dk and dv in {64, 128}, chunks of kChunk = 64 tokens, any T, optional
// initial state. Vector gates (GLA, HGRN-2) need the sub-chunk factorisation of 4.4 and stay
// on the recurrent kernel.
#pragma once
#include <cstdint>

#include "nn/ops/decay_attention_dims.h"
#include "tensor/dtype.h"

namespace hla::cuda::decay_chunk {

constexpr int kChunk = 64;

bool supported(int64_t dk, int64_t dv, bool vector_gate, DType dtype);

// cuda::decay_attention_forward for supported() dims: bf16 o, q, k, v, g (q, k, v 16-byte
// aligned), fp32 h0 (null = zeros) and ht.
void forward(void* o, float* ht, const void* q, const void* k, const void* v, const void* g, const float* h0,
             const DecayAttentionDims& d);

}  // namespace hla::cuda::decay_chunk
