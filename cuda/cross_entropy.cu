// Cross-entropy fused with the softmax, one block per row of logits.
//
// Forward reads each row once: every thread keeps an online logsumexp (cuda/online_lse.cuh), the
// block merges the pairs and writes lse and the row's loss lse - z_c; the rows' losses are
// summed by one reduction.
// Backward writes dz = (exp(z - lse) - onehot(c)) * k in one more pass. No probability tensor
// exists beyond the logits themselves.
#include "cuda/common.cuh"
#include "cuda/cross_entropy.h"
#include "cuda/math.h"
#include "cuda/online_lse.cuh"

namespace hla::cuda {
namespace {

constexpr int kThreads = 256;

// row_loss, row_valid: (N) fp32; NaN flags a target outside [0, V); row_valid is 1 where the
// row carries loss, else 0
template <class T>
__global__ void cross_entropy_forward_kernel(float* lse, float* row_loss, float* row_valid, const T* z,
                                             const int32_t* c, int64_t V, int32_t ignore) {
  const int64_t n = blockIdx.x;
  const T* zr = z + n * V;  // zr: (V)
  OnlineLse acc;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) acc.add(to_float(zr[v]));
  const OnlineLse row = block_lse(acc);
  if (threadIdx.x != 0) return;
  const float l = row.m + logf(row.s);  // lse = logsumexp(z)
  lse[n] = l;
  const int32_t target = c[n];
  row_valid[n] = target == ignore ? 0.0f : 1.0f;
  if (target == ignore) row_loss[n] = 0;
  else if (target < 0 || target >= V) row_loss[n] = NAN;
  else row_loss[n] = l - to_float(zr[target]);  // loss_row = lse - z_c
}

template <class T>
__global__ void cross_entropy_backward_kernel(T* dz, const T* z, const float* lse, const int32_t* c, int64_t V,
                                              int32_t ignore, float k) {
  const int64_t n = blockIdx.x;
  const int32_t target = c[n];
  const float l = lse[n], kk = target == ignore ? 0.0f : k;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x) {
    float p = __expf(to_float(z[n * V + v]) - l);               // softmax
    dz[n * V + v] = from_float<T>((p - (v == target ? 1.0f : 0.0f)) * kk);  // - onehot
  }
}

}  // namespace

double cross_entropy_forward(float* lse, const void* z, const int32_t* c, int64_t N, int64_t V, int32_t ignore,
                             int64_t* valid_rows, DType dtype) {
  *valid_rows = 0;
  if (N == 0) return 0;
  float* rows = static_cast<float*>(device_alloc(2 * N * sizeof(float)));  // rows: (2, N) loss, valid flag
  dispatch_storage(dtype, "cross_entropy_forward", [&](auto tag) {
    using T = decltype(tag);
    cross_entropy_forward_kernel<T><<<static_cast<unsigned>(N), kThreads>>>(lse, rows, rows + N,
                                                                            static_cast<const T*>(z), c, V, ignore);
  });
  CUDA_CHECK_LAUNCH();
  double total = reduce_sum(rows, DType::F32, N);
  *valid_rows = static_cast<int64_t>(reduce_sum(rows + N, DType::F32, N) + 0.5);  // exact: fp64 partial sums
  device_free(rows, 2 * N * sizeof(float));
  return total;
}

void cross_entropy_backward(void* dz, const void* z, const float* lse, const int32_t* c, int64_t N, int64_t V,
                            int32_t ignore, double dloss_over_valid, DType dtype) {
  if (N == 0) return;
  dispatch_storage(dtype, "cross_entropy_backward", [&](auto tag) {
    using T = decltype(tag);
    cross_entropy_backward_kernel<T><<<static_cast<unsigned>(N), kThreads>>>(
        static_cast<T*>(dz), static_cast<const T*>(z), lse, c, V, ignore, static_cast<float>(dloss_over_valid));
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace hla::cuda
