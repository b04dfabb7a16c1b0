// RMSNorm forward and backward, row by row (mixers.md 2.1).
#include "nn/ops/rmsnorm.h"

#include <cmath>

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

#ifdef HLA_CUDA
// The same op on the GPU (cuda/rmsnorm.cu); rstd is fp32 there whatever the storage dtype.
static Var rmsnorm_cuda(const Var& x, const Var& weight, double eps) {
  Tensor xv = x.value(), w = weight.value();
  check_dtype(w, xv.dtype(), "rmsnorm", "weight");
  HLA_CHECK(w.is_cuda(), "rmsnorm: x is on cuda but weight is on the cpu");
  int64_t C = xv.size(-1), N = xv.numel() / C;
  Tensor y = Tensor::empty(xv.shape(), xv.dtype(), Device::CUDA);
  Tensor rstd = Tensor::empty({N}, DType::F32, Device::CUDA);  // rstd: (N)
  cuda::rmsnorm_forward(y.raw(), rstd.data<float>(), xv.raw(), w.raw(), N, C, eps, xv.dtype());
  return record_op1(y, {x, weight}, [=](const std::vector<Tensor>& g) {
    Tensor dx = Tensor::empty(xv.shape(), xv.dtype(), Device::CUDA);
    Tensor dw = Tensor::zeros({C}, xv.dtype(), Device::CUDA);
    cuda::rmsnorm_backward(dx.raw(), dw.raw(), g[0].raw(), xv.raw(), w.raw(), rstd.data<float>(), N, C, xv.dtype());
    return std::vector<Tensor>{dx, dw};
  }, "rmsnorm");
}
#endif

Var rmsnorm(const Var& x, const Var& weight, double eps) {
  int64_t C = x.size(-1), N = x.numel() / C;
  check_shape(weight.value(), {C}, "rmsnorm", "weight");
#ifdef HLA_CUDA
  if (x.value().is_cuda()) return rmsnorm_cuda(x, weight, eps);
#endif
  Tensor xv = x.value(), w = weight.value();
  Tensor y = Tensor::empty(xv.shape(), xv.dtype());
  Tensor rstd = Tensor::empty({N}, xv.dtype());
  dispatch_float(xv.dtype(), "rmsnorm", [&](auto tag) {
    using T = decltype(tag);
    cpu::rmsnorm_forward(y.data<T>(), rstd.data<T>(), xv.data<T>(), w.data<T>(), N, C, eps);
  });
  return record_op1(y, {x, weight}, [=](const std::vector<Tensor>& g) {
    Tensor dx = Tensor::empty(xv.shape(), xv.dtype());
    Tensor dw = Tensor::zeros({C}, xv.dtype());
    dispatch_float(xv.dtype(), "rmsnorm", [&](auto tag) {
      using T = decltype(tag);
      cpu::rmsnorm_backward(dx.data<T>(), dw.data<T>(), g[0].data<T>(), xv.data<T>(), w.data<T>(),
                            rstd.data<T>(), N, C);
    });
    return std::vector<Tensor>{dx, dw};
  }, "rmsnorm");
}

}  // namespace hla
