// RWKV-6 on the GPU (nn/ops/rwkv6.h, mixers.md 11): the same names and argument order as
// cpu::rwkv6_*, plus the storage dtype (F32 or BF16; math and states in fp32). Gradient buffers
// as on the CPU: every element written; grad_h0 null = not wanted.
//   r, k, w: (B, T, H, dk);  v, o: (B, T, H, dv);  u: (H, dk);  h0, ht: (B, H, dk, dv) fp32
// Kernels: the chunked tensor-core forward and backward of cuda/decay_attention_chunk.cu for bf16
// with dk, dv in {64, 128} or {128, 256} (T > 1, 16-byte aligned r, k, v, w, and grad_o for the
// backward; packed documents on their chunk layout, d.chunk_reset, included), else the token
// recurrence of cuda/recurrence.cuh (dk <= 256, any dv), which takes packed documents by
// d.doc_start (the state reset at each document start; a chunk_reset reaching it fails);
// d.chunk_size is the CPU's algorithm choice, the GPU picks its own kernel.
#pragma once
#include <cstdint>

#include "nn/ops/rwkv6_dims.h"
#include "tensor/dtype.h"

namespace hla::cuda {

// The floats (an fp32 buffer) a forward keeps for its backward when given `kept` (every chunk-start
// state of the chunked kernels in bf16, two a float, decay_chunk::kept_floats; the backward then skips replaying the forward's
// scan, with bit-identical results); 0 where the recurrent kernels run.
int64_t rwkv6_kept_floats(const Rwkv6Dims& d, DType dtype);

// The chunk size C of the layout on which the chunked kernels take packed documents
// (nn/ops/document_chunks.h, with d.chunk_reset), or 0 where those kernels do not run for these
// dims (the recurrent kernels then take d.doc_start).
int64_t rwkv6_document_chunk(const Rwkv6Dims& d, DType dtype);

// kept: null, or rwkv6_kept_floats(d, dtype) floats (16-byte aligned) that the forward fills for
// its backward.
void rwkv6_forward(void* o, float* ht, const void* r, const void* k, const void* v, const void* w, const void* u,
                   const float* h0, const Rwkv6Dims& d, float* kept, DType dtype);

// Writes grad_r, grad_k, grad_w (like r), grad_v (like v), grad_u (H, dk) and grad_h0 (fp32;
// null = not wanted); grad_ht null = no gradient on the final state. kept: null (the chunk-start
// states are replayed) or the forward's `kept`, only read.
void rwkv6_backward(void* grad_r, void* grad_k, void* grad_v, void* grad_w, void* grad_u, float* grad_h0,
                    const void* grad_o, const float* grad_ht, const void* r, const void* k, const void* v,
                    const void* w, const void* u, const float* h0, const Rwkv6Dims& d, const float* kept,
                    DType dtype);

// The kernel a call with these dims and storage dtype runs (bench and gpu-check labels).
const char* rwkv6_kernel(int64_t dk, int64_t dv, DType dtype);

}  // namespace hla::cuda
