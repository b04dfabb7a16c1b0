// Linear + cross-entropy in vocabulary chunks: the CPU reference (Eigen, literal math), the
// device dispatch and the one autograd node. Saves h, W and the per-row logsumexp; never logits.
#include "nn/ops/linear_cross_entropy.h"

#include <Eigen/Dense>
#include <cmath>
#include <limits>

#include "nn/ops/check.h"
#include "nn/ops/cross_entropy.h"
#include "tensor/dispatch.h"
#ifdef HLA_CUDA
#include "cuda/linear_cross_entropy.h"
#endif

namespace hla {
namespace cpu {

template <class T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Pass 1, per chunk [v0, v0 + C): z = h w_c^T, merged into each row's running (m, s) and the
// target logit kept; pass 2: lse = m + log s and the loss of the valid rows.
template <class T>
double linear_cross_entropy_forward(T* lse, const T* h, const T* w, const int32_t* c, int64_t N, int64_t D, int64_t V,
                                    int64_t chunk, int32_t ignore, int64_t* valid_rows) {
  HLA_CHECK(chunk >= 1, "linear_cross_entropy: chunk must be >= 1, got ", chunk);
  Eigen::Map<const RowMat<T>> H(h, N, D);  // H: (N, D)
  Eigen::Map<const RowMat<T>> W(w, V, D);  // W: (V, D)
  std::vector<T> m(N, -std::numeric_limits<T>::infinity());  // m: (N) running max of z
  std::vector<T> s(N, T(0));                                // s: (N) running sum of exp(z - m)
  std::vector<T> zc(N, T(0));                               // zc: (N) the target's logit
  // pass 1: the chunks
  for (int64_t v0 = 0; v0 < V; v0 += chunk) {
    const int64_t C = std::min(chunk, V - v0);
    RowMat<T> z = H * W.middleRows(v0, C).transpose();  // z: (N, C) = h w_c^T
    for (int64_t n = 0; n < N; n++) {
      const T mm = std::max(m[n], z.row(n).maxCoeff());
      T sum = 0;
      for (int64_t j = 0; j < C; j++) sum += std::exp(z(n, j) - mm);
      s[n] = s[n] * std::exp(m[n] - mm) + sum;  // rescale the earlier chunks' sum to the new max
      m[n] = mm;
      if (c[n] >= v0 && c[n] < v0 + C) zc[n] = z(n, c[n] - v0);
    }
  }
  // pass 2: lse and the loss
  double total = 0;
  *valid_rows = 0;
  for (int64_t n = 0; n < N; n++) {
    lse[n] = m[n] + std::log(s[n]);  // logsumexp(z)
    if (c[n] == ignore) continue;
    HLA_CHECK(c[n] >= 0 && c[n] < V, "linear_cross_entropy: target ", c[n], " at row ", n, " outside [0, ", V,
              ") and not the ignore index ", ignore);
    total += static_cast<double>(lse[n] - zc[n]);  // loss_row = lse - z_c
    ++*valid_rows;
  }
  return total;
}

// Per chunk: z recomputed, dz = (exp(z - lse) - onehot(c)) * k, dh += dz w_c, dw_c = dz^T h (in T,
// then widened to TW and written or added: exactly cast-then-add; dw null: not wanted).
template <class T, class TW>
void linear_cross_entropy_backward(T* dh, TW* dw, bool add_dw, const T* h, const T* w, const T* lse, const int32_t* c,
                                   int64_t N, int64_t D, int64_t V, int64_t chunk, int32_t ignore,
                                   double dloss_over_valid) {
  HLA_CHECK(chunk >= 1, "linear_cross_entropy: chunk must be >= 1, got ", chunk);
  Eigen::Map<const RowMat<T>> H(h, N, D);      // H: (N, D)
  Eigen::Map<const RowMat<T>> W(w, V, D);      // W: (V, D)
  Eigen::Map<RowMat<T>> dH(dh, N, D);          // dH: (N, D)
  Eigen::Map<RowMat<TW>> dW(dw, dw ? V : 0, D);  // dW: (V, D)
  dH.setZero();
  const T k = static_cast<T>(dloss_over_valid);
  for (int64_t v0 = 0; v0 < V; v0 += chunk) {
    const int64_t C = std::min(chunk, V - v0);
    RowMat<T> dz = H * W.middleRows(v0, C).transpose();  // z: (N, C), overwritten by dz
    for (int64_t n = 0; n < N; n++) {
      if (c[n] == ignore) {
        dz.row(n).setZero();
        continue;
      }
      for (int64_t j = 0; j < C; j++) dz(n, j) = std::exp(dz(n, j) - lse[n]) * k;  // softmax
      if (c[n] >= v0 && c[n] < v0 + C) dz(n, c[n] - v0) -= k;                       // - onehot
    }
    dH += dz * W.middleRows(v0, C);                  // dh += dz w_c : (N, D)
    if (!dw) continue;
    const RowMat<T> dw_c = dz.transpose() * H;  // dw_c = dz^T h : (C, D)
    if (add_dw) dW.middleRows(v0, C) += dw_c.template cast<TW>();
    else dW.middleRows(v0, C) = dw_c.template cast<TW>();
  }
}

#define HLA_INSTANTIATE_LCE(T, TW)                                                                                  \
  template void linear_cross_entropy_backward<T, TW>(T*, TW*, bool, const T*, const T*, const T*, const int32_t*,   \
                                                     int64_t, int64_t, int64_t, int64_t, int32_t, double);
template double linear_cross_entropy_forward<float>(float*, const float*, const float*, const int32_t*, int64_t,
                                                    int64_t, int64_t, int64_t, int32_t, int64_t*);
template double linear_cross_entropy_forward<double>(double*, const double*, const double*, const int32_t*, int64_t,
                                                     int64_t, int64_t, int64_t, int32_t, int64_t*);
HLA_INSTANTIATE_LCE(float, float)
HLA_INSTANTIATE_LCE(float, double)
HLA_INSTANTIATE_LCE(double, double)
#undef HLA_INSTANTIATE_LCE

}  // namespace cpu

// The loss and the count of rows with a target.
struct LossValue {
  Tensor loss;   // (): the mean over rows with a target, in accum_dtype(h) (fp32 for bf16), on h's device
  Tensor valid;  // (): the number of those rows, F32, on h's device
};

// One forward for both devices; h: (N, D), w: (V, D), targets: (N) I32, lse: (N) in accum_dtype(h)
// written. On the GPU nothing is read back: the loss stays a device scalar, and a target outside
// [0, V) makes it NaN (the trainer reports the step); the CPU reference names the target.
static LossValue linear_cross_entropy_forward(Tensor& lse, const Tensor& h, const Tensor& w, const Tensor& targets,
                                              int64_t chunk, int32_t ignore) {
  const int64_t N = h.size(0), D = h.size(1), V = w.size(0);
  if (h.is_cuda()) {
    LossValue out{Tensor::empty({}, DType::F32, h.device()), Tensor::empty({}, DType::F32, h.device())};
    HLA_CUDA_ONLY(cuda::linear_cross_entropy_forward(lse.data<float>(), out.loss.data<float>(), out.valid.data<float>(),
                                                     h.raw(), w.raw(), targets.data<int32_t>(), N, D, V, chunk,
                                                     ignore, h.dtype()));
    return out;
  }
  int64_t valid = 0;
  double total = dispatch_float(h.dtype(), "linear_cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    return cpu::linear_cross_entropy_forward(lse.data<T>(), h.data<T>(), w.data<T>(), targets.data<int32_t>(), N, D,
                                             V, chunk, ignore, &valid);
  });
  return {Tensor::full({}, valid ? total / static_cast<double>(valid) : 0.0, accum_dtype(h), h.device()),
          Tensor::full({}, static_cast<double>(valid), DType::F32, h.device())};
}

