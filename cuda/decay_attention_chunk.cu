// The chunked decay-attention forward on tensor cores; scope in cuda/decay_attention_chunk.cuh.
//
// Per (batch b, value head j; q/k head j / (HV / H)), chunks of C = 64 tokens, local t = 0..63;
// rows past the end of the sequence are zero (q = k = v = 0, g = 0), so they change nothing.
// G = inclusive cumsum of the scalar log gate inside the chunk (<= 0, decreasing), G_last =
// G[C - 1] (= the last valid token's, since g = 0 past it).
//   Pass 1 (scores_kernel, grid (NT, HV, B), every chunk in parallel):
//     Aqk[t, s] = scale (q_t . k_s) exp(G_t - G_s) for s <= t, else 0 (masked BEFORE the exp,
//     so every exponent is <= 0)                                          [C x C] fp32, mma
//   Pass 2 (scan_kernel, grid (dv / BV, HV, B), sequential over chunks; the state h (dk x dv,
//   fp32, the state at the chunk's start) is split along dv into BV-column tiles, one per CTA,
//   held in shared memory):
//     o   = scale exp(G) (.) (Q h) + Aqk V                                               (mma)
//     h  <- exp(G_last) h + K^T diag(exp(G_last - G)) V                                  (mma)
// Precision: q, k, v are bf16 and enter the mma exactly; the fp32 operands (h, Aqk, the
// decay-weighted V) are split into hi + lo bf16 halves (cuda/chunk_mma.cuh); the per-row decay
// exp(G_t) multiplies the fp32 accumulator. Fragments are gathered element by element from
// padded shared tiles; ldmatrix and cp.async double buffering are the next step for speed.
#include "cuda/decay_attention_chunk.cuh"

#include <cuda_bf16.h>

#include "cuda/chunk_mma.cuh"
#include "cuda/common.cuh"
#include "cuda/recurrence.cuh"

