// L2 normalisation forward and backward, row by row (mixers.md 2.5).
// The backward needs only y and rstd: y = x * rstd  =>  dx = rstd * (dy - (dy . y) y).
#include "nn/ops/l2norm.h"

#include <cmath>

#include "tensor/dispatch.h"
#ifdef HLA_CUDA
#include "cuda/l2norm.h"
#endif

namespace hla {
namespace cpu {

template <class T>
void l2norm_forward(T* y, T* rstd, const T* x, int64_t N, int64_t C, double eps) {
  for (int64_t n = 0; n < N; n++) {
    const T* xr = x + n * C;  // xr: (C)
    T sum_sq = 0;
    for (int64_t c = 0; c < C; c++) sum_sq += xr[c] * xr[c];
    rstd[n] = T(1) / std::sqrt(sum_sq + static_cast<T>(eps));     // rstd = 1/sqrt(sum(x^2) + eps)
    for (int64_t c = 0; c < C; c++) y[n * C + c] = xr[c] * rstd[n];  // y = x * rstd
  }
}

template <class T>
void l2norm_backward(T* dx, const T* dy, const T* y, const T* rstd, int64_t N, int64_t C) {
  for (int64_t n = 0; n < N; n++) {
    const T* yr = y + n * C;    // yr: (C)
    const T* dyr = dy + n * C;  // dyr: (C)
    T dy_dot_y = 0;
    for (int64_t c = 0; c < C; c++) dy_dot_y += dyr[c] * yr[c];
    // y = x * rstd(x)  =>  dx = rstd * (dy - (dy . y) * y)
    for (int64_t c = 0; c < C; c++) dx[n * C + c] = rstd[n] * (dyr[c] - dy_dot_y * yr[c]);
  }
}

template void l2norm_forward<float>(float*, float*, const float*, int64_t, int64_t, double);
template void l2norm_forward<double>(double*, double*, const double*, int64_t, int64_t, double);
template void l2norm_backward<float>(float*, const float*, const float*, const float*, int64_t, int64_t);
template void l2norm_backward<double>(double*, const double*, const double*, const double*, int64_t, int64_t);

}  // namespace cpu

// One forward for both devices: cpu::l2norm_forward<T> or cuda::l2norm_forward.
// x, y: (N, C), rstd: (N) in accum_dtype(x)
static void l2norm_forward(Tensor& y, Tensor& rstd, const Tensor& x, int64_t N, int64_t C, double eps) {
  if (x.is_cuda()) {
    HLA_CUDA_ONLY(cuda::l2norm_forward(y.raw(), rstd.data<float>(), x.raw(), N, C, eps, x.dtype()));
    return;
  }
  dispatch_float(x.dtype(), "l2norm", [&](auto tag) {
    using T = decltype(tag);
    cpu::l2norm_forward(y.data<T>(), rstd.data<T>(), x.data<T>(), N, C, eps);
  });
}

void l2norm_backward(Tensor& dx, const Tensor& dy, const Tensor& y, const Tensor& rstd, int64_t N, int64_t C) {
  if (y.is_cuda()) {
    HLA_CUDA_ONLY(cuda::l2norm_backward(dx.raw(), dy.raw(), y.raw(), rstd.data<float>(), N, C, y.dtype()));
    return;
  }
  dispatch_float(y.dtype(), "l2norm", [&](auto tag) {
    using T = decltype(tag);
    cpu::l2norm_backward(dx.data<T>(), dy.data<T>(), y.data<T>(), rstd.data<T>(), N, C);
  });
}

Var l2norm(const Var& x, double eps) {
  HLA_CHECK(x.dim() >= 1 && x.size(-1) > 0, "l2norm: x must have a non-empty last dim, got ", x.value().str());
  Tensor xv = x.value();
  int64_t C = xv.size(-1), N = xv.numel() / C;
  Tensor y = Tensor::empty(xv.shape(), xv.dtype(), xv.device());  // y: (..., C)
  Tensor rstd = Tensor::empty({N}, accum_dtype(xv), xv.device());  // rstd: (N)
  l2norm_forward(y, rstd, xv, N, C, eps);
  return record_op1(y, {x}, [=](const std::vector<Tensor>& g) {
    Tensor dx = Tensor::empty(y.shape(), y.dtype(), y.device());
    l2norm_backward(dx, g[0], y, rstd, N, C);
    return std::vector<Tensor>{dx};
  }, "l2norm");
}

}  // namespace hla
