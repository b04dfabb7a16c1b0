// RMSNorm forward and backward on the GPU (mixers.md 2.1), one block per row.
//
// Forward: pass 1 sums x^2 over the row (block reduction), pass 2 writes y = x * rstd * w.
// Backward: dx needs one more row reduction, mean(x_hat * dy * w). dw = sum_rows(dy * x_hat)
// is a column sum over all N rows: each block keeps fp32 partial sums for its rows in shared
// memory and writes them to a (blocks, C) scratch buffer; write_column_sums (cuda/reduce.cuh)
// writes their column sums into dw. No atomics, so dw is deterministic.
#include "cuda/reduce.cuh"
#include "cuda/rmsnorm.h"

namespace hla::cuda {
namespace {

constexpr int kThreads = 256;

template <class T>
__global__ void rmsnorm_forward_kernel(T* y, float* rstd, const T* x, const T* w, int64_t N, int C, float eps) {
  __shared__ float scratch[32];
  const int64_t n = blockIdx.x;
  const T* xr = x + n * C;  // xr: (C)
  // pass 1: mean(x^2)
  float ss = 0;
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    float v = to_float(xr[c]);
    ss += v * v;
  }
  const float r = rsqrtf(block_sum(ss, scratch) / C + eps);  // rstd = 1/sqrt(mean(x^2) + eps)
  if (threadIdx.x == 0) rstd[n] = r;
  // pass 2: y = x * rstd * w
  for (int c = threadIdx.x; c < C; c += blockDim.x) y[n * C + c] = from_float<T>(to_float(xr[c]) * r * to_float(w[c]));
}

// dw_partial: (gridDim.x, C) fp32; block b handles rows b, b + gridDim.x, ...
template <class T>
__global__ void rmsnorm_backward_kernel(T* dx, float* dw_partial, const T* dy, const T* x, const T* w,
                                       const float* rstd, int64_t N, int C) {
  extern __shared__ float dw_acc[];  // dw_acc: (C) this block's share of dw
  __shared__ float scratch[32];
  for (int c = threadIdx.x; c < C; c += blockDim.x) dw_acc[c] = 0;
  for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
    const T* xr = x + n * C;
    const T* dyr = dy + n * C;
    const float r = rstd[n];
    float dot = 0;  // sum(x_hat * dy * w), x_hat = x * rstd
    for (int c = threadIdx.x; c < C; c += blockDim.x) {
      float xhat = to_float(xr[c]) * r, g = to_float(dyr[c]);
      dot += xhat * g * to_float(w[c]);
      dw_acc[c] += g * xhat;  // y = x_hat * w  =>  dw = sum_rows dy * x_hat
    }
    const float mean_dot = block_sum(dot, scratch) / C;
    for (int c = threadIdx.x; c < C; c += blockDim.x) {  // dx = rstd * (dy w - x_hat * mean(x_hat dy w))
      float xhat = to_float(xr[c]) * r;
      dx[n * C + c] = from_float<T>(r * (to_float(dyr[c]) * to_float(w[c]) - xhat * mean_dot));
    }
  }
  for (int c = threadIdx.x; c < C; c += blockDim.x) dw_partial[blockIdx.x * (int64_t)C + c] = dw_acc[c];
}

}  // namespace

void rmsnorm_forward(void* y, float* rstd, const void* x, const void* w, int64_t N, int64_t C, double eps, DType dtype) {
  if (N == 0) return;
  dispatch_storage(dtype, "rmsnorm_forward", [&](auto tag) {
    using T = decltype(tag);
    rmsnorm_forward_kernel<T><<<static_cast<unsigned>(N), kThreads>>>(
        static_cast<T*>(y), rstd, static_cast<const T*>(x), static_cast<const T*>(w), N, static_cast<int>(C),
        static_cast<float>(eps));
  });
  CUDA_CHECK_LAUNCH();
}

void rmsnorm_backward(void* dx, void* dw, const void* dy, const void* x, const void* w, const float* rstd, int64_t N,
                      int64_t C, DType dtype) {
  if (N == 0) return write_zeros(dw, C, dtype);  // no rows: dw = 0
  const size_t smem = static_cast<size_t>(C) * sizeof(float);
  HLA_CHECK(smem <= 200 * 1024, "rmsnorm_backward: C = ", C, " is too wide for the shared-memory dw partials");
  const int blocks = static_cast<int>(std::min<int64_t>(N, 2 * 132));
  float* partial = static_cast<float*>(device_alloc(blocks * smem));  // partial: (blocks, C)
  dispatch_storage(dtype, "rmsnorm_backward", [&](auto tag) {
    using T = decltype(tag);
    auto kernel = rmsnorm_backward_kernel<T>;
    if (smem > 48 * 1024) CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    kernel<<<blocks, kThreads, smem>>>(static_cast<T*>(dx), partial, static_cast<const T*>(dy),
                                       static_cast<const T*>(x), static_cast<const T*>(w), rstd, N, static_cast<int>(C));
    CUDA_CHECK_LAUNCH();
    write_column_sums(static_cast<T*>(dw), partial, blocks, C);
  });
  CUDA_CHECK_LAUNCH();
  device_free(partial, blocks * smem);
}

}  // namespace hla::cuda
