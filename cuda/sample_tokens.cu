// Top-k / nucleus sampling (nn/ops/sample_tokens.h) on the GPU: one block per row.
// Pass 1 ranks the top k: k rounds, each a block-wide argmax (larger logit, then lower id) over
// the ids ranked after the one the last round took, (z < z_last) or (z == z_last and id > id_last),
// so nothing is marked and the rounds take the ids in the CPU's order. Passes 2-4 (the weights,
// the nucleus and the draw) are a walk over at most k candidates in that order, in double, by
// one thread, the CPU reference's arithmetic step for step.
#include "cuda/common.cuh"
#include "cuda/sample_tokens.h"

namespace hla::cuda {
namespace {

constexpr int kThreads = 256;

// Whether (value a, id ia) ranks before (value b, id ib).
__device__ __forceinline__ bool ranks_before(float a, int32_t ia, float b, int32_t ib) {
  return a > b || (a == b && ia < ib);
}

template <class T>
__global__ void __launch_bounds__(kThreads)
sample_kernel(int32_t* ids, const T* z, const int32_t* widths, const double* uniforms, int64_t V, SampleParams p) {
  __shared__ float best_value[kThreads], ranked_value[kMaxDeviceTopK];
  __shared__ int32_t best_id[kThreads], ranked_id[kMaxDeviceTopK];
  __shared__ double prob[kMaxDeviceTopK];
  const int64_t b = blockIdx.x;
  const T* row = z + b * V;  // row: (V)
  const int32_t width = widths[b];
  const int k = p.top_k < width ? p.top_k : width;
  // pass 1: the top k, one block-wide argmax per round over the ids after the last one taken
  float last_value = INFINITY;
  int32_t last_id = -1;
  for (int round = 0; round < k; round++) {
    float value = -INFINITY;
    int32_t id = width;  // none yet: past the row, loses every comparison
    for (int32_t i = threadIdx.x; i < width; i += kThreads) {
      const float x = to_float(row[i]);
      const bool after_last = x < last_value || (x == last_value && i > last_id);
      if (after_last && (id == width || ranks_before(x, i, value, id))) {
        value = x;
        id = i;
      }
    }
    best_value[threadIdx.x] = value;
    best_id[threadIdx.x] = id;
    __syncthreads();
    for (int half = kThreads / 2; half > 0; half /= 2) {
      if (threadIdx.x < half) {
        const int other = threadIdx.x + half;
        if (best_id[other] < width &&
            (best_id[threadIdx.x] == width ||
             ranks_before(best_value[other], best_id[other], best_value[threadIdx.x], best_id[threadIdx.x]))) {
          best_value[threadIdx.x] = best_value[other];
          best_id[threadIdx.x] = best_id[other];
        }
      }
      __syncthreads();
    }
    last_value = best_value[0];
    last_id = best_id[0];
    if (threadIdx.x == 0) {
      ranked_value[round] = last_value;
      ranked_id[round] = last_id;
    }
    __syncthreads();  // best_* are rewritten by the next round
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
