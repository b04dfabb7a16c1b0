// Causal depthwise short convolution on the GPU (mixers.md 2.6), forward and backward, with the
// CPU reference's extended sequence xe = [state ; x] (nn/ops/short_conv.cpp): output t reads
// xe_t .. xe_{t+K-1}, and the final state is xe_L .. xe_{L+K-2}. Packed documents (d.doc_start)
// narrow both to the extended indices e >= first_visible(b, t) of t's document, as on the CPU.
//
// The main kernels work in x's own indices s (x_s = xe_{s+K-1}; s < 0 is the state, s < 1-K
// zero) with the taps padded on the left to KMAX (4, or kMaxTaps for K > 4) by zero weights, so
// every register index is a compile-time constant. One thread owns W consecutive channels (8 bf16
// or 4 fp32 in one 16-byte load; 1 when C % W != 0 or a pointer is misaligned) and a run of
// consecutive tokens of one sequence; consecutive threads take consecutive channel groups, so a
// warp's loads of one token are coalesced rows. Memory traffic is about one read of each input
// row and one write of each output row:
//   forward: the run walks up the tokens keeping the last KMAX-1 inputs in registers (each x row
//     read once, plus a halo of KMAX-1 rows before the run);
//   backward, one kernel: the run walks DOWN from KMAX-1 tokens past its end, recomputing
//     pre_t = the forward's window and dpre_t = dy_t act'(pre_t) into a register history of the
//     next KMAX-1 tokens, so dx_t = sum_i w_i dpre_{t+K-1-i} (+ dfinal) is written at t, and
//     dw, dbias are summed over the run's own tokens in registers; one fp32 partial per run
//     (chunk = (b, run)) that cuda/reduce.cuh sums in a fixed order (deterministic). Before the
//     walk a thread copies every x and dy row its run reads into shared memory, all those loads
//     in flight at once, and it owns at most kBackwardWidth channels (4: 128 registers, two
//     blocks an SM). Until session 52 it owned 16 bytes of channels (8 bf16: 238 registers, one
//     block an SM) and loaded a token ahead of its walk: too few bytes in flight for DRAM's
//     bandwidth (ncu, H100, the GDN 3:1 hybrid at 4 x 256, B8 T2048: 0.18 ms a call, 8.7 ms a
//     training step, 6.6% of it).
// Runs are kForwardRun / kBackwardRun tokens, halved down to kMinRun while the threads would not
// give every SM a block (plan_runs), and then the blocks are one warp each, so that a small model
// (the MQAR demo: B32 L64 C64, 512 backward threads in two blocks walking 32 tokens, 80 us a
// call, ncu at f0ed7fd) spreads its short walks over the SMs.
// The state rows take small dedicated kernels: final_state copies xe_L.., dstate gathers
// d(xe_e) = sum_i w_i dpre_{e-i} (+ dfinal) for e < K-1 with dpre recomputed from dy and x.
// The fused norm (d.norm_width > 0, the delta-rule mixers' q/k l2norm): the forward rounds each
// y to T (what the unfused l2norm would read back), and the G = norm_width / W lanes that own one
// head of a token sum its squares by shuffles within the head's lanes and scale y by rstd before
// the store; that saves l2norm's read and write of y. When G is not a power of two <= 32 (W = 1
// or fp32's W = 4 at wide heads) the plain kernel runs, then cuda/l2norm.cu on y in place. The
// backward is l2norm's, run by the caller (nn/ops/short_conv.cpp) before this one.
#include "cuda/l2norm.h"
#include "cuda/reduce.cuh"
#include "cuda/short_conv.h"

namespace hla::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxTaps = 16;
constexpr int kForwardRun = 16;   // tokens a forward thread walks, at most
constexpr int kBackwardRun = 16;  // tokens a backward thread walks (one dw partial each), at most
constexpr int kMinRun = 8;        // the shortest run plan_runs cuts
constexpr int kBackwardWidth = 4;  // channels a backward thread owns, at most (its register arrays)
constexpr int kBackwardBlocksPerSm = 2;

__device__ __forceinline__ float sigmoid_of(float v) { return 1.0f / (1.0f + expf(-v)); }

