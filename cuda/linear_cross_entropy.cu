// The lm_head GEMM fused with cross-entropy, a vocabulary chunk at a time: the full (N, V) logits
// never exist, only one (N, chunk) block of them.
//
// Forward, per chunk [v0, v0 + C):  z = h w[v0 : v0 + C]^T  (cuBLAS; (N, C) in the storage dtype,
// so it rounds as the full logits would), then one warp per row merges the chunk row's online
// logsumexp (cuda/online_lse.cuh) into the row's running (m, s) and keeps z_c when the target
// falls in the chunk. After the last chunk lse = m + log s and loss_row = lse - z_c, summed by
// one reduction (as cuda/cross_entropy.cu).
// Backward recomputes each chunk's z and overwrites it with dz = (exp(z - lse) - onehot(c)) * k,
// then dw[v0 : v0 + C] = dz^T h (each chunk writes its own rows; or adds them into a gradient sum,
// in fp32 for an fp32 master's: no cast kernel, no add) and dh += dz w[v0 : v0 + C],
// accumulated in fp32 by the GEMMs themselves (beta 1 after the first chunk): in dh itself for F32,
// for BF16 in an fp32 scratch (cuda::gemm's fp32 output), rounded to dh once at the end.
#include "cuda/common.cuh"
#include "cuda/convert.h"
#include "cuda/linear_cross_entropy.h"
#include "cuda/math.h"
#include "cuda/online_lse.cuh"

namespace hla::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kRowsPerBlock = kThreads / 32;  // the chunk kernels: one warp a row
constexpr int kUnroll = 4;                    // vectors a lane loads before it uses them

// The chunk kernels read a row of z as C / W vectors of W elements (16-byte loads of 8 bf16 or
// 4 fp32 when C is a multiple of that and z is aligned, else W = 1), kUnroll of them in flight per
// lane, and reduce over the row's warp only (no block barrier).
template <class T>
int chunk_width(const void* z, int64_t C) {
  return aligned16(z) && C % kVecWidth<T> == 0 ? kVecWidth<T> : 1;
}

// fn(j, f) for the lane's vectors j = lane, lane + 32, ... < V of the row zr (f: vector j as
// floats), loaded kUnroll at a time before any is used.
template <int W, class T, class Fn>
__device__ __forceinline__ void for_each_vector(const T* zr, int V, Fn&& fn) {
  const int lane = threadIdx.x % 32;
  for (int j0 = lane; j0 < V; j0 += 32 * kUnroll) {
    float f[kUnroll][W];
#pragma unroll
    for (int u = 0; u < kUnroll; u++)
      if (j0 + 32 * u < V) load_floats(f[u], zr + int64_t(j0 + 32 * u) * W);
#pragma unroll
    for (int u = 0; u < kUnroll; u++)
      if (j0 + 32 * u < V) fn(j0 + 32 * u, f[u]);
  }
}

// m, s, zc: (N) fp32, the running max, sum and target logit; z: (N, C) this chunk's logits.
// One warp per row; a lane merges each vector's max first, so a vector costs W exponentials and
// at most one rescale.
template <class T, int W>
__global__ void __launch_bounds__(kThreads) lse_chunk_kernel(float* m, float* s, float* zc, const T* z, const int32_t* c,
                                                             int64_t N, int64_t C, int64_t v0, bool first) {
  const int64_t n = blockIdx.x * int64_t(kRowsPerBlock) + threadIdx.x / 32;
  if (n >= N) return;
  const T* zr = z + n * C;  // zr: (C)
  OnlineLse acc;
  for_each_vector<W>(zr, static_cast<int>(C / W), [&](int, const float (&f)[W]) {
    float vmax = f[0];
#pragma unroll
    for (int e = 1; e < W; e++) vmax = fmaxf(vmax, f[e]);
    float vsum = 0;
#pragma unroll
    for (int e = 0; e < W; e++) vsum += __expf(f[e] - vmax);
    acc.merge(vmax, vsum);
  });
  for (int o = 16; o > 0; o >>= 1) acc.merge(__shfl_xor_sync(0xffffffffu, acc.m, o), __shfl_xor_sync(0xffffffffu, acc.s, o));
  if (threadIdx.x % 32 != 0) return;
  if (!first) acc.merge(m[n], s[n]);  // the chunks before this one
  m[n] = acc.m;
  s[n] = acc.s;
  const int32_t target = c[n];
  if (target >= v0 && target < v0 + C) zc[n] = to_float(zr[target - v0]);
}

