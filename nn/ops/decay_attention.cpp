// Decay linear attention (mixers.md 4.3, 7-10): the token recurrence with its reverse-time
// backward (the reference), the per-head dispatch between it and the chunked form of
// nn/ops/chunk_util.h, the autograd node and the gradchecks.
//
// Backward of the recurrence, walking the tokens in reverse with dS = dL/dS_t (mixers.md 8):
//   dS  += scale * q_t do_t^T                        (o_t = scale * S_t^T q_t)
//   dq_t = scale * S_t do_t
//   dk_t = dS v_t,   dv_t = dS^T k_t                 (S_t = ... + k_t v_t^T)
//   dg_t = rowsum( (Diag(exp(g_t)) S_{t-1}) (.) dS )  (S_t = Diag(exp(g_t)) S_{t-1} + ...)
//   dS   = Diag(exp(g_t)) dS                         (gradient passed on to S_{t-1})
// The states S_t are replayed per head inside the backward; what is left in dS at the start is
// the initial state's gradient. A scalar gate's dg is the sum of the per-channel dg over dk.
#include "nn/ops/decay_attention.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>

#include "nn/ops/chunk_util.h"
#include "nn/recurrence_cuda.h"
#include "tensor/dispatch.h"

namespace hla {
namespace cpu {
namespace {

using decay_chunk::Head;
using decay_chunk::HeadGrads;
using decay_chunk::Mat;
using decay_chunk::Row;

template <class Real>
void recurrent_forward(Mat<Real>& o, Mat<Real>& S, const Head<Real>& x, Real scale) {
  S = x.s0;  // S_0: (dk, dv)
  o.resize(x.q.rows(), x.v.cols());
  for (int64_t t = 0; t < x.q.rows(); t++) {
    S = decay_chunk::next_state(S, x, t);  // S_t = Diag(exp(g_t)) S_{t-1} + k_t v_t^T
    o.row(t) = scale * x.q.row(t) * S;     // o_t = scale * S_t^T q_t
  }
}

template <class Real>
HeadGrads<Real> recurrent_backward(const Head<Real>& x, const Mat<Real>& d_o, const Mat<Real>& ds_final, Real scale) {
  const int64_t T = x.q.rows();
  const std::vector<Mat<Real>> S = decay_chunk::replay_states(x);  // S[t]: after t tokens, t = 0..T
  HeadGrads<Real> grads;
  grads.dq.resize(T, x.q.cols());
  grads.dk.resize(T, x.k.cols());
  grads.dv.resize(T, x.v.cols());
  grads.dg.resize(T, x.g.cols());
  Mat<Real> dS = ds_final;  // dL/dS after token t, carried backwards: (dk, dv)
  for (int64_t t = T - 1; t >= 0; t--) {
    Row<Real> decay = x.g.row(t).array().exp();
    dS += scale * x.q.row(t).transpose() * d_o.row(t);               // o_t = scale S_t^T q_t => dS += scale q_t do_t^T
    grads.dq.row(t) = scale * d_o.row(t) * S[t + 1].transpose();     //                       => dq_t = scale S_t do_t
    grads.dk.row(t) = x.v.row(t) * dS.transpose();                   // S_t = .. + k_t v_t^T  => dk_t = dS v_t
    grads.dv.row(t) = x.k.row(t) * dS;                               //                       => dv_t = dS^T k_t
    // S_t = Diag(exp(g_t)) S_{t-1} + ...  =>  dg_t = rowsum((Diag(exp(g_t)) S_{t-1}) (.) dS),
    //                                          dS_{t-1} = Diag(exp(g_t)) dS
    grads.dg.row(t) = (decay.asDiagonal() * S[t]).cwiseProduct(dS).rowwise().sum().transpose();
    dS = decay.asDiagonal() * dS;
  }
  grads.ds0 = dS;
  return grads;
}

// The inputs of value head j of batch b; its q/k head is j / (HV / H).
template <class Real, bool VectorGate>
Head<Real> gather_value_head(const Real* q, const Real* k, const Real* v, const Real* g, const Real* h0, int64_t b,
                             int64_t j, int64_t T, int64_t H, int64_t HV, int64_t dk, int64_t dv) {
  const int64_t i = j / (HV / H);
  Head<Real> x;
  x.q = decay_chunk::gather_head(q, b, i, T, H, dk);
  x.k = decay_chunk::gather_head(k, b, i, T, H, dk);
  x.v = decay_chunk::gather_head(v, b, j, T, HV, dv);
  x.g = decay_chunk::gather_gate<Real, VectorGate>(g, b, j, T, HV, dk);
  x.bonus = Row<Real>::Ones(dk);  // A[t,t] = q_t . k_t: o_t reads S_t, which already holds token t
  x.s0 = decay_chunk::gather_state(h0, b, j, HV, dk, dv);
  return x;
}

}  // namespace

template <class Real, bool VectorGate>
void decay_attention_forward(Real* o, Real* ht, const Real* q, const Real* k, const Real* v, const Real* g,
                             const Real* h0, int64_t B, int64_t T, int64_t H, int64_t HV, int64_t dk,
                             int64_t dv, double scale, int64_t chunk_size) {
  std::fill(o, o + B * T * HV * dv, Real(0));
  for (int64_t b = 0; b < B; b++)
    for (int64_t j = 0; j < HV; j++) {
      const Head<Real> x = gather_value_head<Real, VectorGate>(q, k, v, g, h0, b, j, T, H, HV, dk, dv);
      Mat<Real> o_head, s_final;  // (T, dv), (dk, dv)
      if (chunk_size == 0)
        recurrent_forward(o_head, s_final, x, Real(scale));
      else
        decay_chunk::forward<Real, VectorGate>(o_head, s_final, x, Real(scale), chunk_size,
                                               decay_chunk::ReadAt::after_update);
      decay_chunk::scatter_head_add(o, o_head, b, j, HV);
      decay_chunk::scatter_state(ht, s_final, b, j, HV);
    }
}

template <class Real, bool VectorGate>
void decay_attention_backward(Real* grad_q, Real* grad_k, Real* grad_v, Real* grad_g, Real* grad_h0,
                              const Real* grad_o, const Real* grad_ht, const Real* q, const Real* k,
                              const Real* v, const Real* g, const Real* h0, int64_t B, int64_t T, int64_t H,
                              int64_t HV, int64_t dk, int64_t dv, double scale, int64_t chunk_size) {
  std::fill(grad_q, grad_q + B * T * H * dk, Real(0));
  std::fill(grad_k, grad_k + B * T * H * dk, Real(0));
  std::fill(grad_v, grad_v + B * T * HV * dv, Real(0));
  std::fill(grad_g, grad_g + B * T * HV * (VectorGate ? dk : 1), Real(0));
  for (int64_t b = 0; b < B; b++)
    for (int64_t j = 0; j < HV; j++) {
      const Head<Real> x = gather_value_head<Real, VectorGate>(q, k, v, g, h0, b, j, T, H, HV, dk, dv);
      const Mat<Real> d_o = decay_chunk::gather_head(grad_o, b, j, T, HV, dv);   // (T, dv)
      const Mat<Real> ds_final = decay_chunk::gather_state(grad_ht, b, j, HV, dk, dv);  // (dk, dv)
      const HeadGrads<Real> d =
          chunk_size == 0 ? recurrent_backward(x, d_o, ds_final, Real(scale))
                          : decay_chunk::backward<Real, VectorGate>(x, d_o, ds_final, Real(scale), chunk_size,
                                                                    decay_chunk::ReadAt::after_update);
      const int64_t i = j / (HV / H);  // value heads of one group sum into their q/k head
      decay_chunk::scatter_head_add(grad_q, d.dq, b, i, H);
      decay_chunk::scatter_head_add(grad_k, d.dk, b, i, H);
      decay_chunk::scatter_head_add(grad_v, d.dv, b, j, HV);
      decay_chunk::scatter_gate_grad<Real, VectorGate>(grad_g, d.dg, b, j, HV);
      if (grad_h0) decay_chunk::scatter_state(grad_h0, d.ds0, b, j, HV);
    }
}

#define HLA_DECAY_ATTENTION_INSTANTIATE(Real, VectorGate)                                                     \
  template void decay_attention_forward<Real, VectorGate>(Real*, Real*, const Real*, const Real*, const Real*, \
                                                          const Real*, const Real*, int64_t, int64_t, int64_t, \
                                                          int64_t, int64_t, int64_t, double, int64_t);         \
  template void decay_attention_backward<Real, VectorGate>(                                                    \
      Real*, Real*, Real*, Real*, Real*, const Real*, const Real*, const Real*, const Real*, const Real*,       \
      const Real*, const Real*, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, double, int64_t);
HLA_DECAY_ATTENTION_INSTANTIATE(float, false)
HLA_DECAY_ATTENTION_INSTANTIATE(float, true)
HLA_DECAY_ATTENTION_INSTANTIATE(double, false)
HLA_DECAY_ATTENTION_INSTANTIATE(double, true)
#undef HLA_DECAY_ATTENTION_INSTANTIATE

}  // namespace cpu

namespace {

// Calls fn(std::true_type) for a vector gate, fn(std::false_type) for a scalar one.
template <class Fn>
void dispatch_gate(bool vector_gate, Fn&& fn) {
  if (vector_gate) fn(std::true_type{});
  else fn(std::false_type{});
}

}  // namespace

DecayAttentionOutput decay_attention(const Var& q, const Var& k, const Var& v, const Var& g,
                                     const Var& initial_state, double scale, int64_t chunk_size) {
  const char* op = "decay_attention";
  HLA_CHECK(q.dim() == 4, "decay_attention: q must be (B, T, H, dk), got ", q.value().str());
  const int64_t B = q.size(0), T = q.size(1), H = q.size(2), dk = q.size(3);
  check_shape(k.value(), {B, T, H, dk}, op, "k");
  HLA_CHECK(v.dim() == 4 && v.size(0) == B && v.size(1) == T,
            "decay_attention: v must be (B, T, HV, dv) with B = ", B, ", T = ", T, ", got ", v.value().str());
  const int64_t HV = v.size(2), dv = v.size(3);
  HLA_CHECK(HV % H == 0, "decay_attention: the value heads HV = ", HV, " must be a multiple of the q/k heads H = ", H);
  HLA_CHECK(g.dim() == 3 || g.dim() == 4, "decay_attention: g must be (B, T, HV) or (B, T, HV, dk), got ",
            g.value().str());
  const bool vector_gate = g.dim() == 4;
  check_shape(g.value(), vector_gate ? Shape{B, T, HV, dk} : Shape{B, T, HV}, op, "g");
  for (const Var* x : {&k, &v, &g}) check_dtype(x->value(), q.dtype(), op, "k, v, g");
  const bool has_h0 = initial_state.defined();
  if (has_h0) {
    check_shape(initial_state.value(), {B, HV, dk, dv}, op, "initial_state");
    check_dtype(initial_state.value(), q.dtype(), op, "initial_state");
  }
  HLA_CHECK(chunk_size >= 0, "decay_attention: chunk_size must be >= 0 (0 = recurrent), got ", chunk_size);
  if (q.value().is_cuda()) return decay_attention_cuda(q, k, v, g, initial_state, scale, chunk_size);

  Tensor qv = q.value(), kv = k.value(), vv = v.value(), gv = g.value();
  Tensor h0 = has_h0 ? initial_state.value() : Tensor();
  Tensor o = Tensor::empty({B, T, HV, dv}, q.dtype());        // o: (B, T, HV, dv)
  Tensor ht = Tensor::empty({B, HV, dk, dv}, q.dtype());      // ht: (B, HV, dk, dv)
  dispatch_float(q.dtype(), op, [&](auto tag) {
    using Real = decltype(tag);
    dispatch_gate(vector_gate, [&](auto vec) {
      cpu::decay_attention_forward<Real, decltype(vec)::value>(
          o.data<Real>(), ht.data<Real>(), qv.data<Real>(), kv.data<Real>(), vv.data<Real>(), gv.data<Real>(),
          has_h0 ? h0.data<Real>() : nullptr, B, T, H, HV, dk, dv, scale, chunk_size);
    });
  });

  auto backward = [=](const std::vector<Tensor>& grad_out) {
    Tensor dq = Tensor::empty(qv.shape(), qv.dtype()), dk_ = Tensor::empty(kv.shape(), kv.dtype());
    Tensor dv_ = Tensor::empty(vv.shape(), vv.dtype()), dg = Tensor::empty(gv.shape(), gv.dtype());
    Tensor dh0 = has_h0 ? Tensor::empty(h0.shape(), h0.dtype()) : Tensor();
    dispatch_float(qv.dtype(), "decay_attention backward", [&](auto tag) {
      using Real = decltype(tag);
      dispatch_gate(vector_gate, [&](auto vec) {
        cpu::decay_attention_backward<Real, decltype(vec)::value>(
            dq.data<Real>(), dk_.data<Real>(), dv_.data<Real>(), dg.data<Real>(),
            has_h0 ? dh0.data<Real>() : nullptr, grad_out[0].data<Real>(), grad_out[1].data<Real>(),
            qv.data<Real>(), kv.data<Real>(), vv.data<Real>(), gv.data<Real>(), has_h0 ? h0.data<Real>() : nullptr,
            B, T, H, HV, dk, dv, scale, chunk_size);
      });
    });
    return std::vector<Tensor>{dq, dk_, dv_, dg, dh0};
  };
  std::vector<Var> outs = record_op({o, ht}, {q, k, v, g, initial_state}, backward, op);
  return {outs[0], outs[1]};
}

}  // namespace hla
