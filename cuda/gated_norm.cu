// Gated RMSNorm forward and backward on the GPU (mixers.md 2.3, 2.4), the same lines as the CPU
// reference in nn/ops/gated_norm.cpp.
//
// A "group row" is one group of G consecutive channels of one row: group row r = n * groups + gi
// covers x, z, y elements [r * G, r * G + G) and weights [gi * G, gi * G + G). One warp per group
// row (G is a head width, 64..256, or a Mamba-2 group of up to a few thousand channels); a block
// of 8 warps handles 8 group rows. A lane takes W consecutive channels at a time: 16 bytes of T
// (8 bf16, one load a tensor at G = 256) when G is a multiple of that and the pointers allow it,
// else 1 (dispatch_group_width).
//   forward:  pass 1 warp-sums a^2 (a = x, or x * act(z) when the gate comes first), pass 2
//             writes y = a * rstd * w (* act(z) when the gate comes after)
//   backward: pass 1 writes dz of the post-norm gate and warp-sums a_hat * dy0 * w, pass 2 writes
//             dx (and dz of the pre-norm gate)
// dw = sum over rows of dy0 * a_hat is a column sum over the N rows: with one group a row (C = G:
// the per-head output norms) the backward's blocks sum it over their rows as they go, else a
// second kernel writes fp32 partial sums over slices of the rows; write_column_sums
// (cuda/reduce.cuh) sums the partials into dw (deterministic).
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
// One group a row (C = G, per-head norms) up to kMaxFusedG channels: the backward's blocks sum dw
// themselves (8 G floats of shared memory a block), at most kFusedParts blocks, so that each
// partial covers many rows (a fixed count: the sums' order does not depend on the device).
constexpr int64_t kMaxFusedG = 1024;
constexpr int64_t kFusedParts = 512;

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

template <class T, int W>
__global__ void gated_rmsnorm_forward_kernel(T* y, float* rstd, const T* x, const T* z, const T* w, int64_t rows,
                                             int G, int groups, float eps, GateAct act, bool gate_after) {
  const int64_t r = blockIdx.x * (int64_t)kRowsPerBlock + threadIdx.x / 32;  // group row n * groups + gi
  if (r >= rows) return;  // the whole warp leaves together, so warp_sum sees all 32 lanes
  const int lane = threadIdx.x % 32;
  const int64_t base = r * G;          // = n * C + gi * G, first element of the group in x, z, y
  const T* wg = w + (r % groups) * G;  // wg: (G), the group's weights
  float sum_sq = 0;
  for (int c = lane * W; c < G; c += 32 * W) {
    float xv[W], zv[W];
    load_floats(xv, x + base + c), load_floats(zv, z + base + c);
#pragma unroll
    for (int k = 0; k < W; k++) {
      const float a = norm_input(xv[k], zv[k], act, gate_after);
      sum_sq += a * a;
    }
  }
  const float rs = rsqrtf(warp_sum(sum_sq) / G + eps);  // rstd = 1/sqrt(mean(a^2) + eps)
  if (lane == 0) rstd[r] = rs;
  for (int c = lane * W; c < G; c += 32 * W) {
    float xv[W], zv[W], wv[W], out[W];
    load_floats(xv, x + base + c), load_floats(zv, z + base + c), load_floats(wv, wg + c);
#pragma unroll
    for (int k = 0; k < W; k++) {
      out[k] = norm_input(xv[k], zv[k], act, gate_after) * rs * wv[k];  // a_hat * w
      if (gate_after) out[k] *= gate_act(zv[k], act);                    // * act(z)
    }
    store_floats(y + base + c, out);
  }
}