// lse, row_loss, row_valid: (N) written from m, s, zc: (N). NaN flags a target outside [0, V).
__global__ void finish_kernel(float* lse, float* row_loss, float* row_valid, const float* m, const float* s,
                              const float* zc, const int32_t* c, int64_t N, int64_t V, int32_t ignore) {
  HLA_GRID_STRIDE(n, N) {
    const float l = m[n] + logf(s[n]);  // lse = logsumexp(z)
    lse[n] = l;
    const int32_t target = c[n];
    row_valid[n] = target == ignore ? 0.0f : 1.0f;
    if (target == ignore) row_loss[n] = 0;
    else if (target < 0 || target >= V) row_loss[n] = NAN;
    else row_loss[n] = l - zc[n];  // loss_row = lse - z_c
  }
}

// loss: () = sum(row_loss) / sum(row_valid) (0 without valid rows), valid: () = sum(row_valid).
// One block; fp64 sums in a fixed order, so the result does not depend on timing.
__global__ void mean_loss_kernel(float* loss, float* valid, const float* row_loss, const float* row_valid, int64_t N) {
  __shared__ double total[kThreads], count[kThreads];
  double t = 0, k = 0;
  for (int64_t n = threadIdx.x; n < N; n += blockDim.x) t += row_loss[n], k += row_valid[n];
  total[threadIdx.x] = t, count[threadIdx.x] = k;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) total[threadIdx.x] += total[threadIdx.x + half], count[threadIdx.x] += count[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    *loss = static_cast<float>(count[0] > 0 ? total[0] / count[0] : 0.0);
    *valid = static_cast<float>(count[0]);
  }
}

// z: (N, C) logits of the chunk in, dz out, scaled by dloss / valid (device scalars). One block per row.
template <class T, int W>
__global__ void __launch_bounds__(kThreads) dz_chunk_kernel(T* z, const float* lse, const int32_t* c, int64_t N, int64_t C,
                                                            int64_t v0, int32_t ignore, const float* dloss,
                                                            const float* valid) {
  const int64_t n = blockIdx.x * int64_t(kRowsPerBlock) + threadIdx.x / 32;
  if (n >= N) return;
  const int32_t target = c[n];
  const float k = *valid > 0 ? *dloss / *valid : 0.0f;
  const float l = lse[n], kk = target == ignore ? 0.0f : k;
  T* zr = z + n * C;  // zr: (C)
  for_each_vector<W>(zr, static_cast<int>(C / W), [&](int j, const float (&f)[W]) {
    float d[W];
#pragma unroll
    for (int e = 0; e < W; e++) {
      const float p = __expf(f[e] - l);                                // softmax
      d[e] = (p - (v0 + j * W + e == target ? 1.0f : 0.0f)) * kk;  // - onehot
    }
    store_floats(zr + int64_t(j) * W, d);
  });
}

