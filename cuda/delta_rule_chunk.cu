// The chunked delta rule forward on tensor cores (mixers.md 4.6-4.8), pass by pass the CPU
// chunked reference of nn/ops/delta_rule.cpp. See cuda/delta_rule_chunk.cuh for the scope.
//
// Per (batch b, value head j), chunks of C = 64 tokens, local tokens t = 0..63 (rows past the
// end of the sequence are zero: k = q = v = 0, beta = w = g = 0, so they change nothing):
//   Pass 1 (prepare_kernel, grid (NT, HV, B), every chunk in parallel; CPU: prepare_chunk):
//     1a  G = inclusive cumsum of g inside the chunk                                   (4.1)
//     1b  L[t,s] = beta_t (k_t . k_s) exp(G_t - G_s), s < t;
//         Aqk[t,s] = scale (q_t . k_s) exp(G_t - G_s), s <= t                     (4.6, mma)
//     1c  A = (I + L)^{-1} by forward substitution, fp32 in shared memory         (4.7)
//     1d  W = A diag(beta exp(G)) K,  U = A diag(w) V                             (4.6, mma)
//   Pass 2 (scan_kernel, grid (dv / 32, HV, B), sequential over chunks; CPU: scan_chunks + the
//   output loop of chunk_forward). The state h (dk x dv, fp32) is split along dv into column
//   tiles of 32, one per CTA, held in shared memory. A CTA needs < 113 KB of shared memory and
//   128 registers a thread, so two fit on an SM: at the anchor shape B * HV * 4 = 256 CTAs are
//   all resident on the 132 SMs, and one CTA's chunk loads overlap the other's math:
//     2a  Vnew = U - W h                            -> residual (bf16) and u_f32    (4.8, mma)
//     2b  o = scale (Q (.) exp(G)) h + Aqk Vnew                                   (4.6, mma)
//     2c  h <- exp(G_last) h + (K (.) exp(G_last - G))^T Vnew                     (4.8, mma)
//
// Precision. Every product runs on mma.m16n8k16 bf16 -> fp32. q, k, v are bf16 already and
// enter exactly; an fp32 operand (A with its column scales, W, U's partner h, Aqk, Vnew) is
// split into hi + lo bf16 halves and multiplied as hi*x + lo*x (and hi*lo cross terms when both
// sides are fp32), which keeps ~16 mantissa bits: the chunked result then differs from fp32
// math by far less than the bf16 rounding of the outputs. The per-row gate factors are folded
// into whichever operand is already fp32, so that k, q, v stay bf16-exact.
// Workspace W, U, Aqk in fp32: the scan forms Vnew = U - W h, a difference of two similar
// terms; bf16 W/U would put 2^-9 relative errors on each term before that cancellation (and on
// every later state), a large part of the 5e-3 output budget. The price is 2x their traffic
// (about 0.06 ms at B4 T4096 H16 D128 on an H200).
//
// Fragments are gathered from shared memory element by element through accessors (A(r, k),
// B(k, n) as floats), one code path for every product, transposed or scaled; ldmatrix tiles and
// cp.async double buffering of the next chunk are the next step for speed.
#include "cuda/delta_rule_chunk.cuh"

#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/common.cuh"
#include "cuda/mma.cuh"
#include "cuda/recurrence.cuh"

