// HGRN recurrence forward and backward (mixers.md section 6), one channel at a time.
//
// Backward walks the tokens in reverse with dh = dL/dh_t:
//   dh   += do_t                 (o_t = h_t)
//   dx_t  = dh                   (h_t = ... + x_t)
//   dg_t  = dh * exp(g_t) h_{t-1}  (h_t = exp(g_t) h_{t-1} + ...)
//   dh    = dh * exp(g_t)        (gradient flowing on to h_{t-1})
// and what is left at the start is dh0. h_{t-1} is read back from o (or h0 at t = 1).
#include "nn/ops/hgrn.h"

#include <cmath>

#include "nn/recurrence_cuda.h"
#include "tensor/dispatch.h"

namespace hla {
namespace cpu {

template <class Real>
void hgrn_forward(Real* o, Real* ht, const Real* x, const Real* g, const Real* h0, int64_t B, int64_t T, int64_t D) {
  for (int64_t b = 0; b < B; b++)
    for (int64_t d = 0; d < D; d++) {
      Real h = h0 ? h0[b * D + d] : Real(0);  // h_0
      for (int64_t t = 0; t < T; t++) {
        const int64_t i = (b * T + t) * D + d;
        h = std::exp(g[i]) * h + x[i];  // h_t = exp(g_t) * h_{t-1} + x_t
        o[i] = h;                       // o_t = h_t
      }
      ht[b * D + d] = h;  // final state h_T
    }
}

template <class Real>
void hgrn_backward(Real* dx, Real* dg, Real* dh0, const Real* dout, const Real* dht, const Real* g, const Real* h0,
                   const Real* o, int64_t B, int64_t T, int64_t D) {
  for (int64_t b = 0; b < B; b++)
    for (int64_t d = 0; d < D; d++) {
      Real dh = dht ? dht[b * D + d] : Real(0);  // dL/dh_T from the final state
      for (int64_t t = T - 1; t >= 0; t--) {
        const int64_t i = (b * T + t) * D + d;
        const Real h_prev = t > 0 ? o[i - D] : (h0 ? h0[b * D + d] : Real(0));  // h_{t-1}
        const Real decay = std::exp(g[i]);
        dh += dout[i];                // o_t = h_t
        dx[i] = dh;                   // h_t = exp(g_t) h_{t-1} + x_t  =>  dx_t = dh_t
        dg[i] = dh * decay * h_prev;  //                              =>  dg_t = dh_t exp(g_t) h_{t-1}
        dh *= decay;                  //                              =>  dh_{t-1} += dh_t exp(g_t)
      }
      if (dh0) dh0[b * D + d] = dh;
    }
}

template void hgrn_forward<float>(float*, float*, const float*, const float*, const float*, int64_t, int64_t, int64_t);
template void hgrn_forward<double>(double*, double*, const double*, const double*, const double*, int64_t, int64_t,
                                   int64_t);
template void hgrn_backward<float>(float*, float*, float*, const float*, const float*, const float*, const float*,
                                   const float*, int64_t, int64_t, int64_t);
template void hgrn_backward<double>(double*, double*, double*, const double*, const double*, const double*,
                                    const double*, const double*, int64_t, int64_t, int64_t);

}  // namespace cpu

HgrnOutput hgrn(const Var& x, const Var& g, const Var& initial_state) {
  HLA_CHECK(x.dim() == 3, "hgrn: x must be (B, T, D), got ", x.value().str());
  const int64_t B = x.size(0), T = x.size(1), D = x.size(2);
  check_shape(g.value(), {B, T, D}, "hgrn", "g");
  check_dtype(g.value(), x.dtype(), "hgrn", "g");
  const bool has_h0 = initial_state.defined();
  if (has_h0) {
    check_shape(initial_state.value(), {B, D}, "hgrn", "initial_state");
    check_dtype(initial_state.value(), x.dtype(), "hgrn", "initial_state");
  }
  if (x.value().is_cuda()) return hgrn_cuda(x, g, initial_state);
  Tensor xv = x.value(), gv = g.value();
  Tensor h0 = has_h0 ? initial_state.value() : Tensor();
  Tensor o = Tensor::empty({B, T, D}, xv.dtype());  // o: (B, T, D)
  Tensor ht = Tensor::empty({B, D}, xv.dtype());    // ht: (B, D)
  dispatch_float(xv.dtype(), "hgrn", [&](auto tag) {
    using Real = decltype(tag);
    cpu::hgrn_forward(o.data<Real>(), ht.data<Real>(), xv.data<Real>(), gv.data<Real>(),
                      has_h0 ? h0.data<Real>() : nullptr, B, T, D);
  });
  std::vector<Var> outs = record_op({o, ht}, {x, g, initial_state}, [=](const std::vector<Tensor>& grads) {
    Tensor dx = Tensor::empty({B, T, D}, xv.dtype());
    Tensor dg = Tensor::empty({B, T, D}, xv.dtype());
    Tensor dh0 = has_h0 ? Tensor::empty({B, D}, xv.dtype()) : Tensor();
    dispatch_float(xv.dtype(), "hgrn", [&](auto tag) {
      using Real = decltype(tag);
      cpu::hgrn_backward(dx.data<Real>(), dg.data<Real>(), has_h0 ? dh0.data<Real>() : nullptr,
                         grads[0].data<Real>(), grads[1].data<Real>(), gv.data<Real>(),
                         has_h0 ? h0.data<Real>() : nullptr, o.data<Real>(), B, T, D);
    });
    return std::vector<Tensor>{dx, dg, dh0};
  }, "hgrn");
  return {outs[0], outs[1]};
}

}  // namespace hla
