// Emulated: write_column_sums on the host, the device kernel's order (chunk by chunk).
#pragma once
#include "cuda/common.cuh"

namespace hla::cuda {

template <class T>
void write_column_sums(T* out, const float* partial, int chunks, int64_t cols) {
  for (int64_t c = 0; c < cols; c++) {
    float s = 0;
    for (int b = 0; b < chunks; b++) s += partial[b * cols + c];
    out[c] = __float2bfloat16_rn(s);
  }
}

}  // namespace hla::cuda
