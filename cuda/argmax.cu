// Row argmax (nn/ops/argmax.h) on the GPU: one block per row. Pass 1: each thread scans the ids
// i = threadIdx.x, + blockDim.x, ... below the row's width and keeps its first maximum (a strict
// > over increasing ids). Pass 2: a tree over the threads in shared memory keeps the larger
// value, and on equal values the lower id, so the block ends with the row's first maximum,
// whatever the order the threads finish in. A NaN compares false everywhere and is never kept.
#include "cuda/argmax.h"
#include "cuda/common.cuh"

namespace hla::cuda {
namespace {

constexpr int kThreads = 256;

template <class T>
__global__ void __launch_bounds__(kThreads) argmax_kernel(int32_t* ids, const T* z, const int32_t* widths, int64_t V) {
  __shared__ float best_value[kThreads];
  __shared__ int32_t best_id[kThreads];
  const int64_t b = blockIdx.x;
  const T* row = z + b * V;  // row: (V)
  const int32_t width = widths[b];
  // pass 1: this thread's first maximum over its strided ids
  float value = -INFINITY;
  int32_t id = width;  // past the row: loses every tie
  for (int32_t i = threadIdx.x; i < width; i += kThreads) {
    const float x = to_float(row[i]);
    if (x > value || (id == width && x == value)) {  // the second term keeps the first -inf
      value = x;
      id = i;
    }
  }
  best_value[threadIdx.x] = value;
  best_id[threadIdx.x] = id;
  __syncthreads();
  // pass 2: halve the candidates, keeping the larger value, the lower id on ties
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      const float other = best_value[threadIdx.x + half];
      const int32_t other_id = best_id[threadIdx.x + half];
      if (other > best_value[threadIdx.x] || (other == best_value[threadIdx.x] && other_id < best_id[threadIdx.x])) {
        best_value[threadIdx.x] = other;
        best_id[threadIdx.x] = other_id;
      }
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) ids[b] = best_id[0] < width ? best_id[0] : 0;  // a row of NaNs: id 0, as the host scan
}

}  // namespace

void argmax_rows_forward(int32_t* ids, const void* z, const int32_t* widths, int64_t B, int64_t V, DType dtype) {
  if (B == 0) return;
  dispatch_storage(dtype, "argmax_rows", [&](auto tag) {
    using S = decltype(tag);
    argmax_kernel<S><<<static_cast<unsigned>(B), kThreads>>>(ids, static_cast<const S*>(z), widths, V);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace hla::cuda
