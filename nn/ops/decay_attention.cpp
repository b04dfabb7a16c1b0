// Decay linear attention (mixers.md 4.3, 7-10): the token recurrence with its reverse-time
// backward (the reference), the per-head dispatch between it and the chunked form of
// nn/ops/chunk_util.h (heads in parallel, nn/ops/parallel.h), the autograd node and the
// gradchecks.
//
// Backward of the recurrence, walking the tokens in reverse with dS = dL/dS_t (mixers.md 8):
//   dS  += scale * q_t do_t^T                        (o_t = scale * S_t^T q_t)
//   dq_t = scale * S_t do_t
//   dk_t = dS v_t,   dv_t = dS^T k_t                 (S_t = ... + k_t v_t^T)
//   dg_t = rowsum( (Diag(exp(g_t)) S_{t-1}) (.) dS )  (S_t = Diag(exp(g_t)) S_{t-1} + ...)
//   dS   = Diag(exp(g_t)) dS                         (gradient passed on to S_{t-1})
// The states S_t are replayed per head inside the backward; what is left in dS at the start is
// the initial state's gradient. A scalar gate's dg is the sum of the per-channel dg over dk.
// On the GPU the chunked backward reads the chunk-start states its forward kept (keep_states)
// instead of replaying them.
#include "nn/ops/decay_attention.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>

#include "nn/ops/chunk_util.h"
#include "nn/ops/check.h"
#include "nn/ops/kept_states.h"
#include "nn/ops/parallel.h"
#include "tensor/dispatch.h"
#ifdef HLA_CUDA
#include "cuda/decay_attention.h"
#endif

