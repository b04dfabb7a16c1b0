// SwiGLU: z = silu(a) * b with s = sigmoid(a).
#include "nn/ops/swiglu.h"

#include <cmath>

#include "tensor/dispatch.h"
#ifdef HLA_CUDA
#include "cuda/swiglu.h"
#endif

namespace hla {
namespace cpu {

template <class T>
void swiglu_forward(T* z, const T* a, const T* b, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    T s = T(1) / (T(1) + std::exp(-a[i]));
    z[i] = a[i] * s * b[i];  // z = silu(a) * b
  }
}

template <class T>
void swiglu_backward(T* da, T* db, const T* dz, const T* a, const T* b, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    T s = T(1) / (T(1) + std::exp(-a[i]));
    da[i] = dz[i] * b[i] * s * (T(1) + a[i] * (T(1) - s));  // d silu(a) / da
    db[i] = dz[i] * a[i] * s;                               // z is linear in b
  }
}

}  // namespace cpu

#ifdef HLA_CUDA
// The same op on the GPU (cuda/swiglu.cu).
static Var swiglu_cuda(const Var& a, const Var& b) {
  Tensor av = a.value(), bv = b.value();
  check_dtype(bv, av.dtype(), "swiglu", "b");
  HLA_CHECK(bv.is_cuda(), "swiglu: a is on cuda but b is on the cpu");
  Tensor z = Tensor::empty(av.shape(), av.dtype(), Device::CUDA);
  cuda::swiglu_forward(z.raw(), av.raw(), bv.raw(), av.numel(), av.dtype());
  return record_op1(z, {a, b}, [av, bv](const std::vector<Tensor>& g) {
    Tensor da = Tensor::empty(av.shape(), av.dtype(), Device::CUDA);
    Tensor db = Tensor::empty(av.shape(), av.dtype(), Device::CUDA);
    cuda::swiglu_backward(da.raw(), db.raw(), g[0].raw(), av.raw(), bv.raw(), av.numel(), av.dtype());
    return std::vector<Tensor>{da, db};
  }, "swiglu");
}
#endif

Var swiglu(const Var& a, const Var& b) {
  check_same_shape(a.value(), b.value(), "swiglu");
#ifdef HLA_CUDA
  if (a.value().is_cuda()) return swiglu_cuda(a, b);
#endif
  Tensor av = a.value(), bv = b.value();
  Tensor z = Tensor::empty(av.shape(), av.dtype());
  dispatch_float(av.dtype(), "swiglu", [&](auto tag) {
    using T = decltype(tag);
    cpu::swiglu_forward(z.data<T>(), av.data<T>(), bv.data<T>(), av.numel());
  });
  return record_op1(z, {a, b}, [av, bv](const std::vector<Tensor>& g) {
    Tensor da = Tensor::empty(av.shape(), av.dtype()), db = Tensor::empty(av.shape(), av.dtype());
    dispatch_float(av.dtype(), "swiglu", [&](auto tag) {
      using T = decltype(tag);
      cpu::swiglu_backward(da.data<T>(), db.data<T>(), g[0].data<T>(), av.data<T>(), bv.data<T>(), av.numel());
    });
    return std::vector<Tensor>{da, db};
  }, "swiglu");
}

}  // namespace hla