// Launches kernel<T, W> over the N rows of a chunk of C columns, one warp a row, W as chunk_width.
template <class T, class Launch>
void launch_chunk_rows(const T* z, int64_t N, int64_t C, Launch&& launch) {
  const auto blocks = static_cast<unsigned>((N + kRowsPerBlock - 1) / kRowsPerBlock);
  if (chunk_width<T>(z, C) == kVecWidth<T>) launch(Width<kVecWidth<T>>{}, blocks);
  else launch(Width<1>{}, blocks);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void linear_cross_entropy_forward(float* lse, float* loss, float* valid, const void* h, const void* w, const int32_t* c,
                                  int64_t N, int64_t D, int64_t V, int64_t chunk, int32_t ignore, DType dtype) {
  HLA_CHECK(chunk >= 1 && V >= 1, "linear_cross_entropy: chunk ", chunk, " and V ", V, " must be >= 1");
  FloatScratch running(3 * N + 1);                  // running: (3, N) m, s, z_c
  FloatScratch rows(2 * N + 1);                     // rows: (2, N) loss, valid flag
  FloatScratch z(std::max<int64_t>(1, N * std::min(chunk, V)));  // z: (N, C) in the storage dtype (<= 4 bytes each)
  float *m = running.get(), *s = m + N, *zc = s + N;
  dispatch_storage(dtype, "linear_cross_entropy_forward", [&](auto tag) {
    using T = decltype(tag);
    T* zt = reinterpret_cast<T*>(z.get());
    if (N > 0) {
      for (int64_t v0 = 0; v0 < V; v0 += chunk) {
        const int64_t C = std::min(chunk, V - v0);
        gemm(zt, dtype, h, static_cast<const T*>(w) + v0 * D, dtype, N, C, D, false, true, 1.0f, 0.0f);  // z = h w_c^T
        launch_chunk_rows(zt, N, C, [&](auto width, unsigned blocks) {
          lse_chunk_kernel<T, decltype(width)::value><<<blocks, kThreads>>>(m, s, zc, zt, c, N, C, v0, v0 == 0);
        });
      }
      finish_kernel<<<grid_1d(N), kThreads>>>(lse, rows.get(), rows.get() + N, m, s, zc, c, N, V, ignore);
      CUDA_CHECK_LAUNCH();
    }
    mean_loss_kernel<<<1, kThreads>>>(loss, valid, rows.get(), rows.get() + N, N);
    CUDA_CHECK_LAUNCH();
  });
}

void linear_cross_entropy_backward(void* dh, void* dw, bool add_dw, const void* h, const void* w, const float* lse,
                                   const int32_t* c, int64_t N, int64_t D, int64_t V, int64_t chunk, int32_t ignore,
                                   const float* dloss, const float* valid, DType dtype, DType dw_dtype) {
  if (N == 0) {  // no rows: dw = 0, or the sum so far (dh is empty)
    if (dw && !add_dw) memset_zero(dw, static_cast<size_t>(V * D) * dtype_size(dw_dtype));
    return;
  }
  HLA_CHECK(chunk >= 1 && V >= 1, "linear_cross_entropy: chunk ", chunk, " and V ", V, " must be >= 1");
  const bool f32 = dtype == DType::F32;
  FloatScratch z(N * std::min(chunk, V));  // z: (N, C) logits, then dz, in the storage dtype
  FloatScratch acc(f32 ? 1 : N * D);       // acc: (N, D) fp32 dh (BF16 only)
  float* dh_sum = f32 ? static_cast<float*>(dh) : acc.get();  // dh_sum: (N, D) fp32
  dispatch_storage(dtype, "linear_cross_entropy_backward", [&](auto tag) {
    using T = decltype(tag);
    T* zt = reinterpret_cast<T*>(z.get());
    for (int64_t v0 = 0; v0 < V; v0 += chunk) {
      const int64_t C = std::min(chunk, V - v0);
      const T* wc = static_cast<const T*>(w) + v0 * D;  // wc: (C, D)
      gemm(zt, dtype, h, wc, dtype, N, C, D, false, true, 1.0f, 0.0f);  // z = h w_c^T (recomputed)
      launch_chunk_rows(zt, N, C, [&](auto width, unsigned blocks) {
        dz_chunk_kernel<T, decltype(width)::value><<<blocks, kThreads>>>(zt, lse, c, N, C, v0, ignore, dloss, valid);
      });
      if (dw)  // dw_c (+)= dz^T h
        gemm(static_cast<char*>(dw) + v0 * D * dtype_size(dw_dtype), dw_dtype, zt, h, dtype, C, D, N, true, false, 1.0f,
             add_dw ? 1.0f : 0.0f);
      gemm(dh_sum, DType::F32, zt, wc, dtype, N, D, C, false, false, 1.0f, v0 == 0 ? 0.0f : 1.0f);  // dh += dz w_c
    }
  });
  if (!f32) convert(dh, dtype, acc.get(), DType::F32, N * D);
}

}  // namespace hla::cuda
