// Pointwise activations on the GPU; formulas and derivatives as nn/ops/activation.cpp.
#include "cuda/activation.h"
#include "cuda/common.cuh"

namespace hla::cuda {
namespace {

__device__ float softplus_of(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

template <class T>
__global__ void activation_forward_kernel(T* y, const T* x, int64_t n, Activation kind) {
  HLA_GRID_STRIDE(i, n) {
    float v = to_float(x[i]), r = 0;
    switch (kind) {
      case Activation::SiLU: r = v * sigmoid_of(v); break;
      case Activation::Sigmoid: r = sigmoid_of(v); break;
      case Activation::Softplus: r = softplus_of(v); break;
      case Activation::LogSigmoid: r = -softplus_of(-v); break;
      case Activation::Tanh: r = tanhf(v); break;
      case Activation::ReluSquared: r = v > 0.0f ? v * v : 0.0f; break;
      case Activation::OneMinusExp: r = -expm1f(v); break;
      case Activation::NegExp: r = -expf(v); break;
    }
    y[i] = from_float<T>(r);
  }
}

template <class T>
__global__ void activation_backward_kernel(T* dx, const T* dy, const T* x, int64_t n, Activation kind) {
  HLA_GRID_STRIDE(i, n) {
    float v = to_float(x[i]), s = sigmoid_of(v), d = 0;
    switch (kind) {
      case Activation::SiLU: d = s * (1.0f + v * (1.0f - s)); break;
      case Activation::Sigmoid: d = s * (1.0f - s); break;
      case Activation::Softplus: d = v > 20.0f ? 1.0f : s; break;
      case Activation::LogSigmoid: d = -v > 20.0f ? 1.0f : 1.0f - s; break;
      case Activation::Tanh: d = 1.0f - tanhf(v) * tanhf(v); break;
      case Activation::ReluSquared: d = v > 0.0f ? 2.0f * v : 0.0f; break;
      case Activation::OneMinusExp:
      case Activation::NegExp: d = -expf(v); break;
    }
    dx[i] = from_float<T>(to_float(dy[i]) * d);
  }
}

}  // namespace

void activation_forward(void* y, const void* x, int64_t n, Activation kind, DType dtype) {
  launch_elementwise(dtype, "activation_forward", n, [&](auto tag) {
    using T = decltype(tag);
    activation_forward_kernel<T><<<grid_1d(n), 256>>>(static_cast<T*>(y), static_cast<const T*>(x), n, kind);
  });
}

void activation_backward(void* dx, const void* dy, const void* x, int64_t n, Activation kind, DType dtype) {
  launch_elementwise(dtype, "activation_backward", n, [&](auto tag) {
    using T = decltype(tag);
    activation_backward_kernel<T><<<grid_1d(n), 256>>>(static_cast<T*>(dx), static_cast<const T*>(dy),
                                                        static_cast<const T*>(x), n, kind);
  });
}

}  // namespace hla::cuda
