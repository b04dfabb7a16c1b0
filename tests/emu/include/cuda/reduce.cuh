// Emulated: write_column_sums and write_zeros on the host, the device kernel's order (chunk by chunk).
#pragma once
#include "cuda/common.cuh"

namespace hla::cuda {

inline void write_zeros(void* out, int64_t n, DType dtype) {
  if (out) std::memset(out, 0, static_cast<size_t>(n) * dtype_size(dtype));
}

template <class T>
void write_column_sums(T* out, const float* partial, int chunks, int64_t cols) {
  for (int64_t c = 0; c < cols; c++) {
    float s = 0;
    for (int b = 0; b < chunks; b++) s += partial[b * cols + c];
    out[c] = from_float<T>(s);
  }
}

}  // namespace hla::cuda
