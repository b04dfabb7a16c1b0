// Embedding on the GPU: one thread per output element; backward zeroes dw and adds rows with
// atomics (repeated token ids in a batch collide, so the adds must be atomic).
#include "cuda/embedding.h"
#include "cuda/reduce.cuh"

namespace hla::cuda {
namespace {

template <class T>
__global__ void embedding_forward_kernel(T* y, const int32_t* ids, const T* w, int64_t N, int64_t V, int64_t D) {
  HLA_GRID_STRIDE(i, N * D) {
    int64_t n = i / D, d = i % D;
    int32_t id = ids[n];
    y[i] = (id >= 0 && id < V) ? w[id * D + d] : from_float<T>(__int_as_float(0x7fc00000));  // NaN flags a bad id
  }
}

template <class T>
__global__ void embedding_backward_kernel(T* dw, const T* dy, const int32_t* ids, int64_t N, int64_t D) {
  HLA_GRID_STRIDE(i, N * D) {
    int64_t n = i / D, d = i % D;
    atomicAdd(&dw[ids[n] * D + d], dy[i]);
  }
}

}  // namespace

void embedding_forward(void* y, const int32_t* ids, const void* w, int64_t N, int64_t V, int64_t D, DType dtype) {
  if (N * D == 0) return;
  dispatch_storage(dtype, "embedding_forward", [&](auto tag) {
    using T = decltype(tag);
    embedding_forward_kernel<T><<<grid_1d(N * D), 256>>>(static_cast<T*>(y), ids, static_cast<const T*>(w), N, V, D);
  });
  CUDA_CHECK_LAUNCH();
}

void embedding_backward(void* dw, const void* dy, const int32_t* ids, int64_t N, int64_t V, int64_t D, DType dtype) {
  write_zeros(dw, V * D, dtype);
  if (N * D == 0) return;
  dispatch_storage(dtype, "embedding_backward", [&](auto tag) {
    using T = decltype(tag);
    embedding_backward_kernel<T><<<grid_1d(N * D), 256>>>(static_cast<T*>(dw), static_cast<const T*>(dy), ids, N, D);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace hla::cuda
