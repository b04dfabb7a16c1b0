// Greedy and sampled token picks (nn/ops/pick_tokens.h) on the GPU: one block per row.
//
// Both are built on one ranked argmax: each thread scans the ids i = threadIdx.x, + blockDim.x,
// ... below the row's width that a filter admits and keeps the best (a larger logit, then a
// lower id), then a tree over the threads in shared memory keeps the better of each pair, so the
// block ends with the row's first maximum whatever order the threads finish in. A NaN compares
// false everywhere and is never kept.
// argmax_rows is one such pass over every id. sample_tokens ranks the top k with k passes, each
// admitting only the ids ranked after the one the last pass took, (z < z_last) or (z == z_last
// and id > id_last), so nothing is marked and the passes take the ids in the CPU's order; then
// one thread walks the at most k candidates in double (weights, nucleus, draw), the CPU
// reference's arithmetic step for step.
#include "cuda/common.cuh"
#include "cuda/pick_tokens.h"

namespace hla::cuda {
namespace {

constexpr int kThreads = 256;

// Whether (value a, id ia) ranks before (value b, id ib).
__device__ __forceinline__ bool ranks_before(float a, int32_t ia, float b, int32_t ib) {
  return a > b || (a == b && ia < ib);
}

// The best admitted (value, id) of the row for the whole block (every thread gets it); id ==
// width when nothing is admitted. admit(x, i) filters the ids. Two __syncthreads at least.
template <class T, class Admit>
__device__ void block_best(const T* row, int32_t width, Admit admit, float& best_value, int32_t& best_id) {
  __shared__ float values[kThreads];
  __shared__ int32_t ids[kThreads];
  // pass 1: this thread's best over its strided ids
  float value = -INFINITY;
  int32_t id = width;  // none yet: past the row, loses every comparison
  for (int32_t i = threadIdx.x; i < width; i += kThreads) {
    const float x = to_float(row[i]);
    if (admit(x, i) && (id == width || ranks_before(x, i, value, id))) {
      value = x;
      id = i;
    }
  }
  values[threadIdx.x] = value;
  ids[threadIdx.x] = id;
  __syncthreads();
  // pass 2: halve the candidates, keeping the better of each pair
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      const int other = threadIdx.x + half;
      const int self = threadIdx.x;
      if (ids[other] < width && (ids[self] == width || ranks_before(values[other], ids[other], values[self], ids[self]))) {
        values[self] = values[other];
        ids[self] = ids[other];
      }
    }
    __syncthreads();
  }
  best_value = values[0];
  best_id = ids[0];
  __syncthreads();  // values and ids may be rewritten by the next call
}

template <class T>
__global__ void __launch_bounds__(kThreads)
argmax_kernel(int32_t* ids, const T* z, const int32_t* widths, int64_t V) {
  const int32_t width = widths[blockIdx.x];
  float value;
  int32_t id;
  block_best(z + blockIdx.x * V, width, [](float, int32_t) { return true; }, value, id);
  if (threadIdx.x == 0) ids[blockIdx.x] = id < width ? id : 0;  // a row of NaNs: id 0, as the host scan
}

template <class T>
__global__ void __launch_bounds__(kThreads)
sample_kernel(int32_t* ids, const T* z, const int32_t* widths, const double* uniforms, int64_t V, SampleParams p) {
  __shared__ float ranked_value[kMaxDeviceTopK];
  __shared__ int32_t ranked_id[kMaxDeviceTopK];
  __shared__ double prob[kMaxDeviceTopK];
  const int64_t b = blockIdx.x;
  const int32_t width = widths[b];
  const int k = p.top_k < width ? p.top_k : width;
  // pass 1: the top k, one ranked argmax per round over the ids after the last one taken
  float last_value = INFINITY;
  int32_t last_id = -1;
  for (int round = 0; round < k; round++) {
    block_best(
        z + b * V, width,
        [=](float x, int32_t i) { return x < last_value || (x == last_value && i > last_id); }, last_value,
        last_id);
    if (threadIdx.x == 0) {  // the only reader below
      ranked_value[round] = last_value;
      ranked_id[round] = last_id;
    }
  }
  if (threadIdx.x != 0) return;
  // pass 2: p_i = exp((z_i - z_max) / temperature) and their total
  double total = 0;
  for (int i = 0; i < k; i++) total += prob[i] = exp(double(ranked_value[i] - ranked_value[0]) / p.temperature);
  // pass 3: the nucleus, the shortest prefix whose mass reaches top_p * total
  int keep = 0;
  double mass = 0;
  while (keep < k && (keep == 0 || mass < p.top_p * total)) mass += prob[keep++];
  // pass 4: the candidate where u * mass falls
  double target = uniforms[b] * mass;
  int32_t chosen = ranked_id[keep - 1];
  for (int i = 0; i < keep; i++) {
    if (target < prob[i]) {
      chosen = ranked_id[i];
      break;
    }
    target -= prob[i];
  }
  ids[b] = chosen;
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

void sample_tokens_forward(int32_t* ids, const void* z, const int32_t* widths, const double* uniforms, int64_t B,
                           int64_t V, const SampleParams& p, DType dtype) {
  HLA_CHECK(p.top_k >= 1 && p.top_k <= kMaxDeviceTopK, "sample_tokens: top_k ", p.top_k, " outside [1, ",
            kMaxDeviceTopK, "] on the GPU");
  if (B == 0) return;
  dispatch_storage(dtype, "sample_tokens", [&](auto tag) {
    using S = decltype(tag);
    sample_kernel<S><<<static_cast<unsigned>(B), kThreads>>>(ids, static_cast<const S*>(z), widths, uniforms, V, p);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace hla::cuda
