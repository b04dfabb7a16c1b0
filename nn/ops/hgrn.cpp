// HGRN recurrence forward and backward (mixers.md section 6), one channel at a time: the
// (batch, channel) sequences run in parallel (nn/ops/parallel.h).
//
// Backward walks the tokens in reverse with dh = dL/dh_t:
//   dh   += do_t                 (o_t = h_t)
//   dx_t  = dh                   (h_t = ... + x_t)
//   dg_t  = dh * exp(g_t) h_{t-1}  (h_t = exp(g_t) h_{t-1} + ...)
//   dh    = dh * exp(g_t)        (gradient flowing on to h_{t-1})
// and what is left at the start is dh0. h_{t-1} is read back from o (or h0 at t = 1).
// Packed documents: at a document's first token t > 0, h_{t-1} is replaced by 0 (so dg_t = 0)
// and dh stops there (nothing before t reaches h_t).
#include "nn/ops/hgrn.h"

#include <cmath>

#include "nn/ops/attention.h"
#include "nn/ops/check.h"
#include "nn/ops/parallel.h"
#include "tensor/dispatch.h"
#ifdef HLA_CUDA
#include "cuda/hgrn.h"
#endif

namespace hla {
namespace cpu {

// Whether h is zeroed before token t > 0 of row b: a packed document starts at t.
inline bool starts_document(const HgrnDims& dims, int64_t b, int64_t t) {
  return dims.doc_start && t > 0 && dims.doc_start[b * dims.T + t] == t;
}

template <class Real>
void hgrn_forward(Real* o, Real* ht, const Real* x, const Real* g, const Real* h0, const HgrnDims& dims) {
  const int64_t B = dims.B, T = dims.T, D = dims.D;
  parallel_for(B * D, [&](int64_t c) {  // (batch, channel) c = b * D + d writes its own column
    const int64_t b = c / D, d = c % D;
    Real h = h0 ? h0[b * D + d] : Real(0);  // h_0
    for (int64_t t = 0; t < T; t++) {
      const int64_t i = (b * T + t) * D + d;
      if (starts_document(dims, b, t)) h = Real(0);  // a document starts from h = 0
      h = std::exp(g[i]) * h + x[i];  // h_t = exp(g_t) * h_{t-1} + x_t
      o[i] = h;                       // o_t = h_t
    }
    ht[b * D + d] = h;  // final state h_T
  });
}

template <class Real>
void hgrn_backward(Real* dx, Real* dg, Real* dh0, const Real* dout, const Real* dht, const Real* g, const Real* h0,
                   const Real* o, const HgrnDims& dims) {
  const int64_t B = dims.B, T = dims.T, D = dims.D;
  parallel_for(B * D, [&](int64_t c) {  // (batch, channel) c = b * D + d writes its own column
    const int64_t b = c / D, d = c % D;
    Real dh = dht ? dht[b * D + d] : Real(0);  // dL/dh_T from the final state
    for (int64_t t = T - 1; t >= 0; t--) {
      const int64_t i = (b * T + t) * D + d;
      const bool starts = starts_document(dims, b, t);
      const Real h_prev = starts ? Real(0) : t > 0 ? o[i - D] : (h0 ? h0[b * D + d] : Real(0));  // h_{t-1}
      const Real decay = std::exp(g[i]);
      dh += dout[i];                // o_t = h_t
      dx[i] = dh;                   // h_t = exp(g_t) h_{t-1} + x_t  =>  dx_t = dh_t
      dg[i] = dh * decay * h_prev;  //                              =>  dg_t = dh_t exp(g_t) h_{t-1}
      dh = starts ? Real(0) : dh * decay;  //                       =>  dh_{t-1} += dh_t exp(g_t)
    }
    if (dh0) dh0[b * D + d] = dh;
  });
}

template void hgrn_forward<float>(float*, float*, const float*, const float*, const float*, const HgrnDims&);
template void hgrn_forward<double>(double*, double*, const double*, const double*, const double*, const HgrnDims&);
template void hgrn_backward<float>(float*, float*, float*, const float*, const float*, const float*, const float*,
                                   const float*, const HgrnDims&);
template void hgrn_backward<double>(double*, double*, double*, const double*, const double*, const double*,
                                    const double*, const double*, const HgrnDims&);

}  // namespace cpu

namespace {

// The device's kernels: cuda::hgrn_* for GPU tensors, cpu::hgrn_* otherwise. States in d.state_dtype.
void hgrn_forward(Tensor& o, Tensor& ht, const Tensor& x, const Tensor& g, const Tensor& h0, const HgrnDims& d) {
  if (x.is_cuda()) {
    HLA_CUDA_ONLY(
        cuda::hgrn_forward(o.raw(), ht.data<float>(), x.raw(), g.raw(), data_or_null<float>(h0), d, x.dtype()));
    return;
  }
  dispatch_float(x.dtype(), "hgrn", [&](auto tag) {
    using Real = decltype(tag);
    cpu::hgrn_forward(o.data<Real>(), ht.data<Real>(), x.data<Real>(), g.data<Real>(), data_or_null<Real>(h0), d);
  });
}

void hgrn_backward(Tensor& dx, Tensor& dg, Tensor& dh0, const Tensor& dout, const Tensor& dht, const Tensor& g,
                   const Tensor& h0, const Tensor& o, const HgrnDims& d) {
  if (g.is_cuda()) {
    HLA_CUDA_ONLY(cuda::hgrn_backward(dx.raw(), dg.raw(), data_or_null<float>(dh0), dout.raw(), dht.data<float>(),
                                      g.raw(), data_or_null<float>(h0), o.raw(), d, g.dtype()));
    return;
  }
  dispatch_float(g.dtype(), "hgrn", [&](auto tag) {
    using Real = decltype(tag);
    cpu::hgrn_backward(dx.data<Real>(), dg.data<Real>(), data_or_null<Real>(dh0), dout.data<Real>(), dht.data<Real>(),
                       g.data<Real>(), data_or_null<Real>(h0), o.data<Real>(), d);
  });
}

}  // namespace

HgrnOutput hgrn(const Var& x, const Var& g, const Var& initial_state, const Tensor& doc_start) {
  HLA_CHECK(x.dim() == 3, "hgrn: x must be (B, T, D), got ", x.value().str());
  const int64_t B = x.size(0), T = x.size(1), D = x.size(2);
  check_shape(g.value(), {B, T, D}, "hgrn", "g");
  check_operand(g.value(), x.value(), "hgrn", "g");
  const bool has_h0 = initial_state.defined();
  if (has_h0) {
    check_shape(initial_state.value(), {B, D}, "hgrn", "initial_state");
    check_operand(initial_state.value(), x.value(), "hgrn", "initial_state");
  }
  if (doc_start.defined()) {
    check_document_starts(doc_start, B, T, x.device(), "hgrn");
    HLA_CHECK(!has_h0, "hgrn: with packed documents (doc_start) the initial state must be undefined, got ",
              initial_state.value().str());
  }
  HgrnDims d{B, T, D, accum_dtype(x.value())};
  if (doc_start.defined()) d.doc_start = doc_start.data<int32_t>();  // the backward's copy of doc_start keeps it alive
  const DType dt = x.dtype();
  const Device dev = x.device();
  Tensor xv = x.value(), gv = g.value();
  Tensor h0 = has_h0 ? initial_state.value().to(d.state_dtype) : Tensor();
  Tensor o = Tensor::empty({B, T, D}, dt, dev);             // o: (B, T, D)
  Tensor ht = Tensor::empty({B, D}, d.state_dtype, dev);    // ht: (B, D)
  hgrn_forward(o, ht, xv, gv, h0, d);
  auto backward = [=, starts = doc_start](const std::vector<Tensor>& grads) {
    Tensor dx = Tensor::empty({B, T, D}, dt, dev), dg = Tensor::empty({B, T, D}, dt, dev);
    Tensor dh0 = has_h0 ? Tensor::empty({B, D}, d.state_dtype, dev) : Tensor();
    hgrn_backward(dx, dg, dh0, grads[0], grads[1].to(d.state_dtype), gv, h0, o, d);
    // dh0 back in the initial state's dtype
    return std::vector<Tensor>{dx, dg, has_h0 ? dh0.to(dt) : Tensor()};
  };
  std::vector<Var> outs = record_op({o, ht}, {x, g, initial_state}, backward, "hgrn");
  return {outs[0], outs[1]};
}

}  // namespace hla