// y = act(pre)
__device__ __forceinline__ float activation(float pre, ConvAct act) {
  return act == ConvAct::SiLU ? pre * sigmoid_of(pre) : pre;
}
// y = pre * s(pre)  =>  dpre = dy * s * (1 + pre * (1 - s))
__device__ __forceinline__ float activation_grad(float dy, float pre, ConvAct act) {
  if (act == ConvAct::Identity) return dy;
  const float s = sigmoid_of(pre);
  return dy * s * (1.0f + pre * (1.0f - s));
}

// The forward operands of one call; every index is a (b, t or e, c) of the CPU reference.
template <class T>
struct ConvInputs {
  const T* __restrict__ x;      // x: (B, L, C)
  const T* __restrict__ w;      // w: (C, K)
  const T* __restrict__ bias;   // bias: (C) or null
  const T* __restrict__ state;  // state: (B, C, K-1) or null (zeros)
  const int32_t* __restrict__ doc_start;  // doc_start: (B, L) or null (one document a row)
  int64_t L, C;
  int K;

  // The first extended index output t of sequence b reads: x_{doc_start} (0 without documents).
  __device__ int64_t first_visible(int64_t b, int64_t t) const {
    return doc_start ? doc_start[b * L + t] + K - 1 : 0;
  }
  // The same in x's indices: the lowest s with x_s visible to output t (1-K: the whole state).
  __device__ int64_t lowest_input(int64_t b, int64_t t) const { return first_visible(b, t) - (K - 1); }

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

  // d(xe_e) for channel c of sequence b (the transposed taps of pre), dpre recomputed from dy:
  // pre_t = ... + w_i xe_{t+i}  =>  dxe_e = sum_i w_i dpre_{e-i} over the outputs t = e - i that see e;
  // final_state_j = xe_{L+j}  =>  dxe_e += dfinal_{e-L} for e >= L where the final state reads it.
  __device__ float extended_grad(const T* dy, const T* dfinal, ConvAct act, int64_t b, int64_t e, int64_t c) const {
    float acc = e >= L && e >= first_visible(b, L - 1) ? to_float(dfinal[(b * C + c) * (K - 1) + e - L]) : 0.0f;
    for (int i = 0; i < K; i++) {
      const int64_t t = e - i;
      if (t >= 0 && t < L && e >= first_visible(b, t))
        acc += to_float(w[c * K + i]) * activation_grad(to_float(dy[(b * L + t) * C + c]), pre(b, t, c), act);
    }
    return acc;
  }

  // x_s of channels c0 .. c0+W-1 (s < 0: the state, s < 1-K: zeros); one vector load for s >= 0.
  template <int W>
  __device__ Vec<T, W> input_row(int64_t b, int64_t s, int64_t c0) const {
    if (s >= 0) return load_vec<W>(x + (b * L + s) * C + c0);
    Vec<T, W> v;
#pragma unroll
    for (int k = 0; k < W; k++)
      v.v[k] = s >= 1 - K && state ? state[(b * C + c0 + k) * (K - 1) + K - 1 + s] : from_float<T>(0.0f);
    return v;
  }
  template <int W>
  __device__ void load_inputs(float (&v)[W], int64_t b, int64_t s, int64_t c0) const {
    to_floats(v, input_row<W>(b, s, c0));
  }
  // wp[j] = w[c, j - (KMAX-K)] for the padded taps j >= KMAX-K, else 0; b = bias[c] or 0.
  template <int KMAX, int W>
  __device__ void load_taps(float (&wp)[KMAX][W], float (&b)[W], int64_t c0) const {
#pragma unroll
    for (int j = 0; j < KMAX; j++)
#pragma unroll
      for (int k = 0; k < W; k++) wp[j][k] = j >= KMAX - K ? to_float(w[(c0 + k) * K + j - (KMAX - K)]) : 0.0f;
#pragma unroll
    for (int k = 0; k < W; k++) b[k] = bias ? to_float(bias[c0 + k]) : 0.0f;
  }
  // pre_t of channels c0.. from the window win[j] = x_{t-KMAX+1+j}: the real (unpadded) taps on
  // visible inputs s >= lowest (a padded tap is skipped, not multiplied by 0: x may hold inf).
  template <int KMAX, int W>
  __device__ void window_pre(float (&pre)[W], const float (&wp)[KMAX][W], const float (&b)[W],
                             const float (&win)[KMAX][W], int64_t t, int64_t lowest) const {
#pragma unroll
    for (int k = 0; k < W; k++) pre[k] = b[k];
#pragma unroll
    for (int j = 0; j < KMAX; j++)
      if (j >= KMAX - K && t - KMAX + 1 + j >= lowest)
#pragma unroll
        for (int k = 0; k < W; k++) pre[k] += wp[j][k] * win[j][k];
  }
};

