// RWKV-6 token shift, static lerp and data-dependent lerp (ddlerp) on the GPU (mixers.md 2.7
// and 11), forward and backward, following nn/ops/token_shift.cpp line by line.
//
// token_shift and lerp are elementwise, one thread per element along D; with packed documents
// (doc_start) x_{t-1} reads as 0 at each document's first token, and its gradient stops there. lerp's dmu sums over
// all M rows: each block sums a fixed chunk of rows for 128 channels into an fp32 partial and
// cuda/reduce.cuh sums the chunks into dmu (deterministic, no atomics).
//
// ddlerp's low-rank maps are GEMMs on cuBLAS in fp32: h = tanh(zz) and W2 are first regrouped
// per map n into fp32 (N, M, R) and (N, D, R) scratch, then for each n
//   forward:   mix = h_n W2_n^T (M, D), xi^n = x + (mix + bias_n) * delta
//   backward:  dm = dxi^n * delta, dbias_n = colsum(dm), dW2_n = dm^T h_n, dzz_n = (dm W2_n) (1 - h_n^2)
// with one (M, D) fp32 scratch for mix / dm reused across n.
#include "cuda/math.h"
#include "cuda/reduce.cuh"
#include "cuda/token_shift.h"

namespace hla::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kColumnThreads = 128;  // channels per block of lerp's backward

// ---- token shift ----

// Whether token t > 0 of row b starts a packed document (x_{t-1} reads as 0); doc_start null: never.
__device__ __forceinline__ bool starts_document(const int32_t* doc_start, int64_t b, int64_t t, int64_t L) {
  return doc_start && doc_start[b * L + t] == t;
}

// delta: (B, L, D), delta_t = x_{t-1} - x_t with x_{-1} = state (zeros when null), x_{t-1} = 0 at a document start
template <class T>
__global__ void token_shift_kernel(T* delta, const T* x, const T* state, const int32_t* doc_start, int64_t L,
                                   int64_t D, int64_t n) {
  HLA_GRID_STRIDE(i, n) {
    const int64_t d = i % D, t = (i / D) % L, b = i / (L * D);
    const float prev = t == 0 ? (state ? to_float(state[b * D + d]) : 0.0f)
                       : starts_document(doc_start, b, t, L) ? 0.0f
                                                             : to_float(x[i - D]);
    delta[i] = from_float<T>(prev - to_float(x[i]));
  }
}

// last: (B, D) = x_{L-1}, or the state itself for an empty chunk
template <class T>
__global__ void last_token_kernel(T* last, const T* x, const T* state, int64_t L, int64_t D, int64_t n) {
  HLA_GRID_STRIDE(i, n) {
    const int64_t d = i % D, b = i / D;
    last[i] = L > 0 ? x[(b * L + L - 1) * D + d] : (state ? state[i] : from_float<T>(0.0f));
  }
}

// dx: (B, L, D); x_t enters delta_t with -1 and delta_{t+1} with +1 (unless a document starts
// at t+1); the last token also is `last`
template <class T>
__global__ void token_shift_dx_kernel(T* dx, const T* ddelta, const T* dlast, const int32_t* doc_start, int64_t L,
                                      int64_t D, int64_t n) {
  HLA_GRID_STRIDE(i, n) {
    const int64_t d = i % D, t = (i / D) % L, b = i / (L * D);
    const float next = t + 1 == L                                ? to_float(dlast[b * D + d])
                       : starts_document(doc_start, b, t + 1, L) ? 0.0f
                                                                 : to_float(ddelta[i + D]);
    dx[i] = from_float<T>(next - to_float(ddelta[i]));
  }
}

// dstate: (B, D); the state enters delta_0 with +1 (it is `last` itself when L = 0)
template <class T>
__global__ void token_shift_dstate_kernel(T* dstate, const T* ddelta, const T* dlast, int64_t L, int64_t D,
                                          int64_t n) {
  HLA_GRID_STRIDE(i, n) {
    const int64_t d = i % D, b = i / D;
    dstate[i] = L > 0 ? ddelta[b * L * D + d] : dlast[i];
  }
}

// ---- lerp ----

// y = x + mu * delta; y, x, delta: (M, D), mu: (D)
template <class T>
__global__ void lerp_kernel(T* y, const T* x, const T* delta, const T* mu, int64_t D, int64_t n) {
  HLA_GRID_STRIDE(i, n) y[i] = from_float<T>(to_float(x[i]) + to_float(mu[i % D]) * to_float(delta[i]));
}

