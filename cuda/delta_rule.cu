// The delta rule on the GPU: the chunked tensor-core forward and backward of
// cuda/delta_rule_chunk.cu where they apply (delta_chunk::supported: DeltaNet, GDN, KDA, and
// GDN-2 but at dk = 128, dv = 256), otherwise the recurrent kernels of cuda/recurrence.cuh with
// Op::Delta (S' = Diag(exp(g)) S, u = w*v - S'^T (b*k),
// S = S' + k u^T, o = scale S^T q), and the small kernels that turn the fp32 per-value-head results into the op's gradients:
//   dq, dk summed over the value heads of a group;  a scalar gate's or beta's gradient summed
//   over the key channels;  y = w * v  =>  dv = w * du,  dw = v * du (scalar w: v . du).
#include "cuda/delta_rule.h"

#include <cstdint>
#include <optional>

#include "cuda/common.cuh"
#include "cuda/delta_rule_chunk.cuh"
#include "cuda/recurrence.cuh"

namespace hla::cuda {

using recurrence::Args;
using recurrence::Gate;
using recurrence::Op;

namespace {

Gate gate_of(DeltaGate g) {
  return g == DeltaGate::None ? Gate::None : g == DeltaGate::Scalar ? Gate::Scalar : Gate::Vector;
}

template <class S, int KMAX>
Args<S> delta_args(const void* q, const void* k, const void* v, const void* g, const void* b, const void* w,
                   const float* h0, const DeltaRuleDims& d) {
  Args<S> a = recurrence::make_args<S, KMAX>(d.B, d.T, d.H, d.HV, d.dk, d.dv, d.scale, q, k, v);
  a.erase_vector = d.erase_vector, a.write_vector = d.write_vector;
  a.g = static_cast<const S*>(g), a.b = static_cast<const S*>(b), a.w = static_cast<const S*>(w), a.h0 = h0;
  a.doc_start = d.doc_start;
  return a;
}

// Calls fn(std::integral_constant<Gate, G>{}).
template <class Fn>
void dispatch_gate(DeltaGate gate, Fn&& fn) {
  switch (gate_of(gate)) {
    case Gate::None: fn(std::integral_constant<Gate, Gate::None>{}); break;
    case Gate::Scalar: fn(std::integral_constant<Gate, Gate::Scalar>{}); break;
    case Gate::Vector: fn(std::integral_constant<Gate, Gate::Vector>{}); break;
  }
}

// Whether the chunked tensor-core forward can run for these dims: not for a single token (a
// decoding step is one recurrent update, cheaper than a one-token chunk), nor packed documents
// on their rows (d.doc_start: the token recurrence resets the state at each document start).
bool chunk_dims(const DeltaRuleDims& d, DType dtype) {
  return d.T > 1 && !d.doc_start && delta_chunk::supported(d, dtype);
}

// Whether the chunked tensor-core forward runs (its 16-byte loads need aligned q, k, v).
bool chunked(const DeltaRuleDims& d, DType dtype, const void* q, const void* k, const void* v) {
  return chunk_dims(d, dtype) && aligned16(q) && aligned16(k) && aligned16(v);
}

}  // namespace

bool delta_rule_backward_reads_u_f32(const DeltaRuleDims& d, DType dtype, const void* q, const void* k,
                                     const void* v) {
  return !chunked(d, dtype, q, k, v);
}

int64_t delta_rule_document_chunk(const DeltaRuleDims& d, DType dtype) {  // chunk_reset needs both directions
  return delta_chunk::supported(d, dtype) ? delta_chunk::kChunk : 0;
}

int64_t delta_rule_kept_floats(const DeltaRuleDims& d, DType dtype) {
  return chunk_dims(d, dtype) ? delta_chunk::kept_floats(d) : 0;
}

void delta_rule_forward(void* o, float* final_state, void* residual, const void* q, const void* k, const void* v,
                        const void* g, const void* b, const void* w, const float* h0, const DeltaRuleDims& d,
                        float* u_f32, float* kept, DType dtype) {
  HLA_CHECK(!d.chunk_reset || chunked(d, dtype, q, k, v),
            "delta_rule_forward: chunk_reset (packed documents' chunk layout) needs the chunked kernels");
  if (chunked(d, dtype, q, k, v)) {
    delta_chunk::forward(o, final_state, residual, q, k, v, g, b, w, h0, d, kept);
    return;
  }
  recurrence::dispatch_storage_kmax(dtype, d.dk, "delta_rule_forward", [&](auto tag, auto kmax) {
    using S = decltype(tag);
    constexpr int KMAX = decltype(kmax)::value;
    Args<S> a = delta_args<S, KMAX>(q, k, v, g, b, w, h0, d);
    a.o = static_cast<S*>(o), a.ht = final_state, a.residual = static_cast<S*>(residual), a.u_f32 = u_f32;
    dispatch_gate(d.gate, [&](auto gate) { recurrence::run_forward<Op::Delta, decltype(gate)::value, KMAX>(a); });
  });
}

void delta_rule_backward(void* grad_q, void* grad_k, void* grad_v, void* grad_g, void* grad_b, void* grad_w,
                         float* grad_h0, const void* d_o, const float* d_final_state, const void* d_residual,
                         const void* q, const void* k, const void* v, const void* g, const void* b, const void* w,
                         const float* h0, const DeltaRuleDims& d, const void* residual, const float* u_f32,
                         float* kept, DType dtype) {
  const bool chunk_kernels = chunked(d, dtype, q, k, v);  // the forward's choice
  HLA_CHECK(!d.chunk_reset || chunk_kernels,
            "delta_rule_backward: chunk_reset (packed documents' chunk layout) needs the chunked kernels");
  if (chunk_kernels) {
    // the chunked kernels copy d_o 16 bytes at a time: an unaligned view goes through an aligned copy
    std::optional<Scratch<uint16_t>> d_o_copy;
    if (!aligned16(d_o)) {
      const int64_t outputs = d.B * d.T * d.HV * d.dv;  // d_o: (B, T, HV, dv) bf16
      copy_d2d(d_o_copy.emplace(outputs).get(), d_o, outputs * sizeof(uint16_t));
      d_o = d_o_copy->get();
    }
    delta_chunk::backward(grad_q, grad_k, grad_v, grad_g, grad_b, grad_w, grad_h0, d_o, d_final_state, d_residual, q,
                          k, v, g, b, w, h0, d, residual, kept);
    return;
  }
  HLA_CHECK(u_f32, "delta_rule_backward: the recurrent backward needs the forward's u_f32 (null)");
  recurrence::dispatch_storage_kmax(dtype, d.dk, "delta_rule_backward", [&](auto tag, auto kmax) {
    using S = decltype(tag);
    constexpr int KMAX = decltype(kmax)::value;
    Args<S> a = delta_args<S, KMAX>(q, k, v, g, b, w, h0, d);
    const int64_t rows = d.B * d.T * d.HV * d.dk, values = d.B * d.T * d.HV;  // (B, T, HV, dk), (B, T, HV)
    FloatScratch du(values * d.dv), dq(rows), dk_(rows), dg(rows), db(rows);
    a.d_o = static_cast<const S*>(d_o), a.d_res = static_cast<const S*>(d_residual), a.dht = d_final_state;
    a.u_saved = u_f32, a.du = du.get(), a.dh0 = grad_h0;
    const recurrence::FinishOut f{dq.get(), dk_.get(), dg.get(), db.get(), nullptr, nullptr};
    dispatch_gate(d.gate, [&](auto gate) { recurrence::run_backward<Op::Delta, decltype(gate)::value, KMAX>(a, f); });
    recurrence::group_sum(static_cast<S*>(grad_q), dq.get(), d.B * d.T, d.H, d.HV / d.H, d.dk);
    recurrence::group_sum(static_cast<S*>(grad_k), dk_.get(), d.B * d.T, d.H, d.HV / d.H, d.dk);
    if (grad_g && d.gate == DeltaGate::Vector) recurrence::group_sum(static_cast<S*>(grad_g), dg.get(), values, 1, 1, d.dk);
    if (grad_g && d.gate == DeltaGate::Scalar)
      recurrence::row_dot(static_cast<S*>(grad_g), dg.get(), static_cast<const float*>(nullptr), values, d.dk);
    if (d.erase_vector) recurrence::group_sum(static_cast<S*>(grad_b), db.get(), values, 1, 1, d.dk);
    else recurrence::row_dot(static_cast<S*>(grad_b), db.get(), static_cast<const float*>(nullptr), values, d.dk);
    // y = w * v  =>  dv = w * du,  dw = v * du
    recurrence::scale_rows_kernel<S><<<grid_1d(values * d.dv), 256>>>(static_cast<S*>(grad_v), du.get(), a.w,
                                                                      d.write_vector, values, static_cast<int>(d.dv));
    CUDA_CHECK_LAUNCH();
    if (d.write_vector) {
      recurrence::scale_rows_kernel<S><<<grid_1d(values * d.dv), 256>>>(static_cast<S*>(grad_w), du.get(), a.v, true,
                                                                        values, static_cast<int>(d.dv));
      CUDA_CHECK_LAUNCH();
    } else {
      recurrence::row_dot(static_cast<S*>(grad_w), a.v, du.get(), values, d.dv);
    }
  });
}

const char* delta_rule_kernel(const DeltaRuleDims& d, DType dtype) {
  return d.doc_start || !delta_chunk::supported(d, dtype) ? "recurrent" : "chunked fwd+bwd (mma)";
}

}  // namespace hla::cuda