// The run of one thread: channels c0 .. c0+W-1 of sequence b, tokens t0 .. t1-1. Thread n takes
// channel group n % groups of run (n / groups) % runs of sequence n / (groups * runs).
struct ThreadRun {
  int64_t b, run, t0, t1, c0;
  bool valid;
};
template <int W>
__device__ ThreadRun thread_run(int64_t L, int64_t C, int64_t runs, int64_t run_tokens, int64_t B) {
  const int64_t n = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, groups = C / W;
  const int64_t g = n % groups, rest = n / groups, run = rest % runs, b = rest / runs;
  const int64_t t0 = run * run_tokens;
  return {b, run, t0, t0 + run_tokens < L ? t0 + run_tokens : L, g * W, b < B};
}

// The fused norm of one token's channels c0 .. c0+W-1: y = y * rstd over each head of norm_width
// channels, rstd = 1 / sqrt(sum(y^2) + eps) as cuda/l2norm.cu, y rounded to T first. The
// G = norm_width / W lanes of one head (G a power of two <= 32) are consecutive threads of one
// warp (threads take consecutive channel groups, and C / W is a multiple of G) that walk the
// same (b, run, tokens), so they all meet at each shuffle; the head's first lane writes
// rstd_row[c0 / norm_width].
template <class T, int W>
__device__ __forceinline__ void normalise_head(float (&y)[W], float* rstd_row, int64_t c0, int norm_width, float eps) {
  const int lanes = norm_width / W, first = (threadIdx.x % 32) & ~(lanes - 1);
  const unsigned head_mask = (lanes == 32 ? 0xffffffffu : (1u << lanes) - 1) << first;
  float sum_sq = 0;
#pragma unroll
  for (int k = 0; k < W; k++) {
    y[k] = to_float(from_float<T>(y[k]));
    sum_sq += y[k] * y[k];
  }
  for (int o = lanes / 2; o > 0; o >>= 1) sum_sq += __shfl_xor_sync(head_mask, sum_sq, o);
  const float r = rsqrtf(sum_sq + eps);  // rstd = 1/sqrt(sum(y^2) + eps)
#pragma unroll
  for (int k = 0; k < W; k++) y[k] *= r;  // y = y * rstd
  if (c0 % norm_width == 0) rstd_row[c0 / norm_width] = r;
}

