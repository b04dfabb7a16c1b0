// Softmax cross-entropy: saves only the per-row logsumexp beside the logits it already has.
#include "nn/ops/cross_entropy.h"

#include <cmath>

#include "tensor/dispatch.h"
#ifdef HLA_CUDA
#include "cuda/cross_entropy.h"
#endif

namespace hla {
namespace cpu {

template <class T>
double cross_entropy_forward(T* lse, const T* z, const int32_t* c, int64_t N, int64_t V, int32_t ignore) {
  double total = 0;
  for (int64_t n = 0; n < N; n++) {
    const T* zr = z + n * V;
    T m = zr[0];
    for (int64_t v = 1; v < V; v++) m = std::max(m, zr[v]);
    T s = 0;
    for (int64_t v = 0; v < V; v++) s += std::exp(zr[v] - m);
    lse[n] = m + std::log(s);  // logsumexp(z), shifted by the max for safety
    if (c[n] == ignore) continue;
    HLA_CHECK(c[n] >= 0 && c[n] < V, "cross_entropy: target ", c[n], " at row ", n,
              " outside [0, ", V, ") and not the ignore index ", ignore);
    total += static_cast<double>(lse[n] - zr[c[n]]);  // loss_row = lse - z_c
  }
  return total;
}

template <class T>
void cross_entropy_backward(T* dz, const T* z, const T* lse, const int32_t* c, int64_t N, int64_t V,
                            int32_t ignore, double dloss_over_valid) {
  for (int64_t n = 0; n < N; n++) {
    T* dr = dz + n * V;
    if (c[n] == ignore) {
      for (int64_t v = 0; v < V; v++) dr[v] = 0;
      continue;
    }
    T k = static_cast<T>(dloss_over_valid);
    for (int64_t v = 0; v < V; v++) dr[v] = std::exp(z[n * V + v] - lse[n]) * k;  // softmax
    dr[c[n]] -= k;                                                                // - onehot
  }
}

}  // namespace cpu

#ifdef HLA_CUDA
// The same op on the GPU (cuda/cross_entropy.cu): one fused pass per row; lse is fp32 there.
// The loss sum and the valid-row count come back to the host; the targets stay on the device.
static Var cross_entropy_cuda(const Var& logits, const Tensor& targets, int32_t ignore_index) {
  Tensor z = logits.value();
  HLA_CHECK(targets.is_cuda(), "cross_entropy: logits are on cuda but targets are on the cpu");
  int64_t V = z.size(-1), N = z.numel() / V;
  int64_t valid = 0;
  Tensor lse = Tensor::empty({N}, DType::F32, Device::CUDA);  // lse: (N)
  double total = cuda::cross_entropy_forward(lse.data<float>(), z.raw(), targets.data<int32_t>(), N, V,
                                             ignore_index, z.dtype(), &valid);
  HLA_CHECK(!std::isnan(total), "cross_entropy: a target lies outside [0, ", V, ") and is not the ignore index ",
            ignore_index);
  double loss = valid ? total / static_cast<double>(valid) : 0.0;
  return record_op1(Tensor::full({}, loss, z.dtype(), Device::CUDA), {logits}, [=](const std::vector<Tensor>& g) {
    Tensor dz = Tensor::empty(z.shape(), z.dtype(), Device::CUDA);
    double k = valid ? g[0].item() / static_cast<double>(valid) : 0.0;
    cuda::cross_entropy_backward(dz.raw(), z.raw(), lse.data<float>(), targets.data<int32_t>(), N, V, ignore_index,
                                 k, z.dtype());
    return std::vector<Tensor>{dz};
  }, "cross_entropy");
}
#endif

Var cross_entropy(const Var& logits, const Tensor& targets, int32_t ignore_index) {
  int64_t V = logits.size(-1), N = logits.numel() / V;
  HLA_CHECK(targets.numel() == N, "cross_entropy: ", N, " rows of logits ", logits.value().str(),
            " but targets ", targets.str());
  check_dtype(targets, DType::I32, "cross_entropy", "targets");
#ifdef HLA_CUDA
  if (logits.value().is_cuda()) return cross_entropy_cuda(logits, targets, ignore_index);
#endif
  Tensor z = logits.value();
  Tensor lse = Tensor::empty({N}, z.dtype());
  const int32_t* c = targets.data<int32_t>();
  int64_t valid = 0;
  for (int64_t n = 0; n < N; n++) valid += c[n] != ignore_index;
  double total = dispatch_float(z.dtype(), "cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    return cpu::cross_entropy_forward(lse.data<T>(), z.data<T>(), c, N, V, ignore_index);
  });
  double loss = valid ? total / static_cast<double>(valid) : 0.0;
  return record_op1(Tensor::full({}, loss, z.dtype()), {logits}, [=](const std::vector<Tensor>& g) {
    Tensor dz = Tensor::empty(z.shape(), z.dtype());
    double k = valid ? g[0].item() / static_cast<double>(valid) : 0.0;
    dispatch_float(z.dtype(), "cross_entropy", [&](auto tag) {
      using T = decltype(tag);
      cpu::cross_entropy_backward(dz.data<T>(), z.data<T>(), lse.data<T>(), targets.data<int32_t>(), N, V,
                                  ignore_index, k);
    });
    return std::vector<Tensor>{dz};
  }, "cross_entropy");
}

}  // namespace hla
