// RWKV-6 (mixers.md section 11): the token recurrence with its reverse-time backward (the
// reference), the per-head dispatch between it and the chunked form of nn/ops/chunk_util.h
// (heads in parallel, nn/ops/parallel.h), the autograd node and the gradchecks.
//
// Backward of the recurrence, walking the tokens in reverse with dS = dL/dS_t:
//   dk_t = dS v_t + scale * (u * r_t) (v_t . do_t)        (S_t = ... + k_t v_t^T, and the bonus)
//   dv_t = dS^T k_t + scale * (r_t . (u * k_t)) do_t
//   dr_t = scale * ( S_{t-1} do_t + (u * k_t) (v_t . do_t) )
//   du  += scale * (r_t * k_t) (v_t . do_t)
//   dw_t = rowsum( (Diag(exp(w_t)) S_{t-1}) (.) dS )
//   dS   = Diag(exp(w_t)) dS + scale * r_t do_t^T          (gradient of S_{t-1}: two uses)
// The states are replayed per head inside the backward; what is left in dS is dh0. On the GPU
// the chunked backward reads the chunk-start states its forward kept (keep_states) instead.
#include "nn/ops/rwkv6.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "nn/ops/chunk_util.h"
#include "nn/ops/check.h"
#include "nn/ops/kept_states.h"
#include "nn/ops/parallel.h"
#include "tensor/dispatch.h"
#ifdef HLA_CUDA
#include "cuda/rwkv6.h"
#endif

