// GroupNorm / LayerNorm forward and backward on the GPU (mixers.md 2.2), the same lines as the
// CPU reference in nn/ops/group_norm.cpp.
//
// A "group row" is one group of G consecutive channels of one row: group row r = n * groups + gi
// covers x, y elements [r * G, r * G + G) and weights/biases [gi * G, gi * G + G). One warp per
// group row (an RWKV-6 head of 64 channels, or a LayerNorm row of the hidden size); a block of
// 8 warps handles 8 group rows.
//   forward:  warp sum for mu, a second pass for the variance about mu (no cancellation), then
//             y = x_hat * w + b
//   backward: warp sums of dyw and x_hat * dyw, then dx
// dw = sum_rows dy * x_hat and db = sum_rows dy are column sums over the N rows: a second kernel
// writes fp32 partial sums over slices of the rows, write_column_sums (cuda/reduce.cuh) sums them
// into dw, db (deterministic).
#include "cuda/reduce.cuh"
#include "cuda/group_norm.h"

namespace hla::cuda {
namespace {

constexpr int kRowsPerBlock = 8;  // one warp per group row
constexpr int kThreads = 32 * kRowsPerBlock;
constexpr int64_t kColumnParts = 256;  // row slices of the dw, db partial sums

template <class T>
__global__ void group_norm_forward_kernel(T* y, float* mean, float* rstd, const T* x, const T* w, const T* b,
                                          int64_t rows, int G, int groups, float eps) {
  const int64_t r = blockIdx.x * (int64_t)kRowsPerBlock + threadIdx.x / 32;  // group row n * groups + gi
  if (r >= rows) return;  // the whole warp leaves together, so warp_sum sees all 32 lanes
  const int lane = threadIdx.x % 32;
  const T* xg = x + r * G;                // xg: (G), = x + n * C + gi * G
  const int64_t wc0 = (r % groups) * G;  // first weight/bias channel of the group
  float sum = 0;
  for (int c = lane; c < G; c += 32) sum += to_float(xg[c]);
  const float mu = warp_sum(sum) / G;  // mu = mean(x)
  float sum_sq = 0;
  for (int c = lane; c < G; c += 32) {
    const float d = to_float(xg[c]) - mu;
    sum_sq += d * d;
  }
  const float rs = rsqrtf(warp_sum(sum_sq) / G + eps);  // rstd = 1/sqrt(mean((x-mu)^2) + eps)
  if (lane == 0) {
    mean[r] = mu;
    rstd[r] = rs;
  }
  for (int c = lane; c < G; c += 32) {
    const float bias = b ? to_float(b[wc0 + c]) : 0.0f;
    y[r * G + c] = from_float<T>((to_float(xg[c]) - mu) * rs * to_float(w[wc0 + c]) + bias);  // y = x_hat * w + b
  }
}

template <class T>
__global__ void group_norm_backward_kernel(T* dx, const T* dy, const T* x, const T* w, const float* mean,
                                           const float* rstd, int64_t rows, int G, int groups) {
  const int64_t r = blockIdx.x * (int64_t)kRowsPerBlock + threadIdx.x / 32;
  if (r >= rows) return;
  const int lane = threadIdx.x % 32;
  const int64_t base = r * G;            // first element of the group in x, dy, dx
  const int64_t wc0 = (r % groups) * G;  // first weight channel of the group
  const float mu = mean[r], rs = rstd[r];
  float sum_dyw = 0, sum_xhat_dyw = 0;  // over the group, dyw = dy * w
  for (int c = lane; c < G; c += 32) {
    const float x_hat = (to_float(x[base + c]) - mu) * rs, dyw = to_float(dy[base + c]) * to_float(w[wc0 + c]);
    sum_dyw += dyw;
    sum_xhat_dyw += x_hat * dyw;
  }
  const float mean_dyw = warp_sum(sum_dyw) / G, mean_xhat_dyw = warp_sum(sum_xhat_dyw) / G;
  for (int c = lane; c < G; c += 32) {  // x_hat = (x - mean(x)) * rstd(x)  =>
    const float x_hat = (to_float(x[base + c]) - mu) * rs;  // dx = rstd * (dyw - x_hat * mean(x_hat * dyw) - mean(dyw))
    const float dyw = to_float(dy[base + c]) * to_float(w[wc0 + c]);
    dx[base + c] = from_float<T>(rs * (dyw - x_hat * mean_xhat_dyw - mean_dyw));
  }
}

// y = x_hat * w + b  =>  dw = sum_rows dy * x_hat,  db = sum_rows dy.  grid (column tiles, parts):
// part p sums rows p, p + parts, ... of column col; dw_partial, db_partial: (parts, C),
// db_partial null when there is no bias.
template <class T>
__global__ void group_norm_param_partial_kernel(float* dw_partial, float* db_partial, const T* dy, const T* x,
                                                const float* mean, const float* rstd, int64_t N, int C, int G) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= C) return;
  const int groups = C / G, gi = col / G;
  float sum_w = 0, sum_b = 0;
  for (int64_t n = blockIdx.y; n < N; n += gridDim.y) {
    const int64_t i = n * C + col, r = n * groups + gi;
    const float g = to_float(dy[i]);
    sum_w += g * (to_float(x[i]) - mean[r]) * rstd[r];
    sum_b += g;
  }
  dw_partial[blockIdx.y * (int64_t)C + col] = sum_w;
  if (db_partial) db_partial[blockIdx.y * (int64_t)C + col] = sum_b;
}

