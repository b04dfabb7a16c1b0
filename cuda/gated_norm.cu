// Gated RMSNorm forward and backward on the GPU (mixers.md 2.3, 2.4), the same lines as the CPU
// reference in nn/ops/gated_norm.cpp.
//
// A "group row" is one group of G consecutive channels of one row: group row r = n * groups + gi
// covers x, z, y elements [r * G, r * G + G) and weights [gi * G, gi * G + G). One warp per group
// row (G is a head width, 64..256, or a Mamba-2 group of up to a few thousand channels); a block
// of 8 warps handles 8 group rows.
//   forward:  pass 1 warp-sums a^2 (a = x, or x * act(z) when the gate comes first), pass 2
//             writes y = a * rstd * w (* act(z) when the gate comes after)
//   backward: pass 1 writes dz of the post-norm gate and warp-sums a_hat * dy0 * w, pass 2 writes
//             dx (and dz of the pre-norm gate)
// dw = sum over rows of dy0 * a_hat is a column sum over the N rows: a second kernel writes fp32
// partial sums over slices of the rows, write_column_sums (cuda/reduce.cuh) sums them into dw (deterministic).
#include "cuda/reduce.cuh"
#include "cuda/gated_norm.h"

namespace hla::cuda {
namespace {

constexpr int kRowsPerBlock = 8;  // one warp per group row
constexpr int kThreads = 32 * kRowsPerBlock;
// Row slices of the dw partial sums: at least 256, and enough that the pass runs ~2^18 threads
// (one a column and slice: ~2k an SM of the H200) whatever C is. Its loads are independent but a
// thread's slice runs in sequence, so narrow rows need many slices: GDN's head width C = 256 over
// N = 65536 rows took 0.134 ms a call with 256 slices (H200, the GDN 3:1 hybrid's step).
constexpr int64_t kColumnParts = 256;
constexpr int64_t kColumnPassThreads = int64_t{1} << 18;

__device__ __forceinline__ float sigmoid_of(float v) { return 1.0f / (1.0f + expf(-v)); }
// act(z): swish z * s(z) or sigmoid s(z)
__device__ __forceinline__ float gate_act(float z, GateAct act) {
  const float s = sigmoid_of(z);
  return act == GateAct::Swish ? z * s : s;
}
// act'(z): swish s (1 + z (1 - s)) or sigmoid s (1 - s)
__device__ __forceinline__ float gate_act_grad(float z, GateAct act) {
  const float s = sigmoid_of(z);
  return act == GateAct::Swish ? s * (1.0f + z * (1.0f - s)) : s * (1.0f - s);
}
// The value normalised: x, or x * act(z) when the gate comes first.
__device__ __forceinline__ float norm_input(float x, float z, GateAct act, bool gate_after) {
  return gate_after ? x : x * gate_act(z, act);
}

template <class T>
__global__ void gated_rmsnorm_forward_kernel(T* y, float* rstd, const T* x, const T* z, const T* w, int64_t rows,
                                             int G, int groups, float eps, GateAct act, bool gate_after) {
  const int64_t r = blockIdx.x * (int64_t)kRowsPerBlock + threadIdx.x / 32;  // group row n * groups + gi
  if (r >= rows) return;  // the whole warp leaves together, so warp_sum sees all 32 lanes
  const int lane = threadIdx.x % 32;
  const int64_t base = r * G;          // = n * C + gi * G, first element of the group in x, z, y
  const T* wg = w + (r % groups) * G;  // wg: (G), the group's weights
  float sum_sq = 0;
  for (int c = lane; c < G; c += 32) {
    const float a = norm_input(to_float(x[base + c]), to_float(z[base + c]), act, gate_after);
    sum_sq += a * a;
  }
  const float rs = rsqrtf(warp_sum(sum_sq) / G + eps);  // rstd = 1/sqrt(mean(a^2) + eps)
  if (lane == 0) rstd[r] = rs;
  for (int c = lane; c < G; c += 32) {
    const float xc = to_float(x[base + c]), zc = to_float(z[base + c]);
    float out = norm_input(xc, zc, act, gate_after) * rs * to_float(wg[c]);  // a_hat * w
    if (gate_after) out *= gate_act(zc, act);                                 // * act(z)
    y[base + c] = from_float<T>(out);
  }
}

template <class T>
__global__ void gated_rmsnorm_backward_kernel(T* dx, T* dz, const T* dy, const T* x, const T* z, const T* w,
                                              const float* rstd, int64_t rows, int G, int groups, GateAct act,
                                              bool gate_after) {
  const int64_t r = blockIdx.x * (int64_t)kRowsPerBlock + threadIdx.x / 32;
  if (r >= rows) return;
  const int lane = threadIdx.x % 32;
  const int64_t base = r * G;
  const T* wg = w + (r % groups) * G;  // wg: (G)
  const float rs = rstd[r];
  // pass 1: dy0 = gradient of y0 = a_hat * w; mean(a_hat * dy0 * w) for the norm backward
  float dot = 0;
  for (int c = lane; c < G; c += 32) {
    const int64_t i = base + c;
    const float xc = to_float(x[i]), zc = to_float(z[i]), g = to_float(dy[i]), wc = to_float(wg[c]);
    const float a_hat = norm_input(xc, zc, act, gate_after) * rs;
    float dy0 = g;
    if (gate_after) {  // y = y0 * act(z)  =>  dz = dy * y0 * act'(z),  dy0 = dy * act(z)
      dz[i] = from_float<T>(g * a_hat * wc * gate_act_grad(zc, act));
      dy0 = g * gate_act(zc, act);
    }
    dot += a_hat * dy0 * wc;
  }
  const float mean_dot = warp_sum(dot) / G;
  // pass 2: a_hat = a * rstd(a)  =>  da = rstd * (dy0 * w - a_hat * mean(a_hat * dy0 * w))
  for (int c = lane; c < G; c += 32) {
    const int64_t i = base + c;
    const float xc = to_float(x[i]), zc = to_float(z[i]), g = to_float(dy[i]);
    const float a_hat = norm_input(xc, zc, act, gate_after) * rs;
    const float dy0 = gate_after ? g * gate_act(zc, act) : g;
    const float da = rs * (dy0 * to_float(wg[c]) - a_hat * mean_dot);
    if (gate_after) {
      dx[i] = from_float<T>(da);  // a = x
    } else {                      // a = x * act(z)  =>  dx = da * act(z),  dz = da * x * act'(z)
      dx[i] = from_float<T>(da * gate_act(zc, act));
      dz[i] = from_float<T>(da * xc * gate_act_grad(zc, act));
    }
  }
}

// y0 = a_hat * w  =>  dw = sum_rows dy0 * a_hat.  grid (column tiles, parts): part p sums rows
// p, p + parts, ... of column col into partial[p, col]; partial: (parts, C).
template <class T>
__global__ void gated_rmsnorm_dw_partial_kernel(float* partial, const T* dy, const T* x, const T* z,
                                                const float* rstd, int64_t N, int C, int G, GateAct act,
                                                bool gate_after) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= C) return;
  const int groups = C / G, gi = col / G;
  float sum = 0;
  for (int64_t n = blockIdx.y; n < N; n += gridDim.y) {
    const int64_t i = n * C + col;
    const float xc = to_float(x[i]), zc = to_float(z[i]), g = to_float(dy[i]);
    const float a_hat = norm_input(xc, zc, act, gate_after) * rstd[n * groups + gi];
    const float dy0 = gate_after ? g * gate_act(zc, act) : g;
    sum += dy0 * a_hat;
  }
  partial[blockIdx.y * (int64_t)C + col] = sum;
}

