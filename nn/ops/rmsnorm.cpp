// RMSNorm forward and backward, row by row (mixers.md 2.1).
#include "nn/ops/rmsnorm.h"

#include <algorithm>
#include <cmath>

#include "nn/ops/check.h"
#include "tensor/dispatch.h"
#ifdef HLA_CUDA
#include "cuda/rmsnorm.h"
#endif

namespace hla {
namespace cpu {

template <class T>
void rmsnorm_forward(T* y, T* rstd, const T* x, const T* w, int64_t N, int64_t C, double eps) {
  for (int64_t n = 0; n < N; n++) {
    const T* xr = x + n * C;
    T ms = 0;
    for (int64_t c = 0; c < C; c++) ms += xr[c] * xr[c];
    ms /= static_cast<T>(C);                                    // mean(x^2)
    rstd[n] = T(1) / std::sqrt(ms + static_cast<T>(eps));       // rstd = 1/sqrt(mean + eps)
    for (int64_t c = 0; c < C; c++) y[n * C + c] = xr[c] * rstd[n] * w[c];  // y = x * rstd * w
  }
}

template <class T>
void rmsnorm_backward(T* dx, T* dw, const T* dy, const T* x, const T* w, const T* rstd, int64_t N, int64_t C) {
  std::fill(dw, dw + C, T(0));
  for (int64_t n = 0; n < N; n++) {
    const T* xr = x + n * C;
    const T* dyr = dy + n * C;
    T dot = 0;  // mean(x_hat * dyw) with x_hat = x * rstd, dyw = dy * w
    for (int64_t c = 0; c < C; c++) {
      dot += xr[c] * rstd[n] * dyr[c] * w[c];
      dw[c] += dyr[c] * xr[c] * rstd[n];  // y = x_hat * w  =>  dw = sum_rows dy * x_hat
    }
    dot /= static_cast<T>(C);
    for (int64_t c = 0; c < C; c++)  // dx = rstd * (dyw - x_hat * mean(x_hat * dyw))
      dx[n * C + c] = rstd[n] * (dyr[c] * w[c] - xr[c] * rstd[n] * dot);
  }
}

}  // namespace cpu

// One forward for both devices: cpu::rmsnorm_forward<T> or cuda::rmsnorm_forward.
// x, y: (N, C), w: (C), rstd: (N) in accum_dtype(x)
static void rmsnorm_forward(Tensor& y, Tensor& rstd, const Tensor& x, const Tensor& w, int64_t N, int64_t C,
                            double eps) {
  if (x.is_cuda()) {
    HLA_CUDA_ONLY(cuda::rmsnorm_forward(y.raw(), rstd.data<float>(), x.raw(), w.raw(), N, C, eps, x.dtype()));
    return;
  }
  dispatch_float(x.dtype(), "rmsnorm", [&](auto tag) {
    using T = decltype(tag);
    cpu::rmsnorm_forward(y.data<T>(), rstd.data<T>(), x.data<T>(), w.data<T>(), N, C, eps);
  });
}

// One backward for both devices; dx: (N, C), dw: (C) written.
static void rmsnorm_backward(Tensor& dx, Tensor& dw, const Tensor& dy, const Tensor& x, const Tensor& w,
                             const Tensor& rstd, int64_t N, int64_t C) {
  if (x.is_cuda()) {
    HLA_CUDA_ONLY(cuda::rmsnorm_backward(dx.raw(), dw.raw(), dy.raw(), x.raw(), w.raw(), rstd.data<float>(), N, C,
                                         x.dtype()));
    return;
  }
  dispatch_float(x.dtype(), "rmsnorm", [&](auto tag) {
    using T = decltype(tag);
    cpu::rmsnorm_backward(dx.data<T>(), dw.data<T>(), dy.data<T>(), x.data<T>(), w.data<T>(), rstd.data<T>(), N, C);
  });
}

Var rmsnorm(const Var& x, const Var& weight, double eps) {
  Tensor xv = x.value(), w = weight.value();
  int64_t C = xv.size(-1), N = xv.numel() / C;
  check_shape(w, {C}, "rmsnorm", "weight");
  check_operand(w, xv, "rmsnorm", "weight");
  Tensor y = Tensor::empty(xv.shape(), xv.dtype(), xv.device());
  Tensor rstd = Tensor::empty({N}, accum_dtype(xv), xv.device());  // rstd: (N)
  rmsnorm_forward(y, rstd, xv, w, N, C, eps);
  return record_op1(y, {x, weight}, [=](const std::vector<Tensor>& g) {
    Tensor dx = Tensor::empty(xv.shape(), xv.dtype(), xv.device());
    Tensor dw = Tensor::empty({C}, xv.dtype(), xv.device());
    rmsnorm_backward(dx, dw, g[0], xv, w, rstd, N, C);
    return std::vector<Tensor>{dx, dw};
  }, "rmsnorm");
}

}  // namespace hla
