// Online logsumexp for the softmax kernels (cuda/cross_entropy.cu, cuda/linear_cross_entropy.cu):
// a running max m and sum s of exp(z - m), rescaled when the max grows, and the merge of two
// pairs:  (m1, s1) + (m2, s2) = (m, s1 exp(m1 - m) + s2 exp(m2 - m)),  m = max(m1, m2).
#pragma once
#include "cuda/common.cuh"

namespace hla::cuda {

struct OnlineLse {
  float m = -INFINITY, s = 0;
  __device__ void add(float z) {
    if (z > m) {
      s = s * __expf(m - z) + 1.0f;  // exp(-inf) = 0 on the first element
      m = z;
    } else {
      s += __expf(z - m);
    }
  }
  __device__ void merge(float m2, float s2) {
    float mm = fmaxf(m, m2);
    if (mm == -INFINITY) return;
    s = s * __expf(m - mm) + s2 * __expf(m2 - mm);
    m = mm;
  }
};

// The merge of every thread's pair in the block (blockDim.x a multiple of 32, <= 1024); only
// thread 0's result is the block's. Contains one __syncthreads.
__device__ __forceinline__ OnlineLse block_lse(OnlineLse acc) {
  __shared__ float ms[32], ss[32];
  for (int o = 16; o > 0; o >>= 1)
    acc.merge(__shfl_xor_sync(0xffffffffu, acc.m, o), __shfl_xor_sync(0xffffffffu, acc.s, o));
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) {
    ms[warp] = acc.m;
    ss[warp] = acc.s;
  }
  __syncthreads();
  OnlineLse row;
  if (threadIdx.x == 0)
    for (int w = 0; w < blockDim.x / 32; w++) row.merge(ms[w], ss[w]);
  return row;
}

}  // namespace hla::cuda