unsigned row_blocks(int64_t rows) { return static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock); }

}  // namespace

void gated_rmsnorm_forward(void* y, float* rstd, const void* x, const void* z, const void* w, const GatedNormDims& d,
                           DType dtype) {
  const int64_t N = d.N, C = d.C, G = d.G;
  if (N == 0) return;
  const int64_t groups = C / G, rows = N * groups;
  dispatch_storage(dtype, "gated_rmsnorm_forward", [&](auto tag) {
    using T = decltype(tag);
    gated_rmsnorm_forward_kernel<T><<<row_blocks(rows), kThreads>>>(
        static_cast<T*>(y), rstd, static_cast<const T*>(x), static_cast<const T*>(z), static_cast<const T*>(w), rows,
        static_cast<int>(G), static_cast<int>(groups), static_cast<float>(d.eps), d.act,
        d.order == GateOrder::NormThenGate);
  });
  CUDA_CHECK_LAUNCH();
}

void gated_rmsnorm_backward(void* dx, void* dz, void* dw, const void* dy, const void* x, const void* z, const void* w,
                            const float* rstd, const GatedNormDims& d, DType dtype) {
  const int64_t N = d.N, C = d.C, G = d.G;
  if (N == 0) return write_zeros(dw, C, dtype);  // no rows: dw = 0
  const int64_t groups = C / G, rows = N * groups;
  const GateAct act = d.act;
  const bool gate_after = d.order == GateOrder::NormThenGate;
  const int parts = static_cast<int>(std::min<int64_t>(N, std::max<int64_t>(kColumnParts, kColumnPassThreads / C)));
  const int col_threads = static_cast<int>(std::min<int64_t>(256, (C + 31) / 32 * 32));
  const dim3 col_grid(static_cast<unsigned>((C + col_threads - 1) / col_threads), static_cast<unsigned>(parts));
  const size_t partial_bytes = static_cast<size_t>(parts) * C * sizeof(float);
  float* partial = static_cast<float*>(device_alloc(partial_bytes));  // partial: (parts, C)
  dispatch_storage(dtype, "gated_rmsnorm_backward", [&](auto tag) {
    using T = decltype(tag);
    const T *dy_t = static_cast<const T*>(dy), *x_t = static_cast<const T*>(x), *z_t = static_cast<const T*>(z);
    gated_rmsnorm_backward_kernel<T><<<row_blocks(rows), kThreads>>>(
        static_cast<T*>(dx), static_cast<T*>(dz), dy_t, x_t, z_t, static_cast<const T*>(w), rstd, rows,
        static_cast<int>(G), static_cast<int>(groups), act, gate_after);
    CUDA_CHECK_LAUNCH();
    gated_rmsnorm_dw_partial_kernel<T><<<col_grid, col_threads>>>(partial, dy_t, x_t, z_t, rstd, N,
                                                                  static_cast<int>(C), static_cast<int>(G), act,
                                                                  gate_after);
    CUDA_CHECK_LAUNCH();
    write_column_sums(static_cast<T*>(dw), partial, parts, C);
  });
  CUDA_CHECK_LAUNCH();
  device_free(partial, partial_bytes);
}

}  // namespace hla::cuda
