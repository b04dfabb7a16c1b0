// GroupNorm / LayerNorm forward and backward, group by group (mixers.md 2.2).
#include "nn/ops/group_norm.h"

#include <algorithm>
#include <cmath>

#include "nn/ops/check.h"
#include "tensor/dispatch.h"
#ifdef HLA_CUDA
#include "cuda/group_norm.h"
#endif

namespace hla {
namespace cpu {

template <class T>
void group_norm_forward(T* y, T* mean, T* rstd, const T* x, const T* w, const T* b, int64_t N, int64_t C, int64_t G,
                        double eps) {
  int64_t groups = C / G;
  for (int64_t n = 0; n < N; n++)
    for (int64_t gi = 0; gi < groups; gi++) {
      const T* xg = x + n * C + gi * G;  // xg: (G), this group's channels
      T mu = 0, var = 0;
      for (int64_t c = 0; c < G; c++) mu += xg[c];
      mu /= static_cast<T>(G);                                             // mu = mean(x)
      for (int64_t c = 0; c < G; c++) var += (xg[c] - mu) * (xg[c] - mu);
      T r = T(1) / std::sqrt(var / static_cast<T>(G) + static_cast<T>(eps));  // rstd = 1/sqrt(mean((x-mu)^2) + eps)
      mean[n * groups + gi] = mu;
      rstd[n * groups + gi] = r;
      for (int64_t c = 0; c < G; c++) {
        int64_t wc = gi * G + c;
        y[n * C + wc] = (xg[c] - mu) * r * w[wc] + (b ? b[wc] : T(0));  // y = x_hat * w + b
      }
    }
}

template <class T>
void group_norm_backward(T* dx, T* dw, T* db, const T* dy, const T* x, const T* w, const T* mean, const T* rstd,
                         int64_t N, int64_t C, int64_t G) {
  int64_t groups = C / G;
  std::fill(dw, dw + C, T(0));
  if (db) std::fill(db, db + C, T(0));
  for (int64_t n = 0; n < N; n++)
    for (int64_t gi = 0; gi < groups; gi++) {
      int64_t c0 = n * C + gi * G;
      T mu = mean[n * groups + gi], r = rstd[n * groups + gi];
      T mean_dyw = 0, mean_xhat_dyw = 0;  // mean(dyw), mean(x_hat * dyw) with dyw = dy * w
      for (int64_t c = 0; c < G; c++) {
        int64_t wc = gi * G + c;
        T x_hat = (x[c0 + c] - mu) * r, dyw = dy[c0 + c] * w[wc];
        dw[wc] += dy[c0 + c] * x_hat;  // y = x_hat * w + b  =>  dw = sum dy * x_hat
        if (db) db[wc] += dy[c0 + c];  //                        db = sum dy
        mean_dyw += dyw;
        mean_xhat_dyw += x_hat * dyw;
      }
      mean_dyw /= static_cast<T>(G);
      mean_xhat_dyw /= static_cast<T>(G);
      for (int64_t c = 0; c < G; c++) {  // x_hat = (x - mean(x)) * rstd(x)  =>
        T x_hat = (x[c0 + c] - mu) * r;  // dx = rstd * (dyw - x_hat * mean(x_hat * dyw) - mean(dyw))
        dx[c0 + c] = r * (dy[c0 + c] * w[gi * G + c] - x_hat * mean_xhat_dyw - mean_dyw);
      }
    }
}

template void group_norm_forward<float>(float*, float*, float*, const float*, const float*, const float*, int64_t,
                                        int64_t, int64_t, double);
template void group_norm_forward<double>(double*, double*, double*, const double*, const double*, const double*,
                                         int64_t, int64_t, int64_t, double);
template void group_norm_backward<float>(float*, float*, float*, const float*, const float*, const float*,
                                         const float*, const float*, int64_t, int64_t, int64_t);
template void group_norm_backward<double>(double*, double*, double*, const double*, const double*, const double*,
                                          const double*, const double*, int64_t, int64_t, int64_t);

}  // namespace cpu

// One forward for both devices: cpu::group_norm_forward<T> or cuda::group_norm_forward.
// x, y: (N, C), w: (C), b: (C) or undefined, mean, rstd: (N, C / G) in accum_dtype(x)
static void group_norm_forward(Tensor& y, Tensor& mean, Tensor& rstd, const Tensor& x, const Tensor& w,
                               const Tensor& b, int64_t N, int64_t C, int64_t G, double eps) {
  if (x.is_cuda()) {
    HLA_CUDA_ONLY(cuda::group_norm_forward(y.raw(), mean.data<float>(), rstd.data<float>(), x.raw(), w.raw(),
                                           raw_or_null(b), N, C, G, eps, x.dtype()));
    return;
  }
  dispatch_float(x.dtype(), "group_norm", [&](auto tag) {
    using T = decltype(tag);
    cpu::group_norm_forward(y.data<T>(), mean.data<T>(), rstd.data<T>(), x.data<T>(), w.data<T>(),
                            data_or_null<T>(b), N, C, G, eps);
  });
}

// One backward for both devices; dx: (N, C), dw, db: (C) written (db undefined without a bias).
static void group_norm_backward(Tensor& dx, Tensor& dw, Tensor& db, const Tensor& dy, const Tensor& x,
                                const Tensor& w, const Tensor& mean, const Tensor& rstd, int64_t N, int64_t C,
                                int64_t G) {
  if (x.is_cuda()) {
    HLA_CUDA_ONLY(cuda::group_norm_backward(dx.raw(), dw.raw(), raw_or_null(db), dy.raw(), x.raw(), w.raw(),
                                            mean.data<float>(), rstd.data<float>(), N, C, G, x.dtype()));
    return;
  }
  dispatch_float(x.dtype(), "group_norm", [&](auto tag) {
    using T = decltype(tag);
    cpu::group_norm_backward(dx.data<T>(), dw.data<T>(), data_or_null<T>(db), dy.data<T>(), x.data<T>(),
                             w.data<T>(), mean.data<T>(), rstd.data<T>(), N, C, G);
  });
}

Var group_norm(const Var& x, const Var& weight, const Var& bias, int64_t num_groups, double eps) {
  Tensor xv = x.value(), wv = weight.value();
  Tensor bv = bias.defined() ? bias.value() : Tensor();
  int64_t C = xv.size(-1), N = xv.numel() / C;
  HLA_CHECK(num_groups > 0 && C % num_groups == 0, "group_norm: num_groups ", num_groups,
            " must divide the last dim ", C);
  int64_t G = C / num_groups;
  check_shape(wv, {C}, "group_norm", "weight");
  if (bv.defined()) check_shape(bv, {C}, "group_norm", "bias");
  check_operand(wv, xv, "group_norm", "weight");
  check_operand(bv, xv, "group_norm", "bias");
  Tensor y = Tensor::empty(xv.shape(), xv.dtype(), xv.device());                // y: (..., C)
  Tensor mean = Tensor::empty({N, num_groups}, accum_dtype(xv), xv.device());  // mean: (N, groups)
  Tensor rstd = Tensor::empty({N, num_groups}, accum_dtype(xv), xv.device());  // rstd: (N, groups)
  group_norm_forward(y, mean, rstd, xv, wv, bv, N, C, G, eps);
  return record_op1(y, {x, weight, bias}, [=](const std::vector<Tensor>& g) {
    Tensor dx = Tensor::empty(xv.shape(), xv.dtype(), xv.device());
    Tensor dw = Tensor::empty({C}, xv.dtype(), xv.device());
    Tensor db = bv.defined() ? Tensor::empty({C}, xv.dtype(), xv.device()) : Tensor();
    group_norm_backward(dx, dw, db, g[0], xv, wv, mean, rstd, N, C, G);
    return std::vector<Tensor>{dx, dw, db};
  }, "group_norm");
}

}  // namespace hla
