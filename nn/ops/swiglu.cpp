// SwiGLU: z = silu(a) * b with s = sigmoid(a).
#include "nn/ops/swiglu.h"

#include <cmath>

#include "nn/ops/check.h"
#include "nn/ops/pointwise.h"
#include "tensor/dispatch.h"
#ifdef HLA_CUDA
#include "cuda/swiglu.h"
#endif

namespace hla {
namespace cpu {

template <class T>
void swiglu_forward(T* z, const T* a, const T* b, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    T s = sigmoid_of(a[i]);
    z[i] = a[i] * s * b[i];  // z = silu(a) * b
  }
}

template <class T>
void swiglu_backward(T* da, T* db, const T* dz, const T* a, const T* b, int64_t n) {
  for (int64_t i = 0; i < n; i++) {
    T s = sigmoid_of(a[i]);
    da[i] = dz[i] * b[i] * s * (T(1) + a[i] * (T(1) - s));  // d silu(a) / da
    db[i] = dz[i] * a[i] * s;                               // z is linear in b
  }
}

}  // namespace cpu

// One forward for both devices: cpu::swiglu_forward<T> or cuda::swiglu_forward. a, b, z: (n)
static void swiglu_forward(Tensor& z, const Tensor& a, const Tensor& b) {
  if (a.is_cuda()) {
    HLA_CUDA_ONLY(cuda::swiglu_forward(z.raw(), a.raw(), b.raw(), a.numel(), a.dtype()));
    return;
  }
  dispatch_float(a.dtype(), "swiglu", [&](auto tag) {
    using T = decltype(tag);
    cpu::swiglu_forward(z.data<T>(), a.data<T>(), b.data<T>(), a.numel());
  });
}

// One backward for both devices; da, db: (n) written.
static void swiglu_backward(Tensor& da, Tensor& db, const Tensor& dz, const Tensor& a, const Tensor& b) {
  if (a.is_cuda()) {
    HLA_CUDA_ONLY(cuda::swiglu_backward(da.raw(), db.raw(), dz.raw(), a.raw(), b.raw(), a.numel(), a.dtype()));
    return;
  }
  dispatch_float(a.dtype(), "swiglu", [&](auto tag) {
    using T = decltype(tag);
    cpu::swiglu_backward(da.data<T>(), db.data<T>(), dz.data<T>(), a.data<T>(), b.data<T>(), a.numel());
  });
}

Var swiglu(const Var& a, const Var& b) {
  Tensor av = a.value(), bv = b.value();
  check_same_shape(av, bv, "swiglu");
  check_operand(bv, av, "swiglu", "b");
  Tensor z = Tensor::empty(av.shape(), av.dtype(), av.device());
  swiglu_forward(z, av, bv);
  return record_op1(z, {a, b}, [av, bv](const std::vector<Tensor>& g) {
    Tensor da = Tensor::empty(av.shape(), av.dtype(), av.device());
    Tensor db = Tensor::empty(av.shape(), av.dtype(), av.device());
    swiglu_backward(da, db, g[0], av, bv);
    return std::vector<Tensor>{da, db};
  }, "swiglu");
}

}  // namespace hla