// One backward for both devices; dh: (N, D) written, dw: (V, D) in w's dtype or wider (a master
// weight's) written or added into (add_dw; undefined: not wanted); dloss: () the loss's gradient.
static void linear_cross_entropy_backward(Tensor& dh, Tensor& dw, bool add_dw, const Tensor& h, const Tensor& w,
                                          const Tensor& lse, const Tensor& targets, int64_t chunk, int32_t ignore,
                                          const Tensor& dloss, const LossValue& forward) {
  const int64_t N = h.size(0), D = h.size(1), V = w.size(0);
  const DType dw_dtype = dw.defined() ? dw.dtype() : w.dtype();
  if (h.is_cuda()) {
    HLA_CUDA_ONLY(cuda::linear_cross_entropy_backward(
        dh.raw(), dw.defined() ? dw.raw() : nullptr, add_dw, h.raw(), w.raw(), lse.data<float>(),
        targets.data<int32_t>(), N, D, V, chunk, ignore, dloss.to(DType::F32).data<float>(),
        forward.valid.data<float>(), h.dtype(), dw_dtype));
    return;
  }
  HLA_CHECK(dtype_size(dw_dtype) >= dtype_size(w.dtype()), "linear_cross_entropy: dw in ", dtype_name(dw_dtype),
            " for a ", dtype_name(w.dtype()), " weight (it takes the weight's dtype or a wider one)");
  const double valid = forward.valid.item();
  const double dloss_over_valid = valid > 0 ? dloss.item() / valid : 0.0;
  dispatch_float(h.dtype(), "linear_cross_entropy", [&](auto tag) {
    using T = decltype(tag);
    dispatch_float(dw_dtype, "linear_cross_entropy", [&](auto dw_tag) {
      using TW = decltype(dw_tag);
      if constexpr (sizeof(TW) >= sizeof(T))  // the check above
        cpu::linear_cross_entropy_backward(dh.data<T>(), dw.defined() ? dw.data<TW>() : nullptr, add_dw, h.data<T>(),
                                           w.data<T>(), lse.data<T>(), targets.data<int32_t>(), N, D, V, chunk,
                                           ignore, dloss_over_valid);
    });
  });
}

