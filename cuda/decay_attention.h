// Decay linear attention on the GPU (nn/ops/decay_attention.h, mixers.md 4.3): the same names
// and argument order as cpu::decay_attention_*, plus the storage dtype (F32 or BF16; math and
// states in fp32). Gradient buffers as on the CPU: every element written; grad_h0 null = not wanted.
//   q, k: (B, T, H, dk);  v, o: (B, T, HV, dv);  g: (B, T, HV) scalar or (B, T, HV, dk) vector
//   h0, ht: (B, HV, dk, dv) fp32, h0 null = zeros
// Kernels: forward and backward run the chunked tensor-core kernels of
// cuda/decay_attention_chunk.cu for BF16 storage, either gate, dk, dv in {64, 128} or {128, 256},
// T > 1 and 16-byte aligned q, k, v, a vector g (and grad_o), packed documents included on their
// chunk layout (d.chunk_reset: the scans reset the state at the flagged chunks); every other case
// runs the token recurrence of cuda/recurrence.cuh (dk <= 256, any dv), packed documents by
// d.doc_start (the state reset at each document start) included. A chunk_reset reaching the
// recurrent kernels fails. Both directions read only the inputs and h0, so the two kernels mix
// freely. d.chunk_size is the CPU's algorithm choice; the GPU picks its kernel by the rules above.
#pragma once
#include <cstdint>

#include "nn/ops/decay_attention_dims.h"
#include "tensor/dtype.h"

namespace hla::cuda {

// The floats (an fp32 buffer) a forward keeps for its backward when given `kept` (every chunk-start
// state of the chunked kernels in bf16, two a float, decay_chunk::kept_floats; the backward then skips replaying the forward's
// scan, with bit-identical results); 0 where the recurrent kernels run.
int64_t decay_attention_kept_floats(const DecayAttentionDims& d, DType dtype);

// The chunk size C of the layout on which the chunked kernels take packed documents
// (nn/ops/document_chunks.h, with d.chunk_reset), or 0 where those kernels do not run for these
// dims (the recurrent kernels then take d.doc_start).
int64_t decay_attention_document_chunk(const DecayAttentionDims& d, DType dtype);

// kept: null, or decay_attention_kept_floats(d, dtype) floats (16-byte aligned) that the forward
// fills for its backward.
void decay_attention_forward(void* o, float* ht, const void* q, const void* k, const void* v, const void* g,
                             const float* h0, const DecayAttentionDims& d, float* kept, DType dtype);

// Writes grad_q, grad_k (like q), grad_v (like v), grad_g (like g) and grad_h0 (fp32; null = not
// wanted); grad_ht null = no gradient on the final state. kept: null (the chunk-start states are
// replayed) or the forward's `kept`, only read.
void decay_attention_backward(void* grad_q, void* grad_k, void* grad_v, void* grad_g, float* grad_h0,
                              const void* grad_o, const float* grad_ht, const void* q, const void* k, const void* v,
                              const void* g, const float* h0, const DecayAttentionDims& d, const float* kept,
                              DType dtype);

// The names of the kernels that run for these dims and storage dtype, given aligned inputs
// (allocator buffers always are): the gpu-check table and the bench print them.
const char* decay_attention_kernel(int64_t dk, int64_t dv, bool vector_gate, DType dtype);

}  // namespace hla::cuda
