// Softmax over depth, then a cumulative sum that leaves layer 0 out (see lower_bounds.h).
#include "nn/ops/lower_bounds.h"

#include <algorithm>
#include <cmath>

#include "nn/ops/check.h"
#include "tensor/dispatch.h"
#ifdef HLA_CUDA
#include "cuda/lower_bounds.h"
#endif

namespace hla {
namespace cpu {

template <class T>
void lower_bounds_forward(T* lb, T* P, const T* z, int64_t L, int64_t D) {
  for (int64_t d = 0; d < D; d++) {
    T m = z[d];
    for (int64_t l = 1; l < L; l++) m = std::max(m, z[l * D + d]);
    T s = 0;
    for (int64_t l = 0; l < L; l++) s += std::exp(z[l * D + d] - m);
    for (int64_t l = 0; l < L; l++) P[l * D + d] = std::exp(z[l * D + d] - m) / s;  // P = softmax_L(z)
    lb[d] = 0;                                                                      // lb_0 = 0
    for (int64_t l = 1; l < L; l++) lb[l * D + d] = lb[(l - 1) * D + d] + P[l * D + d];  // lb_i = sum_{1..i} P_j
  }
}

template <class T>
void lower_bounds_backward(T* dz, const T* dlb, const T* P, int64_t L, int64_t D) {
  for (int64_t d = 0; d < D; d++) {
    // lb_i = sum_{j=1..i} P_j  =>  dP_j = sum_{i >= j} dlb_i (j >= 1), dP_0 = 0: a reverse
    // cumulative sum; with it, P = softmax(z)  =>  dz = P * (dP - sum_l P dP).
    T suffix = 0, dot = 0;
    for (int64_t l = L - 1; l >= 1; l--) {
      suffix += dlb[l * D + d];
      dz[l * D + d] = suffix;  // dP_l, for now
      dot += P[l * D + d] * suffix;
    }
    dz[d] = P[d] * -dot;  // dP_0 = 0
    for (int64_t l = 1; l < L; l++) dz[l * D + d] = P[l * D + d] * (dz[l * D + d] - dot);
  }
}

template void lower_bounds_forward<float>(float*, float*, const float*, int64_t, int64_t);
template void lower_bounds_forward<double>(double*, double*, const double*, int64_t, int64_t);
template void lower_bounds_backward<float>(float*, const float*, const float*, int64_t, int64_t);
template void lower_bounds_backward<double>(double*, const double*, const double*, int64_t, int64_t);

}  // namespace cpu

// One forward for both devices; lb, z: (L, D), P: (L, D) in accum_dtype(z).
static void lower_bounds_forward(Tensor& lb, Tensor& P, const Tensor& z, int64_t L, int64_t D) {
  if (z.is_cuda()) {
    HLA_CUDA_ONLY(cuda::lower_bounds_forward(lb.raw(), P.data<float>(), z.raw(), L, D, z.dtype()));
    return;
  }
  dispatch_float(z.dtype(), "lower_bounds", [&](auto tag) {
    using T = decltype(tag);
    cpu::lower_bounds_forward(lb.data<T>(), P.data<T>(), z.data<T>(), L, D);
  });
}

// One backward for both devices; dz, dlb: (L, D), dz written.
static void lower_bounds_backward(Tensor& dz, const Tensor& dlb, const Tensor& P, int64_t L, int64_t D) {
  if (dz.is_cuda()) {
    HLA_CUDA_ONLY(cuda::lower_bounds_backward(dz.raw(), dlb.raw(), P.data<float>(), L, D, dz.dtype()));
    return;
  }
  dispatch_float(dz.dtype(), "lower_bounds", [&](auto tag) {
    using T = decltype(tag);
    cpu::lower_bounds_backward(dz.data<T>(), dlb.data<T>(), P.data<T>(), L, D);
  });
}

std::vector<Var> lower_bounds(const Var& lb_param) {
  const Tensor z = lb_param.value();  // z: (L, D)
  HLA_CHECK_INPUT(z.dim() == 2 && z.size(0) >= 1, "lower_bounds: the parameter must be (layers, width), got ",
                  z.str());
  const int64_t L = z.size(0), D = z.size(1);
  Tensor lb = Tensor::empty({L, D}, z.dtype(), z.device());   // lb: (L, D)
  Tensor P = Tensor::empty({L, D}, accum_dtype(z), z.device());  // P: (L, D)
  lower_bounds_forward(lb, P, z, L, D);
  std::vector<Tensor> rows;  // lb_i: (D), views of lb's rows
  for (int64_t l = 0; l < L; l++) rows.push_back(lb.slice0(l, l + 1).reshape({D}));
  return record_op(rows, {lb_param}, [P, L, D](const std::vector<Tensor>& g) {
    Tensor dlb = Tensor::empty({L, D}, g[0].dtype(), g[0].device());  // dlb: (L, D), the rows' gradients
    for (int64_t l = 0; l < L; l++) dlb.slice0(l, l + 1).reshape({D}).copy_(g[l]);
    Tensor dz = Tensor::empty({L, D}, dlb.dtype(), dlb.device());  // dz: (L, D)
    lower_bounds_backward(dz, dlb, P, L, D);
    return std::vector<Tensor>{dz};
  }, "lower_bounds");
}

}  // namespace hla
