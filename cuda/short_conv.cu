// Causal depthwise short convolution on the GPU (mixers.md 2.6), forward and backward, with the
// CPU reference's extended sequence xe = [state ; x] (nn/ops/short_conv.cpp): output t reads
// xe_t .. xe_{t+K-1}, and the final state is xe_L .. xe_{L+K-2}. Packed documents (d.doc_start)
// narrow both to the extended indices e >= first_visible(b, t) of t's document, as on the CPU.
//
// Forward: one thread per output (b, t, c), consecutive threads on consecutive channels, so the
// K taps of a warp are K coalesced row loads. Backward in three steps:
//   1. dpre = dy * act'(pre) into an fp32 scratch (pre recomputed);
//   2. dx and dstate, one thread per element, gather d(xe_e) = sum_i w_i dpre_{e-i} (+ dfinal);
//   3. dw, dbias: sums over all (b, t) rows; each block sums a fixed chunk of rows for 128
//      channels into an fp32 partial, then cuda/reduce.cuh sums the chunks into dw, dbias
//      (deterministic).
#include "cuda/reduce.cuh"
#include "cuda/short_conv.h"

namespace hla::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kColumnThreads = 128;  // channels per block of the dw / dbias pass
constexpr int kMaxTaps = 16;         // dw accumulators per thread live in registers

__device__ __forceinline__ float sigmoid_of(float v) { return 1.0f / (1.0f + expf(-v)); }

// The forward operands of one call; every index is a (b, t or e, c) of the CPU reference.
template <class T>
struct ConvInputs {
  const T* x;      // x: (B, L, C)
  const T* w;      // w: (C, K)
  const T* bias;   // bias: (C) or null
  const T* state;  // state: (B, C, K-1) or null (zeros)
  const int32_t* doc_start;  // doc_start: (B, L) or null (one document a row)
  int64_t L, C;
  int K;

  // The first extended index output t of sequence b reads: x_{doc_start} (0 without documents).
  __device__ int64_t first_visible(int64_t b, int64_t t) const {
    return doc_start ? doc_start[b * L + t] + K - 1 : 0;
  }

  // xe_e for channel c of sequence b
  __device__ float extended(int64_t b, int64_t e, int64_t c) const {
    if (e >= K - 1) return to_float(x[(b * L + e - (K - 1)) * C + c]);
    return state ? to_float(state[(b * C + c) * (K - 1) + e]) : 0.0f;
  }
  // pre_t[c] = bias[c] + sum_i w[c, i] * xe_{t+i}[c] over the visible taps t + i >= first
  __device__ float pre(int64_t b, int64_t t, int64_t c) const {
    const int64_t first = first_visible(b, t);
    float acc = bias ? to_float(bias[c]) : 0.0f;
    for (int i = 0; i < K; i++)
      if (t + i >= first) acc += to_float(w[c * K + i]) * extended(b, t + i, c);
    return acc;
  }

  // d(xe_e) for channel c of sequence b (the transposed taps of pre):
  // pre_t = ... + w_i xe_{t+i}  =>  dxe_e = sum_i w_i dpre_{e-i} over the outputs t = e - i that see e;
  // final_state_j = xe_{L+j}  =>  dxe_e += dfinal_{e-L} for e >= L where the final state reads it.
  __device__ float extended_grad(const float* dpre, const T* dfinal, int64_t b, int64_t e, int64_t c) const {
    float acc = e >= L && e >= first_visible(b, L - 1) ? to_float(dfinal[(b * C + c) * (K - 1) + e - L]) : 0.0f;
    for (int i = 0; i < K; i++) {
      const int64_t t = e - i;
      if (t >= 0 && t < L && e >= first_visible(b, t)) acc += to_float(w[c * K + i]) * dpre[(b * L + t) * C + c];
    }
    return acc;
  }
};

