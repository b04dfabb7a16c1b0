// Embedding lookup; its backward sums each row's gradient into its token's row (from zeros, in the
// weights' dtype), then writes dw or adds it into the weight's gradient sum.
#include "nn/ops/embedding.h"

#include <vector>

#include "tensor/dispatch.h"
#ifdef HLA_CUDA
#include "cuda/embedding.h"
#endif

namespace hla {
namespace cpu {

template <class T>
void embedding_forward(T* y, const int32_t* ids, const T* w, int64_t N, int64_t V, int64_t D) {
  for (int64_t n = 0; n < N; n++) {
    int32_t id = ids[n];
    HLA_CHECK(id >= 0 && id < V, "embedding: token id ", id, " at position ", n,
              " is outside the vocabulary [0, ", V, ")");
    for (int64_t d = 0; d < D; d++) y[n * D + d] = w[id * D + d];
  }
}

template <class T, class TW>
void embedding_backward(TW* dw, bool add_dw, const T* dy, const int32_t* ids, int64_t N, int64_t V, int64_t D) {
  std::vector<T> rows(V * D, T(0));  // rows: (V, D), the sums in T
  for (int64_t n = 0; n < N; n++)
    for (int64_t d = 0; d < D; d++) rows[ids[n] * D + d] += dy[n * D + d];  // y[n] = w[ids[n]]
  for (int64_t i = 0; i < V * D; i++) dw[i] = add_dw ? dw[i] + static_cast<TW>(rows[i]) : static_cast<TW>(rows[i]);
}

}  // namespace cpu

// One forward for both devices: cpu::embedding_forward<T> or cuda::embedding_forward.
// ids: (N) I32, w: (V, D), y: (N, D)
static void embedding_forward(Tensor& y, const Tensor& ids, const Tensor& w, int64_t N, int64_t V, int64_t D) {
  if (w.is_cuda()) {
    HLA_CUDA_ONLY(cuda::embedding_forward(y.raw(), ids.data<int32_t>(), w.raw(), N, V, D, w.dtype()));
    return;
  }
  dispatch_float(w.dtype(), "embedding", [&](auto tag) {
    using T = decltype(tag);
    cpu::embedding_forward(y.data<T>(), ids.data<int32_t>(), w.data<T>(), N, V, D);
  });
}

// One backward for both devices; dw: (V, D) in dy's dtype or wider (a master weight's), written
// or added into (add_dw).
static void embedding_backward(Tensor& dw, bool add_dw, const Tensor& dy, const Tensor& ids, int64_t N, int64_t V,
                               int64_t D) {
  if (dw.is_cuda()) {
    HLA_CUDA_ONLY(
        cuda::embedding_backward(dw.raw(), add_dw, dy.raw(), ids.data<int32_t>(), N, V, D, dy.dtype(), dw.dtype()));
    return;
  }
  HLA_CHECK(dtype_size(dw.dtype()) >= dtype_size(dy.dtype()), "embedding: dw in ", dtype_name(dw.dtype()), " for ",
            dtype_name(dy.dtype()), " dy (it takes dy's dtype or a wider one)");
  dispatch_float(dy.dtype(), "embedding", [&](auto tag) {
    using T = decltype(tag);
    dispatch_float(dw.dtype(), "embedding", [&](auto dw_tag) {
      using TW = decltype(dw_tag);
      if constexpr (sizeof(TW) >= sizeof(T))  // the check above
        cpu::embedding_backward(dw.data<TW>(), add_dw, dy.data<T>(), ids.data<int32_t>(), N, V, D);
    });
  });
}

Var embedding(const Tensor& ids, const Var& weight) {
  check_dtype(ids, DType::I32, "embedding", "ids");
  HLA_CHECK(ids.device() == weight.device(), "embedding: ids on ", device_name(ids.device()),
            " but weight on ", device_name(weight.device()));
  Tensor w = weight.value();
  int64_t V = w.size(0), D = w.size(1), N = ids.numel();
  Shape out_shape = ids.shape();
  out_shape.push_back(D);
  Tensor y = Tensor::empty(out_shape, w.dtype(), w.device());  // y: (..., D)
  embedding_forward(y, ids, w, N, V, D);
  Shape w_shape = w.shape();
  Device dev = w.device();
  return record_op1(y, {weight}, [=](const std::vector<Tensor>& g) {
    // dw into the weight's gradient sum, past its compute copy's cast (autograd/var.h: gradient_sum)
    GradientSum dw_sum = gradient_sum(0);
    Tensor dw = dw_sum.target(w_shape, dev);
    if (dw.defined()) embedding_backward(dw, dw_sum.adds(), g[0], ids, N, V, D);
    dw_sum.keep(dw);
    return std::vector<Tensor>{Tensor()};
  }, "embedding");
}

}  // namespace hla