// One group row's backward (base: its first element; wg: (G), its group's weights; rs: its
// rstd), by the 32 lanes of a warp; kFusedDw: dy0 * a_hat added into own_dw (G), the lanes'
// own channels.
template <class T, int W, bool kFusedDw>
__device__ void backward_group_row(T* dx, T* dz, float* own_dw, const T* dy, const T* x, const T* z, const T* wg,
                                   float rs, int64_t base, int G, int lane, GateAct act, bool gate_after) {
  // pass 1: dy0 = gradient of y0 = a_hat * w; mean(a_hat * dy0 * w) for the norm backward
  float dot = 0;
  for (int c = lane * W; c < G; c += 32 * W) {
    float xv[W], zv[W], gv[W], wv[W], dzv[W];
    load_floats(xv, x + base + c), load_floats(zv, z + base + c), load_floats(gv, dy + base + c);
    load_floats(wv, wg + c);
#pragma unroll
    for (int k = 0; k < W; k++) {
      const float a_hat = norm_input(xv[k], zv[k], act, gate_after) * rs;
      float dy0 = gv[k];
      if (gate_after) {  // y = y0 * act(z)  =>  dz = dy * y0 * act'(z),  dy0 = dy * act(z)
        dzv[k] = gv[k] * a_hat * wv[k] * gate_act_grad(zv[k], act);
        dy0 = gv[k] * gate_act(zv[k], act);
      }
      dot += a_hat * dy0 * wv[k];
      if constexpr (kFusedDw) own_dw[c + k] += dy0 * a_hat;  // y0 = a_hat * w  =>  dw += dy0 * a_hat
    }
    if (gate_after) store_floats(dz + base + c, dzv);
  }
  const float mean_dot = warp_sum(dot) / G;
  // pass 2: a_hat = a * rstd(a)  =>  da = rstd * (dy0 * w - a_hat * mean(a_hat * dy0 * w))
  for (int c = lane * W; c < G; c += 32 * W) {
    float xv[W], zv[W], gv[W], wv[W], dxv[W], dzv[W];
    load_floats(xv, x + base + c), load_floats(zv, z + base + c), load_floats(gv, dy + base + c);
    load_floats(wv, wg + c);
#pragma unroll
    for (int k = 0; k < W; k++) {
      const float a_hat = norm_input(xv[k], zv[k], act, gate_after) * rs;
      const float dy0 = gate_after ? gv[k] * gate_act(zv[k], act) : gv[k];
      const float da = rs * (dy0 * wv[k] - a_hat * mean_dot);
      if (gate_after) {
        dxv[k] = da;  // a = x
      } else {        // a = x * act(z)  =>  dx = da * act(z),  dz = da * x * act'(z)
        dxv[k] = da * gate_act(zv[k], act);
        dzv[k] = da * xv[k] * gate_act_grad(zv[k], act);
      }
    }
    store_floats(dx + base + c, dxv);
    if (!gate_after) store_floats(dz + base + c, dzv);
  }
}

// kFusedDw (one group a row: every group row reads all of w): the block's warps take group rows
// blockIdx.x * 8 + warp, then every gridDim.x * 8 rows after it, each warp summing dy0 * a_hat
// into its own row of dw_rows (its lanes' channels, no atomics); the block then adds its 8 rows
// in order into partial[blockIdx.x] (deterministic). Else one group row a warp, dw left to
// gated_rmsnorm_dw_partial_kernel.
template <class T, int W, bool kFusedDw>
__global__ void gated_rmsnorm_backward_kernel(T* dx, T* dz, float* partial, const T* dy, const T* x, const T* z,
                                              const T* w, const float* rstd, int64_t rows, int G, int groups,
                                              GateAct act, bool gate_after) {
  extern __shared__ float dw_rows[];  // kFusedDw: (kRowsPerBlock, G)
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float* own_dw = dw_rows + warp * G;
  if constexpr (kFusedDw)
    for (int c = lane * W; c < G; c += 32 * W)
#pragma unroll
      for (int k = 0; k < W; k++) own_dw[c + k] = 0;
  for (int64_t r = blockIdx.x * (int64_t)kRowsPerBlock + warp; r < rows; r += gridDim.x * (int64_t)kRowsPerBlock)
    backward_group_row<T, W, kFusedDw>(dx, dz, own_dw, dy, x, z, w + (r % groups) * G, rstd[r], r * G, G, lane, act,
                                       gate_after);
  if constexpr (kFusedDw) {
    __syncthreads();
    for (int c = threadIdx.x; c < G; c += blockDim.x) {
      float sum = 0;
      for (int v = 0; v < kRowsPerBlock; v++) sum += dw_rows[v * G + c];
      partial[blockIdx.x * (int64_t)G + c] = sum;
    }
  }
}

// y0 = a_hat * w  =>  dw = sum_rows dy0 * a_hat.  grid (column tiles, parts): part p sums rows
// p, p + parts, ... of columns col .. col + W - 1 (one group's: G % W == 0) into partial[p, col..];
// partial: (parts, C).
template <class T, int W>
__global__ void gated_rmsnorm_dw_partial_kernel(float* partial, const T* dy, const T* x, const T* z,
                                                const float* rstd, int64_t N, int C, int G, GateAct act,
                                                bool gate_after) {
  const int col = (blockIdx.x * blockDim.x + threadIdx.x) * W;
  if (col >= C) return;
  const int groups = C / G, gi = col / G;
  float sum[W] = {};
  for (int64_t n = blockIdx.y; n < N; n += gridDim.y) {
    const int64_t i = n * C + col;
    float xv[W], zv[W], gv[W];
    load_floats(xv, x + i), load_floats(zv, z + i), load_floats(gv, dy + i);
    const float rs = rstd[n * groups + gi];
#pragma unroll
    for (int k = 0; k < W; k++) {
      const float a_hat = norm_input(xv[k], zv[k], act, gate_after) * rs;
      sum[k] += (gate_after ? gv[k] * gate_act(zv[k], act) : gv[k]) * a_hat;  // dy0 * a_hat
    }
  }
#pragma unroll
  for (int k = 0; k < W; k++) partial[blockIdx.y * (int64_t)C + col + k] = sum[k];
}