namespace hla::cuda::delta_chunk {
namespace {

using bf16 = __nv_bfloat16;
constexpr int C = kChunk;
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kLdC = C + 4;  // fp32 row stride of C-wide matrices in shared memory (bank spread)

struct ChunkArgs {
  int B, T, H, HV, NT;  // NT = ceil(T / C) chunks
  float scale;
  const bf16 *q, *k;    // (B, T, H, dk)
  const bf16* v;        // (B, T, HV, dv)
  const bf16* g;        // (B, T, HV) or null (no gate)
  const bf16 *b, *w;    // (B, T, HV) erase and write gates
  const float* h0;      // (B, HV, dk, dv) or null
  bf16 *o, *residual;   // (B, T, HV, dv)
  float* u_f32;         // (B, T, HV, dv) or null
  float* final_state;   // (B, HV, dk, dv)
  // workspace, written by pass 1 and read by pass 2
  float* W;             // (B, HV, NT * C, dk)
  float* U;             // (B, HV, NT * C, dv)
  float* Aqk;           // (B, HV, NT, C, C)
  float* G;             // (B, HV, NT * C)  in-chunk cumulative gate
};

__device__ __forceinline__ float bf(bf16 x) { return __bfloat162float(x); }

// (x0, x1) = hi + lo with hi, lo packed bf16 pairs (hi the rounded value, lo the rest).
__device__ __forceinline__ void split2(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  const float r0 = __bfloat162float(__float2bfloat16_rn(x0)), r1 = __bfloat162float(__float2bfloat16_rn(x1));
  hi = pack_bf16(r0, r1);
  lo = pack_bf16(x0 - r0, x1 - r1);
}

// One warp's part of an (M x N) product computed by the block's 8 warps: M / 16 row tiles of
// 16 rows, each shared by 8 / (M / 16) warps that split its N columns; each warp holds NT
// accumulator tiles of 16 x 8 (mma's C layout: element i of tile nt is at row g + 8 (i / 2),
// column nt * 8 + 2 t + i % 2 of the warp's block, g = lane / 4, t = lane % 4).
template <int M, int N>
struct WarpTile {
  static constexpr int kRowTiles = M / 16;
  static_assert(M % 16 == 0 && kWarps % kRowTiles == 0, "row tiles must divide the warps");
  static constexpr int kCols = N / (kWarps / kRowTiles);  // columns per warp
  static_assert(kCols % 8 == 0, "whole 8-column tiles per warp");
  static constexpr int NT = kCols / 8;
  int row0, col0, g, t;
  float acc[NT][4];

  __device__ WarpTile() {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    row0 = (warp % kRowTiles) * 16;
    col0 = (warp / kRowTiles) * kCols;
    g = lane / 4, t = lane % 4;
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
      for (int i = 0; i < 4; i++) acc[nt][i] = 0.f;
  }

  // acc += sum_{k < K} A(row, k) B(k, col). SPLIT_A / SPLIT_B: that operand is fp32 (not
  // bf16-exact) and enters as hi + lo; the lo * lo term (~2^-18 relative) is dropped.
  template <int K, bool SPLIT_A, bool SPLIT_B, class FA, class FB>
  __device__ __forceinline__ void mma(const FA& A, const FB& B) {
    static_assert(K % 16 == 0, "K in steps of 16");
#pragma unroll 2
    for (int k0 = 0; k0 < K; k0 += 16) {
      const int r = row0 + g, kk = k0 + 2 * t;
      uint32_t ahi[4], alo[4];
      split2(A(r, kk), A(r, kk + 1), ahi[0], alo[0]);
      split2(A(r + 8, kk), A(r + 8, kk + 1), ahi[1], alo[1]);
      split2(A(r, kk + 8), A(r, kk + 9), ahi[2], alo[2]);
      split2(A(r + 8, kk + 8), A(r + 8, kk + 9), ahi[3], alo[3]);
#pragma unroll
      for (int nt = 0; nt < NT; nt++) {
        const int n = col0 + nt * 8 + g;
        uint32_t bhi0, blo0, bhi1, blo1;
        split2(B(kk, n), B(kk + 1, n), bhi0, blo0);
        split2(B(kk + 8, n), B(kk + 9, n), bhi1, blo1);
        mma_bf16_16816(acc[nt], ahi, bhi0, bhi1);
        if constexpr (SPLIT_B) mma_bf16_16816(acc[nt], ahi, blo0, blo1);
        if constexpr (SPLIT_A) mma_bf16_16816(acc[nt], alo, bhi0, bhi1);
      }
    }
  }

