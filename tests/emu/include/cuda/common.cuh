// Emulated cuda/common.cuh: the helpers the chunk, attention and short conv kernels use, on the host.
#pragma once
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "tensor/dtype.h"
#include "tensor/error.h"

#define CUDA_CHECK(x) (void)(x)
#define CUDA_CHECK_LAUNCH() (void)0
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize, cudaFuncAttributePreferredSharedMemoryCarveout };
constexpr int cudaSharedmemCarveoutMaxShared = 100;
template <class K> inline int cudaFuncSetAttribute(K, cudaFuncAttribute, int) { return 0; }
// One host stream: launches run in order, so the side stream (cuda/runtime.h) is hla's stream.
using cudaStream_t = void*;
inline cudaStream_t const cudaStreamPerThread = nullptr;

namespace hla::cuda {

inline cudaStream_t fork_side_stream() { return cudaStreamPerThread; }
inline void join_side_stream() {}
inline void memset_zero(void* ptr, size_t bytes) { std::memset(ptr, 0, bytes); }

inline float to_float(float v) { return v; }
inline float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class T> T from_float(float v);
template <> inline float from_float<float>(float v) { return v; }
template <> inline __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
// cuda/common.cuh's fast_sigmoid in exact arithmetic (its ~1e-6 relative error is the hardware's)
inline float fast_sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }

template <class Fn>
void dispatch_storage(DType dtype, const char* op, Fn&& fn) {
  if (dtype == DType::F32) fn(float{});
  else if (dtype == DType::BF16) fn(__nv_bfloat16{});
  else fail(op, ": CUDA kernels take F32 or BF16, got ", dtype_name(dtype));
}

inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <class T> constexpr int kVecWidth = 16 / sizeof(T);
template <class T, int W>
struct alignas(W * sizeof(T)) Vec {
  T v[W];
};
template <int W> using Width = std::integral_constant<int, W>;
template <int W, class T>
inline Vec<T, W> load_vec(const T* p) {
  return *reinterpret_cast<const Vec<T, W>*>(p);
}
template <int W, class T>
inline void to_floats(float (&out)[W], const Vec<T, W>& v) {
  for (int k = 0; k < W; k++) out[k] = to_float(v.v[k]);
}
template <int W, class T>
inline void load_floats(float (&out)[W], const T* p) {
  to_floats(out, load_vec<W>(p));
}
template <int W, class T>
inline void store_floats(T* p, const float (&in)[W]) {
  Vec<T, W> v;
  for (int k = 0; k < W; k++) v.v[k] = from_float<T>(in[k]);
  *reinterpret_cast<Vec<T, W>*>(p) = v;
}
template <class T, class Fn, class... Ptrs>
void dispatch_width(Fn&& fn, const Ptrs*... ptrs) {
  if ((aligned16(ptrs) && ...)) fn(Width<kVecWidth<T>>{});
  else fn(Width<1>{});
}

// One emulated SM: the short convolution's plan_runs cuts the small cases' runs (and gives them
// one-warp blocks) while a wider case keeps its full runs, so the tests take both.
inline int sm_count() { return 1; }

inline int grid_1d(int64_t n, int block = 256) {
  return static_cast<int>(std::min<int64_t>((n + block - 1) / block, 65535));
}
#define HLA_GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

// Scratch filled with 0xff (NaN) so that a read of an unwritten element shows.
template <class T>
class Scratch {
 public:
  explicit Scratch(int64_t n) : n_(std::max<int64_t>(n, 1)), ptr_(static_cast<T*>(aligned_alloc(64, ((n_ * sizeof(T) + 63) / 64) * 64))) {
    std::memset(ptr_, 0xff, n_ * sizeof(T));
  }
  ~Scratch() { free(ptr_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  T* get() const { return ptr_; }

 private:
  int64_t n_;
  T* ptr_;
};
using FloatScratch = Scratch<float>;

inline float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
inline float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = std::fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
inline float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : 0.0f;
  v = warp_sum(v);
  __syncthreads();
  return v;
}

}  // namespace hla::cuda
