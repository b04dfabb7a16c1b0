// RMSNorm forward and backward, row by row (mixers.md 2.1), and the residual stream's add fused
// before it (add_rmsnorm).
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

template <class T>
void add_rmsnorm_forward(T* sum, T* y, T* rstd, const T* x, const T* h, const T* w, int64_t N, int64_t C,
                         double eps) {
  for (int64_t i = 0; i < N * C; i++) sum[i] = x[i] + h[i];  // r = x + h
  rmsnorm_forward(y, rstd, sum, w, N, C, eps);               // y = RMSNorm(r)
}

template <class T, class TW>
void rmsnorm_backward(T* dx, const T* dx_sum, TW* dw, bool add_dw, const T* dy, const T* x, const T* w, const T* rstd,
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
      dx[n * C + c] = dx_sum ? dx_sum[n * C + c] + g : g;
    }
  }
  if (dw)
    for (int64_t c = 0; c < C; c++) dw[c] = add_dw ? dw[c] + static_cast<TW>(dw_rows[c]) : static_cast<TW>(dw_rows[c]);
}

}  // namespace cpu

namespace {

// One forward for both devices, x, y: (N, C), w: (C), rstd: (N) in accum_dtype(x); with h (N, C)
// defined, the row normalised is sum = x + h (add_rmsnorm), else x itself.
void rmsnorm_forward(Tensor& y, Tensor& sum, Tensor& rstd, const Tensor& x, const Tensor& h, const Tensor& w, int64_t N,
                     int64_t C, double eps) {
  const bool add = h.defined();
  if (x.is_cuda()) {
    HLA_CUDA_ONLY(add ? cuda::add_rmsnorm_forward(sum.raw(), y.raw(), rstd.data<float>(), x.raw(), h.raw(), w.raw(), N,
                                                  C, eps, x.dtype())
                      : cuda::rmsnorm_forward(y.raw(), rstd.data<float>(), x.raw(), w.raw(), N, C, eps, x.dtype()));
    return;
  }
  dispatch_float(x.dtype(), "rmsnorm", [&](auto tag) {
    using T = decltype(tag);
    if (add) cpu::add_rmsnorm_forward(sum.data<T>(), y.data<T>(), rstd.data<T>(), x.data<T>(), h.data<T>(),
                                      w.data<T>(), N, C, eps);
    else cpu::rmsnorm_forward(y.data<T>(), rstd.data<T>(), x.data<T>(), w.data<T>(), N, C, eps);
  });
}

// One backward for both devices; dx: (N, C) = the norm's gradient plus dx_sum when that is defined
// (dx itself or another tensor); dw: (C) written or added into (add_dw); an undefined one is not
// wanted. dw in x's dtype or wider (a master weight's).
void rmsnorm_backward(Tensor& dx, const Tensor& dx_sum, Tensor& dw, bool add_dw, const Tensor& dy, const Tensor& x,
                      const Tensor& w, const Tensor& rstd, int64_t N, int64_t C) {
  const DType dw_dtype = dw.defined() ? dw.dtype() : x.dtype();
  if (x.is_cuda()) {
    HLA_CUDA_ONLY(cuda::rmsnorm_backward(dx.defined() ? dx.raw() : nullptr, dx_sum.defined() ? dx_sum.raw() : nullptr,
                                         dw.defined() ? dw.raw() : nullptr, add_dw, dy.raw(), x.raw(), w.raw(),
                                         rstd.data<float>(), N, C, x.dtype(), dw_dtype));
    return;
  }
  HLA_CHECK(dtype_size(dw_dtype) >= dtype_size(x.dtype()), "rmsnorm: dw in ", dtype_name(dw_dtype), " for ",
            dtype_name(x.dtype()), " x (it takes x's dtype or a wider one)");
  dispatch_float(x.dtype(), "rmsnorm", [&](auto tag) {
    using T = decltype(tag);
    dispatch_float(dw_dtype, "rmsnorm", [&](auto dw_tag) {
      using TW = decltype(dw_tag);
      if constexpr (sizeof(TW) >= sizeof(T))  // the check above
        cpu::rmsnorm_backward(dx.defined() ? dx.data<T>() : nullptr, dx_sum.defined() ? dx_sum.data<T>() : nullptr,
                              dw.defined() ? dw.data<TW>() : nullptr, add_dw, dy.data<T>(), x.data<T>(), w.data<T>(),
                              rstd.data<T>(), N, C);
    });
  });
}

// Checks weight (C) against x (..., C); returns N, the number of rows.
int64_t checked_rows(const Tensor& x, const Tensor& w, const char* op) {
  const int64_t C = x.size(-1);
  check_shape(w, {C}, op, "weight");
  check_operand(w, x, op, "weight");
  return x.numel() / C;
}

}  // namespace

Var rmsnorm(const Var& x, const Var& weight, double eps) {
  Tensor xv = x.value(), w = weight.value();
  const int64_t C = xv.size(-1), N = checked_rows(xv, w, "rmsnorm");
  Tensor y = Tensor::empty(xv.shape(), xv.dtype(), xv.device());
  Tensor rstd = Tensor::empty({N}, accum_dtype(xv), xv.device());  // rstd: (N)
  Tensor no_sum;
  rmsnorm_forward(y, no_sum, rstd, xv, Tensor(), w, N, C, eps);
  return record_op1(y, {x, weight}, [=](const std::vector<Tensor>& g) {
    // dx in x's dtype into the sum of x's other uses; dw into the weight's sum, past its compute
    // copy's cast (autograd/var.h: gradient_sum)
    GradientSum dx_sum = gradient_sum(0, false), dw_sum = gradient_sum(1);
    Tensor dx = dx_sum.target(xv.shape(), xv.device()), dw = dw_sum.target({C}, xv.device());
    rmsnorm_backward(dx, dx_sum.adds() ? dx : Tensor(), dw, dw_sum.adds(), g[0], xv, w, rstd, N, C);
    dx_sum.keep(dx);
    dw_sum.keep(dw);
    return std::vector<Tensor>{Tensor(), Tensor()};
  }, "rmsnorm");
}

ResidualNorm add_rmsnorm(const Var& x, const Var& h, const Var& weight, double eps) {
  Tensor xv = x.value(), hv = h.value(), w = weight.value();
  check_shape(hv, xv.shape(), "add_rmsnorm", "h");
  check_operand(hv, xv, "add_rmsnorm", "h");
  const int64_t C = xv.size(-1), N = checked_rows(xv, w, "add_rmsnorm");
  Tensor sum = Tensor::empty(xv.shape(), xv.dtype(), xv.device());  // sum: (..., C)
  Tensor y = Tensor::empty(xv.shape(), xv.dtype(), xv.device());
  Tensor rstd = Tensor::empty({N}, accum_dtype(xv), xv.device());  // rstd: (N)
  rmsnorm_forward(y, sum, rstd, xv, hv, w, N, C, eps);
  std::vector<Var> out = record_op({sum, y}, {x, h, weight}, [=](const std::vector<Tensor>& g) {
    // dr = g_sum + the norm's dx (one kernel), the gradient of both x and h; dw as rmsnorm's
    GradientSum dw_sum = gradient_sum(2);
    Tensor dr = Tensor::empty(xv.shape(), xv.dtype(), xv.device()), dw = dw_sum.target({C}, xv.device());
    rmsnorm_backward(dr, g[0], dw, dw_sum.adds(), g[1], sum, w, rstd, N, C);
    dw_sum.keep(dw);
    return std::vector<Tensor>{dr, dr, Tensor()};
  }, "add_rmsnorm");
  return {out[0], out[1]};
}

}  // namespace hla