// y: (B, L, C), n_out = B*L*C
template <class T>
__global__ void conv_forward_kernel(T* y, ConvInputs<T> in, int64_t n_out, ConvAct act) {
  HLA_GRID_STRIDE(n, n_out) {
    const int64_t c = n % in.C, row = n / in.C, t = row % in.L, b = row / in.L;
    const float pre = in.pre(b, t, c);
    y[n] = from_float<T>(act == ConvAct::SiLU ? pre * sigmoid_of(pre) : pre);  // y = act(pre)
  }
}

// final_state: (B, C, K-1), final_state[b, c, j] = xe_{L+j} (of the last document)
template <class T>
__global__ void conv_final_state_kernel(T* final_state, ConvInputs<T> in, int64_t n_state) {
  const int S = in.K - 1;
  HLA_GRID_STRIDE(n, n_state) {
    const int64_t j = n % S, bc = n / S, c = bc % in.C, b = bc / in.C;
    const bool visible = in.L == 0 || in.L + j >= in.first_visible(b, in.L - 1);
    final_state[n] = from_float<T>(visible ? in.extended(b, in.L + j, c) : 0.0f);
  }
}

// dpre: (B, L, C) fp32; y = pre * s(pre)  =>  dpre = dy * s * (1 + pre * (1 - s))
template <class T>
__global__ void conv_dpre_kernel(float* dpre, const T* dy, ConvInputs<T> in, int64_t n_out, ConvAct act) {
  HLA_GRID_STRIDE(n, n_out) {
    float d = to_float(dy[n]);
    if (act == ConvAct::SiLU) {
      const int64_t c = n % in.C, row = n / in.C, t = row % in.L, b = row / in.L;
      const float pre = in.pre(b, t, c), s = sigmoid_of(pre);
      d *= s * (1.0f + pre * (1.0f - s));
    }
    dpre[n] = d;
  }
}

// dx: (B, L, C), x_t = xe_{t+K-1}; n_out = B*L*C
template <class T>
__global__ void conv_dx_kernel(T* dx, const float* dpre, const T* dfinal, ConvInputs<T> in, int64_t n_out) {
  HLA_GRID_STRIDE(n, n_out) {
    const int64_t c = n % in.C, row = n / in.C, t = row % in.L, b = row / in.L;
    dx[n] = from_float<T>(in.extended_grad(dpre, dfinal, b, t + in.K - 1, c));
  }
}

// dstate: (B, C, K-1), state_j = xe_j; n_state = B*C*(K-1)
template <class T>
__global__ void conv_dstate_kernel(T* dstate, const float* dpre, const T* dfinal, ConvInputs<T> in, int64_t n_state) {
  const int S = in.K - 1;
  HLA_GRID_STRIDE(n, n_state) {
    const int64_t j = n % S, bc = n / S, c = bc % in.C, b = bc / in.C;
    dstate[n] = from_float<T>(in.extended_grad(dpre, dfinal, b, j, c));
  }
}

// Pass 1 of dw and dbias over the rows (b, t) of one chunk, one thread per channel:
// partial_w: (chunks, C, K) += dpre_t xe_{t+i};  partial_b: (chunks, C) += dpre_t (null: no bias).
// grid (chunks, ceil(C / kColumnThreads)).
template <class T>
__global__ void conv_dweight_partial_kernel(float* partial_w, float* partial_b, const float* dpre, ConvInputs<T> in,
                                            int64_t rows, int64_t per_chunk) {
  const int64_t c = blockIdx.y * (int64_t)blockDim.x + threadIdx.x;
  if (c >= in.C) return;
  float dw[kMaxTaps] = {};
  float db = 0;
  const int64_t r0 = blockIdx.x * per_chunk, r1 = std::min(rows, r0 + per_chunk);
  for (int64_t row = r0; row < r1; row++) {
    const int64_t t = row % in.L, b = row / in.L, first = in.first_visible(b, t);
    const float d = dpre[row * in.C + c];
    db += d;  // pre = bias + ...  =>  dbias = sum_t dpre_t
#pragma unroll
    for (int i = 0; i < kMaxTaps; i++)  // pre = ... + w_i xe_{t+i}  =>  dw_i = sum dpre xe_{t+i} (visible taps)
      if (i < in.K && t + i >= first) dw[i] += d * in.extended(b, t + i, c);
  }
  float* pw = partial_w + (blockIdx.x * in.C + c) * in.K;
#pragma unroll
  for (int i = 0; i < kMaxTaps; i++)
    if (i < in.K) pw[i] = dw[i];
  if (partial_b) partial_b[blockIdx.x * in.C + c] = db;
}

}  // namespace

