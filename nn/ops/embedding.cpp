// Embedding lookup; its backward writes dw: zeros, then each row's gradient added into its token's row.
#include "nn/ops/embedding.h"

#include <algorithm>

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

template <class T>
void embedding_backward(T* dw, const T* dy, const int32_t* ids, int64_t N, int64_t V, int64_t D) {
  std::fill(dw, dw + V * D, T(0));
  for (int64_t n = 0; n < N; n++)
    for (int64_t d = 0; d < D; d++) dw[ids[n] * D + d] += dy[n * D + d];  // y[n] = w[ids[n]]
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

// One backward for both devices; dw: (V, D) written.
static void embedding_backward(Tensor& dw, const Tensor& dy, const Tensor& ids, int64_t N, int64_t V, int64_t D) {
  if (dw.is_cuda()) {
    HLA_CUDA_ONLY(cuda::embedding_backward(dw.raw(), dy.raw(), ids.data<int32_t>(), N, V, D, dw.dtype()));
    return;
  }
  dispatch_float(dw.dtype(), "embedding", [&](auto tag) {
    using T = decltype(tag);
    cpu::embedding_backward(dw.data<T>(), dy.data<T>(), ids.data<int32_t>(), N, V, D);
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
  DType dt = w.dtype();
  Device dev = w.device();
  return record_op1(y, {weight}, [=](const std::vector<Tensor>& g) {
    Tensor dw = Tensor::empty(w_shape, dt, dev);
    embedding_backward(dw, g[0], ids, N, V, D);
    return std::vector<Tensor>{dw};
  }, "embedding");
}

}  // namespace hla