namespace hla {
namespace cpu {
namespace {

using decay_chunk::Head;
using decay_chunk::HeadGrads;
using decay_chunk::Mat;
using decay_chunk::Row;

// The token loops write into buffers sized once per head: they allocate nothing.
template <class Real>
void recurrent_forward(Mat<Real>& o, Mat<Real>& S, const Head<Real>& x, Real scale) {
  S = x.s0;  // S_0: (dk, dv)
  o.resize(x.q.rows(), x.v.cols());
  Row<Real> decay(x.g.cols());  // exp(g_t): (dk)
  for (int64_t t = 0; t < x.q.rows(); t++) {
    if (x.starts_document(t)) S.setZero();  // a packed document starts from S = 0
    decay_chunk::advance_state(S, decay, x, t);   // S_t = Diag(exp(g_t)) S_{t-1} + k_t v_t^T
    o.row(t).noalias() = scale * x.q.row(t) * S;  // o_t = scale * S_t^T q_t
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
  Row<Real> decay(x.g.cols());  // exp(g_t): (dk)
  const Mat<Real> zero = Mat<Real>::Zero(x.k.cols(), x.v.cols());  // S_{t-1} where a document starts at t
  for (int64_t t = T - 1; t >= 0; t--) {
    decay = x.g.row(t).array().exp();
    // o_t = scale S_t^T q_t  =>  dS += scale q_t do_t^T,  dq_t = scale S_t do_t
    dS.noalias() += scale * x.q.row(t).transpose() * d_o.row(t);
    grads.dq.row(t).noalias() = scale * d_o.row(t) * S[t + 1].transpose();
    // S_t = ... + k_t v_t^T  =>  dk_t = dS v_t,  dv_t = dS^T k_t
    grads.dk.row(t).noalias() = x.v.row(t) * dS.transpose();
    grads.dv.row(t).noalias() = x.k.row(t) * dS;
    // S_t = Diag(exp(g_t)) S_{t-1} + ...  =>  dg_t = rowsum((Diag(exp(g_t)) S_{t-1}) (.) dS),
    //                                          dS_{t-1} = Diag(exp(g_t)) dS
    const Mat<Real>& S_prev = decay_chunk::state_before(S, zero, x, t);  // S_{t-1} as token t reads it
    grads.dg.row(t) = (decay.asDiagonal() * S_prev).cwiseProduct(dS).rowwise().sum().transpose();
    dS = decay.asDiagonal() * dS;
    if (x.starts_document(t)) dS.setZero();  // S_{t-1} was replaced by 0 (so dg_t = 0 above)
  }
  grads.ds0 = dS;
  return grads;
}

// The inputs of value head j of batch b; its q/k head is j / (HV / H).
template <class Real, bool VectorGate>
Head<Real> gather_value_head(const Real* q, const Real* k, const Real* v, const Real* g, const Real* h0, int64_t b,
                             int64_t j, const DecayAttentionDims& d) {
  const int64_t i = j / (d.HV / d.H);
  Head<Real> x;
  x.q = decay_chunk::gather_head(q, b, i, d.T, d.H, d.dk);
  x.k = decay_chunk::gather_head(k, b, i, d.T, d.H, d.dk);
  x.v = decay_chunk::gather_head(v, b, j, d.T, d.HV, d.dv);
  x.g = decay_chunk::gather_gate<Real, VectorGate>(g, b, j, d.T, d.HV, d.dk);
  x.bonus = Row<Real>::Ones(d.dk);  // A[t,t] = q_t . k_t: o_t reads S_t, which already holds token t
  x.s0 = decay_chunk::gather_state(h0, b, j, d.HV, d.dk, d.dv);
  x.doc_start = d.doc_start ? d.doc_start + b * d.T : nullptr;
  x.chunk_reset = d.chunk_reset ? d.chunk_reset + b * (d.T / d.chunk_size) : nullptr;
  return x;
}

// Calls fn(vector_gate) with vector_gate = std::true_type or std::false_type: the gate kind as a
// template flag.
template <class Fn>
void with_gate_kind(const DecayAttentionDims& d, Fn&& fn) {
  if (d.vector_gate) fn(std::true_type{});
  else fn(std::false_type{});
}

}  // namespace

template <class Real>
void decay_attention_forward(Real* o, Real* ht, const Real* q, const Real* k, const Real* v, const Real* g,
                             const Real* h0, const DecayAttentionDims& d) {
  std::fill(o, o + d.B * d.T * d.HV * d.dv, Real(0));
  const Real scale = Real(d.scale);
  with_gate_kind(d, [&](auto vector_gate) {
    constexpr bool VectorGate = decltype(vector_gate)::value;
    parallel_for(d.B * d.HV, [&](int64_t i) {  // (batch, value head) i = b * HV + j writes its own rows
      const int64_t b = i / d.HV, j = i % d.HV;
      const Head<Real> x = gather_value_head<Real, VectorGate>(q, k, v, g, h0, b, j, d);
      Mat<Real> o_head, s_final;  // (T, dv), (dk, dv)
      if (d.chunk_size == 0)
        recurrent_forward(o_head, s_final, x, scale);
      else
        decay_chunk::forward<Real, VectorGate>(o_head, s_final, x, scale, d.chunk_size,
                                               decay_chunk::ReadAt::after_update);
      decay_chunk::scatter_head_add(o, o_head, b, j, d.HV);
      decay_chunk::scatter_state(ht, s_final, b, j, d.HV);
    });
  });
}

template <class Real>
void decay_attention_backward(Real* grad_q, Real* grad_k, Real* grad_v, Real* grad_g, Real* grad_h0,
                              const Real* grad_o, const Real* grad_ht, const Real* q, const Real* k, const Real* v,
                              const Real* g, const Real* h0, const DecayAttentionDims& d) {
  std::fill(grad_q, grad_q + d.B * d.T * d.H * d.dk, Real(0));
  std::fill(grad_k, grad_k + d.B * d.T * d.H * d.dk, Real(0));
  std::fill(grad_v, grad_v + d.B * d.T * d.HV * d.dv, Real(0));
  std::fill(grad_g, grad_g + d.B * d.T * d.HV * (d.vector_gate ? d.dk : 1), Real(0));
  const Real scale = Real(d.scale);
  // One task per (batch, q/k head): its value heads add into the same dq and dk rows, so they
  // run in one task, in order.
  const int64_t group = d.HV / d.H;
  with_gate_kind(d, [&](auto vector_gate) {
    constexpr bool VectorGate = decltype(vector_gate)::value;
    parallel_for(d.B * d.H, [&](int64_t i) {
      const int64_t b = i / d.H, h = i % d.H;
      for (int64_t j = h * group; j < (h + 1) * group; j++) {
        const Head<Real> x = gather_value_head<Real, VectorGate>(q, k, v, g, h0, b, j, d);
        const Mat<Real> d_o = decay_chunk::gather_head(grad_o, b, j, d.T, d.HV, d.dv);            // (T, dv)
        const Mat<Real> ds_final = decay_chunk::gather_state(grad_ht, b, j, d.HV, d.dk, d.dv);  // (dk, dv)
        const HeadGrads<Real> dx =
            d.chunk_size == 0 ? recurrent_backward(x, d_o, ds_final, scale)
                              : decay_chunk::backward<Real, VectorGate>(x, d_o, ds_final, scale, d.chunk_size,
                                                                        decay_chunk::ReadAt::after_update);
        decay_chunk::scatter_head_add(grad_q, dx.dq, b, h, d.H);  // summed over the value heads of q/k head h
        decay_chunk::scatter_head_add(grad_k, dx.dk, b, h, d.H);
        decay_chunk::scatter_head_add(grad_v, dx.dv, b, j, d.HV);
        decay_chunk::scatter_gate_grad<Real, VectorGate>(grad_g, dx.dg, b, j, d.HV);
        if (grad_h0) decay_chunk::scatter_state(grad_h0, dx.ds0, b, j, d.HV);
      }
    });
  });
}

#define HLA_DECAY_ATTENTION_INSTANTIATE(Real)                                                                      \
  template void decay_attention_forward<Real>(Real*, Real*, const Real*, const Real*, const Real*, const Real*,   \
                                              const Real*, const DecayAttentionDims&);                            \
  template void decay_attention_backward<Real>(Real*, Real*, Real*, Real*, Real*, const Real*, const Real*,         \
                                               const Real*, const Real*, const Real*, const Real*, const Real*,     \
                                               const DecayAttentionDims&);
HLA_DECAY_ATTENTION_INSTANTIATE(float)
HLA_DECAY_ATTENTION_INSTANTIATE(double)
#undef HLA_DECAY_ATTENTION_INSTANTIATE

}  // namespace cpu

namespace {

// The device's kernels: cuda::decay_attention_* for GPU tensors, cpu::decay_attention_*
// otherwise. States in d.state_dtype. kept: the chunk-start states the GPU forward keeps for its
// backward (keep_states), or undefined (the CPU's backward always replays them).
void decay_attention_forward(Tensor& o, Tensor& ht, const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& g, const Tensor& h0, const DecayAttentionDims& d, Tensor& kept) {
  if (q.is_cuda()) {
    HLA_CUDA_ONLY(cuda::decay_attention_forward(o.raw(), ht.data<float>(), q.raw(), k.raw(), v.raw(), g.raw(),
                                                data_or_null<float>(h0), d, data_or_null<float>(kept), q.dtype()));
    return;
  }
  dispatch_float(q.dtype(), "decay_attention", [&](auto tag) {
    using Real = decltype(tag);
    cpu::decay_attention_forward(o.data<Real>(), ht.data<Real>(), q.data<Real>(), k.data<Real>(), v.data<Real>(),
                                 g.data<Real>(), data_or_null<Real>(h0), d);
  });
}

void decay_attention_backward(Tensor& grad_q, Tensor& grad_k, Tensor& grad_v, Tensor& grad_g, Tensor& grad_h0,
                              const Tensor& grad_o, const Tensor& grad_ht, const Tensor& q, const Tensor& k,
                              const Tensor& v, const Tensor& g, const Tensor& h0, const DecayAttentionDims& d,
                              const Tensor& kept) {
  if (q.is_cuda()) {
    HLA_CUDA_ONLY(cuda::decay_attention_backward(grad_q.raw(), grad_k.raw(), grad_v.raw(), grad_g.raw(),
                                                 data_or_null<float>(grad_h0), grad_o.raw(), grad_ht.data<float>(),
                                                 q.raw(), k.raw(), v.raw(), g.raw(), data_or_null<float>(h0), d,
                                                 data_or_null<float>(kept), q.dtype()));
    return;
  }
  dispatch_float(q.dtype(), "decay_attention backward", [&](auto tag) {
    using Real = decltype(tag);
    cpu::decay_attention_backward(grad_q.data<Real>(), grad_k.data<Real>(), grad_v.data<Real>(), grad_g.data<Real>(),
                                  data_or_null<Real>(grad_h0), grad_o.data<Real>(), grad_ht.data<Real>(),
                                  q.data<Real>(), k.data<Real>(), v.data<Real>(), g.data<Real>(),
                                  data_or_null<Real>(h0), d);
  });
}

DecayAttentionDims check_inputs(const Var& q, const Var& k, const Var& v, const Var& g, const Var& initial_state,
                                double scale, int64_t chunk_size) {
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
  check_operand(k.value(), q.value(), op, "k");
  check_operand(v.value(), q.value(), op, "v");
  check_operand(g.value(), q.value(), op, "g");
  if (initial_state.defined()) {
    check_shape(initial_state.value(), {B, HV, dk, dv}, op, "initial_state");
    check_operand(initial_state.value(), q.value(), op, "initial_state");
  }
  HLA_CHECK(chunk_size >= 0, "decay_attention: chunk_size must be >= 0 (0 = recurrent), got ", chunk_size);
  return {B, T, H, HV, dk, dv, vector_gate, scale, chunk_size, accum_dtype(q.value())};
}

// The op on rows as they are, d from check_inputs with the documents' pointers (run_on_documents)
// into `keep`, which the backward keeps alive; {o, final_state}.
std::vector<Var> decay_attention_rows(const Var& q, const Var& k, const Var& v, const Var& g, const Var& initial_state,
                                      const DecayAttentionDims& d, bool keep_states, const Tensor& keep) {
  const bool has_h0 = initial_state.defined();
  const DType dt = q.dtype();
  const Device dev = q.device();
  Tensor qv = q.value(), kv = k.value(), vv = v.value(), gv = g.value();
  Tensor h0 = has_h0 ? initial_state.value().to(d.state_dtype) : Tensor();
  Tensor o = Tensor::empty({d.B, d.T, d.HV, d.dv}, dt, dev);                 // o: (B, T, HV, dv)
  Tensor ht = Tensor::empty({d.B, d.HV, d.dk, d.dv}, d.state_dtype, dev);   // ht: (B, HV, dk, dv)
  int64_t kept_floats = 0;
  if (qv.is_cuda() && keep_states && backward_follows({&q, &k, &v, &g, &initial_state}))
    HLA_CUDA_ONLY(kept_floats = cuda::decay_attention_kept_floats(d, dt));
  Tensor kept = kept_buffer(kept_floats, dev);  // (B, HV, NT, dk, dv) fp32, or undefined
  decay_attention_forward(o, ht, qv, kv, vv, gv, h0, d, kept);

  // documents: kept alive for d.doc_start, d.chunk_reset
  auto backward = [=, documents = keep](const std::vector<Tensor>& grad_out) mutable {
    Tensor dq = Tensor::empty(qv.shape(), dt, dev), dk_ = Tensor::empty(kv.shape(), dt, dev);
    Tensor dv_ = Tensor::empty(vv.shape(), dt, dev), dg = Tensor::empty(gv.shape(), dt, dev);
    Tensor dh0 = has_h0 ? Tensor::empty(h0.shape(), d.state_dtype, dev) : Tensor();
    decay_attention_backward(dq, dk_, dv_, dg, dh0, grad_out[0], grad_out[1].to(d.state_dtype), qv, kv, vv, gv, h0, d,
                             kept);
    kept = Tensor();  // read: freed now, before the layers below run their backward (a second backward replays)
    // dh0 back in the initial state's dtype
    return std::vector<Tensor>{dq, dk_, dv_, dg, has_h0 ? dh0.to(dt) : Tensor()};
  };
  return record_op({o, ht}, {q, k, v, g, initial_state}, backward, "decay_attention");
}

}  // namespace

// Packed documents: the token recurrence (the CPU's chunk_size = 0, and the GPU's recurrent
// kernels) resets the state at each document start; the chunked forms (the CPU's, and the GPU's
// where its chunked kernels run) take the documents' chunk layout, resetting the chunks that
// start one.
DecayAttentionOutput decay_attention(const Var& q, const Var& k, const Var& v, const Var& g,
                                     const Var& initial_state, double scale, int64_t chunk_size,
                                     bool keep_states, const DocumentStarts& documents) {
  const DecayAttentionDims d = check_inputs(q, k, v, g, initial_state, scale, chunk_size);
  if (!documents.defined()) {
    std::vector<Var> outs = decay_attention_rows(q, k, v, g, initial_state, d, keep_states, Tensor());
    return {outs[0], outs[1]};
  }
  // the layout's chunk size: the CPU's chunk_size, the GPU chunked kernels' (0: the token recurrence)
  int64_t chunk = chunk_size;
  if (q.value().is_cuda()) HLA_CUDA_ONLY(chunk = cuda::decay_attention_document_chunk(d, q.dtype()));
  std::vector<Var> outs = run_on_documents(
      "decay_attention", documents, d, chunk, q.device(), initial_state, {q, k, v, g}, 1,
      [&](const DecayAttentionDims& dd, const std::vector<Var>& x, const Tensor& keep) {
        return decay_attention_rows(x[0], x[1], x[2], x[3], Var(), dd, keep_states, keep);
      });
  return {outs[0], outs[1]};
}

}  // namespace hla
