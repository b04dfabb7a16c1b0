// HGRN's per-layer lower bounds on the GPU (mixers.md section 6): one thread per channel d walks
// the L layers (L is the depth, tens; D the width), as the CPU reference does. Computed on the
// device so that a training step of an HGRN model copies nothing back to the host.
//   forward:  P = softmax over layers, lb_0 = 0, lb_i = lb_{i-1} + P_i
//   backward: dP_j = sum_{i >= j} dlb_i (j >= 1, dP_0 = 0), dz = P * (dP - sum_l P dP)
#include "cuda/common.cuh"
#include "cuda/lower_bounds.h"

namespace hla::cuda {
namespace {

template <class T>
__global__ void lower_bounds_forward_kernel(T* lb, float* P, const T* z, int64_t L, int64_t D) {
  for (int64_t d = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; d < D; d += (int64_t)gridDim.x * blockDim.x) {
    float m = to_float(z[d]);
    for (int64_t l = 1; l < L; l++) m = fmaxf(m, to_float(z[l * D + d]));
    float s = 0;
    for (int64_t l = 0; l < L; l++) s += expf(to_float(z[l * D + d]) - m);
    float running = 0;  // lb_0 = 0
    for (int64_t l = 0; l < L; l++) {
      const float p = expf(to_float(z[l * D + d]) - m) / s;  // P = softmax_L(z)
      P[l * D + d] = p;
      if (l > 0) running += p;  // lb_i = sum_{1..i} P_j
      lb[l * D + d] = from_float<T>(running);
    }
  }
}

template <class T>
__global__ void lower_bounds_backward_kernel(T* dz, const T* dlb, const float* P, int64_t L, int64_t D) {
  for (int64_t d = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; d < D; d += (int64_t)gridDim.x * blockDim.x) {
    float suffix = 0, dot = 0;  // dP_l = sum_{i >= l} dlb_i; dot = sum_l P_l dP_l
    for (int64_t l = L - 1; l >= 1; l--) {
      suffix += to_float(dlb[l * D + d]);
      dot += P[l * D + d] * suffix;
    }
    dz[d] = from_float<T>(-P[d] * dot);  // dP_0 = 0
    suffix = 0;
    for (int64_t l = L - 1; l >= 1; l--) {
      suffix += to_float(dlb[l * D + d]);
      dz[l * D + d] = from_float<T>(P[l * D + d] * (suffix - dot));
    }
  }
}

}  // namespace

void lower_bounds_forward(void* lb, float* P, const void* z, int64_t L, int64_t D, DType dtype) {
  launch_elementwise(dtype, "lower_bounds_forward", D, [&](auto tag) {
    using T = decltype(tag);
    lower_bounds_forward_kernel<T><<<grid_1d(D), 256>>>(static_cast<T*>(lb), P, static_cast<const T*>(z), L, D);
  });
}

void lower_bounds_backward(void* dz, const void* dlb, const float* P, int64_t L, int64_t D, DType dtype) {
  launch_elementwise(dtype, "lower_bounds_backward", D, [&](auto tag) {
    using T = decltype(tag);
    lower_bounds_backward_kernel<T><<<grid_1d(D), 256>>>(static_cast<T*>(dz), static_cast<const T*>(dlb), P, L, D);
  });
}

}  // namespace hla::cuda
