// Embedding on the GPU: the forward is one thread per output element. The backward is
// deterministic and accumulates in fp32: the token ids are sorted stably (CUB's radix sort, with
// the positions as values), so each vocabulary row finds its positions as one run in position
// order, and one block per row sums those rows of dy in that order, as the CPU reference does,
// and writes the row (or adds it into a gradient sum: in fp32 into an fp32 master's gradient).
// (Atomic adds would order the sums by timing and, in bf16, round after every add.)
#include "cuda/embedding.h"

#include <cub/device/device_radix_sort.cuh>

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

__global__ void iota_kernel(int32_t* x, int64_t n) { HLA_GRID_STRIDE(i, n) x[i] = static_cast<int32_t>(i); }

// The first index of sorted: (n) whose value is >= v (n when none is).
__device__ int64_t lower_bound(const int32_t* sorted, int64_t n, int64_t v) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    const int64_t mid = (lo + hi) / 2;
    if (sorted[mid] < v) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

// dw: (V, D) written or added into (add), a block per row v: dw[v] (+)= the sum, in position order,
// of dy: (N, D) at the positions of v's run in sorted_ids: (N) (sorted_pos: (N) the position of
// each sorted id). Ids outside [0, V) form runs no row reads.
template <class T, class TW>
__global__ void embedding_backward_rows(TW* dw, bool add, const T* dy, const int32_t* sorted_ids,
                                        const int32_t* sorted_pos, int64_t N, int64_t V, int64_t D) {
  __shared__ int64_t run[2];
  for (int64_t v = blockIdx.x; v < V; v += gridDim.x) {
    if (threadIdx.x < 2) run[threadIdx.x] = lower_bound(sorted_ids, N, v + threadIdx.x);
    __syncthreads();
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
      float sum = 0.0f;
      for (int64_t j = run[0]; j < run[1]; j++) sum += to_float(dy[sorted_pos[j] * D + d]);
      write_or_add(dw, v * D + d, sum, add);
    }
    __syncthreads();  // run[] is rewritten for the next row
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

void embedding_backward(void* dw, bool add_dw, const void* dy, const int32_t* ids, int64_t N, int64_t V, int64_t D,
                        DType dtype, DType dw_dtype) {
  HLA_CHECK(dw_dtype == dtype || dw_dtype == DType::F32, "embedding_backward: dw in ", dtype_name(dw_dtype), " for ",
            dtype_name(dtype), " dy (it takes dy's dtype or F32)");
  if (V * D == 0) return;
  HLA_CHECK(N <= INT32_MAX, "embedding_backward: ", N, " positions do not fit the sort's int32 positions");
  const int n = static_cast<int>(N);
  // pass 1: the ids sorted stably, with their positions
  Scratch<int32_t> positions(N), sorted_ids(N), sorted_pos(N);
  launch_1d(iota_kernel, N, 256, positions.get(), N);
  size_t sort_bytes = 0;
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, ids, sorted_ids.get(), positions.get(),
                                             sorted_pos.get(), n, 0, 32, cudaStreamPerThread));
  Scratch<unsigned char> sort_space(static_cast<int64_t>(sort_bytes));
  if (N > 0)
    CUDA_CHECK(cub::DeviceRadixSort::SortPairs(sort_space.get(), sort_bytes, ids, sorted_ids.get(), positions.get(),
                                               sorted_pos.get(), n, 0, 32, cudaStreamPerThread));
  // pass 2: every row of dw from its run
  dispatch_storage(dtype, "embedding_backward", [&](auto tag) {
    using T = decltype(tag);
    dispatch_storage(dw_dtype, "embedding_backward", [&](auto dw_tag) {
      embedding_backward_rows<T><<<static_cast<unsigned>(std::min<int64_t>(V, 65535)), 128>>>(
          static_cast<decltype(dw_tag)*>(dw), add_dw, static_cast<const T*>(dy), sorted_ids.get(), sorted_pos.get(),
          N, V, D);
    });
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace hla::cuda