namespace hla {
namespace cpu {
namespace {

using decay_chunk::Head;
using decay_chunk::HeadGrads;
using decay_chunk::Mat;
using decay_chunk::Row;

// In Head terms: q = r, g = w, bonus = u. The token loops write into buffers sized once per
// head: they allocate nothing.
template <class Real>
void recurrent_forward(Mat<Real>& o, Mat<Real>& S, const Head<Real>& x, Real scale) {
  S = x.s0;  // S_0: (dk, dv)
  o.resize(x.q.rows(), x.v.cols());
  Row<Real> decay(x.g.cols()), read(x.v.cols());  // exp(w_t): (dk); S_{t-1}^T r_t: (dv)
  for (int64_t t = 0; t < x.q.rows(); t++) {
    if (x.starts_document(t)) S.setZero();  // a packed document starts from S = 0
    const Real bonus = x.q.row(t).cwiseProduct(x.bonus).dot(x.k.row(t));  // r_t . (u * k_t)
    read.noalias() = x.q.row(t) * S;
    o.row(t) = scale * (read + bonus * x.v.row(t));  // o_t = scale (S_{t-1}^T r_t + bonus v_t)
    decay_chunk::advance_state(S, decay, x, t);      // S_t = Diag(exp(w_t)) S_{t-1} + k_t v_t^T
  }
}

template <class Real>
HeadGrads<Real> recurrent_backward(const Head<Real>& x, const Mat<Real>& d_o, const Mat<Real>& ds_final, Real scale) {
  const int64_t T = x.q.rows();
  const std::vector<Mat<Real>> S = decay_chunk::replay_states(x);  // S[t]: after t tokens, t = 0..T
  HeadGrads<Real> grads;
  grads.dq.resize(T, x.q.cols());  // dr
  grads.dk.resize(T, x.k.cols());
  grads.dv.resize(T, x.v.cols());
  grads.dg.resize(T, x.g.cols());  // dw
  grads.dbonus = Row<Real>::Zero(x.bonus.cols());  // du
  Mat<Real> dS = ds_final;  // dL/dS after token t, carried backwards: (dk, dv)
  Row<Real> decay(x.g.cols()), dS_v(x.k.cols()), S_do(x.q.cols());  // exp(w_t), dS v_t, S_{t-1} do_t: (dk)
  Row<Real> dS_k(x.v.cols());                                         // dS^T k_t: (dv)
  const Mat<Real> zero = Mat<Real>::Zero(x.k.cols(), x.v.cols());  // S_{t-1} where a document starts at t
  for (int64_t t = T - 1; t >= 0; t--) {
    auto r = x.q.row(t), k = x.k.row(t), v = x.v.row(t), d_ot = d_o.row(t);
    const Real v_do = v.dot(d_ot);                          // v_t . do_t
    const Real bonus = r.cwiseProduct(x.bonus).dot(k);      // r_t . (u * k_t)
    decay = x.g.row(t).array().exp();
    const Mat<Real>& S_prev = decay_chunk::state_before(S, zero, x, t);  // S_{t-1} as token t reads it: (dk, dv)
    // o_t = scale (S_{t-1}^T r_t + (r_t . (u * k_t)) v_t)  and  S_t = Diag(exp(w_t)) S_{t-1} + k_t v_t^T
    dS_v.noalias() = v * dS.transpose();
    dS_k.noalias() = k * dS;
    S_do.noalias() = d_ot * S_prev.transpose();
    grads.dk.row(t) = dS_v + scale * v_do * x.bonus.cwiseProduct(r);    // dS v_t + bonus path
    grads.dv.row(t) = dS_k + scale * bonus * d_ot;                      // dS^T k_t + bonus path
    grads.dq.row(t) = scale * (S_do + v_do * x.bonus.cwiseProduct(k));  // S_{t-1} do_t + bonus path
    grads.dbonus += scale * v_do * r.cwiseProduct(k);
    grads.dg.row(t) = (decay.asDiagonal() * S_prev).cwiseProduct(dS).rowwise().sum().transpose();
    dS = decay.asDiagonal() * dS;                  // S_{t-1} feeds S_t
    dS.noalias() += scale * r.transpose() * d_ot;  //           and o_t
    if (x.starts_document(t)) dS.setZero();  // S_{t-1} was replaced by 0
  }
  grads.ds0 = dS;
  return grads;
}

template <class Real>
Head<Real> gather_rwkv_head(const Real* r, const Real* k, const Real* v, const Real* w, const Real* u,
                            const Real* h0, int64_t b, int64_t h, const Rwkv6Dims& d) {
  Head<Real> x;
  x.q = decay_chunk::gather_head(r, b, h, d.T, d.H, d.dk);
  x.k = decay_chunk::gather_head(k, b, h, d.T, d.H, d.dk);
  x.v = decay_chunk::gather_head(v, b, h, d.T, d.H, d.dv);
  x.g = decay_chunk::gather_head(w, b, h, d.T, d.H, d.dk);
  x.bonus = Eigen::Map<const Row<Real>>(u + h * d.dk, d.dk);
  x.s0 = decay_chunk::gather_state(h0, b, h, d.H, d.dk, d.dv);
  x.doc_start = d.doc_start ? d.doc_start + b * d.T : nullptr;
  x.chunk_reset = d.chunk_reset ? d.chunk_reset + b * (d.T / d.chunk_size) : nullptr;
  return x;
}

}  // namespace

template <class Real>
void rwkv6_forward(Real* o, Real* ht, const Real* r, const Real* k, const Real* v, const Real* w, const Real* u,
                   const Real* h0, const Rwkv6Dims& d) {
  std::fill(o, o + d.B * d.T * d.H * d.dv, Real(0));
  parallel_for(d.B * d.H, [&](int64_t i) {  // (batch, head) i = b * H + h writes its own rows
    const int64_t b = i / d.H, h = i % d.H;
    const Head<Real> x = gather_rwkv_head(r, k, v, w, u, h0, b, h, d);
    Mat<Real> o_head, s_final;  // (T, dv), (dk, dv)
    if (d.chunk_size == 0)
      recurrent_forward(o_head, s_final, x, Real(d.scale));
    else
      decay_chunk::forward<Real, true>(o_head, s_final, x, Real(d.scale), d.chunk_size,
                                       decay_chunk::ReadAt::before_update);
    decay_chunk::scatter_head_add(o, o_head, b, h, d.H);
    decay_chunk::scatter_state(ht, s_final, b, h, d.H);
  });
}

template <class Real>
void rwkv6_backward(Real* grad_r, Real* grad_k, Real* grad_v, Real* grad_w, Real* grad_u, Real* grad_h0,
                    const Real* grad_o, const Real* grad_ht, const Real* r, const Real* k, const Real* v,
                    const Real* w, const Real* u, const Real* h0, const Rwkv6Dims& d) {
  for (Real* grad : {grad_r, grad_k, grad_w}) std::fill(grad, grad + d.B * d.T * d.H * d.dk, Real(0));
  std::fill(grad_v, grad_v + d.B * d.T * d.H * d.dv, Real(0));
  std::fill(grad_u, grad_u + d.H * d.dk, Real(0));
  Mat<Real> du(d.B * d.H, d.dk);  // du: (B * H, dk), row b * H + h: (batch, head)'s part of grad_u
  parallel_for(d.B * d.H, [&](int64_t i) {  // (batch, head) i = b * H + h writes its own rows and row i of du
    const int64_t b = i / d.H, h = i % d.H;
    const Head<Real> x = gather_rwkv_head(r, k, v, w, u, h0, b, h, d);
    const Mat<Real> d_o = decay_chunk::gather_head(grad_o, b, h, d.T, d.H, d.dv);            // (T, dv)
    const Mat<Real> ds_final = decay_chunk::gather_state(grad_ht, b, h, d.H, d.dk, d.dv);  // (dk, dv)
    const HeadGrads<Real> dx =
        d.chunk_size == 0 ? recurrent_backward(x, d_o, ds_final, Real(d.scale))
                          : decay_chunk::backward<Real, true>(x, d_o, ds_final, Real(d.scale), d.chunk_size,
                                                              decay_chunk::ReadAt::before_update);
    decay_chunk::scatter_head_add(grad_r, dx.dq, b, h, d.H);
    decay_chunk::scatter_head_add(grad_k, dx.dk, b, h, d.H);
    decay_chunk::scatter_head_add(grad_v, dx.dv, b, h, d.H);
    decay_chunk::scatter_head_add(grad_w, dx.dg, b, h, d.H);
    du.row(i) = dx.dbonus;
    if (grad_h0) decay_chunk::scatter_state(grad_h0, dx.ds0, b, h, d.H);
  });
  // u is shared by the batch: its parts are summed here, in the serial order b = 0, 1, ...
  for (int64_t b = 0; b < d.B; b++)
    for (int64_t h = 0; h < d.H; h++) Eigen::Map<Row<Real>>(grad_u + h * d.dk, d.dk) += du.row(b * d.H + h);
}

#define HLA_RWKV6_INSTANTIATE(Real)                                                                            \
  template void rwkv6_forward<Real>(Real*, Real*, const Real*, const Real*, const Real*, const Real*,          \
                                    const Real*, const Real*, const Rwkv6Dims&);                               \
  template void rwkv6_backward<Real>(Real*, Real*, Real*, Real*, Real*, Real*, const Real*, const Real*,        \
                                     const Real*, const Real*, const Real*, const Real*, const Real*,          \
                                     const Real*, const Rwkv6Dims&);
HLA_RWKV6_INSTANTIATE(float)
HLA_RWKV6_INSTANTIATE(double)
#undef HLA_RWKV6_INSTANTIATE

}  // namespace cpu

namespace {

// The device's kernels: cuda::rwkv6_* for GPU tensors, cpu::rwkv6_* otherwise. States in d.state_dtype.
// kept: the chunk-start states the GPU forward keeps for its backward (keep_states), or undefined.
void rwkv6_forward(Tensor& o, Tensor& ht, const Tensor& r, const Tensor& k, const Tensor& v, const Tensor& w,
                   const Tensor& u, const Tensor& h0, const Rwkv6Dims& d, Tensor& kept) {
  if (r.is_cuda()) {
    HLA_CUDA_ONLY(cuda::rwkv6_forward(o.raw(), ht.data<float>(), r.raw(), k.raw(), v.raw(), w.raw(), u.raw(),
                                      data_or_null<float>(h0), d, data_or_null<float>(kept), r.dtype()));
    return;
  }
  dispatch_float(r.dtype(), "rwkv6", [&](auto tag) {
    using Real = decltype(tag);
    cpu::rwkv6_forward(o.data<Real>(), ht.data<Real>(), r.data<Real>(), k.data<Real>(), v.data<Real>(),
                       w.data<Real>(), u.data<Real>(), data_or_null<Real>(h0), d);
  });
}

void rwkv6_backward(Tensor& grad_r, Tensor& grad_k, Tensor& grad_v, Tensor& grad_w, Tensor& grad_u, Tensor& grad_h0,
                    const Tensor& grad_o, const Tensor& grad_ht, const Tensor& r, const Tensor& k, const Tensor& v,
                    const Tensor& w, const Tensor& u, const Tensor& h0, const Rwkv6Dims& d, const Tensor& kept) {
  if (r.is_cuda()) {
    HLA_CUDA_ONLY(cuda::rwkv6_backward(grad_r.raw(), grad_k.raw(), grad_v.raw(), grad_w.raw(), grad_u.raw(),
                                       data_or_null<float>(grad_h0), grad_o.raw(), grad_ht.data<float>(), r.raw(),
                                       k.raw(), v.raw(), w.raw(), u.raw(), data_or_null<float>(h0), d,
                                       data_or_null<float>(kept), r.dtype()));
    return;
  }
  dispatch_float(r.dtype(), "rwkv6 backward", [&](auto tag) {
    using Real = decltype(tag);
    cpu::rwkv6_backward(grad_r.data<Real>(), grad_k.data<Real>(), grad_v.data<Real>(), grad_w.data<Real>(),
                        grad_u.data<Real>(), data_or_null<Real>(grad_h0), grad_o.data<Real>(), grad_ht.data<Real>(),
                        r.data<Real>(), k.data<Real>(), v.data<Real>(), w.data<Real>(), u.data<Real>(),
                        data_or_null<Real>(h0), d);
  });
}

Rwkv6Dims check_inputs(const Var& r, const Var& k, const Var& v, const Var& w, const Var& u, const Var& initial_state,
                       double scale, int64_t chunk_size) {
  const char* op = "rwkv6";
  HLA_CHECK(r.dim() == 4, "rwkv6: r must be (B, T, H, dk), got ", r.value().str());
  const int64_t B = r.size(0), T = r.size(1), H = r.size(2), dk = r.size(3);
  check_shape(k.value(), {B, T, H, dk}, op, "k");
  check_shape(w.value(), {B, T, H, dk}, op, "w");
  HLA_CHECK(v.dim() == 4 && v.size(0) == B && v.size(1) == T && v.size(2) == H,
            "rwkv6: v must be (B, T, H, dv) with B = ", B, ", T = ", T, ", H = ", H, ", got ", v.value().str());
  const int64_t dv = v.size(3);
  check_shape(u.value(), {H, dk}, op, "u");
  for (const auto& [x, name] : {std::pair<const Var*, const char*>{&k, "k"}, {&v, "v"}, {&w, "w"}, {&u, "u"}})
    check_operand(x->value(), r.value(), op, name);
  if (initial_state.defined()) {
    check_shape(initial_state.value(), {B, H, dk, dv}, op, "initial_state");
    check_operand(initial_state.value(), r.value(), op, "initial_state");
  }
  HLA_CHECK(chunk_size >= 0, "rwkv6: chunk_size must be >= 0 (0 = recurrent), got ", chunk_size);
  return {B, T, H, dk, dv, scale, chunk_size, accum_dtype(r.value())};
}

// The op on rows as they are, d from check_inputs with the documents' pointers (run_on_documents)
// into `keep`, which the backward keeps alive; {o, final_state}.
std::vector<Var> rwkv6_rows(const Var& r, const Var& k, const Var& v, const Var& w, const Var& u,
                            const Var& initial_state, const Rwkv6Dims& d, bool keep_states, const Tensor& keep) {
  const bool has_h0 = initial_state.defined();
  const DType dt = r.dtype();
  const Device dev = r.device();
  Tensor rv = r.value(), kv = k.value(), vv = v.value(), wv = w.value(), uv = u.value();
  Tensor h0 = has_h0 ? initial_state.value().to(d.state_dtype) : Tensor();
  Tensor o = Tensor::empty({d.B, d.T, d.H, d.dv}, dt, dev);               // o: (B, T, H, dv)
  Tensor ht = Tensor::empty({d.B, d.H, d.dk, d.dv}, d.state_dtype, dev);  // ht: (B, H, dk, dv)
  int64_t kept_floats = 0;
  if (rv.is_cuda() && keep_states && backward_follows({&r, &k, &v, &w, &u, &initial_state}))
    HLA_CUDA_ONLY(kept_floats = cuda::rwkv6_kept_floats(d, dt));
  Tensor kept = kept_buffer(kept_floats, dev);  // (B, H, NT, dk, dv) fp32, or undefined
  rwkv6_forward(o, ht, rv, kv, vv, wv, uv, h0, d, kept);
  // documents: kept alive for d.doc_start, d.chunk_reset
  auto backward = [=, documents = keep](const std::vector<Tensor>& grad_out) mutable {
    Tensor dr = Tensor::empty(rv.shape(), dt, dev), dk_ = Tensor::empty(kv.shape(), dt, dev);
    Tensor dv_ = Tensor::empty(vv.shape(), dt, dev), dw = Tensor::empty(wv.shape(), dt, dev);
    Tensor du = Tensor::empty(uv.shape(), dt, dev);
    Tensor dh0 = has_h0 ? Tensor::empty(h0.shape(), d.state_dtype, dev) : Tensor();
    rwkv6_backward(dr, dk_, dv_, dw, du, dh0, grad_out[0], grad_out[1].to(d.state_dtype), rv, kv, vv, wv, uv, h0, d,
                   kept);
    kept = Tensor();  // read: freed now, before the layers below run their backward (a second backward replays)
    // dh0 back in the initial state's dtype
    return std::vector<Tensor>{dr, dk_, dv_, dw, du, has_h0 ? dh0.to(dt) : Tensor()};
  };
  return record_op({o, ht}, {r, k, v, w, u, initial_state}, backward, "rwkv6");
}

}  // namespace

// Packed documents: as decay_attention's (the state alone resets: u reads only the current token).
Rwkv6Output rwkv6(const Var& r, const Var& k, const Var& v, const Var& w, const Var& u, const Var& initial_state,
                  double scale, int64_t chunk_size, bool keep_states, const DocumentStarts& documents) {
  const Rwkv6Dims d = check_inputs(r, k, v, w, u, initial_state, scale, chunk_size);
  if (!documents.defined()) {
    std::vector<Var> outs = rwkv6_rows(r, k, v, w, u, initial_state, d, keep_states, Tensor());
    return {outs[0], outs[1]};
  }
  // the layout's chunk size: the CPU's chunk_size, the GPU chunked kernels' (0: the token recurrence)
  int64_t chunk = chunk_size;
  if (r.value().is_cuda()) HLA_CUDA_ONLY(chunk = cuda::rwkv6_document_chunk(d, r.dtype()));
  std::vector<Var> outs = run_on_documents(
      "rwkv6", documents, d, chunk, r.device(), initial_state, {r, k, v, w}, 1,
      [&](const Rwkv6Dims& dd, const std::vector<Var>& x, const Tensor& keep) {
        return rwkv6_rows(x[0], x[1], x[2], x[3], u, Var(), dd, keep_states, keep);
      });
  return {outs[0], outs[1]};
}

}  // namespace hla