void short_conv_forward(void* y, void* final_state, const void* x, const void* w, const void* bias, const void* state,
                        const ShortConvDims& d, DType dtype) {
  const int64_t B = d.B, L = d.L, C = d.C, K = d.K;
  const int64_t n_out = B * L * C, n_state = B * C * (K - 1);
  dispatch_storage(dtype, "short_conv_forward", [&](auto tag) {
    using T = decltype(tag);
    const ConvInputs<T> in{static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(bias),
                           static_cast<const T*>(state), d.doc_start, L, C, static_cast<int>(K)};
    if (n_out > 0) conv_forward_kernel<T><<<grid_1d(n_out), kThreads>>>(static_cast<T*>(y), in, n_out, d.act);
    CUDA_CHECK_LAUNCH();
    if (n_state > 0)
      conv_final_state_kernel<T><<<grid_1d(n_state), kThreads>>>(static_cast<T*>(final_state), in, n_state);
  });
  CUDA_CHECK_LAUNCH();
}

void short_conv_backward(void* dx, void* dw, void* dbias, void* dstate, const void* dy, const void* dfinal,
                         const void* x, const void* w, const void* bias, const void* state, const ShortConvDims& d,
                         DType dtype) {
  const int64_t B = d.B, L = d.L, C = d.C, K = d.K;
  HLA_CHECK(K <= kMaxTaps, "short_conv_backward: the CUDA kernel takes kernel sizes up to ", kMaxTaps, ", got ", K);
  if (C == 0) return;  // every buffer is empty; with B * L == 0 the passes below still write dw = dbias = 0
  const int64_t rows = B * L, n_out = rows * C, n_state = B * C * (K - 1);
  const RowChunks chunks = split_rows(rows);
  FloatScratch dpre(n_out);                                        // dpre: (B, L, C)
  FloatScratch partial_w(chunks.count * C * K);                    // partial_w: (chunks, C, K)
  FloatScratch partial_b(dbias ? chunks.count * C : 0);            // partial_b: (chunks, C)
  dispatch_storage(dtype, "short_conv_backward", [&](auto tag) {
    using T = decltype(tag);
    const ConvInputs<T> in{static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(bias),
                           static_cast<const T*>(state), d.doc_start, L, C, static_cast<int>(K)};
    const T* dfin = static_cast<const T*>(dfinal);
    if (n_out > 0) {
      conv_dpre_kernel<T><<<grid_1d(n_out), kThreads>>>(dpre.get(), static_cast<const T*>(dy), in, n_out, d.act);
      CUDA_CHECK_LAUNCH();
      conv_dx_kernel<T><<<grid_1d(n_out), kThreads>>>(static_cast<T*>(dx), dpre.get(), dfin, in, n_out);
      CUDA_CHECK_LAUNCH();
    }
    if (dstate && n_state > 0) {
      conv_dstate_kernel<T><<<grid_1d(n_state), kThreads>>>(static_cast<T*>(dstate), dpre.get(), dfin, in, n_state);
      CUDA_CHECK_LAUNCH();
    }
    const dim3 grid(chunks.count, static_cast<unsigned>((C + kColumnThreads - 1) / kColumnThreads));
    conv_dweight_partial_kernel<T><<<grid, kColumnThreads>>>(partial_w.get(), dbias ? partial_b.get() : nullptr,
                                                             dpre.get(), in, rows, chunks.per_chunk);
    CUDA_CHECK_LAUNCH();
    write_column_sums(static_cast<T*>(dw), partial_w.get(), chunks.count, C * K);
    if (dbias) write_column_sums(static_cast<T*>(dbias), partial_b.get(), chunks.count, C);
  });
}

}  // namespace hla::cuda