// y: (B, L, C), rstd: (B, L, C / norm_width) when kNorm (the fused norm, normalise_head);
// threads: B * runs * (C / W), runs = ceil(L / run_tokens).
template <class T, int KMAX, int W, bool kNorm>
__global__ void __launch_bounds__(kThreads, 1)
    conv_forward_kernel(T* __restrict__ y, float* __restrict__ rstd, ConvInputs<T> in, int64_t B, int64_t runs,
                        int run_tokens, ConvAct act, int norm_width, float norm_eps) {
  const ThreadRun r = thread_run<W>(in.L, in.C, runs, run_tokens, B);
  if (!r.valid) return;
  float wp[KMAX][W], bias[W];
  in.load_taps(wp, bias, r.c0);
  float win[KMAX][W];  // win[j] = x_{t-KMAX+1+j} at token t
#pragma unroll
  for (int j = 0; j < KMAX - 1; j++) in.load_inputs(win[j + 1], r.b, r.t0 - KMAX + 1 + j, r.c0);
  float next[W];  // x_t, loaded a token ahead (its latency hidden behind the token before)
  in.load_inputs(next, r.b, r.t0, r.c0);
  for (int64_t t = r.t0; t < r.t1; t++) {
#pragma unroll
    for (int j = 0; j < KMAX - 1; j++)
#pragma unroll
      for (int k = 0; k < W; k++) win[j][k] = win[j + 1][k];
#pragma unroll
    for (int k = 0; k < W; k++) win[KMAX - 1][k] = next[k];
    if (t + 1 < r.t1) in.load_inputs(next, r.b, t + 1, r.c0);
    float out[W];
    in.window_pre(out, wp, bias, win, t, in.lowest_input(r.b, t));
#pragma unroll
    for (int k = 0; k < W; k++) out[k] = activation(out[k], act);  // y = act(pre)
    if constexpr (kNorm)
      normalise_head<T, W>(out, rstd + (r.b * in.L + t) * (in.C / norm_width), r.c0, norm_width, norm_eps);
    store_floats(y + (r.b * in.L + t) * in.C + r.c0, out);
  }
}

// The backward's rows of one thread in shared memory, [row][thread] (a warp's reads of one row
// are consecutive): x_s for s = t0 - KMAX .. top, then dy_t for t = t0 .. top (top: the run's
// last token plus the KMAX - 1 outputs past it that its dx reads).
template <int KMAX>
constexpr int backward_x_rows(int run_tokens) { return run_tokens + 2 * KMAX - 1; }
template <int KMAX>
constexpr int backward_dy_rows(int run_tokens) { return run_tokens + KMAX - 1; }
template <class T, int KMAX, int W>
size_t backward_smem(int run_tokens, int block) {
  return sizeof(Vec<T, W>) * size_t(block) * (backward_x_rows<KMAX>(run_tokens) + backward_dy_rows<KMAX>(run_tokens));
}

