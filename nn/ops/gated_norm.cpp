// Gated RMSNorm forward and backward, both orders in one kernel (mixers.md 2.3, 2.4).
//
// Per group the kernel normalises a = x (NormThenGate) or a = x * act(z) (GateThenNorm):
//   a_hat = a * rstd,  rstd = 1 / sqrt(mean(a^2) + eps),  y = a_hat * w * (act(z) if NormThenGate)
// The backward walks the same lines in reverse: the post-norm gate, the RMSNorm backward
// (mixers.md 2.1) into da, then the pre-norm gate.
#include "nn/ops/gated_norm.h"

#include <cmath>

#include "tensor/dispatch.h"
#ifdef HLA_CUDA
#include "cuda/gated_norm.h"
#endif

namespace hla {
namespace cpu {

namespace {
template <class T> T sigmoid_of(T v) { return T(1) / (T(1) + std::exp(-v)); }
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
void gated_rmsnorm_forward(T* y, T* rstd, const T* x, const T* z, const T* w, int64_t N, int64_t C, int64_t G,
                           double eps, GateAct act, GateOrder order) {
  int64_t groups = C / G;
  for (int64_t n = 0; n < N; n++)
    for (int64_t gi = 0; gi < groups; gi++) {
      int64_t c0 = n * C + gi * G;  // first element of this group in x, z, y
      T ms = 0;
      for (int64_t c = 0; c < G; c++) {
        T a = norm_input(x[c0 + c], z[c0 + c], act, order);
        ms += a * a;
      }
      T r = T(1) / std::sqrt(ms / static_cast<T>(G) + static_cast<T>(eps));  // rstd = 1/sqrt(mean(a^2) + eps)
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
                            int64_t N, int64_t C, int64_t G, GateAct act, GateOrder order) {
  int64_t groups = C / G;
  bool gate_after = order == GateOrder::NormThenGate;
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

template void gated_rmsnorm_forward<float>(float*, float*, const float*, const float*, const float*, int64_t,
                                           int64_t, int64_t, double, GateAct, GateOrder);
template void gated_rmsnorm_forward<double>(double*, double*, const double*, const double*, const double*, int64_t,
                                            int64_t, int64_t, double, GateAct, GateOrder);
template void gated_rmsnorm_backward<float>(float*, float*, float*, const float*, const float*, const float*,
                                            const float*, const float*, int64_t, int64_t, int64_t, GateAct, GateOrder);
template void gated_rmsnorm_backward<double>(double*, double*, double*, const double*, const double*, const double*,
                                             const double*, const double*, int64_t, int64_t, int64_t, GateAct,
                                             GateOrder);

}  // namespace cpu

#ifdef HLA_CUDA
// The same op on the GPU (cuda/gated_norm.cu); rstd is fp32 there whatever the storage dtype.
static Var gated_rmsnorm_cuda(const Var& x, const Var& z, const Var& weight, double eps, GateAct act, GateOrder order,
                              int64_t G) {
  Tensor xv = x.value(), zv = z.value(), wv = weight.value();
  check_dtype(zv, xv.dtype(), "gated_rmsnorm", "z");
  check_dtype(wv, xv.dtype(), "gated_rmsnorm", "weight");
  HLA_CHECK(zv.is_cuda() && wv.is_cuda(), "gated_rmsnorm: x is on cuda but z or weight is on the cpu");
  int64_t C = xv.size(-1), N = xv.numel() / C;
  Tensor y = Tensor::empty(xv.shape(), xv.dtype(), Device::CUDA);   // y: (..., C)
  Tensor rstd = Tensor::empty({N, C / G}, DType::F32, Device::CUDA);  // rstd: (N, groups)
  cuda::gated_rmsnorm_forward(y.raw(), rstd.data<float>(), xv.raw(), zv.raw(), wv.raw(), N, C, G, eps, act, order,
                              xv.dtype());
  return record_op1(y, {x, z, weight}, [=](const std::vector<Tensor>& g) {
    Tensor dx = Tensor::empty(xv.shape(), xv.dtype(), Device::CUDA);
    Tensor dz = Tensor::empty(xv.shape(), xv.dtype(), Device::CUDA);
    Tensor dw = Tensor::zeros({C}, xv.dtype(), Device::CUDA);
    cuda::gated_rmsnorm_backward(dx.raw(), dz.raw(), dw.raw(), g[0].raw(), xv.raw(), zv.raw(), wv.raw(),
                                 rstd.data<float>(), N, C, G, act, order, xv.dtype());
    return std::vector<Tensor>{dx, dz, dw};
  }, "gated_rmsnorm");
}
#endif

Var gated_rmsnorm(const Var& x, const Var& z, const Var& weight, double eps, GateAct act, GateOrder order,
                  int64_t group_size) {
  check_same_shape(x.value(), z.value(), "gated_rmsnorm");
  int64_t C = x.size(-1), N = x.numel() / C;
  int64_t G = group_size == 0 ? C : group_size;
  HLA_CHECK(G > 0 && C % G == 0, "gated_rmsnorm: group_size ", group_size, " must divide the last dim ", C);
  check_shape(weight.value(), {C}, "gated_rmsnorm", "weight");
#ifdef HLA_CUDA
  if (x.value().is_cuda()) return gated_rmsnorm_cuda(x, z, weight, eps, act, order, G);
#endif
  Tensor xv = x.value(), zv = z.value(), wv = weight.value();
  Tensor y = Tensor::empty(xv.shape(), xv.dtype());        // y: (..., C)
  Tensor rstd = Tensor::empty({N, C / G}, xv.dtype());    // rstd: (N, groups)
  dispatch_float(xv.dtype(), "gated_rmsnorm", [&](auto tag) {
    using T = decltype(tag);
    cpu::gated_rmsnorm_forward(y.data<T>(), rstd.data<T>(), xv.data<T>(), zv.data<T>(), wv.data<T>(), N, C, G, eps,
                               act, order);
  });
  return record_op1(y, {x, z, weight}, [=](const std::vector<Tensor>& g) {
    Tensor dx = Tensor::empty(xv.shape(), xv.dtype()), dz = Tensor::empty(xv.shape(), xv.dtype());
    Tensor dw = Tensor::zeros({C}, xv.dtype());
    dispatch_float(xv.dtype(), "gated_rmsnorm", [&](auto tag) {
      using T = decltype(tag);
      cpu::gated_rmsnorm_backward(dx.data<T>(), dz.data<T>(), dw.data<T>(), g[0].data<T>(), xv.data<T>(),
                                  zv.data<T>(), wv.data<T>(), rstd.data<T>(), N, C, G, act, order);
    });
    return std::vector<Tensor>{dx, dz, dw};
  }, "gated_rmsnorm");
}

}  // namespace hla
