// Softmax over depth, then an exclusive-of-layer-0 cumulative sum (see lower_bounds.h).
#include "nn/ops/lower_bounds.h"

#include <cmath>

#include "tensor/dispatch.h"

namespace hla {

std::vector<Var> lower_bounds(const Var& lb_param) {
  Tensor z = lb_param.value().to(Device::CPU).to(DType::F64);  // z: (L, D), tiny: computed on the host
  int64_t L = z.size(0), D = z.size(1);
  std::vector<double> P(L * D), lb(L * D, 0.0);
  const double* zp = z.data<double>();
  for (int64_t d = 0; d < D; d++) {
    double m = zp[d];
    for (int64_t l = 1; l < L; l++) m = std::max(m, zp[l * D + d]);
    double s = 0;
    for (int64_t l = 0; l < L; l++) s += std::exp(zp[l * D + d] - m);
    for (int64_t l = 0; l < L; l++) P[l * D + d] = std::exp(zp[l * D + d] - m) / s;  // P = softmax_L(z)
    for (int64_t l = 1; l < L; l++) lb[l * D + d] = lb[(l - 1) * D + d] + P[l * D + d];  // lb_i = sum_{1..i} P_j
  }
  DType dt = lb_param.dtype();
  Device dev = lb_param.device();
  std::vector<Tensor> outs;
  for (int64_t l = 0; l < L; l++)
    outs.push_back(Tensor::from_f64(std::vector<double>(lb.begin() + l * D, lb.begin() + (l + 1) * D), {D}, dt).to(dev));
  return record_op(outs, {lb_param}, [P, L, D, dt, dev](const std::vector<Tensor>& g) {
    std::vector<double> dP(L * D, 0.0), dz(L * D);
    for (int64_t i = 1; i < L; i++) {  // lb_i = sum_{j=1..i} P_j  =>  dP_j = sum_{i >= j} dlb_i  (j >= 1)
      std::vector<double> gi = g[i].to_f64_vector();
      for (int64_t j = 1; j <= i; j++)
        for (int64_t d = 0; d < D; d++) dP[j * D + d] += gi[d];
    }
    for (int64_t d = 0; d < D; d++) {  // P = softmax(z)  =>  dz = P * (dP - sum_l P dP)
      double s = 0;
      for (int64_t l = 0; l < L; l++) s += P[l * D + d] * dP[l * D + d];
      for (int64_t l = 0; l < L; l++) dz[l * D + d] = P[l * D + d] * (dP[l * D + d] - s);
    }
    return std::vector<Tensor>{Tensor::from_f64(dz, {L, D}, dt).to(dev)};
  }, "lower_bounds");
}

}  // namespace hla