unsigned row_blocks(int64_t rows) { return static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock); }

// Calls fn(Width<W>{}): W = 16 bytes of T when the group width G is a multiple of it and every
// pointer is 16-byte aligned (then every group row and lane's piece is), else 1.
template <class T, class Fn, class... Ptrs>
void dispatch_group_width(int64_t G, Fn&& fn, const Ptrs*... ptrs) {
  if (G % kVecWidth<T> == 0) dispatch_width<T>(fn, ptrs...);
  else fn(Width<1>{});
}

}  // namespace

void gated_rmsnorm_forward(void* y, float* rstd, const void* x, const void* z, const void* w, const GatedNormDims& d,
                           DType dtype) {
  const int64_t N = d.N, C = d.C, G = d.G;
  if (N == 0) return;
  const int64_t groups = C / G, rows = N * groups;
  dispatch_storage(dtype, "gated_rmsnorm_forward", [&](auto tag) {
    using T = decltype(tag);
    dispatch_group_width<T>(G, [&](auto width) {
      gated_rmsnorm_forward_kernel<T, decltype(width)::value><<<row_blocks(rows), kThreads>>>(
          static_cast<T*>(y), rstd, static_cast<const T*>(x), static_cast<const T*>(z), static_cast<const T*>(w),
          rows, static_cast<int>(G), static_cast<int>(groups), static_cast<float>(d.eps), d.act,
          d.order == GateOrder::NormThenGate);
    }, static_cast<const T*>(y), static_cast<const T*>(x), static_cast<const T*>(z), static_cast<const T*>(w));
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
  dispatch_storage(dtype, "gated_rmsnorm_backward", [&](auto tag) {
    using T = decltype(tag);
    const T *dy_t = static_cast<const T*>(dy), *x_t = static_cast<const T*>(x), *z_t = static_cast<const T*>(z);
    dispatch_group_width<T>(G, [&](auto width) {
      constexpr int W = decltype(width)::value;
      // dw summed by the backward's blocks (one group a row), else by a pass of its own: a thread
      // a piece of W columns, parts enough for ~kColumnPassThreads threads
      const bool fused = groups == 1 && G <= kMaxFusedG;
      const int64_t pieces = C / W;
      const int parts = static_cast<int>(
          fused ? std::min<int64_t>(row_blocks(rows), kFusedParts)
                : std::min<int64_t>(N, std::max<int64_t>(kColumnParts, kColumnPassThreads / pieces)));
      const size_t partial_bytes = static_cast<size_t>(parts) * C * sizeof(float);
      float* partial = static_cast<float*>(device_alloc(partial_bytes));  // partial: (parts, C)
      if (fused) {
        gated_rmsnorm_backward_kernel<T, W, true><<<parts, kThreads, kRowsPerBlock * G * sizeof(float)>>>(
            static_cast<T*>(dx), static_cast<T*>(dz), partial, dy_t, x_t, z_t, static_cast<const T*>(w), rstd, rows,
            static_cast<int>(G), 1, act, gate_after);
      } else {
        gated_rmsnorm_backward_kernel<T, W, false><<<row_blocks(rows), kThreads>>>(
            static_cast<T*>(dx), static_cast<T*>(dz), nullptr, dy_t, x_t, z_t, static_cast<const T*>(w), rstd, rows,
            static_cast<int>(G), static_cast<int>(groups), act, gate_after);
        CUDA_CHECK_LAUNCH();
        const int col_threads = static_cast<int>(std::min<int64_t>(256, (pieces + 31) / 32 * 32));
        const dim3 col_grid(static_cast<unsigned>((pieces + col_threads - 1) / col_threads),
                            static_cast<unsigned>(parts));
        gated_rmsnorm_dw_partial_kernel<T, W><<<col_grid, col_threads>>>(
            partial, dy_t, x_t, z_t, rstd, N, static_cast<int>(C), static_cast<int>(G), act, gate_after);
      }
      CUDA_CHECK_LAUNCH();
      write_column_sums(static_cast<T*>(dw), partial, parts, C);
      device_free(partial, partial_bytes);
    }, static_cast<const T*>(dx), static_cast<const T*>(dz), dy_t, x_t, z_t, static_cast<const T*>(w));
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace hla::cuda