namespace hla::cuda::decay_chunk {
namespace {

using bf16 = __nv_bfloat16;
constexpr int C = kChunk;
constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
template <int M, int N>
using WarpTile = chunk_mma::WarpTile<M, N, kWarps>;
using chunk_mma::load_bf16_rows;
constexpr int kLdA = C + 4;  // fp32 row stride of the (C x C) score tile in shared memory
constexpr int BV = 32;       // state columns per scan CTA

struct Args {
  int B, T, H, HV, NT;  // NT = ceil(T / C)
  float scale;
  const bf16 *q, *k;    // (B, T, H, dk)
  const bf16* v;        // (B, T, HV, dv)
  const bf16* g;        // (B, T, HV)
  const float* h0;      // (B, HV, dk, dv) or null
  bf16* o;              // (B, T, HV, dv)
  float* ht;            // (B, HV, dk, dv)
  float* aqk;           // (B, HV, NT, C, C) workspace: pass 1 writes, pass 2 reads
};

__device__ __forceinline__ float bf(bf16 x) { return __bfloat162float(x); }

// Warp 0 only: G[t] = g_0 + ... + g_t for the chunk's tokens (g past n = 0), two tokens a lane.
__device__ __forceinline__ void chunk_cumsum(float* G, const bf16* g, int64_t stride, int n) {
  const int lane = threadIdx.x;
  const float x0 = 2 * lane < n ? bf(g[2 * lane * stride]) : 0.f;
  const float x1 = 2 * lane + 1 < n ? bf(g[(2 * lane + 1) * stride]) : 0.f;
  float s = x0 + x1;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const float y = __shfl_up_sync(0xffffffffu, s, off);
    if (lane >= off) s += y;
  }
  G[2 * lane] = s - x1;
  G[2 * lane + 1] = s;
}

// ---- Pass 1: the masked, decayed scores of every chunk ----

template <int DK>
__global__ void __launch_bounds__(kThreads) scores_kernel(Args a) {
  constexpr int kLdK = DK + 8;
  extern __shared__ float4 smem_raw[];
  bf16* q = reinterpret_cast<bf16*>(smem_raw);  // (C, kLdK)
  bf16* k = q + C * kLdK;                       // (C, kLdK)
  float* G = reinterpret_cast<float*>(k + C * kLdK);  // (C)
  const int chunk = blockIdx.x, j = blockIdx.y, b = blockIdx.z, hq = j / (a.HV / a.H);
  const int t0 = chunk * C, n = min(C, a.T - t0);
  load_bf16_rows<C, DK>(q, a.q + ((int64_t(b) * a.T + t0) * a.H + hq) * DK, int64_t(a.H) * DK, n);
  load_bf16_rows<C, DK>(k, a.k + ((int64_t(b) * a.T + t0) * a.H + hq) * DK, int64_t(a.H) * DK, n);
  if (threadIdx.x < 32) chunk_cumsum(G, a.g + (int64_t(b) * a.T + t0) * a.HV + j, a.HV, n);
  __syncthreads();
  WarpTile<C, C> s;
  s.mma<DK, false, false>([&](int r, int d) { return bf(q[r * kLdK + d]); },   // Q[r][d]
                          [&](int d, int c) { return bf(k[c * kLdK + d]); });  // K^T[d][c]
  float* out = a.aqk + ((int64_t(b) * a.HV + j) * a.NT + chunk) * C * C;
  s.each([&](int r, int c, float& x, int) { out[r * C + c] = c <= r ? a.scale * x * expf(G[r] - G[c]) : 0.f; });
}

// ---- Pass 2: the scan over chunks, one BV-column tile of the state per CTA ----

template <int DK>
struct ScanSmem {
  static constexpr int kLdK = DK + 8, kLdV = BV + 8, kLdH = BV + 4;
  float* h;             // (DK, kLdH)  state columns v0 .. v0 + BV - 1 at the chunk's start
  float* aqk;           // (C, kLdA)
  float *G, *expG, *kdecay;  // (C): G, exp(G), exp(G_last - G)
  bf16 *q, *k;          // (C, kLdK)
  bf16* v;              // (C, kLdV)  columns v0 .. v0 + BV - 1
  static constexpr size_t bytes() {
    return sizeof(float) * (size_t(DK) * kLdH + C * kLdA + 3 * C) + sizeof(bf16) * (2 * C * kLdK + C * kLdV);
  }
  __device__ explicit ScanSmem(void* p) {
    h = static_cast<float*>(p), aqk = h + DK * kLdH, G = aqk + C * kLdA, expG = G + C, kdecay = expG + C;
    q = reinterpret_cast<bf16*>(kdecay + C), k = q + C * kLdK, v = k + C * kLdK;
  }
};

template <int DK>
__global__ void __launch_bounds__(kThreads) scan_kernel(Args a, int DV) {
  extern __shared__ float4 smem_raw[];
  using Smem = ScanSmem<DK>;
  const Smem sm(smem_raw);
  constexpr int kLdK = Smem::kLdK, kLdV = Smem::kLdV, kLdH = Smem::kLdH;
  const int v0 = blockIdx.x * BV, j = blockIdx.y, b = blockIdx.z, hq = j / (a.HV / a.H);
  const int64_t head = int64_t(b) * a.HV + j;  // (b, j) of the (B, HV, ..) buffers
  const float* h0 = a.h0 ? a.h0 + head * DK * DV : nullptr;
  for (int i = threadIdx.x; i < DK * BV; i += kThreads) {
    const int d = i / BV, c = i % BV;
    sm.h[d * kLdH + c] = h0 ? h0[d * DV + v0 + c] : 0.f;
  }
  for (int chunk = 0; chunk < a.NT; chunk++) {
    const int t0 = chunk * C, n = min(C, a.T - t0);
    const int64_t tok = int64_t(b) * a.T + t0;  // first (b, t) row of the chunk
    load_bf16_rows<C, DK>(sm.q, a.q + (tok * a.H + hq) * DK, int64_t(a.H) * DK, n);
    load_bf16_rows<C, DK>(sm.k, a.k + (tok * a.H + hq) * DK, int64_t(a.H) * DK, n);
    load_bf16_rows<C, BV>(sm.v, a.v + (tok * a.HV + j) * DV + v0, int64_t(a.HV) * DV, n);
    const float* aqk = a.aqk + (head * a.NT + chunk) * C * C;
    for (int i = threadIdx.x; i < C * C / 4; i += kThreads) {
      const int r = i / (C / 4), c = (i % (C / 4)) * 4;
      *reinterpret_cast<float4*>(sm.aqk + r * kLdA + c) = *reinterpret_cast<const float4*>(aqk + r * C + c);
    }
    if (threadIdx.x < 32) {
      chunk_cumsum(sm.G, a.g + tok * a.HV + j, a.HV, n);
      __syncwarp();
      const float last = sm.G[C - 1];
      for (int t = threadIdx.x; t < C; t += 32) {
        sm.expG[t] = expf(sm.G[t]);
        sm.kdecay[t] = expf(last - sm.G[t]);
      }
    }
    __syncthreads();
    auto h_op = [&](int d, int c) { return sm.h[d * kLdH + c]; };  // h[d][c]
    // o = scale exp(G) (.) (Q h) + Aqk V   (Aqk holds scale and the decays)
    {
      WarpTile<C, BV> o;
      o.mma<DK, false, true>([&](int r, int d) { return bf(sm.q[r * kLdK + d]); }, h_op);
      o.each([&](int r, int, float& x, int) { x *= a.scale * sm.expG[r]; });
      o.mma<C, true, false>([&](int r, int s) { return sm.aqk[r * kLdA + s]; },
                            [&](int s, int c) { return bf(sm.v[s * kLdV + c]); });
      bf16* out = a.o + tok * a.HV * DV + int64_t(j) * DV + v0;  // o[b, t0, j, v0]
      o.each([&](int r, int c, float& x, int) {
        if (r < n) out[int64_t(r) * a.HV * DV + c] = __float2bfloat16_rn(x);
      });
    }
    // h <- exp(G_last) h + K^T diag(exp(G_last - G)) V
    {
      WarpTile<DK, BV> hn;
      const float decay = sm.expG[C - 1];
      hn.each([&](int d, int c, float& x, int) { x = decay * sm.h[d * kLdH + c]; });
      hn.mma<C, false, true>([&](int d, int s) { return bf(sm.k[s * kLdK + d]); },
                             [&](int s, int c) { return bf(sm.v[s * kLdV + c]) * sm.kdecay[s]; });
      __syncthreads();  // every read of h and of this chunk's tiles is done
      hn.each([&](int d, int c, float& x, int) { sm.h[d * kLdH + c] = x; });
    }
  }
  __syncthreads();
  float* ht = a.ht + head * DK * DV;
  for (int i = threadIdx.x; i < DK * BV; i += kThreads) {
    const int d = i / BV, c = i % BV;
    ht[d * DV + v0 + c] = sm.h[d * kLdH + c];
  }
}

template <int DK>
void launch(const Args& a, int DV) {
  auto scores = scores_kernel<DK>;
  constexpr size_t scores_bytes = sizeof(bf16) * 2 * C * (DK + 8) + sizeof(float) * C;
  CUDA_CHECK(cudaFuncSetAttribute(scores, cudaFuncAttributeMaxDynamicSharedMemorySize, int(scores_bytes)));
  scores<<<dim3(a.NT, a.HV, a.B), kThreads, scores_bytes>>>(a);
  CUDA_CHECK_LAUNCH();
  auto scan = scan_kernel<DK>;
  constexpr size_t scan_bytes = ScanSmem<DK>::bytes();
  CUDA_CHECK(cudaFuncSetAttribute(scan, cudaFuncAttributeMaxDynamicSharedMemorySize, int(scan_bytes)));
  scan<<<dim3(DV / BV, a.HV, a.B), kThreads, scan_bytes>>>(a, DV);
  CUDA_CHECK_LAUNCH();
}

}  // namespace