// dx: (B, L, C); partial_w: (B * runs, C, K), partial_b: (B * runs, C) or null: each run's sums
// of dw and dbias; threads: B * runs * (C / W), runs = ceil(L / run_tokens). A thread first
// copies every row its run reads into shared memory (all its loads in flight at once: a walk
// that loads a token ahead keeps too few bytes in flight to reach DRAM's bandwidth), then walks.
template <class T, int KMAX, int W>
__global__ void __launch_bounds__(kThreads, kBackwardBlocksPerSm)
    conv_backward_kernel(T* __restrict__ dx, float* __restrict__ partial_w, float* __restrict__ partial_b,
                         const T* __restrict__ dy, const T* __restrict__ dfinal, ConvInputs<T> in, int64_t B,
                         int64_t runs, int run_tokens, ConvAct act) {
  extern __shared__ float4 smem_raw[];
  const ThreadRun r = thread_run<W>(in.L, in.C, runs, run_tokens, B);
  if (!r.valid) return;  // no barrier below: every thread reads only the rows it copied
  const int64_t L = in.L, C = in.C, K = in.K;
  float wp[KMAX][W], bias[W];
  in.load_taps(wp, bias, r.c0);
  // 1. the run's last token's dx reads dpre of KMAX-1 tokens past the run: the walk starts there;
  //    its rows into shared memory first
  const int64_t top = (r.t1 + KMAX - 1 < L ? r.t1 + KMAX - 1 : L) - 1, x_first = r.t0 - KMAX;
  const int stride = blockDim.x;
  Vec<T, W>* xs = reinterpret_cast<Vec<T, W>*>(smem_raw) + threadIdx.x;  // x_s at xs[(s - x_first) * stride]
  Vec<T, W>* dys = xs + backward_x_rows<KMAX>(run_tokens) * stride;       // dy_t at dys[(t - t0) * stride]
  for (int64_t s = x_first; s < 0 && s <= top; s++) xs[(s - x_first) * stride] = in.template input_row<W>(r.b, s, r.c0);
#pragma unroll 8
  for (int64_t s = x_first > 0 ? x_first : 0; s <= top; s++)  // the state rows above, x's rows without a branch
    xs[(s - x_first) * stride] = load_vec<W>(in.x + (r.b * L + s) * C + r.c0);
#pragma unroll 8
  for (int64_t t = r.t0; t <= top; t++) dys[(t - r.t0) * stride] = load_vec<W>(dy + (r.b * L + t) * C + r.c0);
  float win[KMAX][W];  // win[j] = x_{t-KMAX+1+j} at token t
#pragma unroll
  for (int j = 0; j < KMAX; j++) to_floats(win[j], xs[(top - KMAX + 1 + j - x_first) * stride]);
  float dpre[KMAX][W] = {};  // dpre[j] = dpre_{t+j} (0 past L)
  int lowest[KMAX] = {};  // lowest[j] = the lowest input output t+j sees (a token index: L < 2^31)
  float dw[KMAX][W] = {}, db[W] = {};
  const int64_t final_lowest = in.lowest_input(r.b, L - 1);  // the final state reads x_s for s >= this
  for (int64_t t = top; t >= r.t0; t--) {
#pragma unroll
    for (int j = KMAX - 1; j > 0; j--) {
      lowest[j] = lowest[j - 1];
#pragma unroll
      for (int k = 0; k < W; k++) dpre[j][k] = dpre[j - 1][k];
    }
    float d[W], x_low[W];  // dy_t, x_{t-KMAX}
    to_floats(d, dys[(t - r.t0) * stride]);
    to_floats(x_low, xs[(t - KMAX - x_first) * stride]);
    // 2. pre_t from the window, dpre_t = dy_t act'(pre_t)
    lowest[0] = static_cast<int>(in.lowest_input(r.b, t));
    float pre[W];
    in.window_pre(pre, wp, bias, win, t, lowest[0]);
#pragma unroll
    for (int k = 0; k < W; k++) dpre[0][k] = activation_grad(d[k], pre[k], act);
    if (t < r.t1) {
      // 3. dx_t: pre_{t'} = ... + w'_j x_{t'-KMAX+1+j}  =>  dx_t = sum_j w'_j dpre_{t+KMAX-1-j} over
      //    the outputs that see x_t; final_state_i = x_{L-K+1+i}  =>  dx_t += dfinal_{t-L+K-1}
      float g[W];
      const bool in_final = t >= L - K + 1 && t >= final_lowest;
#pragma unroll
      for (int k = 0; k < W; k++)
        g[k] = in_final ? to_float(dfinal[(r.b * C + r.c0 + k) * (K - 1) + t - L + K - 1]) : 0.0f;
#pragma unroll
      for (int j = 0; j < KMAX; j++)
        if (j >= KMAX - K && t >= lowest[KMAX - 1 - j])
#pragma unroll
          for (int k = 0; k < W; k++) g[k] += wp[j][k] * dpre[KMAX - 1 - j][k];
      store_floats(dx + (r.b * L + t) * C + r.c0, g);
      // 4. dw_j += dpre_t x_{t-KMAX+1+j} over the visible taps, dbias += dpre_t
#pragma unroll
      for (int j = 0; j < KMAX; j++)
        if (j >= KMAX - K && t - KMAX + 1 + j >= lowest[0])
#pragma unroll
          for (int k = 0; k < W; k++) dw[j][k] += dpre[0][k] * win[j][k];
#pragma unroll
      for (int k = 0; k < W; k++) db[k] += dpre[0][k];
    }
    // 5. slide the window down one token
#pragma unroll
    for (int j = KMAX - 1; j > 0; j--)
#pragma unroll
      for (int k = 0; k < W; k++) win[j][k] = win[j - 1][k];
#pragma unroll
    for (int k = 0; k < W; k++) win[0][k] = x_low[k];
  }
  // 6. this run's partial sums: the unpadded taps i = j - (KMAX-K)
  const int64_t chunk = r.b * runs + r.run;
#pragma unroll
  for (int k = 0; k < W; k++) {
    float* pw = partial_w + (chunk * C + r.c0 + k) * K;
#pragma unroll
    for (int j = 0; j < KMAX; j++)
      if (j >= KMAX - K) pw[j - (KMAX - K)] = dw[j][k];
    if (partial_b) partial_b[chunk * C + r.c0 + k] = db[k];
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

// dstate: (B, C, K-1), state_j = xe_j; n_state = B*C*(K-1)
template <class T>
__global__ void conv_dstate_kernel(T* dstate, const T* dy, const T* dfinal, ConvInputs<T> in, int64_t n_state,
                                   ConvAct act) {
  const int S = in.K - 1;
  HLA_GRID_STRIDE(n, n_state) {
    const int64_t j = n % S, bc = n / S, c = bc % in.C, b = bc / in.C;
    dstate[n] = from_float<T>(in.extended_grad(dy, dfinal, act, b, j, c));
  }
}

// Launches kernel(params...) on grid x threads with `bytes` of dynamic shared memory (the
// backward's staged rows: beyond 48 KB, and as much of the SM as shared memory as two blocks
// want) and checks the launch.
template <class Kernel, class... Params>
void launch(Kernel kernel, dim3 grid, int threads, size_t bytes, Params... params) {
  if (bytes > 0) {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                    cudaSharedmemCarveoutMaxShared));
  }
  kernel<<<grid, threads, bytes>>>(params...);
  CUDA_CHECK_LAUNCH();
}

