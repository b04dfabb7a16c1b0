// Emulated cuda/l2norm.h: l2norm_forward on the host, cuda/l2norm.cu's math in fp32 (rstd =
// rsqrt(sum(x^2) + eps), y = x * rstd), for the short convolution's unfused norm (the case its
// fused kernel does not take). y may be x: a row is read before it is written.
#pragma once
#include "cuda/common.cuh"

namespace hla::cuda {

// x, y: (N, C), rstd: (N)
inline void l2norm_forward(void* y, float* rstd, const void* x, int64_t N, int64_t C, double eps, DType dtype) {
  dispatch_storage(dtype, "l2norm_forward", [&](auto tag) {
    using T = decltype(tag);
    for (int64_t n = 0; n < N; n++) {
      const T* xr = static_cast<const T*>(x) + n * C;  // xr: (C)
      T* yr = static_cast<T*>(y) + n * C;              // yr: (C)
      float sum_sq = 0;
      for (int64_t c = 0; c < C; c++) sum_sq += to_float(xr[c]) * to_float(xr[c]);
      rstd[n] = rsqrtf(sum_sq + static_cast<float>(eps));
      for (int64_t c = 0; c < C; c++) yr[c] = from_float<T>(to_float(xr[c]) * rstd[n]);
    }
  });
}

}  // namespace hla::cuda
