// Pointwise activations and their derivatives (see activation.h).
//   silu(x)       = x * s(x)                  silu'(x)       = s(x) * (1 + x * (1 - s(x)))
//   sigmoid(x)    = s(x) = 1 / (1 + e^-x)     sigmoid'(x)    = s(x) * (1 - s(x))
//   softplus(x)   = log(1 + e^x), x if x > 20 softplus'(x)   = s(x), 1 if x > 20
//   logsigmoid(x) = -softplus(-x)             logsigmoid'(x) = s(-x) = 1 - s(x)
//   tanh(x)                                   tanh'(x)       = 1 - tanh(x)^2
//   relu2(x)      = max(x, 0)^2               relu2'(x)      = 2 max(x, 0)
//   1 - exp(x)                                d/dx           = -exp(x)
//   -exp(x)                                   d/dx           = -exp(x)
#include "nn/ops/activation.h"

#include <cmath>

#include "nn/ops/pointwise.h"
#include "tensor/dispatch.h"
#ifdef HLA_CUDA
#include "cuda/activation.h"
#endif

namespace hla {

const char* activation_name(Activation a) {
  switch (a) {
    case Activation::SiLU: return "silu";
    case Activation::Sigmoid: return "sigmoid";
    case Activation::Softplus: return "softplus";
    case Activation::LogSigmoid: return "logsigmoid";
    case Activation::Tanh: return "tanh";
    case Activation::ReluSquared: return "relu_squared";
    case Activation::OneMinusExp: return "one_minus_exp";
    case Activation::NegExp: return "neg_exp";
  }
  return "?";
}

namespace cpu {

template <class T>
void activation_forward(T* y, const T* x, int64_t n, Activation kind) {
  for (int64_t i = 0; i < n; i++) {
    T v = x[i];
    switch (kind) {
      case Activation::SiLU: y[i] = v * sigmoid_of(v); break;
      case Activation::Sigmoid: y[i] = sigmoid_of(v); break;
      case Activation::Softplus: y[i] = softplus_of(v); break;
      case Activation::LogSigmoid: y[i] = -softplus_of(-v); break;
      case Activation::Tanh: y[i] = std::tanh(v); break;
      case Activation::ReluSquared: y[i] = v > T(0) ? v * v : T(0); break;
      case Activation::OneMinusExp: y[i] = -std::expm1(v); break;
      case Activation::NegExp: y[i] = -std::exp(v); break;
    }
  }
}

template <class T>
void activation_backward(T* dx, const T* dy, const T* x, int64_t n, Activation kind) {
  for (int64_t i = 0; i < n; i++) {
    T v = x[i], s = sigmoid_of(v), d = 0;
    switch (kind) {
      case Activation::SiLU: d = s * (T(1) + v * (T(1) - s)); break;
      case Activation::Sigmoid: d = s * (T(1) - s); break;
      case Activation::Softplus: d = v > T(20) ? T(1) : s; break;
      case Activation::LogSigmoid: d = -v > T(20) ? T(1) : T(1) - s; break;
      case Activation::Tanh: d = T(1) - std::tanh(v) * std::tanh(v); break;
      case Activation::ReluSquared: d = v > T(0) ? T(2) * v : T(0); break;
      case Activation::OneMinusExp:
      case Activation::NegExp: d = -std::exp(v); break;
    }
    dx[i] = dy[i] * d;
  }
}

template void activation_forward<float>(float*, const float*, int64_t, Activation);
template void activation_forward<double>(double*, const double*, int64_t, Activation);
template void activation_backward<float>(float*, const float*, const float*, int64_t, Activation);
template void activation_backward<double>(double*, const double*, const double*, int64_t, Activation);

}  // namespace cpu

// One forward for both devices: cpu::activation_forward<T> or cuda::activation_forward.
// x, y: (n)
static void activation_forward(Tensor& y, const Tensor& x, Activation kind) {
  if (x.is_cuda()) {
    HLA_CUDA_ONLY(cuda::activation_forward(y.raw(), x.raw(), x.numel(), kind, x.dtype()));
    return;
  }
  dispatch_float(x.dtype(), activation_name(kind), [&](auto tag) {
    using T = decltype(tag);
    cpu::activation_forward(y.data<T>(), x.data<T>(), x.numel(), kind);
  });
}

// One backward for both devices; dx: (n) written.
static void activation_backward(Tensor& dx, const Tensor& dy, const Tensor& x, Activation kind) {
  if (x.is_cuda()) {
    HLA_CUDA_ONLY(cuda::activation_backward(dx.raw(), dy.raw(), x.raw(), x.numel(), kind, x.dtype()));
    return;
  }
  dispatch_float(x.dtype(), activation_name(kind), [&](auto tag) {
    using T = decltype(tag);
    cpu::activation_backward(dx.data<T>(), dy.data<T>(), x.data<T>(), x.numel(), kind);
  });
}

Var activation(const Var& x, Activation kind) {
  Tensor xv = x.value();
  Tensor y = Tensor::empty(xv.shape(), xv.dtype(), xv.device());
  activation_forward(y, xv, kind);
  return record_op1(y, {x}, [xv, kind](const std::vector<Tensor>& g) {
    Tensor dx = Tensor::empty(xv.shape(), xv.dtype(), xv.device());
    activation_backward(dx, g[0], xv, kind);
    return std::vector<Tensor>{dx};
  }, activation_name(kind));
}

}  // namespace hla