// Calls fn(KMAX, W) as integral constants: KMAX = 4 for K <= 4 (else kMaxTaps), W = 16 bytes of T,
// at most MAXW channels, when C allows it and every row pointer is 16-byte aligned (and KMAX = 4:
// registers), else 1.
template <class T, int MAXW, class Fn, class... Ptrs>
void dispatch_taps_width(int64_t K, int64_t C, Fn&& fn, const Ptrs*... rows) {
  constexpr int V = kVecWidth<T> < MAXW ? kVecWidth<T> : MAXW;
  const bool vector = K <= 4 && C % V == 0 && (aligned16(rows) && ...);
  if (K > 4) fn(Width<kMaxTaps>{}, Width<1>{});
  else if (vector) fn(Width<4>{}, Width<V>{});
  else fn(Width<4>{}, Width<1>{});
}

int64_t runs_of(int64_t L, int run_tokens) { return (L + run_tokens - 1) / run_tokens; }

// Whether the forward of W channels a thread normalises heads of norm_width channels in its
// kernel: the lanes of one head, norm_width / W, a power of two <= 32 (normalise_head).
bool fused_norm(int64_t norm_width, int W) {
  const int64_t lanes = norm_width / W;
  return norm_width > 0 && norm_width % W == 0 && lanes <= 32 && (lanes & (lanes - 1)) == 0;
}

// How B sequences of L tokens and `groups` channel groups are cut: runs of max_run tokens,
// halved down to kMinRun while B * runs * groups threads would not give every SM a block of
// kThreads; blocks of kThreads, or of one warp when there are still fewer threads than that.
struct RunPlan {
  int run_tokens;
  int64_t runs;
  int block;
  unsigned blocks;
};
RunPlan plan_runs(int64_t B, int64_t L, int64_t groups, int max_run) {
  const int64_t enough = int64_t(sm_count()) * kThreads;
  int run = max_run;
  while (run > kMinRun && B * runs_of(L, run) * groups < enough) run /= 2;
  const int64_t runs = runs_of(L, run), threads = B * runs * groups;
  const int block = threads < enough ? 32 : kThreads;
  return {run, runs, block, static_cast<unsigned>((threads + block - 1) / block)};
}

}  // namespace