unsigned row_blocks(int64_t rows) { return static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock); }

}  // namespace

void group_norm_forward(void* y, float* mean, float* rstd, const void* x, const void* w, const void* b, int64_t N,
                        int64_t C, int64_t G, double eps, DType dtype) {
  if (N == 0) return;
  const int64_t groups = C / G, rows = N * groups;
  dispatch_storage(dtype, "group_norm_forward", [&](auto tag) {
    using T = decltype(tag);
    group_norm_forward_kernel<T><<<row_blocks(rows), kThreads>>>(
        static_cast<T*>(y), mean, rstd, static_cast<const T*>(x), static_cast<const T*>(w),
        static_cast<const T*>(b), rows, static_cast<int>(G), static_cast<int>(groups), static_cast<float>(eps));
  });
  CUDA_CHECK_LAUNCH();
}

void group_norm_backward(void* dx, void* dw, void* db, const void* dy, const void* x, const void* w, const float* mean,
                         const float* rstd, int64_t N, int64_t C, int64_t G, DType dtype) {
  if (N == 0) {  // no rows: dw = db = 0
    write_zeros(dw, C, dtype);
    write_zeros(db, C, dtype);
    return;
  }
  const int64_t groups = C / G, rows = N * groups;
  const int parts = static_cast<int>(std::min<int64_t>(N, kColumnParts));
  const int col_threads = static_cast<int>(std::min<int64_t>(256, (C + 31) / 32 * 32));
  const dim3 col_grid(static_cast<unsigned>((C + col_threads - 1) / col_threads), static_cast<unsigned>(parts));
  const size_t partial_bytes = 2 * static_cast<size_t>(parts) * C * sizeof(float);
  float* partial = static_cast<float*>(device_alloc(partial_bytes));  // partial: (2, parts, C), dw's then db's
  float* db_partial = db ? partial + static_cast<int64_t>(parts) * C : nullptr;
  dispatch_storage(dtype, "group_norm_backward", [&](auto tag) {
    using T = decltype(tag);
    const T *dy_t = static_cast<const T*>(dy), *x_t = static_cast<const T*>(x);
    group_norm_backward_kernel<T><<<row_blocks(rows), kThreads>>>(static_cast<T*>(dx), dy_t, x_t,
                                                                  static_cast<const T*>(w), mean, rstd, rows,
                                                                  static_cast<int>(G), static_cast<int>(groups));
    CUDA_CHECK_LAUNCH();
    group_norm_param_partial_kernel<T><<<col_grid, col_threads>>>(partial, db_partial, dy_t, x_t, mean, rstd, N,
                                                                  static_cast<int>(C), static_cast<int>(G));
    CUDA_CHECK_LAUNCH();
    write_column_sums(static_cast<T*>(dw), partial, parts, C);
    if (db) write_column_sums(static_cast<T*>(db), db_partial, parts, C);
  });
  CUDA_CHECK_LAUNCH();
  device_free(partial, partial_bytes);
}

}  // namespace hla::cuda
