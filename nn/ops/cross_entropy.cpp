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
double cross_entropy_forward(T* lse, const T* z, const int32_t* c, int64_t N, int64_t V, int32_t ignore,
                             int64_t* valid_rows) {
  double total = 0;
  *valid_rows = 0;
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
    ++*valid_rows;
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

// One forward for both devices: cpu::cross_entropy_forward<T> or cuda::cross_entropy_forward (one
// fused pass per row; the loss sum and the valid-row count come back to the host, the targets stay
// on the device). z: (N, V), targets: (N) I32, lse: (N) in accum_dtype(z).
static double cross_entropy_forward(Tensor& lse, const Tensor& z, const Tensor& targets, int64_t N, int64_t V,
                                    int32_t ignore, int64_t* valid_rows) {
  if (z.is_cuda()) {
    double total = 0;
    HLA_CUDA_ONLY(total = cuda::cross_entropy_forward(lse.data<float>(), z.raw(), targets.data<int32_t>(), N, V,
                                                      ignore, valid_rows, z.dtype()));
    HLA_CHECK(!std::isnan(total), "cross_entropy: a target lies outside [0, ", V, ") and is not the ignore index ",
              ignore);
    return total;
  }
  return dispatch_float(z.dtype(), "cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    return cpu::cross_entropy_forward(lse.data<T>(), z.data<T>(), targets.data<int32_t>(), N, V, ignore, valid_rows);
  });
}

// One backward for both devices; dz: (N, V) written.
static void cross_entropy_backward(Tensor& dz, const Tensor& z, const Tensor& lse, const Tensor& targets, int64_t N,
                                   int64_t V, int32_t ignore, double dloss_over_valid) {
  if (z.is_cuda()) {
    HLA_CUDA_ONLY(cuda::cross_entropy_backward(dz.raw(), z.raw(), lse.data<float>(), targets.data<int32_t>(), N, V,
                                               ignore, dloss_over_valid, z.dtype()));
    return;
  }
  dispatch_float(z.dtype(), "cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    cpu::cross_entropy_backward(dz.data<T>(), z.data<T>(), lse.data<T>(), targets.data<int32_t>(), N, V, ignore,
                                dloss_over_valid);
  });
}

void check_loss_targets(const Tensor& targets, int64_t N, const Tensor& x, const char* op, const char* what) {
  HLA_CHECK(targets.numel() == N, op, ": ", N, " rows of ", what, " ", x.str(), " but targets ", targets.str());
  check_dtype(targets, DType::I32, op, "targets");
  HLA_CHECK(targets.device() == x.device(), op, ": targets ", targets.str(), " are not on the device of the ", what,
            " ", x.str());
}

Var cross_entropy(const Var& logits, const Tensor& targets, int32_t ignore_index) {
  Tensor z = logits.value();
  int64_t V = z.size(-1), N = z.numel() / V;
  check_loss_targets(targets, N, z, "cross_entropy", "logits");
  Tensor lse = Tensor::empty({N}, accum_dtype(z), z.device());  // lse: (N)
  int64_t valid = 0;
  double total = cross_entropy_forward(lse, z, targets, N, V, ignore_index, &valid);
  double loss = valid ? total / static_cast<double>(valid) : 0.0;
  return record_op1(Tensor::full({}, loss, z.dtype(), z.device()), {logits}, [=](const std::vector<Tensor>& g) {
    Tensor dz = Tensor::empty(z.shape(), z.dtype(), z.device());
    double k = valid ? g[0].item() / static_cast<double>(valid) : 0.0;
    cross_entropy_backward(dz, z, lse, targets, N, V, ignore_index, k);
    return std::vector<Tensor>{dz};
  }, "cross_entropy");
}

}  // namespace hla