void short_conv_forward(void* y, void* final_state, float* rstd, const void* x, const void* w, const void* bias,
                        const void* state, const ShortConvDims& d, DType dtype) {
  const int64_t B = d.B, L = d.L, C = d.C, K = d.K, norm_width = d.norm_width;
  HLA_CHECK(K >= 1 && K <= kMaxTaps, "short_conv_forward: the CUDA kernel takes kernel sizes 1 to ", kMaxTaps,
            ", got ", K);
  HLA_CHECK(norm_width == 0 || (norm_width > 0 && C % norm_width == 0),
            "short_conv_forward: norm_width must be 0 or a positive divisor of C = ", C, ", got ", norm_width);
  const int64_t n_state = B * C * (K - 1);
  dispatch_storage(dtype, "short_conv_forward", [&](auto tag) {
    using T = decltype(tag);
    const ConvInputs<T> in{static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(bias),
                           static_cast<const T*>(state), d.doc_start, L, C, static_cast<int>(K)};
    if (B * L * C > 0)
      dispatch_taps_width<T, kVecWidth<T>>(K, C, [&](auto taps, auto width) {
        constexpr int KMAX = decltype(taps)::value, W = decltype(width)::value;
        const RunPlan plan = plan_runs(B, L, C / W, kForwardRun);
        const bool fused = fused_norm(norm_width, W);
        launch(fused ? conv_forward_kernel<T, KMAX, W, true> : conv_forward_kernel<T, KMAX, W, false>, plan.blocks,
               plan.block, 0, static_cast<T*>(y), rstd, in, B, plan.runs, plan.run_tokens, d.act,
               static_cast<int>(norm_width), static_cast<float>(d.norm_eps));
        // else y = l2norm(y) in place (a lane reads each element before it writes it)
        if (norm_width > 0 && !fused) l2norm_forward(y, rstd, y, B * L * C / norm_width, norm_width, d.norm_eps, dtype);
      }, in.x, static_cast<const T*>(y));
    if (n_state > 0)
      launch(conv_final_state_kernel<T>, grid_1d(n_state), kThreads, 0, static_cast<T*>(final_state), in, n_state);
  });
}

void short_conv_backward(void* dx, void* dw, void* dbias, void* dstate, const void* dy, const void* dfinal,
                         const void* x, const void* w, const void* bias, const void* state, const ShortConvDims& d,
                         DType dtype) {
  const int64_t B = d.B, L = d.L, C = d.C, K = d.K;
  HLA_CHECK(K >= 1 && K <= kMaxTaps, "short_conv_backward: the CUDA kernel takes kernel sizes 1 to ", kMaxTaps,
            ", got ", K);
  if (C == 0) return;  // every buffer is empty
  const int64_t n_state = B * C * (K - 1);
  dispatch_storage(dtype, "short_conv_backward", [&](auto tag) {
    using T = decltype(tag);
    const ConvInputs<T> in{static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(bias),
                           static_cast<const T*>(state), d.doc_start, L, C, static_cast<int>(K)};
    const T* dfin = static_cast<const T*>(dfinal);
    if (B * L == 0) {  // no rows: dw = dbias = 0
      write_zeros(dw, C * K, dtype);
      write_zeros(dbias, C, dtype);
    } else {
      dispatch_taps_width<T, kBackwardWidth>(K, C, [&](auto taps, auto width) {
        constexpr int KMAX = decltype(taps)::value, W = decltype(width)::value;
        const RunPlan plan = plan_runs(B, L, C / W, kBackwardRun);
        const int chunks = static_cast<int>(B * plan.runs);  // one partial per (b, run)
        FloatScratch partial_w(chunks * C * K);              // partial_w: (chunks, C, K)
        FloatScratch partial_b(dbias ? chunks * C : 0);      // partial_b: (chunks, C)
        launch(conv_backward_kernel<T, KMAX, W>, plan.blocks, plan.block,
               backward_smem<T, KMAX, W>(plan.run_tokens, plan.block), static_cast<T*>(dx), partial_w.get(),
               dbias ? partial_b.get() : nullptr, static_cast<const T*>(dy), dfin, in, B, plan.runs, plan.run_tokens,
               d.act);
        write_column_sums(static_cast<T*>(dw), partial_w.get(), chunks, C * K);
        if (dbias) write_column_sums(static_cast<T*>(dbias), partial_b.get(), chunks, C);
      }, in.x, static_cast<const T*>(dx), static_cast<const T*>(dy));
    }
    if (dstate && n_state > 0)
      launch(conv_dstate_kernel<T>, grid_1d(n_state), kThreads, 0, static_cast<T*>(dstate), static_cast<const T*>(dy),
             dfin, in, n_state, d.act);
  });
}

}  // namespace hla::cuda
