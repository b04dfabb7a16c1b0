// Gated RMSNorm forward and backward, both orders in one kernel (mixers.md 2.3, 2.4).
//
// Per group the kernel normalises a = x (NormThenGate) or a = x * act(z) (GateThenNorm):
//   a_hat = a * rstd,  rstd = 1 / sqrt(mean(a^2) + eps),  y = a_hat * w * (act(z) if NormThenGate)
// The backward walks the same lines in reverse: the post-norm gate, the RMSNorm backward
// (mixers.md 2.1) into da, then the pre-norm gate.
#include "nn/ops/gated_norm.h"

#include <algorithm>
#include <cmath>

#include "nn/ops/check.h"
#include "nn/ops/pointwise.h"
#include "tensor/dispatch.h"
#ifdef HLA_CUDA
#include "cuda/gated_norm.h"
#endif

namespace hla {
namespace cpu {

namespace {
// act(z): swish z * s(z) or sigmoid s(z)
template <class T> T gate_act(T z, GateAct act) { return act == GateAct::Swish ? z * sigmoid_of(z) : sigmoid_of(z); }
// act'(z): swish s (1 + z (1 - s)) or sigmoid s (1 - s)
template <class T> T gate_act_grad(T z, GateAct act) {
  T s = sigmoid_of(z);
  return act == GateAct::Swish ? s * (T(1) + z * (T(1) - s)) : s * (T(1) - s);
}
// The value normalised at channel c: x, or x * act(z) when the gate comes first.
template <class T> T norm_input(T x, T z, GateAct act, GateOrder order) {
  return order == GateOrder::GateThenNorm ? x * gate_act(z, act) : x;
}
}  // namespace

template <class T>
void gated_rmsnorm_forward(T* y, T* rstd, const T* x, const T* z, const T* w, const GatedNormDims& d) {
  const int64_t N = d.N, C = d.C, G = d.G, groups = C / G;
  const GateAct act = d.act;
  const GateOrder order = d.order;
  for (int64_t n = 0; n < N; n++)
    for (int64_t gi = 0; gi < groups; gi++) {
      int64_t c0 = n * C + gi * G;  // first element of this group in x, z, y
      T ms = 0;
      for (int64_t c = 0; c < G; c++) {
        T a = norm_input(x[c0 + c], z[c0 + c], act, order);
        ms += a * a;
      }
      T r = T(1) / std::sqrt(ms / static_cast<T>(G) + static_cast<T>(d.eps));  // rstd = 1/sqrt(mean(a^2) + eps)
      rstd[n * groups + gi] = r;
      for (int64_t c = 0; c < G; c++) {
        T a = norm_input(x[c0 + c], z[c0 + c], act, order);
        T out = a * r * w[gi * G + c];                                         // a_hat * w
        if (order == GateOrder::NormThenGate) out *= gate_act(z[c0 + c], act);  // * act(z)
        y[c0 + c] = out;
      }
    }
}

template <class T>
void gated_rmsnorm_backward(T* dx, T* dz, T* dw, const T* dy, const T* x, const T* z, const T* w, const T* rstd,
                            const GatedNormDims& d) {
  const int64_t N = d.N, C = d.C, G = d.G, groups = C / G;
  const GateAct act = d.act;
  const GateOrder order = d.order;
  const bool gate_after = order == GateOrder::NormThenGate;
  std::fill(dw, dw + C, T(0));
  for (int64_t n = 0; n < N; n++)
    for (int64_t gi = 0; gi < groups; gi++) {
      int64_t c0 = n * C + gi * G;
      T r = rstd[n * groups + gi];
      // pass 1: dy0 = gradient of y0 = a_hat * w; mean(a_hat * dy0 * w) for the norm backward
      T mean_dot = 0;
      for (int64_t c = 0; c < G; c++) {
        int64_t i = c0 + c, wc = gi * G + c;
        T a_hat = norm_input(x[i], z[i], act, order) * r;
        T dy0 = dy[i];
        if (gate_after) {  // y = y0 * act(z)  =>  dz = dy * y0 * act'(z),  dy0 = dy * act(z)
          dz[i] = dy[i] * a_hat * w[wc] * gate_act_grad(z[i], act);
          dy0 = dy[i] * gate_act(z[i], act);
        }
        dw[wc] += dy0 * a_hat;  // y0 = a_hat * w  =>  dw = sum_rows dy0 * a_hat
        mean_dot += a_hat * dy0 * w[wc];
      }
      mean_dot /= static_cast<T>(G);
      // pass 2: a_hat = a * rstd(a)  =>  da = rstd * (dy0 * w - a_hat * mean(a_hat * dy0 * w))
      for (int64_t c = 0; c < G; c++) {
        int64_t i = c0 + c, wc = gi * G + c;
        T a_hat = norm_input(x[i], z[i], act, order) * r;
        T dy0 = gate_after ? dy[i] * gate_act(z[i], act) : dy[i];
        T da = r * (dy0 * w[wc] - a_hat * mean_dot);
        if (gate_after) {
          dx[i] = da;  // a = x
        } else {       // a = x * act(z)  =>  dx = da * act(z),  dz = da * x * act'(z)
          dx[i] = da * gate_act(z[i], act);
          dz[i] = da * x[i] * gate_act_grad(z[i], act);
        }
      }
    }
}

template void gated_rmsnorm_forward<float>(float*, float*, const float*, const float*, const float*,
                                           const GatedNormDims&);
template void gated_rmsnorm_forward<double>(double*, double*, const double*, const double*, const double*,
                                            const GatedNormDims&);
template void gated_rmsnorm_backward<float>(float*, float*, float*, const float*, const float*, const float*,
                                            const float*, const float*, const GatedNormDims&);
template void gated_rmsnorm_backward<double>(double*, double*, double*, const double*, const double*, const double*,
                                             const double*, const double*, const GatedNormDims&);

}  // namespace cpu

// One forward for both devices: cpu::gated_rmsnorm_forward<T> or cuda::gated_rmsnorm_forward.
// x, z, y: (N, C), w: (C), rstd: (N, C / G) in accum_dtype(x)
static void gated_rmsnorm_forward(Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& z, const Tensor& w,
                                  const GatedNormDims& d) {
  if (x.is_cuda()) {
    HLA_CUDA_ONLY(cuda::gated_rmsnorm_forward(y.raw(), rstd.data<float>(), x.raw(), z.raw(), w.raw(), d, x.dtype()));
    return;
  }
  dispatch_float(x.dtype(), "gated_rmsnorm", [&](auto tag) {
    using T = decltype(tag);
    cpu::gated_rmsnorm_forward(y.data<T>(), rstd.data<T>(), x.data<T>(), z.data<T>(), w.data<T>(), d);
  });
}

// One backward for both devices; dx, dz: (N, C), dw: (C) written.
static void gated_rmsnorm_backward(Tensor& dx, Tensor& dz, Tensor& dw, const Tensor& dy, const Tensor& x,
                                   const Tensor& z, const Tensor& w, const Tensor& rstd, const GatedNormDims& d) {
  if (x.is_cuda()) {
    HLA_CUDA_ONLY(cuda::gated_rmsnorm_backward(dx.raw(), dz.raw(), dw.raw(), dy.raw(), x.raw(), z.raw(), w.raw(),
                                               rstd.data<float>(), d, x.dtype()));
    return;
  }
  dispatch_float(x.dtype(), "gated_rmsnorm", [&](auto tag) {
    using T = decltype(tag);
    cpu::gated_rmsnorm_backward(dx.data<T>(), dz.data<T>(), dw.data<T>(), dy.data<T>(), x.data<T>(), z.data<T>(),
                                w.data<T>(), rstd.data<T>(), d);
  });
}

Var gated_rmsnorm(const Var& x, const Var& z, const Var& weight, double eps, GateAct act, GateOrder order,
                  int64_t group_size) {
  Tensor xv = x.value(), zv = z.value(), wv = weight.value();
  check_same_shape(xv, zv, "gated_rmsnorm");
  int64_t C = xv.size(-1), N = xv.numel() / C;
  int64_t G = group_size == 0 ? C : group_size;
  HLA_CHECK(G > 0 && C % G == 0, "gated_rmsnorm: group_size ", group_size, " must divide the last dim ", C);
  check_shape(wv, {C}, "gated_rmsnorm", "weight");
  check_operand(zv, xv, "gated_rmsnorm", "z");
  check_operand(wv, xv, "gated_rmsnorm", "weight");
  const GatedNormDims d{N, C, G, eps, act, order};
  Tensor y = Tensor::empty(xv.shape(), xv.dtype(), xv.device());           // y: (..., C)
  Tensor rstd = Tensor::empty({N, C / G}, accum_dtype(xv), xv.device());  // rstd: (N, groups)
  gated_rmsnorm_forward(y, rstd, xv, zv, wv, d);
  return record_op1(y, {x, z, weight}, [=](const std::vector<Tensor>& g) {
    Tensor dx = Tensor::empty(xv.shape(), xv.dtype(), xv.device());
    Tensor dz = Tensor::empty(xv.shape(), xv.dtype(), xv.device());
    Tensor dw = Tensor::empty({C}, xv.dtype(), xv.device());
    gated_rmsnorm_backward(dx, dz, dw, g[0], xv, zv, wv, rstd, d);
    return std::vector<Tensor>{dx, dz, dw};
  }, "gated_rmsnorm");
}

}  // namespace hla