  // fn(row, col, acc element, slot); slot = nt * 4 + i names the same element in another
  // WarpTile<M, N> (see at()).
  template <class Fn>
  __device__ __forceinline__ void each(Fn&& fn) {
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
      for (int i = 0; i < 4; i++) fn(row0 + g + 8 * (i / 2), col0 + nt * 8 + 2 * t + i % 2, acc[nt][i], nt * 4 + i);
  }
  __device__ __forceinline__ float at(int slot) const { return acc[slot / 4][slot % 4]; }
};

// Rows t0 .. t0 + C - 1 of a bf16 (.., W) matrix whose rows are `stride` apart, into a (C, W + 8)
// shared tile; rows n .. C - 1 become zeros. 16-byte loads (W % 8 == 0, src 16-byte aligned).
template <int W>
__device__ __forceinline__ void load_bf16_rows(bf16* dst, const bf16* src, int64_t stride, int n) {
  constexpr int kPieces = W / 8;
  for (int i = threadIdx.x; i < C * kPieces; i += kThreads) {
    const int r = i / kPieces, c = (i % kPieces) * 8;
    const uint4 x = r < n ? *reinterpret_cast<const uint4*>(src + r * stride + c) : make_uint4(0, 0, 0, 0);
    *reinterpret_cast<uint4*>(dst + r * (W + 8) + c) = x;
  }
}

// C rows of W floats (rows `stride` apart, 16-byte aligned) into a (C, LD) shared tile.
template <int W, int LD>
__device__ __forceinline__ void load_f32_rows(float* dst, const float* src, int64_t stride) {
  constexpr int kPieces = W / 4;
  for (int i = threadIdx.x; i < C * kPieces; i += kThreads) {
    const int r = i / kPieces, c = (i % kPieces) * 4;
    *reinterpret_cast<float4*>(dst + r * LD + c) = *reinterpret_cast<const float4*>(src + r * stride + c);
  }
}

// ---------------------------------------------------------------------------------------------
// Pass 1: per chunk, G, L, Aqk, A = (I + L)^{-1}, W, U.

template <int DK, int DV>
struct PrepareSmem {
  static constexpr int kLdK = DK + 8, kLdV = DV + 8;
  bf16 *q, *k, *v;                 // (C, DK + 8), (C, DK + 8), (C, DV + 8)
  float *L, *A;                    // (C, kLdC) strictly lower L, then A = (I + L)^{-1}
  float *G, *beta, *colw, *colu;   // (C): G, beta, beta exp(G) (W's column scale), w (U's)
  static constexpr size_t bytes() {
    return sizeof(bf16) * C * (2 * kLdK + kLdV) + sizeof(float) * (2 * C * kLdC + 4 * C);
  }
  __device__ explicit PrepareSmem(void* p) {
    q = static_cast<bf16*>(p), k = q + C * kLdK, v = k + C * kLdK;
    L = reinterpret_cast<float*>(v + C * kLdV), A = L + C * kLdC;
    G = A + C * kLdC, beta = G + C, colw = beta + C, colu = colw + C;
  }
};

template <int DK, int DV>
__global__ void __launch_bounds__(kThreads) prepare_kernel(ChunkArgs a) {
  extern __shared__ float4 smem_raw[];
  using Smem = PrepareSmem<DK, DV>;
  const Smem sm(smem_raw);
  constexpr int kLdK = Smem::kLdK, kLdV = Smem::kLdV;
  const int chunk = blockIdx.x, j = blockIdx.y, bi = blockIdx.z, hq = j / (a.HV / a.H);
  const int t0 = chunk * C, n = min(C, a.T - t0);
  const int64_t head = int64_t(bi) * a.HV + j;  // (b, j) of (B, HV, ..) workspaces
  load_bf16_rows<DK>(sm.q, a.q + ((int64_t(bi) * a.T + t0) * a.H + hq) * DK, int64_t(a.H) * DK, n);
  load_bf16_rows<DK>(sm.k, a.k + ((int64_t(bi) * a.T + t0) * a.H + hq) * DK, int64_t(a.H) * DK, n);
  load_bf16_rows<DV>(sm.v, a.v + ((int64_t(bi) * a.T + t0) * a.HV + j) * DV, int64_t(a.HV) * DV, n);
  if (threadIdx.x < C) {
    const int tt = threadIdx.x;
    const bool ok = tt < n;
    const int64_t idx = (int64_t(bi) * a.T + t0 + tt) * a.HV + j;  // (B, T, HV)
    sm.beta[tt] = ok ? bf(a.b[idx]) : 0.f;
    sm.colu[tt] = ok ? bf(a.w[idx]) : 0.f;
    sm.G[tt] = ok && a.g ? bf(a.g[idx]) : 0.f;
  }
  __syncthreads();
  // 1a: G = inclusive cumsum of g (warp 0, two tokens per lane).
  if (threadIdx.x < 32) {
    const int lane = threadIdx.x;
    const float x0 = sm.G[2 * lane], x1 = sm.G[2 * lane + 1];
    float s = x0 + x1;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const float y = __shfl_up_sync(0xffffffffu, s, off);
      if (lane >= off) s += y;
    }
    const float before = s - x0 - x1;  // sum of the tokens before 2 * lane
    sm.G[2 * lane] = before + x0;
    sm.G[2 * lane + 1] = before + x0 + x1;
  }
  __syncthreads();
  if (threadIdx.x < C) {
    const int tt = threadIdx.x;
    sm.colw[tt] = sm.beta[tt] * expf(sm.G[tt]);          // ehat_t = beta_t k_t exp(G_t)
    a.G[head * a.NT * C + t0 + tt] = sm.G[tt];
  }
  // 1b: K K^T and Q K^T on tensor cores, then the masks and decays (exponents <= 0 only).
  {
    auto k_rows = [&](int r, int d) { return bf(sm.k[r * kLdK + d]); };  // K[r][d]
    auto q_rows = [&](int r, int d) { return bf(sm.q[r * kLdK + d]); };  // Q[r][d]
    auto k_cols = [&](int d, int s) { return bf(sm.k[s * kLdK + d]); };  // K^T[d][s]
    WarpTile<C, C> kk, qk;
    kk.mma<DK, false, false>(k_rows, k_cols);
    qk.mma<DK, false, false>(q_rows, k_cols);
    kk.each([&](int r, int s, float x, int) {
      sm.L[r * kLdC + s] = s < r ? sm.beta[r] * x * expf(sm.G[r] - sm.G[s]) : 0.f;
    });
    float* aqk = a.Aqk + (head * a.NT + chunk) * C * C;
    qk.each([&](int r, int s, float x, int) { aqk[r * C + s] = s <= r ? a.scale * x * expf(sm.G[r] - sm.G[s]) : 0.f; });
  }
  __syncthreads();
  // 1c: A = (I + L)^{-1}. Column `col` of A solves (I + L) x = e_col by forward substitution:
  //     x_i = [i == col] - sum_{col <= m < i} L[i][m] x_m. Four neighbouring lanes share a column
  //     and split the sum; rows go in order, so a __syncwarp orders each row's write.
  {
    const int col = threadIdx.x / 4, part = threadIdx.x % 4;
    for (int i = 0; i < C; i++) {
      float s = 0.f;
#pragma unroll 4
      for (int m = col + part; m < i; m += 4) s += sm.L[i * kLdC + m] * sm.A[m * kLdC + col];  // loads pipelined
      s += __shfl_xor_sync(0xffffffffu, s, 1);
      s += __shfl_xor_sync(0xffffffffu, s, 2);
      if (part == 0) sm.A[i * kLdC + col] = i == col ? 1.f : i > col ? -s : 0.f;
      __syncwarp();
    }
  }
  __syncthreads();
  // 1d: W = A diag(beta exp(G)) K and U = A diag(w) V (fp32 A with its column scale split).
  {
    WarpTile<C, DK> wt;
    wt.mma<C, true, false>([&](int r, int s) { return sm.A[r * kLdC + s] * sm.colw[s]; },
                           [&](int s, int d) { return bf(sm.k[s * kLdK + d]); });
    float* W = a.W + (head * a.NT * C + t0) * DK;
    wt.each([&](int r, int d, float x, int) { W[r * DK + d] = x; });
  }
  {
    WarpTile<C, DV> ut;
    ut.mma<C, true, false>([&](int r, int s) { return sm.A[r * kLdC + s] * sm.colu[s]; },
                           [&](int s, int c) { return bf(sm.v[s * kLdV + c]); });
    float* U = a.U + (head * a.NT * C + t0) * DV;
    ut.each([&](int r, int c, float x, int) { U[r * DV + c] = x; });
  }
}

// ---------------------------------------------------------------------------------------------
// Pass 2: per (b, j, half of dv), sequential over chunks: Vnew, o, and the state update.

template <int DK, int DV>
struct ScanSmem {
  static constexpr int BV = 32;  // state columns per CTA
  static constexpr int kLdH = BV + 4, kLdW = DK + 4, kLdK = DK + 8;
  float* h;      // (DK, kLdH)  the state's columns v0 .. v0 + BV - 1
  float* W;      // (C, kLdW)
  float* vnew;   // (C, kLdH)
  float* aqk;    // (C, kLdC)
  float *G, *expG, *kdecay;  // (C): G, exp(G), exp(G_last - G)
  bf16 *q, *k;   // (C, kLdK)
  static constexpr size_t bytes() {
    return sizeof(float) * (size_t(DK) * kLdH + C * kLdW + C * kLdH + C * kLdC + 3 * C) +
           sizeof(bf16) * 2 * C * kLdK;
  }
  __device__ explicit ScanSmem(void* p) {
    h = static_cast<float*>(p), W = h + DK * kLdH, vnew = W + C * kLdW, aqk = vnew + C * kLdH;
    G = aqk + C * kLdC, expG = G + C, kdecay = expG + C;
    q = reinterpret_cast<bf16*>(kdecay + C), k = q + C * kLdK;
  }
};

template <int DK, int DV>
__global__ void __launch_bounds__(kThreads, 2) scan_kernel(ChunkArgs a) {
  extern __shared__ float4 smem_raw[];
  using Smem = ScanSmem<DK, DV>;
  const Smem sm(smem_raw);
  constexpr int BV = Smem::BV, kLdH = Smem::kLdH, kLdW = Smem::kLdW, kLdK = Smem::kLdK;
  const int v0 = blockIdx.x * BV, j = blockIdx.y, bi = blockIdx.z, hq = j / (a.HV / a.H);
  const int64_t head = int64_t(bi) * a.HV + j;
  const float* h0 = a.h0 ? a.h0 + head * DK * DV : nullptr;
  for (int i = threadIdx.x; i < DK * BV; i += kThreads) {
    const int d = i / BV, c = i % BV;
    sm.h[d * kLdH + c] = h0 ? h0[d * DV + v0 + c] : 0.f;
  }
  auto h_op = [&](int d, int c) { return sm.h[d * kLdH + c]; };  // h[d][c] as an mma B operand
  for (int chunk = 0; chunk < a.NT; chunk++) {
    const int t0 = chunk * C, n = min(C, a.T - t0);
    const int64_t row0 = head * a.NT * C + t0;  // first workspace row of the chunk
    load_bf16_rows<DK>(sm.q, a.q + ((int64_t(bi) * a.T + t0) * a.H + hq) * DK, int64_t(a.H) * DK, n);
    load_bf16_rows<DK>(sm.k, a.k + ((int64_t(bi) * a.T + t0) * a.H + hq) * DK, int64_t(a.H) * DK, n);
    load_f32_rows<DK, kLdW>(sm.W, a.W + row0 * DK, DK);
    load_f32_rows<C, kLdC>(sm.aqk, a.Aqk + (head * a.NT + chunk) * C * C, C);
    if (threadIdx.x < C) sm.G[threadIdx.x] = a.G[row0 + threadIdx.x];
    __syncthreads();
    // 2a: Vnew = U - W h (rows past n are 0 - 0 h = 0); U straight from global memory.
    {
      if (threadIdx.x < C) {
        sm.expG[threadIdx.x] = expf(sm.G[threadIdx.x]);
        sm.kdecay[threadIdx.x] = expf(sm.G[C - 1] - sm.G[threadIdx.x]);  // G_last = G[C - 1]: g = 0 past n
      }
      WarpTile<C, BV> wh;
      wh.mma<DK, true, true>([&](int r, int d) { return sm.W[r * kLdW + d]; }, h_op);
      wh.each([&](int r, int c, float x, int) {
        const float u = a.U[(row0 + r) * DV + v0 + c] - x;
        sm.vnew[r * kLdH + c] = u;
        if (r < n) {
          const int64_t idx = ((int64_t(bi) * a.T + t0 + r) * a.HV + j) * DV + v0 + c;  // (B, T, HV, dv)
          a.residual[idx] = __float2bfloat16_rn(u);
          if (a.u_f32) a.u_f32[idx] = u;
        }
      });
    }
    __syncthreads();
    // 2b: o = scale exp(G) (.) (Q h) + Aqk Vnew (Aqk already holds scale and the decays).
    {
      WarpTile<C, BV> qh, av;
      qh.mma<DK, false, true>([&](int r, int d) { return bf(sm.q[r * kLdK + d]); }, h_op);
      av.mma<C, true, true>([&](int r, int s) { return sm.aqk[r * kLdC + s]; },
                            [&](int s, int c) { return sm.vnew[s * kLdH + c]; });
      qh.each([&](int r, int c, float x, int slot) {
        if (r < n)
          a.o[((int64_t(bi) * a.T + t0 + r) * a.HV + j) * DV + v0 + c] =
              __float2bfloat16_rn(a.scale * sm.expG[r] * x + av.at(slot));
      });
    }
    // 2c: h <- exp(G_last) h + K^T diag(exp(G_last - G)) Vnew.
    {
      const float decay = sm.expG[C - 1];
      WarpTile<DK, BV> hn;
      hn.each([&](int d, int c, float& x, int) { x = decay * sm.h[d * kLdH + c]; });
      hn.mma<C, false, true>([&](int d, int s) { return bf(sm.k[s * kLdK + d]); },
                             [&](int s, int c) { return sm.vnew[s * kLdH + c] * sm.kdecay[s]; });
      __syncthreads();  // every read of h, vnew and this chunk's tiles is done
      hn.each([&](int d, int c, float x, int) { sm.h[d * kLdH + c] = x; });
    }
  }
  __syncthreads();
  float* ht = a.final_state + head * DK * DV;
  for (int i = threadIdx.x; i < DK * BV; i += kThreads) {
    const int d = i / BV, c = i % BV;
    ht[d * DV + v0 + c] = sm.h[d * kLdH + c];
  }
}

template <int DK, int DV>
void launch(const ChunkArgs& a) {
  auto prepare = prepare_kernel<DK, DV>;
  constexpr size_t prepare_bytes = PrepareSmem<DK, DV>::bytes();
  CUDA_CHECK(cudaFuncSetAttribute(prepare, cudaFuncAttributeMaxDynamicSharedMemorySize, int(prepare_bytes)));
  prepare<<<dim3(a.NT, a.HV, a.B), kThreads, prepare_bytes>>>(a);
  CUDA_CHECK_LAUNCH();
  auto scan = scan_kernel<DK, DV>;
  constexpr size_t scan_bytes = ScanSmem<DK, DV>::bytes();
  static_assert(scan_bytes <= 113 * 1024, "two scan CTAs per SM (228 KB, 1 KB reserved per CTA)");
  CUDA_CHECK(cudaFuncSetAttribute(scan, cudaFuncAttributeMaxDynamicSharedMemorySize, int(scan_bytes)));
  CUDA_CHECK(cudaFuncSetAttribute(scan, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared));
  scan<<<dim3(DV / ScanSmem<DK, DV>::BV, a.HV, a.B), kThreads, scan_bytes>>>(a);
  CUDA_CHECK_LAUNCH();
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

bool supported(const DeltaRuleDims& d, DType dtype) {
  const bool width_ok = (d.dk == 64 || d.dk == 128) && (d.dv == 64 || d.dv == 128);
  return dtype == DType::BF16 && d.gate != DeltaGate::Vector && !d.erase_vector && !d.write_vector && width_ok;
}

void forward(void* o, float* final_state, void* residual, const void* q, const void* k, const void* v, const void* g,
             const void* b, const void* w, const float* h0, const DeltaRuleDims& d, float* u_f32) {
  HLA_CHECK(aligned16(q) && aligned16(k) && aligned16(v), "delta_rule chunk kernel: q, k, v must be 16-byte aligned");
  ChunkArgs a{};
  a.B = int(d.B), a.T = int(d.T), a.H = int(d.H), a.HV = int(d.HV), a.NT = int((d.T + C - 1) / C);
  a.scale = float(d.scale);
  a.q = static_cast<const bf16*>(q), a.k = static_cast<const bf16*>(k), a.v = static_cast<const bf16*>(v);
  a.g = static_cast<const bf16*>(g), a.b = static_cast<const bf16*>(b), a.w = static_cast<const bf16*>(w);
  a.h0 = h0;
  a.o = static_cast<bf16*>(o), a.residual = static_cast<bf16*>(residual), a.u_f32 = u_f32;
  a.final_state = final_state;
  const int64_t rows = d.B * d.HV * a.NT * C;  // workspace rows: (B, HV, NT * C)
  recurrence::Scratch W(rows * d.dk), U(rows * d.dv), Aqk(rows * C), G(rows);
  a.W = W.get(), a.U = U.get(), a.Aqk = Aqk.get(), a.G = G.get();
  if (d.dk == 64 && d.dv == 64) launch<64, 64>(a);
  else if (d.dk == 64) launch<64, 128>(a);
  else if (d.dv == 64) launch<128, 64>(a);
  else launch<128, 128>(a);
}

}  // namespace hla::cuda::delta_chunk
