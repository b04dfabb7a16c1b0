// RWKV-6 on the GPU: the chunked tensor-core forward and backward of
// cuda/decay_attention_chunk.cu where they apply (decay_chunk::takes: dk, dv in {64, 128} or in
// {128, 256}; packed documents on their chunk layout, with d.chunk_reset), else the recurrent
// kernels of cuda/recurrence.cuh with Op::Rwkv6 (o reads the state before the token's update,
// plus the bonus (r . (u * k)) v; with d.doc_start the state resets at each document start). The
// recurrent backward's bonus gradients need v . do per token, computed here first; u's gradient
// is summed over the batch and segments (chunks for the chunked backward) in a fixed order. Both
// directions read only the inputs, so a chunked and a recurrent direction mix freely; the
// chunk-start states a forward kept (`kept`) are read only by a chunked backward, which takes the
// kernels on the forward's rule (decay_chunk::takes).
#include "cuda/decay_attention_chunk.cuh"
#include "cuda/recurrence.cuh"
#include "cuda/reduce.cuh"
#include "cuda/rwkv6.h"

namespace hla::cuda {

using recurrence::Args;

namespace {

template <class S, int KMAX>
Args<S> rwkv6_args(const void* r, const void* k, const void* v, const void* w, const void* u, const float* h0,
                   const Rwkv6Dims& d) {
  Args<S> a = recurrence::make_args<S, KMAX>(d.B, d.T, d.H, d.H, d.dk, d.dv, d.scale, r, k, v);
  a.g = static_cast<const S*>(w), a.bonus = static_cast<const S*>(u), a.h0 = h0, a.doc_start = d.doc_start;
  return a;
}

// Whether the chunked tensor-core kernels run (decay_chunk::takes; packed documents by doc_start
// run recurrent, on their chunk layout by chunk_reset chunked).
bool chunked(const Rwkv6Dims& d, DType dtype, const void* r, const void* k, const void* v, const void* w) {
  return !d.doc_start && decay_chunk::takes(d.B, d.T, d.dk, d.dv, dtype, r, k, v, w);
}

}  // namespace

int64_t rwkv6_document_chunk(const Rwkv6Dims& d, DType dtype) {
  return d.B > 0 && d.T > 0 && decay_chunk::supported(d.dk, d.dv, dtype) ? decay_chunk::kChunk : 0;
}

int64_t rwkv6_kept_floats(const Rwkv6Dims& d, DType dtype) {
  return d.T > 1 && !d.doc_start && decay_chunk::supported(d.dk, d.dv, dtype) ? decay_chunk::kept_floats(d) : 0;
}

void rwkv6_forward(void* o, float* ht, const void* r, const void* k, const void* v, const void* w, const void* u,
                   const float* h0, const Rwkv6Dims& d, float* kept, DType dtype) {
  HLA_CHECK(!d.chunk_reset || chunked(d, dtype, r, k, v, w),
            "rwkv6_forward: chunk_reset (packed documents' chunk layout) needs the chunked kernels, which do not run ",
            "at B = ", d.B, ", T = ", d.T, ", dk = ", d.dk, ", dv = ", d.dv, ", ", dtype_name(dtype),
            " (or unaligned inputs)");
  if (chunked(d, dtype, r, k, v, w)) {
    decay_chunk::rwkv6_forward(o, ht, r, k, v, w, u, h0, d, kept);
    return;
  }
  recurrence::dispatch_storage_kmax(dtype, d.dk, "rwkv6_forward", [&](auto tag, auto kmax) {
    using S = decltype(tag);
    constexpr int KMAX = decltype(kmax)::value;
    Args<S> a = rwkv6_args<S, KMAX>(r, k, v, w, u, h0, d);
    a.o = static_cast<S*>(o), a.ht = ht;
    recurrence::run_forward<recurrence::Op::Rwkv6, recurrence::Gate::Vector, KMAX>(a);
  });
}

void rwkv6_backward(void* grad_r, void* grad_k, void* grad_v, void* grad_w, void* grad_u, float* grad_h0,
                    const void* grad_o, const float* grad_ht, const void* r, const void* k, const void* v,
                    const void* w, const void* u, const float* h0, const Rwkv6Dims& d, const float* kept,
                    DType dtype) {
  HLA_CHECK(!d.chunk_reset || (chunked(d, dtype, r, k, v, w) && aligned16(grad_o)),
            "rwkv6_backward: chunk_reset (packed documents' chunk layout) needs the chunked kernels, which do not run ",
            "at B = ", d.B, ", T = ", d.T, ", dk = ", d.dk, ", dv = ", d.dv, ", ", dtype_name(dtype),
            " (or unaligned inputs or grad_o)");
  if (chunked(d, dtype, r, k, v, w) && aligned16(grad_o)) {
    decay_chunk::rwkv6_backward(grad_r, grad_k, grad_v, grad_w, grad_u, grad_h0, grad_o, grad_ht, r, k, v, w, u, h0,
                                d, kept);
    return;
  }
  const int64_t B = d.B, T = d.T, H = d.H, dk = d.dk, dv = d.dv;
  recurrence::dispatch_storage_kmax(dtype, d.dk, "rwkv6_backward", [&](auto tag, auto kmax) {
    using S = decltype(tag);
    constexpr int KMAX = decltype(kmax)::value;
    Args<S> a = rwkv6_args<S, KMAX>(r, k, v, w, u, h0, d);
    a.d_o = static_cast<const S*>(grad_o), a.dht = grad_ht, a.dh0 = grad_h0, a.dv_out = static_cast<S*>(grad_v);
    const int64_t rows = B * T * H * dk;  // fp32 (B, T, H, dk)
    FloatScratch dr(rows), dk_(rows), dw(rows), du_part(B * a.nseg * H * dk), vdo(B * T * H);
    recurrence::row_dot(vdo.get(), a.v, a.d_o, B * T * H, dv);  // v_t . do_t: (B, T, H)
    const recurrence::FinishOut f{dr.get(), dk_.get(), dw.get(), nullptr, du_part.get(), vdo.get()};
    recurrence::run_backward<recurrence::Op::Rwkv6, recurrence::Gate::Vector, KMAX>(a, f);
    recurrence::group_sum(static_cast<S*>(grad_r), dr.get(), B * T, H, 1, dk);
    recurrence::group_sum(static_cast<S*>(grad_k), dk_.get(), B * T, H, 1, dk);
    recurrence::group_sum(static_cast<S*>(grad_w), dw.get(), B * T, H, 1, dk);
    write_column_sums(static_cast<S*>(grad_u), du_part.get(), static_cast<int>(B * a.nseg), H * dk);
  });
}

const char* rwkv6_kernel(int64_t dk, int64_t dv, DType dtype) {
  return decay_chunk::kernel_label(dk, dv, dtype);
}

}  // namespace hla::cuda
