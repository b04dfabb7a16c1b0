// The general delta rule on the GPU (nn/ops/delta_rule.h, mixers.md 4.5): DeltaNet, GDN, KDA
// and GDN-2. The same names and argument order as cpu::delta_rule_*, plus the storage dtype
// (F32 or BF16; math and states in fp32) and what the backward reads of the forward besides its
// inputs: the residual output u (the chunked backward's Vnew, which it rounds to bf16 as u is),
// or where the recurrent kernels run an fp32 copy of u (so that the bf16 rounding of u never
// enters their gradients).
//   q, k: (B, T, H, dk);  v, o, residual, u_f32: (B, T, HV, dv);  h0, final_state: (B, HV, dk, dv) fp32
//   g: null, (B, T, HV) or (B, T, HV, dk);  b: (B, T, HV) or (B, T, HV, dk);  w: (B, T, HV) or (B, T, HV, dv)
// Kernels: forward and backward run the chunked tensor-core kernels of cuda/delta_rule_chunk.cu
// where they apply (BF16, no gate or a scalar gate, scalar b and w, dk and dv in {64, 128, 256},
// 16-byte aligned q, k, v) and the token recurrence of cuda/recurrence.cuh (dk <= 256, any dv)
// otherwise; the backward takes the forward's kernels (an unaligned d_o is copied for the
// chunked ones).
// Packed documents: the chunked kernels on their chunk-aligned layout (d.chunk_reset), or the
// recurrent ones on the rows (d.doc_start).
// Gradient buffers as on the CPU (nn/ops/delta_rule.h): every element written; grad_g (no gate)
// and grad_h0 null = not wanted; grad_b and grad_w distinct even when w = b.
#pragma once
#include <cstdint>

#include "nn/ops/delta_rule_dims.h"
#include "tensor/dtype.h"

namespace hla::cuda {

// The fp32 floats a forward keeps for its backward when given `kept` (the chunked kernels'
// chunk-start states and workspaces, delta_chunk::kept_floats; the backward then skips the
// replay of passes 1-2, with bit-identical results); 0 where the recurrent kernels run.
int64_t delta_rule_kept_floats(const DeltaRuleDims& d, DType dtype);

// The chunk size C of the layout on which the chunked kernels take packed documents
// (nn/ops/document_chunks.h, with d.chunk_reset), or 0 where those kernels do not run for these
// dims (the recurrent kernels then take d.doc_start).
int64_t delta_rule_document_chunk(const DeltaRuleDims& d, DType dtype);

// Whether the backward of these dims and inputs reads the forward's u_f32 (the recurrent
// kernels run); else the forward needs none.
bool delta_rule_backward_reads_u_f32(const DeltaRuleDims& d, DType dtype, const void* q, const void* k,
                                     const void* v);

// u_f32 may be null (no backward will follow, or the chunked kernels run). kept: null, or
// delta_rule_kept_floats(d, dtype) floats (16-byte aligned) that the forward fills for its backward.
void delta_rule_forward(void* o, float* final_state, void* residual, const void* q, const void* k, const void* v,
                        const void* g, const void* b, const void* w, const float* h0, const DeltaRuleDims& d,
                        float* u_f32, float* kept, DType dtype);

// Gradients are WRITTEN with the shapes of their inputs; grad_g and grad_h0 may be null (not
// wanted); d_final_state null = no gradient on the final state. residual, u_f32 and kept: the
// forward's (u_f32 null where delta_rule_backward_reads_u_f32 is false; kept null: passes 1-2
// replayed; else consumed, so one backward per keeping forward).
void delta_rule_backward(void* grad_q, void* grad_k, void* grad_v, void* grad_g, void* grad_b, void* grad_w,
                         float* grad_h0, const void* d_o, const float* d_final_state, const void* d_residual,
                         const void* q, const void* k, const void* v, const void* g, const void* b, const void* w,
                         const float* h0, const DeltaRuleDims& d, const void* residual, const float* u_f32,
                         float* kept, DType dtype);

// Which kernels run for these dims and storage dtype, given aligned inputs (allocator buffers
// always are): the gpu-check table and the bench print them.
const char* delta_rule_kernel(const DeltaRuleDims& d, DType dtype);

}  // namespace hla::cuda
