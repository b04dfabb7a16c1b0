// Helpers shared by the CUDA kernels: bf16/f32 load-store, dtype dispatch, grid sizing.
#pragma once
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>

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

// A launch over n elements: nothing when n == 0, else fn(float{}) or fn(__nv_bfloat16{}) for
// the storage dtype (fn launches the kernel), then the launch check.
template <class Fn>
void launch_elementwise(DType dtype, const char* op, int64_t n, Fn&& fn) {
  if (n == 0) return;
  dispatch_storage(dtype, op, fn);
  CUDA_CHECK_LAUNCH();
}

// Whether p allows 16-byte vector loads (the chunked kernels' tile loads need it).
inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

inline int grid_1d(int64_t n, int block = 256) {
  return static_cast<int>(std::min<int64_t>((n + block - 1) / block, 65535));
}

// Launches kernel over n elements (grid_1d(n, block) blocks of `block` threads) and checks the
// launch; nothing when n == 0.
template <class... Params, class... Args>
void launch_1d(void (*kernel)(Params...), int64_t n, int block, Args... args) {
  if (n == 0) return;
  kernel<<<grid_1d(n, block), block>>>(args...);
  CUDA_CHECK_LAUNCH();
}

// Device scratch of n elements of T that frees itself (through the caching allocator, so it is
// cheap).
template <class T>
class Scratch {
 public:
  explicit Scratch(int64_t n)
      : bytes_(static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(T)), ptr_(static_cast<T*>(device_alloc(bytes_))) {}
  ~Scratch() { device_free(ptr_, bytes_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  T* get() const { return ptr_; }

 private:
  size_t bytes_;
  T* ptr_;
};
using FloatScratch = Scratch<float>;

#define HLA_GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

}  // namespace hla::cuda

namespace hla::cuda {

// Warp-wide sum and max (every lane gets the result).
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Block-wide sum for blockDim.x a multiple of 32 (<= 1024); every thread gets the result.
// `scratch` holds 32 floats of shared memory; the call contains two __syncthreads.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : 0.0f;
  v = warp_sum(v);
  __syncthreads();  // scratch may be reused right after
  return v;
}

}  // namespace hla::cuda
