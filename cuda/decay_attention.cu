// Decay linear attention on the GPU: the chunked tensor-core forward and backward of
// cuda/decay_attention_chunk.cu where they apply (packed documents on their chunk layout, with
// d.chunk_reset), else the recurrent kernels of cuda/recurrence.cuh with Op::Decay (S =
// Diag(exp(g)) S + k v^T, o = scale S^T q; with d.doc_start the state resets at each document
// start), and the casts that turn their fp32 per-value-head gradients into the op's: q/k
// gradients summed over the value heads of a group, a scalar gate's gradient summed over the key
// channels. A forward given `kept` and a backward given the same buffer take the chunked kernels
// on the same rule (chunked(): the same dims, dtype and inputs), so the backward reads the states
// only where that forward wrote them (a recurrent backward, at an unaligned grad_o, ignores them).
#include "cuda/decay_attention.h"
#include "cuda/decay_attention_chunk.cuh"
#include "cuda/recurrence.cuh"

namespace hla::cuda {

using recurrence::Args;
using recurrence::Gate;
using recurrence::Op;

namespace {

template <class S, int KMAX>
Args<S> decay_args(const void* q, const void* k, const void* v, const void* g, const float* h0,
                   const DecayAttentionDims& d) {
  Args<S> a = recurrence::make_args<S, KMAX>(d.B, d.T, d.H, d.HV, d.dk, d.dv, d.scale, q, k, v);
  a.g = static_cast<const S*>(g), a.h0 = h0, a.doc_start = d.doc_start;
  return a;
}

// Whether the chunked tensor-core kernels run (decay_chunk::takes; packed documents by doc_start
// run recurrent, on their chunk layout by chunk_reset chunked).
bool chunked(const DecayAttentionDims& d, DType dtype, const void* q, const void* k, const void* v, const void* g) {
  return !d.doc_start && decay_chunk::takes(d.B, d.T, d.dk, d.dv, dtype, q, k, v, d.vector_gate ? g : nullptr);
}

}  // namespace

int64_t decay_attention_document_chunk(const DecayAttentionDims& d, DType dtype) {
  return d.B > 0 && d.T > 0 && decay_chunk::supported(d.dk, d.dv, dtype) ? decay_chunk::kChunk : 0;
}

int64_t decay_attention_kept_floats(const DecayAttentionDims& d, DType dtype) {
  return d.T > 1 && !d.doc_start && decay_chunk::supported(d.dk, d.dv, dtype) ? decay_chunk::kept_floats(d) : 0;
}

void decay_attention_forward(void* o, float* ht, const void* q, const void* k, const void* v, const void* g,
                             const float* h0, const DecayAttentionDims& d, float* kept, DType dtype) {
  HLA_CHECK(!d.chunk_reset || chunked(d, dtype, q, k, v, g),
            "decay_attention_forward: chunk_reset (packed documents' chunk layout) needs the chunked kernels, which ",
            "do not run at B = ", d.B, ", T = ", d.T, ", dk = ", d.dk, ", dv = ", d.dv, ", ", dtype_name(dtype),
            " (or unaligned inputs)");
  if (chunked(d, dtype, q, k, v, g)) {
    decay_chunk::forward(o, ht, q, k, v, g, h0, d, kept);
    return;
  }
  recurrence::dispatch_storage_kmax(dtype, d.dk, "decay_attention_forward", [&](auto tag, auto kmax) {
    using S = decltype(tag);
    constexpr int KMAX = decltype(kmax)::value;
    Args<S> a = decay_args<S, KMAX>(q, k, v, g, h0, d);
    a.o = static_cast<S*>(o), a.ht = ht;
    if (d.vector_gate) recurrence::run_forward<Op::Decay, Gate::Vector, KMAX>(a);
    else recurrence::run_forward<Op::Decay, Gate::Scalar, KMAX>(a);
  });
}

void decay_attention_backward(void* grad_q, void* grad_k, void* grad_v, void* grad_g, float* grad_h0,
                              const void* grad_o, const float* grad_ht, const void* q, const void* k, const void* v,
                              const void* g, const float* h0, const DecayAttentionDims& d, const float* kept,
                              DType dtype) {
  HLA_CHECK(!d.chunk_reset || (chunked(d, dtype, q, k, v, g) && aligned16(grad_o)),
            "decay_attention_backward: chunk_reset (packed documents' chunk layout) needs the chunked kernels, which ",
            "do not run at B = ", d.B, ", T = ", d.T, ", dk = ", d.dk, ", dv = ", d.dv, ", ", dtype_name(dtype),
            " (or unaligned inputs or grad_o)");
  if (chunked(d, dtype, q, k, v, g) && aligned16(grad_o)) {
    decay_chunk::backward(grad_q, grad_k, grad_v, grad_g, grad_h0, grad_o, grad_ht, q, k, v, g, h0, d, kept);
    return;
  }
  recurrence::dispatch_storage_kmax(dtype, d.dk, "decay_attention_backward", [&](auto tag, auto kmax) {
    using S = decltype(tag);
    constexpr int KMAX = decltype(kmax)::value;
    Args<S> a = decay_args<S, KMAX>(q, k, v, g, h0, d);
    a.d_o = static_cast<const S*>(grad_o), a.dht = grad_ht, a.dh0 = grad_h0, a.dv_out = static_cast<S*>(grad_v);
    const int64_t tokens = d.B * d.T, rows = tokens * d.HV * d.dk;  // per value head, fp32: (B, T, HV, dk)
    FloatScratch dq(rows), dk_(rows), dg(rows);
    const recurrence::FinishOut f{dq.get(), dk_.get(), dg.get(), nullptr, nullptr, nullptr};
    if (d.vector_gate) recurrence::run_backward<Op::Decay, Gate::Vector, KMAX>(a, f);
    else recurrence::run_backward<Op::Decay, Gate::Scalar, KMAX>(a, f);
    recurrence::group_sum(static_cast<S*>(grad_q), dq.get(), tokens, d.H, d.HV / d.H, d.dk);
    recurrence::group_sum(static_cast<S*>(grad_k), dk_.get(), tokens, d.H, d.HV / d.H, d.dk);
    if (d.vector_gate) recurrence::group_sum(static_cast<S*>(grad_g), dg.get(), tokens, d.HV, 1, d.dk);
    else
      recurrence::row_dot(static_cast<S*>(grad_g), dg.get(), static_cast<const float*>(nullptr), tokens * d.HV,
                          d.dk);
  });
}

const char* decay_attention_kernel(int64_t dk, int64_t dv, bool vector_gate, DType dtype) {
  (void)vector_gate;  // both gates have the chunked kernels
  return decay_chunk::kernel_label(dk, dv, dtype);
}

}  // namespace hla::cuda
