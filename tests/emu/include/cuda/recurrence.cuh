// Emulated: recurrence::group_sum on the host (out[n, h, :] = sum over the G value heads of h).
#pragma once
#include "cuda/common.cuh"

namespace hla::cuda::recurrence {

template <class D>
void group_sum(D* out, const float* in, int64_t N, int64_t H, int64_t G, int64_t W) {
  for (int64_t n = 0; n < N; n++)
    for (int64_t h = 0; h < H; h++)
      for (int64_t w = 0; w < W; w++) {
        float s = 0.f;
        for (int64_t g = 0; g < G; g++) s += in[((n * H + h) * G + g) * W + w];
        out[(n * H + h) * W + w] = __float2bfloat16_rn(s);
      }
}

}  // namespace hla::cuda::recurrence