bool supported(int64_t dk, int64_t dv, bool vector_gate, DType dtype) {
  return dtype == DType::BF16 && !vector_gate && (dk == 64 || dk == 128) && (dv == 64 || dv == 128);
}

void forward(void* o, float* ht, const void* q, const void* k, const void* v, const void* g, const float* h0,
             const DecayAttentionDims& d) {
  HLA_CHECK(aligned16(q) && aligned16(k) && aligned16(v), "decay_attention chunk kernel: q, k, v must be 16-byte aligned");
  Args a{};
  a.B = int(d.B), a.T = int(d.T), a.H = int(d.H), a.HV = int(d.HV), a.NT = int((d.T + C - 1) / C);
  a.scale = float(d.scale);
  a.q = static_cast<const bf16*>(q), a.k = static_cast<const bf16*>(k), a.v = static_cast<const bf16*>(v);
  a.g = static_cast<const bf16*>(g), a.h0 = h0, a.o = static_cast<bf16*>(o), a.ht = ht;
  FloatScratch aqk(d.B * d.HV * a.NT * C * C);  // (B, HV, NT, C, C)
  a.aqk = aqk.get();
  if (d.dk == 64) launch<64>(a, int(d.dv));
  else launch<128>(a, int(d.dv));
}

}  // namespace hla::cuda::decay_chunk
