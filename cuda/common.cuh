// Helpers shared by the CUDA kernels: bf16/f32 load-store, dtype dispatch, grid sizing.
#pragma once
#include <cuda_bf16.h>

#include <algorithm>

#include "cuda/runtime.h"
#include "tensor/dtype.h"

namespace hla::cuda {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Calls fn(float{}) or fn(__nv_bfloat16{}) for the storage dtype.
template <class Fn>
void dispatch_storage(DType dtype, const char* op, Fn&& fn) {
  if (dtype == DType::F32) fn(float{});
  else if (dtype == DType::BF16) fn(__nv_bfloat16{});
  else fail(op, ": CUDA kernels take F32 or BF16, got ", dtype_name(dtype));
}

inline int grid_1d(int64_t n, int block = 256) {
  return static_cast<int>(std::min<int64_t>((n + block - 1) / block, 65535));
}

#define HLA_GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

}  // namespace hla::cuda