Var linear_cross_entropy(const Var& h, const Var& weight, const Tensor& targets, int64_t chunk,
                         int32_t ignore_index) {
  const Tensor& w = weight.value();  // w: (V, D)
  HLA_CHECK(w.dim() == 2 && w.size(0) >= 1, "linear_cross_entropy: weight ", w.str(), " is not (V, D) with V >= 1");
  const int64_t V = w.size(0), D = w.size(1);
  HLA_CHECK(h.dim() >= 1 && h.size(-1) == D, "linear_cross_entropy: hidden states ", h.value().str(),
            " do not end in the weight's width ", D, " (weight ", w.str(), ")");
  HLA_CHECK(chunk >= 1, "linear_cross_entropy: chunk must be >= 1, got ", chunk);
  check_operand(w, h.value(), "linear_cross_entropy", "weight");
  Tensor h2 = h.value().reshape({-1, D});  // h2: (N, D)
  const int64_t N = h2.size(0);
  check_loss_targets(targets, N, h.value(), "linear_cross_entropy", "hidden states");
  Tensor lse = Tensor::empty({N}, accum_dtype(h2), h2.device());  // lse: (N)
  LossValue forward = linear_cross_entropy_forward(lse, h2, w, targets, chunk, ignore_index);
  Shape h_shape = h.shape();
  return record_op1(forward.loss, {h, weight}, [=](const std::vector<Tensor>& g) {
    // dw into the weight's gradient sum, past its compute copy's cast (autograd/var.h: gradient_sum)
    GradientSum dw_sum = gradient_sum(1);
    Tensor dh = Tensor::empty({N, D}, h2.dtype(), h2.device());  // dh: (N, D)
    Tensor dw = dw_sum.target({V, D}, w.device());               // dw: (V, D)
    linear_cross_entropy_backward(dh, dw, dw_sum.adds(), h2, w, lse, targets, chunk, ignore_index, g[0], forward);
    dw_sum.keep(dw);
    return std::vector<Tensor>{dh.reshape(h_shape), Tensor()};
  }, "linear_cross_entropy");
}

}  // namespace hla
