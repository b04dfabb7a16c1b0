// Packed documents laid out for the chunked recurrence kernels (issue W2.2): every document of a
// row starts at a multiple of the chunk size C in a padded row of T' tokens, T' = the max over
// rows of the sum over the row's documents of round_up(length, C). A chunk then never holds two
// documents, so the chunked form resets its state at the chunks that start one (chunk_reset) and
// nothing else changes. Padding places hold zeros in every input (gather_tokens), which the
// chunked delta rule treats as no-ops: g = 0 decays nothing, b = 0 erases nothing, w = 0 and
// k = 0 write nothing, so the state at the end of a row is the state at the end of its last
// document.
//
//   gather_tokens:  out[b, p] = x[b, index[b, p]]  (0 where index[b, p] = -1)      (B, T, ...) -> (B, T', ...)
//   scatter_tokens: out[b, index[b, p]] = y[b, p]  (places with index -1 dropped)  (B, T', ...) -> (B, T, ...)
// Every token of a row has exactly one place, so each op is the other's backward.
#pragma once
#include "autograd/var.h"

namespace hla {

struct DocumentChunks {
  Tensor index;        // (B, T') I32: the row-relative token at each place, or -1 (padding)
  Tensor chunk_reset;  // (B, T' / C) I32: 1 where a chunk starts a document, else 0
};

// doc_start: (B, T) I32 on the CPU (nn/ops/attention.h: document_starts); C >= 1. The results
// are on the CPU (the caller moves them to its device).
DocumentChunks document_chunks(const Tensor& doc_start, int64_t C);

// x: (B, T, ...) float; index: (B, T') I32 on x's device, from document_chunks. (B, T', ...)
Var gather_tokens(const Var& x, const Tensor& index);
// y: (B, T', ...) float; index: (B, T') I32 on y's device, from document_chunks for T tokens a
// row. (B, T, ...)
Var scatter_tokens(const Var& y, const Tensor& index, int64_t T);

namespace cpu {
// out: (B, Tp, inner); x: (B, T, inner); index: (B, Tp)
template <class Real>
void gather_tokens_forward(Real* out, const Real* x, const int32_t* index, int64_t B, int64_t T, int64_t Tp,
                           int64_t inner);
// out: (B, T, inner), every element written; y: (B, Tp, inner); index: (B, Tp)
template <class Real>
void scatter_tokens_forward(Real* out, const Real* y, const int32_t* index, int64_t B, int64_t T, int64_t Tp,
                            int64_t inner);
}  // namespace cpu

}  // namespace hla
