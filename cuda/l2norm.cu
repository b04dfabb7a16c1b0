// L2 normalisation forward and backward on the GPU (mixers.md 2.5), one warp per row: q/k rows
// are short (dk = 64..256), so a warp covers a row in a few coalesced passes and a block of
// 8 warps handles 8 rows.
//   forward:  rstd = 1 / sqrt(sum(x^2) + eps) (warp sum), then y = x * rstd
//   backward: dx = rstd * (dy - (dy . y) y)   (warp dot, then the elementwise line)
#include "cuda/common.cuh"
#include "cuda/l2norm.h"

namespace hla::cuda {
namespace {

constexpr int kRowsPerBlock = 8;  // one warp per row
constexpr int kThreads = 32 * kRowsPerBlock;

template <class T>
__global__ void l2norm_forward_kernel(T* y, float* rstd, const T* x, int64_t N, int C, float eps) {
  const int64_t n = blockIdx.x * (int64_t)kRowsPerBlock + threadIdx.x / 32;
  if (n >= N) return;  // the whole warp leaves together, so warp_sum sees all 32 lanes
  const int lane = threadIdx.x % 32;
  const T* xr = x + n * C;  // xr: (C)
  T* yr = y + n * C;        // yr: (C)
  float sum_sq = 0;
  for (int c = lane; c < C; c += 32) {
    const float v = to_float(xr[c]);
    sum_sq += v * v;
  }
  const float r = rsqrtf(warp_sum(sum_sq) + eps);  // rstd = 1/sqrt(sum(x^2) + eps)
  if (lane == 0) rstd[n] = r;
  for (int c = lane; c < C; c += 32) yr[c] = from_float<T>(to_float(xr[c]) * r);  // y = x * rstd
}

template <class T>
__global__ void l2norm_backward_kernel(T* dx, const T* dy, const T* y, const float* rstd, int64_t N, int C) {
  const int64_t n = blockIdx.x * (int64_t)kRowsPerBlock + threadIdx.x / 32;
  if (n >= N) return;
  const int lane = threadIdx.x % 32;
  const T* yr = y + n * C;    // yr: (C)
  const T* dyr = dy + n * C;  // dyr: (C)
  float dot = 0;
  for (int c = lane; c < C; c += 32) dot += to_float(dyr[c]) * to_float(yr[c]);
  const float dy_dot_y = warp_sum(dot);
  const float r = rstd[n];
  // y = x * rstd(x)  =>  dx = rstd * (dy - (dy . y) * y)
  for (int c = lane; c < C; c += 32)
    dx[n * C + c] = from_float<T>(r * (to_float(dyr[c]) - dy_dot_y * to_float(yr[c])));
}

unsigned row_blocks(int64_t N) { return static_cast<unsigned>((N + kRowsPerBlock - 1) / kRowsPerBlock); }

}  // namespace

void l2norm_forward(void* y, float* rstd, const void* x, int64_t N, int64_t C, double eps, DType dtype) {
  if (N == 0) return;
  dispatch_storage(dtype, "l2norm_forward", [&](auto tag) {
    using T = decltype(tag);
    l2norm_forward_kernel<T><<<row_blocks(N), kThreads>>>(static_cast<T*>(y), rstd, static_cast<const T*>(x), N,
                                                          static_cast<int>(C), static_cast<float>(eps));
  });
  CUDA_CHECK_LAUNCH();
}

void l2norm_backward(void* dx, const void* dy, const void* y, const float* rstd, int64_t N, int64_t C, DType dtype) {
  if (N == 0) return;
  dispatch_storage(dtype, "l2norm_backward", [&](auto tag) {
    using T = decltype(tag);
    l2norm_backward_kernel<T><<<row_blocks(N), kThreads>>>(static_cast<T*>(dx), static_cast<const T*>(dy),
                                                           static_cast<const T*>(y), rstd, N, static_cast<int>(C));
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace hla::cuda