// dx = dy, ddelta = dy * mu for the rows of one chunk, and partial_mu[chunk, d] = sum dy * delta.
// grid (chunks, ceil(D / kColumnThreads)), one thread per channel d.
template <class T>
__global__ void lerp_backward_kernel(T* dx, T* ddelta, float* partial_mu, const T* dy, const T* delta, const T* mu,
                                     int64_t M, int64_t D, int64_t per_chunk) {
  const int64_t d = blockIdx.y * (int64_t)blockDim.x + threadIdx.x;
  if (d >= D) return;
  const float m = to_float(mu[d]);
  const int64_t r0 = blockIdx.x * per_chunk, r1 = std::min(M, r0 + per_chunk);
  float acc = 0;
  for (int64_t r = r0; r < r1; r++) {
    const int64_t i = r * D + d;
    const float g = to_float(dy[i]);
    dx[i] = dy[i];                       // y = x + ...         =>  dx = dy
    ddelta[i] = from_float<T>(g * m);    // y = ... mu * delta   =>  ddelta = dy * mu
    acc += g * to_float(delta[i]);       //                         dmu = sum dy * delta
  }
  partial_mu[blockIdx.x * D + d] = acc;
}

// ---- ddlerp ----

// h: (N, M, R) fp32, h[n, m, r] = tanh(zz[m, n*R + r]); zz: (M, N*R)
template <class T>
__global__ void lowrank_tanh_kernel(float* h, const T* zz, int64_t M, int64_t N, int64_t R) {
  const int64_t NR = N * R;
  HLA_GRID_STRIDE(i, M * NR) {
    const int64_t m = i / NR, k = i % NR, n = k / R, r = k % R;
    h[(n * M + m) * R + r] = tanhf(to_float(zz[i]));
  }
}

// w2n: (N, D, R) fp32, w2n[n, d, r] = w2[d, n*R + r]; w2: (D, N*R)
template <class T>
__global__ void split_w2_kernel(float* w2n, const T* w2, int64_t D, int64_t N, int64_t R) {
  const int64_t NR = N * R;
  HLA_GRID_STRIDE(i, D * NR) {
    const int64_t d = i / NR, k = i % NR, n = k / R, r = k % R;
    w2n[(n * D + d) * R + r] = to_float(w2[i]);
  }
}

// xi^n = x + m^n * delta with m^n = mix + bias_n; xi_n, x, delta, mix: (M, D), bias_n: (D)
template <class T>
__global__ void ddlerp_output_kernel(T* xi_n, const T* x, const T* delta, const float* mix, const T* bias_n,
                                     int64_t D, int64_t n_md) {
  HLA_GRID_STRIDE(i, n_md) {
    const float m = mix[i] + to_float(bias_n[i % D]);
    xi_n[i] = from_float<T>(to_float(x[i]) + m * to_float(delta[i]));
  }
}

// xi^n = x + m^n * delta  =>  ddelta += g * m^n, dm^n = g * delta (written over mix); g = dxi^n
template <class T>
__global__ void ddlerp_mix_grad_kernel(float* mix, float* ddelta_acc, const T* g_n, const T* delta, const T* bias_n,
                                       int64_t D, int64_t n_md) {
  HLA_GRID_STRIDE(i, n_md) {
    const float g = to_float(g_n[i]), m = mix[i] + to_float(bias_n[i % D]);
    ddelta_acc[i] += g * m;
    mix[i] = g * to_float(delta[i]);
  }
}

// dw2[d, n*R + r] = dw2_n[d, r]; dw2: (D, N*R), dw2_n: (D, R)
template <class T>
__global__ void write_w2_block_kernel(T* dw2, const float* dw2_n, int64_t D, int64_t N, int64_t R, int64_t n) {
  HLA_GRID_STRIDE(i, D * R) {
    const int64_t d = i / R, r = i % R;
    dw2[d * N * R + n * R + r] = from_float<T>(dw2_n[i]);
  }
}

// h = tanh(zz_n)  =>  dzz[m, n*R + r] = dh[m, r] * (1 - h[m, r]^2); dh, h_n: (M, R), dzz: (M, N*R)
template <class T>
__global__ void tanh_grad_kernel(T* dzz, const float* dh, const float* h_n, int64_t M, int64_t N, int64_t R,
                                 int64_t n) {
  HLA_GRID_STRIDE(i, M * R) {
    const int64_t m = i / R, r = i % R;
    dzz[m * N * R + n * R + r] = from_float<T>(dh[i] * (1.0f - h_n[i] * h_n[i]));
  }
}

