// RMSNorm forward and backward, row by row (mixers.md 2.1).
#include "nn/ops/rmsnorm.h"

#include <cmath>
#include <vector>

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

template <class T, class TW>
void rmsnorm_backward(T* dx, bool add_dx, TW* dw, bool add_dw, const T* dy, const T* x, const T* w, const T* rstd,
                      int64_t N, int64_t C) {
  std::vector<T> dw_rows(C, T(0));  // dw_rows: (C), the sum over rows in T
  for (int64_t n = 0; n < N; n++) {
    const T* xr = x + n * C;
    const T* dyr = dy + n * C;
    T dot = 0;  // mean(x_hat * dyw) with x_hat = x * rstd, dyw = dy * w
    for (int64_t c = 0; c < C; c++) {
      dot += xr[c] * rstd[n] * dyr[c] * w[c];
      dw_rows[c] += dyr[c] * xr[c] * rstd[n];  // y = x_hat * w  =>  dw = sum_rows dy * x_hat
    }
    dot /= static_cast<T>(C);
    if (!dx) continue;
    for (int64_t c = 0; c < C; c++) {  // dx = rstd * (dyw - x_hat * mean(x_hat * dyw))
      const T g = rstd[n] * (dyr[c] * w[c] - xr[c] * rstd[n] * dot);
      dx[n * C + c] = add_dx ? dx[n * C + c] + g : g;
    }
  }
  if (dw)
    for (int64_t c = 0; c < C; c++) dw[c] = add_dw ? dw[c] + static_cast<TW>(dw_rows[c]) : static_cast<TW>(dw_rows[c]);
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

// One backward for both devices; dx: (N, C), dw: (C) written or added into (add_dx, add_dw); an
// undefined one is not wanted. dw in x's dtype or wider (a master weight's).
static void rmsnorm_backward(Tensor& dx, bool add_dx, Tensor& dw, bool add_dw, const Tensor& dy, const Tensor& x,
                             const Tensor& w, const Tensor& rstd, int64_t N, int64_t C) {
  const DType dw_dtype = dw.defined() ? dw.dtype() : x.dtype();
  if (x.is_cuda()) {
    HLA_CUDA_ONLY(cuda::rmsnorm_backward(dx.defined() ? dx.raw() : nullptr, add_dx, dw.defined() ? dw.raw() : nullptr,
                                         add_dw, dy.raw(), x.raw(), w.raw(), rstd.data<float>(), N, C, x.dtype(),
                                         dw_dtype));
    return;
  }
  HLA_CHECK(dtype_size(dw_dtype) >= dtype_size(x.dtype()), "rmsnorm: dw in ", dtype_name(dw_dtype), " for ",
            dtype_name(x.dtype()), " x (it takes x's dtype or a wider one)");
  dispatch_float(x.dtype(), "rmsnorm", [&](auto tag) {
    using T = decltype(tag);
    dispatch_float(dw_dtype, "rmsnorm", [&](auto dw_tag) {
      using TW = decltype(dw_tag);
      if constexpr (sizeof(TW) >= sizeof(T))  // the check above
        cpu::rmsnorm_backward(dx.defined() ? dx.data<T>() : nullptr, add_dx, dw.defined() ? dw.data<TW>() : nullptr,
                              add_dw, dy.data<T>(), x.data<T>(), w.data<T>(), rstd.data<T>(), N, C);
    });
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
    // dx in x's dtype into the sum of x's other uses; dw into the weight's sum, past its compute
    // copy's cast (autograd/var.h: gradient_sum)
    GradientSum dx_sum = gradient_sum(0, false), dw_sum = gradient_sum(1);
    Tensor dx = dx_sum.target(xv.shape(), xv.device()), dw = dw_sum.target({C}, xv.device());
    rmsnorm_backward(dx, dx_sum.adds(), dw, dw_sum.adds(), g[0], xv, w, rstd, N, C);
    dx_sum.keep(dx);
    dw_sum.keep(dw);
    return std::vector<Tensor>{Tensor(), Tensor()};
  }, "rmsnorm");
}

}  // namespace hla
