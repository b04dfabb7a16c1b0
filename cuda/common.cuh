// Helpers shared by the CUDA kernels: bf16/f32 load-store, 16-byte vector load-store, dtype
// dispatch, grid sizing.
#pragma once
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

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

// sigmoid(v) = 1 / (1 + exp(-v)) in IEEE expf and division
__device__ __forceinline__ float sigmoid_of(float v) { return 1.0f / (1.0f + expf(-v)); }
// The same on the fast paths, MUFU.EX2 and MUFU.RCP (~1e-6 relative; 0 for v < -88), where the
// activation is most of a kernel's instructions (cuda/short_conv.cu: IEEE expf and division were).
__device__ __forceinline__ float fast_sigmoid(float v) { return __fdividef(1.0f, 1.0f + __expf(-v)); }

// W consecutive elements of T moved by one load or store (alignas makes W * sizeof(T) = 16
// bytes a single 128-bit access). kVecWidth<T> elements fill 16 bytes: 8 bf16 or 4 fp32.
template <class T> constexpr int kVecWidth = 16 / sizeof(T);
template <class T, int W>
struct alignas(W * sizeof(T)) Vec {
  T v[W];
};
template <int W> using Width = std::integral_constant<int, W>;

// p[0 .. W) in one load; p aligned to W * sizeof(T).
template <int W, class T>
__device__ __forceinline__ Vec<T, W> load_vec(const T* p) {
  return *reinterpret_cast<const Vec<T, W>*>(p);
}
template <int W, class T>
__device__ __forceinline__ void to_floats(float (&out)[W], const Vec<T, W>& v) {
#pragma unroll
  for (int k = 0; k < W; k++) out[k] = to_float(v.v[k]);
}
// out[k] = p[k] for k < W as floats; p aligned to W * sizeof(T).
template <int W, class T>
__device__ __forceinline__ void load_floats(float (&out)[W], const T* p) {
  to_floats(out, load_vec<W>(p));
}
// p[k] = in[k] for k < W, rounded to T; p aligned to W * sizeof(T).
template <int W, class T>
__device__ __forceinline__ void store_floats(T* p, const float (&in)[W]) {
  Vec<T, W> v;
#pragma unroll
  for (int k = 0; k < W; k++) v.v[k] = from_float<T>(in[k]);
  *reinterpret_cast<Vec<T, W>*>(p) = v;
}

// Grid-stride over n elements in groups of W: fn(i, Width<W>{}) for each full group [i, i + W),
// then fn(i, Width<1>{}) for each of the n % W elements left (the tail).
template <int W, class Fn>
__device__ __forceinline__ void for_each_group(int64_t n, Fn&& fn) {
  const int64_t groups = n / W, stride = (int64_t)gridDim.x * blockDim.x;
  const int64_t first = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  for (int64_t g = first; g < groups; g += stride) fn(g * W, Width<W>{});
  for (int64_t i = groups * W + first; i < n; i += stride) fn(i, Width<1>{});
}

// out[i] = f(a[i], b[i]) for i < n in floats, groups of W as for_each_group; out may be a or b.
template <int W, class T, class F>
__device__ __forceinline__ void map_pairs(T* out, const T* a, const T* b, int64_t n, F f) {
  for_each_group<W>(n, [&](int64_t i, auto width) {
    constexpr int w = decltype(width)::value;
    float x[w], y[w], r[w];
    load_floats(x, a + i);
    load_floats(y, b + i);
#pragma unroll
    for (int k = 0; k < w; k++) r[k] = f(x[k], y[k]);
    store_floats(out + i, r);
  });
}

// Whether p allows 16-byte vector loads (the chunked kernels' tile loads need it).
inline bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Calls fn(Width<kVecWidth<T>>{}) when every pointer is 16-byte aligned, else fn(Width<1>{})
// (a view that starts mid-vector runs the scalar loads).
template <class T, class Fn, class... Ptrs>
void dispatch_width(Fn&& fn, const Ptrs*... ptrs) {
  if ((aligned16(ptrs) && ...)) fn(Width<kVecWidth<T>>{});
  else fn(Width<1>{});
}

// The number of SMs of the current device (asked once).
inline int sm_count() {
  static const int sms = [] {
    int device = 0, count = 0;
    CUDA_CHECK(cudaGetDevice(&device));
    CUDA_CHECK(cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device));
    return count;
  }();
  return sms;
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