// xi^n = x + ...  =>  dx = sum_n dxi^n; ddelta from its fp32 accumulator. dxi: (N, M, D)
template <class T>
__global__ void ddlerp_finish_kernel(T* dx, T* ddelta, const T* dxi, const float* ddelta_acc, int64_t N, int64_t n_md) {
  HLA_GRID_STRIDE(i, n_md) {
    float s = 0;
    for (int64_t n = 0; n < N; n++) s += to_float(dxi[n * n_md + i]);
    dx[i] = from_float<T>(s);
    ddelta[i] = from_float<T>(ddelta_acc[i]);
  }
}

// Both ddlerp passes start here: h = tanh(zz) regrouped per map, h: (N, M, R), and W2's column
// blocks w2n: (N, D, R).
template <class T>
void regroup_lowrank(float* h, float* w2n, const void* zz, const void* w2, int64_t M, int64_t D, int64_t N,
                     int64_t R) {
  lowrank_tanh_kernel<T><<<grid_1d(M * N * R), kThreads>>>(h, static_cast<const T*>(zz), M, N, R);
  CUDA_CHECK_LAUNCH();
  split_w2_kernel<T><<<grid_1d(D * N * R), kThreads>>>(w2n, static_cast<const T*>(w2), D, N, R);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

void token_shift_forward(void* delta, void* last, const void* x, const void* state, const int32_t* doc_start,
                         int64_t B, int64_t L, int64_t D, DType dtype) {
  const int64_t n = B * L * D, n_last = B * D;
  dispatch_storage(dtype, "token_shift_forward", [&](auto tag) {
    using T = decltype(tag);
    const T *xs = static_cast<const T*>(x), *ss = static_cast<const T*>(state);
    launch_1d(token_shift_kernel<T>, n, kThreads, static_cast<T*>(delta), xs, ss, doc_start, L, D, n);
    launch_1d(last_token_kernel<T>, n_last, kThreads, static_cast<T*>(last), xs, ss, L, D, n_last);
  });
}

void token_shift_backward(void* dx, void* dstate, const void* ddelta, const void* dlast, const int32_t* doc_start,
                          int64_t B, int64_t L, int64_t D, DType dtype) {
  const int64_t n = B * L * D, n_state = B * D;
  dispatch_storage(dtype, "token_shift_backward", [&](auto tag) {
    using T = decltype(tag);
    const T *dd = static_cast<const T*>(ddelta), *dl = static_cast<const T*>(dlast);
    launch_1d(token_shift_dx_kernel<T>, n, kThreads, static_cast<T*>(dx), dd, dl, doc_start, L, D, n);
    if (dstate)
      launch_1d(token_shift_dstate_kernel<T>, n_state, kThreads, static_cast<T*>(dstate), dd, dl, L, D, n_state);
  });
}

void lerp_forward(void* y, const void* x, const void* delta, const void* mu, int64_t M, int64_t D, DType dtype) {
  const int64_t n = M * D;
  launch_elementwise(dtype, "lerp_forward", n, [&](auto tag) {
    using T = decltype(tag);
    lerp_kernel<T><<<grid_1d(n), kThreads>>>(static_cast<T*>(y), static_cast<const T*>(x),
                                             static_cast<const T*>(delta), static_cast<const T*>(mu), D, n);
  });
}

void lerp_backward(void* dx, void* ddelta, void* dmu, const void* dy, const void* delta, const void* mu, int64_t M,
                   int64_t D, DType dtype) {
  if (D == 0) return;
  const RowChunks chunks = split_rows(M);
  FloatScratch partial(chunks.count * D);  // partial: (chunks, D)
  dispatch_storage(dtype, "lerp_backward", [&](auto tag) {
    using T = decltype(tag);
    const dim3 grid(chunks.count, static_cast<unsigned>((D + kColumnThreads - 1) / kColumnThreads));
    lerp_backward_kernel<T><<<grid, kColumnThreads>>>(static_cast<T*>(dx), static_cast<T*>(ddelta), partial.get(),
                                                      static_cast<const T*>(dy), static_cast<const T*>(delta),
                                                      static_cast<const T*>(mu), M, D, chunks.per_chunk);
    CUDA_CHECK_LAUNCH();
    write_column_sums(static_cast<T*>(dmu), partial.get(), chunks.count, D);
  });
}

void ddlerp_forward(void* xi, const void* x, const void* delta, const void* zz, const void* w2, const void* bias,
                    int64_t M, int64_t D, int64_t N, int64_t R, DType dtype) {
  HLA_CHECK(R > 0, "ddlerp_forward: the low-rank width R must be > 0, got ", R);
  if (M * D * N == 0) return;
  FloatScratch h(N * M * R);   // h: (N, M, R) = tanh(zz) regrouped per map
  FloatScratch w2n(N * D * R); // w2n: (N, D, R) = W2's column blocks
  FloatScratch mix(M * D);     // mix: (M, D) = h_n W2_n^T for the current n
  dispatch_storage(dtype, "ddlerp_forward", [&](auto tag) {
    using T = decltype(tag);
    regroup_lowrank<T>(h.get(), w2n.get(), zz, w2, M, D, N, R);
    for (int64_t n = 0; n < N; n++) {
      // m^n - bias_n = h_n W2_n^T : (M, R) x (R, D)
      gemm(mix.get(), DType::F32, h.get() + n * M * R, w2n.get() + n * D * R, DType::F32, M, D, R, false, true, 1.0f,
           0.0f);
      ddlerp_output_kernel<T><<<grid_1d(M * D), kThreads>>>(
          static_cast<T*>(xi) + n * M * D, static_cast<const T*>(x), static_cast<const T*>(delta), mix.get(),
          static_cast<const T*>(bias) + n * D, D, M * D);
      CUDA_CHECK_LAUNCH();
    }
  });
}

void ddlerp_backward(void* dx, void* ddelta, void* dzz, void* dw2, void* dbias, const void* dxi, const void* delta,
                     const void* zz, const void* w2, const void* bias, int64_t M, int64_t D, int64_t N, int64_t R,
                     DType dtype) {
  HLA_CHECK(R > 0, "ddlerp_backward: the low-rank width R must be > 0, got ", R);
  if (M * D * N == 0) {  // an empty dimension: every gradient is zero or empty
    write_zeros(dx, M * D, dtype);
    write_zeros(ddelta, M * D, dtype);
    write_zeros(dzz, M * N * R, dtype);
    write_zeros(dw2, D * N * R, dtype);
    write_zeros(dbias, N * D, dtype);
    return;
  }
  FloatScratch h(N * M * R);         // h: (N, M, R) = tanh(zz) regrouped per map
  FloatScratch w2n(N * D * R);       // w2n: (N, D, R) = W2's column blocks
  FloatScratch mix(M * D);           // mix: (M, D), m^n - bias_n, then dm^n
  FloatScratch ddelta_acc(M * D);    // ddelta_acc: (M, D) = sum_n dxi^n * m^n
  FloatScratch dh(M * R);            // dh: (M, R) = dm^n W2_n
  FloatScratch dw2_n(D * R);         // dw2_n: (D, R) = dm^n^T h_n
  memset_zero(ddelta_acc.get(), static_cast<size_t>(M * D) * sizeof(float));
  dispatch_storage(dtype, "ddlerp_backward", [&](auto tag) {
    using T = decltype(tag);
    regroup_lowrank<T>(h.get(), w2n.get(), zz, w2, M, D, N, R);
    for (int64_t n = 0; n < N; n++) {
      const float* h_n = h.get() + n * M * R;
      const float* w2_n = w2n.get() + n * D * R;
      // m^n - bias_n = h_n W2_n^T
      gemm(mix.get(), DType::F32, h_n, w2_n, DType::F32, M, D, R, false, true, 1.0f, 0.0f);
      ddlerp_mix_grad_kernel<T><<<grid_1d(M * D), kThreads>>>(mix.get(), ddelta_acc.get(),
                                                              static_cast<const T*>(dxi) + n * M * D,
                                                              static_cast<const T*>(delta),
                                                              static_cast<const T*>(bias) + n * D, D, M * D);
      CUDA_CHECK_LAUNCH();
      // m^n = h W2_n^T + bias_n  =>  dbias_n = colsum(dm^n), dW2_n = dm^n^T h, dh = dm^n W2_n
      write_fp32_column_sums(static_cast<T*>(dbias) + n * D, mix.get(), M, D);
      gemm(dw2_n.get(), DType::F32, mix.get(), h_n, DType::F32, D, R, M, true, false, 1.0f, 0.0f);
      write_w2_block_kernel<T><<<grid_1d(D * R), kThreads>>>(static_cast<T*>(dw2), dw2_n.get(), D, N, R, n);
      CUDA_CHECK_LAUNCH();
      gemm(dh.get(), DType::F32, mix.get(), w2_n, DType::F32, M, R, D, false, false, 1.0f, 0.0f);
      // h = tanh(zz_n)  =>  dzz_n = dh * (1 - h^2)
      tanh_grad_kernel<T><<<grid_1d(M * R), kThreads>>>(static_cast<T*>(dzz), dh.get(), h_n, M, N, R, n);
      CUDA_CHECK_LAUNCH();
    }
    ddlerp_finish_kernel<T><<<grid_1d(M * D), kThreads>>>(static_cast<T*>(dx), static_cast<T*>(ddelta),
                                                          static_cast<const T*>(dxi), ddelta_acc.get(), N, M * D);
  });
  CUDA_CHECK_LAUNCH();
}

}  // namespace hla::cuda
