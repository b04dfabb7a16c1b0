// The chunked decay attention on tensor cores, forward and backward, pass by pass the CPU chunked
// reference decay_chunk::forward / decay_chunk::backward of nn/ops/chunk_util.h (scalar and
// vector gate, ReadAt::after_update); scope in cuda/decay_attention_chunk.cuh. The passes below
// are written for the scalar gate; the vector gate's differences follow them.
//
// Per (batch b, value head j; q/k head j / (HV / H)), chunks of C = 64 tokens, local t = 0..63;
// rows past the end of the sequence are zero (q = k = v = dO = 0, g = 0), so they change nothing.
// G = inclusive cumsum of the scalar log gate inside the chunk (<= 0, decreasing), G_last =
// G[C - 1] (= the last valid token's, since g = 0 past it).
// Forward (split as fla's chunk_simple_gla and chunk_gla are, their source read, not copied: only
// the state runs in sequence, everything else in parallel over chunks):
//   Pass 1 (scan_kernel, grid (dv / BV, HV, B), sequential over chunks; the state h (dk x dv,
//   fp32, the state at the chunk's start) is split along dv into BV-column tiles, one per CTA,
//   held in registers (StateTile)):
//     h  <- exp(G_last) h + K^T diag(exp(G_last - G)) V                                  (mma)
//     every chunk-start h[n] into h_start (the forward's `kept` when given, else a workspace)
//   Pass 2 (output_kernel, grid (NT, HV, B), every chunk in parallel):
//     Aqk[t, s] = scale (q_t . k_s) exp(G_t - G_s) for s <= t, else 0 (masked BEFORE the exp,
//     so every exponent is <= 0)                                                          (mma)
//     o   = scale exp(G) (.) (Q h[n]) + Aqk V                                             (mma)
// Backward (CPU decay_chunk::backward, its passes 1-3; mixers.md 4.9 without W, U, L, and 4.10):
//   Pass 1 (the forward's scan_kernel replayed): every chunk-start state h[n] into h_start;
//     skipped when the forward kept them (forward's `kept`, which its scan filled: the same
//     kernel on the same inputs, so the same bits; kept_floats() x 4 B, bf16 states two a float,
//     134 MB at B4 T4096 H16 D128; both gates and RWKV-6; nn/ops/decay_attention.h's keep_states).
//   Pass 2 (reverse_scan_kernel, the scan's grid and layout, chunks in reverse), dS = dL/dS
//   starting at dht (zeros when null):
//     dh[n] = dS, the gradient of chunk n's END state, into dh_end
//     dS   <- exp(G_last) dS + Q^T diag(scale exp(G)) dO                                 (mma)
//     finally dh0 = dS.
//   Pass 3 (local_backward_kernel, grid (NT x key blocks, HV, B), every chunk in parallel; CPU
//   pass 3; at dk = 256 two CTAs a chunk take 128 key channels each (kKeyBlock): every product
//   below contracts over dv or the chunk's tokens, or is per key channel, except dV (K dh, Aqk)
//   and the scalar dG, which each CTA forms over its own channels and writes as an fp32 part,
//   added in block order after the kernel (write_column_sums):
//     3a  Aqk as in pass 1, and Ps[t, s] = scale (dO_t . v_s) exp(G_t - G_s) for s <= t    (mma)
//     3b  32 state columns at a time: dQ += dO h^T;  dK += V dh^T;  <h, dh>;
//         dV = exp(G_last - G) (.) (K dh) + Aqk^T dO                                       (mma)
//     3c  dQ = scale exp(G) (.) dQ + Ps K;  dK = exp(G_last - G) (.) dK + Ps^T Q           (mma)
//     3d  dG_t = q_t . dQ_t - k_t . dK_t, and at the chunk's last row + exp(G_last) <h, dh> +
//         sum_s k_s . dK^state_s (dK^state = the exp(G_last - G) (V dh^T) part); dg = the reverse
//         cumsum of dG inside the chunk (rows past the end carry only the last-row terms, down
//         into the last valid token)
//   then dq, dk are summed over the value heads of a group (recurrence::group_sum).
//   Ps holds the whole lower triangle with its diagonal, A[t,t] = q_t . k_t (exp(0) = 1): the
//   diagonal's terms in q_t . dQ_t and k_t . dK_t are equal and cancel in dG_t, as in the CPU
//   reference, which leaves the diagonal out of dG.
//   h[n] and dh[n] are stored in bf16 (2 B x B HV NT dk dv, 134 MB each at B4 T4096 H16 D128),
//   rounded once by the scans that write them: pass 3 and output_kernel take them as bf16 mma
//   operands (see Precision), so fp32 copies would give the same products at twice the bytes;
//   <h, dh> for dG_last is summed from the bf16 values (fp32 products, the sum's error far under
//   the 2^-9 rounding).
// Packed documents (Args::chunk_reset, the CPU's Head::resets_chunk): on their chunk layout every
// document starts a chunk, so the scans alone change: the forward scan (and its replay) zeroes h
// entering a flagged chunk, so h[n] = 0 there; the reverse scan zeroes dS leaving it backwards,
// so dh[n - 1] = 0 (and dh0 = 0 when chunk 0 is flagged). The chunk-parallel passes read those
// h[n], dh[n] (pass 3's exp(G_last) <h, dh> term of dG is then 0, as the reference's). The
// layout's padding places hold zeros (q = k = v = dO = 0, g = 0: no decay, no write), like the
// rows past the end of a sequence.
// Vector gate (GLA, HGRN-2; template flag VG; g and dg (B, T, HV, dk), G per channel, fp32 (C, dk)
// tiles in shared memory). Every diagonal factor becomes per channel, exp(G_t) -> exp(G_t[d]):
//   The forward splits as fla's chunk_gla does (its source read, not copied): only the state runs
//   in sequence, everything else in parallel over chunks.
//   Pass 1 (scan_kernel, grid ((dk / 64) (dv / BV), HV, B)): each row of the state decays by its
//     own exp(G_last[d]), so the state tiles split along dk as well (64 x BV, 8 CTAs a head at
//     dk = dv = 128): h <- Diag(exp(G_last)) h + (K (.) exp(G_last - G))^T V, every chunk-start
//     state into h_start (bf16, 2 B x B HV NT dk dv, 134 MB at B4 T4096 H16 D128, both gates:
//     the forward's `kept` when given, else a workspace).
//   Pass 2 (output_kernel, grid (NT, HV, B)): Aqk in 16-row sub-chunks (mixers.md 4.4),
//     kept in shared memory: below the diagonal blocks one mma per row tile through its first
//     row r, (q_t e^{G_t - G_r}) . (k_s e^{G_r - G_s}), s < r <= t; the 16 x 16 diagonal blocks
//     pair by pair in fp32; then o = scale (Q (.) exp(G)) h[n] + Aqk V, every mma operand staged
//     once as a bf16 swizzled tile (the decayed rows of Aqk's product 64 key channels a slice,
//     the state 32 columns a piece: its passes above the kernel).
//   Backward passes 1-2: the same scan tiles (the replay, where nothing was kept, is forward
//     pass 1); the reverse scan reads the fp32 tile q (.) exp(G).
//   RWKV-6 (rwkv6_forward, rwkv6_backward; template flag RW; mixers.md 11, ReadAt::before_update):
//     its state update is this one, so the forward scan and the backward's replay are shared;
//     every query-side read of the state uses the exclusive gate Gq_t = G_{t-1} (the state
//     before token t's update) and Aqk's diagonal is the bonus q_t . (u (.) k_t): the forward's
//     pass 2 (output_kernel), the reverse scan (q (.) exp(Gq)) and pass 3
//     (local_backward_kernel: the bonus terms of dQ, dK, du's per-chunk parts, dG's query
//     terms one row up; its head lists them). du is then summed over the chunks in a fixed order.
//   Pass 3: Ps = scale dO V^T masked (no decay: it is per channel); dQ_t += sum_{s<=t} Ps[t,s] k_s
//     (.) e^{G_t - G_s} through the row tile's first row (earlier sub-chunks) and pair by pair (its
//     own), dK_s += sum_{t>=s} Ps[t,s] q_t (.) e^{G_t - G_s} through the row tile's last row; the
//     decayed operands of these products and of 3a's Aqk (qr, kref, qlast: see kDecayedRows) and of
//     dV (kd = K (.) exp(G_last - G)) are staged once as bf16 tiles, the pairs inside a sub-chunk
//     summed 8 channels a thread with e^x on the ex2 unit (exp_ex2; Aqk's diagonal blocks and dQ's
//     own pairs share one pass and its decays); dG per channel: q (.) dQ - k (.) dK, at the last row
//     exp(G_last) (.) rowsum(h (.) dh) + sum_s k_s (.) dK^state_s (WarpTile::add_col_sums), reverse
//     cumsum per channel.
//   Bound relied on: every exponent formed is <= 0 (G decreases inside a chunk, the reference
//   rows sit between the pair's rows, the pairs s > t are masked before the exp), so no factor
//   overflows whatever the gate; a factor underflows only where the exact pair weight
//   exp(G_t - G_s) is itself below ~1e-38. Factoring q e^{G} . k e^{-G} over the chunk instead
//   overflows once G reaches ~-88 (logsigmoid(N(-3, 1)), ~-3 a step, does within ~30 tokens).
// Precision: q, k, v, dO are bf16 and enter the mma exactly. In the scans the fp32 operands (the
// decay-weighted V and dO, the gated k and q) are split into hi + lo bf16 halves
// (cuda/chunk_mma.cuh), staged once a chunk as two tiles read by ldmatrix, and the states are
// held in fp32 registers, so they stay fp32-exact (ht, dh0 ~1e-6 relative). output_kernel and
// local_backward_kernel instead round each fp32 or decayed operand to bf16 once, where it is
// formed (Aqk, qg and qr, kref in the forward; Aqk, Ps in 3a, qr, kref, qlast, kd in the
// backward; the states h[n], dh[n] by the scans that store them), as fla's chunk_gla does, and
// read every fragment by ldmatrix from swizzled tiles (cuda/staged_mma.cuh): most of o's error
// against the fp64 reference is then o's own bf16 rounding (bound 5e-3 relative RMS; the
// gradients' 1e-2). Per-row decays multiply the fp32 accumulators; the in-sub-chunk pairs are
// summed in fp32. Per-row sums (dG) are reduced without atomics (WarpTile::add_row_sums), so
// the backward is deterministic.
// Memory round trips: every kernel issues all of a chunk's global loads before it waits for any
// (tiles through cp.async, load_bf16_rows_async / load_tile_async / load_f32_rows_async; a
// thread's gate values into registers, vector_cumsum), so a chunk costs one round trip, not one
// per loop iteration (a load-then-store loop through generic pointers is serialised: the
// compiler cannot move a load above a store that may alias it). The scans run T / 64 chunks in
// sequence, so their per-chunk latency is the forward's and backward's floor; they copy the
// next chunk's tiles (and the scalar gate's values) during this chunk's state update
// (vector_scan, scalar_scan), which leaves no round trip in the chain. output_kernel fetches
// its state pieces a piece ahead (cp.async of the bf16 states into padded tiles by parity while
// the previous piece's products run); local_backward_kernel its state pieces (3b) too: h's and
// dh's first piece with the chunk's tiles, each next one while this piece's products read the
// other parity's tiles.
// Floors of the vector gate at B4 T4096 H16 D128 (bench/README has the measured times):
// scan_kernel (512 CTAs, all resident) reads k, g once for each of the dv / BV column tiles and
// v once, and writes h_start: ~0.7 GB, ~0.16 ms at 4.5 TB/s, under the chain of 64 chunk steps
// (latency). output_kernel (4096 CTAs): ~0.46 GB (a chunk reads h[n] 32 KB, q, k, v 48 KB, g 16
// KB, writes o 16 KB), ~0.1 ms; 864 mma.m16n8k16 a CTA (14.5 GFLOP), ~0.02 ms; ~98K elementwise
// exps a CTA, ~0.1 ms on the ex2 units overlapping the memory. local_backward_kernel (4096 CTAs):
// ~0.9 GB (a chunk reads h, dh 64 KB, q, k, v, dO 64 KB, g 16 KB, writes dq, dk, dv, dg 64 KB),
// ~0.2 ms; ~2.3K mma.m16n8k16 a CTA (39 GFLOP), < 0.1 ms; ~230K elementwise exps a CTA (staging
// 61K, Aqk's diagonal blocks with dQ's own pairs 74K, dK's own pairs 70K, accumulator decays
// 25K), ~0.25 ms on the ex2 units (16 a clock an SM). The scalar gate has no elementwise decays:
// memory-bound.
// Shared memory a CTA in KB (bytes(), launch_kernel checks <= 227 KB) and CTAs an SM (launch
// bounds), 256 threads a CTA; the scans are grid (dk / KT x dv / BV, HV, B), the local backward
// one CTA a chunk, two at dk = 256 (kKeyBlock):
//   (dk, dv)      scan / reverse scan    output_kernel           local_backward_kernel
//                 scalar   vector        scalar   vector         scalar   vector   (RWKV-6)
//   (64, 64)      33.0 x2  47.2 x4       37.5 x2  69.0 x2        70.6 x2  98.5 x1  (98.8)
//   (64, 128)     33.0 x2  47.2 x4       45.5 x2  77.0 x2        86.6 x1  114.5 x1 (114.8)
//   (128, 64)     49.0 x2  47.2 x4       58.5 x2  101.0 x2       106.6 x1 164.0 x1 (164.5)
//   (128, 128)    49.0 x2  47.2 x4       66.5 x2  109.0 x2       122.6 x1 180.0 x1 (180.5)
//   (128, 256)    49.0 x2  47.2 x4       82.5 x1  125.0 x1       154.6 x1 212.0 x1 (212.5)
//   (256, 128)    81.0 x2  47.2 x4       108.5 x1 185.0 x1       122.6 x1 180.0 x1 (180.5)
//   (256, 256)    81.0 x2  47.2 x4       124.5 x1 201.0 x1       154.6 x1 212.0 x1 (212.5)
//   (RWKV-6's output_kernel +4 dk bytes for the bonus u.)
// Registers a thread (ptxas -v, sm_90a, nvcc 13.0): scan 61 / 78 / 102 at dk = 64 / 128 / 256
// (vector 64), reverse scan 64 / 81 / 101 (vector 55); output_kernel 54-72 (dk = 256: scalar 70,
// vector 96-124); local backward 128 at (64, 64), else scalar 154-167, vector 161-219, RWKV-6
// 181-226. No spills.
#include "cuda/decay_attention_chunk.cuh"

#include <cuda_bf16.h>

#include <algorithm>
#include <type_traits>

#include "cuda/chunk_mma.cuh"
#include "cuda/common.cuh"
#include "cuda/recurrence.cuh"
#include "cuda/reduce.cuh"
#include "cuda/staged_mma.cuh"

namespace hla::cuda::decay_chunk {
namespace {

using bf16 = __nv_bfloat16;
constexpr int C = kChunk;
constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
template <int M, int N>
using WarpTile = chunk_mma::WarpTile<M, N, kWarps>;
using chunk_mma::load_bf16_rows_async;
using chunk_mma::load_f32_rows_async;
using chunk_mma::wait_tiles;
constexpr int BV = 32;       // state columns per scan CTA

struct Args {
  int B, T, H, HV, NT;  // NT = ceil(T / C)
  float scale;
  const bf16 *q, *k;    // (B, T, H, dk)
  const bf16* v;        // (B, T, HV, dv)
  const bf16* g;        // (B, T, HV) scalar gate, (B, T, HV, dk) vector gate
  const bf16* bonus;    // RWKV-6's u: (H, dk)
  const float* h0;      // (B, HV, dk, dv) or null
  const int32_t* chunk_reset;  // (B, NT) 1 where the state entering a chunk is zero (packed documents), or null
  bf16* o;              // (B, T, HV, dv); null: the backward's replay (no outputs)
  float* ht;            // (B, HV, dk, dv) or null
  bf16* h_start;        // (B, HV, NT, dk, dv)  state at the start of each chunk, rounded to bf16 (its readers,
                        // output_kernel and pass 3, take it as a bf16 mma operand): written by the forward's
                        // scan and by the backward's replay of it
  // backward only (null in the forward)
  bf16* dh_end;         // (B, HV, NT, dk, dv)  gradient of each chunk's END state (pass 2), bf16 as h_start
  const bf16* d_o;      // (B, T, HV, dv)
  const float* dht;     // (B, HV, dk, dv) or null: gradient of the final state
  float* dh0;           // (B, HV, dk, dv) or null
  float *dq, *dk;       // HV > H: (B, T, HV, dk) per value head (summed over a group afterwards), else null
  bf16 *dq_direct, *dk_direct;  // HV == H: (B, T, H, dk), pass 3 writes them itself (no group sum), else null
  bf16 *dv, *dg;        // (B, T, HV, dv); (B, T, HV) scalar gate, (B, T, HV, dk) vector gate
  float* dbonus;        // RWKV-6 (B, NT, H, dk): each chunk's part of du (summed in chunk order after)
  float* dv_part;       // dk = 256 (kKeyBlock): (dk / 128, B, T, HV, dv), each key block's part of dV
  float* dg_part;       // dk = 256, scalar gate: (dk / 128, B, T, HV), each key block's part of dG

  // Whether the state entering chunk `chunk` of sequence b is zero (a packed document starts
  // there): the forward scan restarts h from zero there, the reverse scan zeroes dS leaving it.
  __device__ bool resets(int b, int chunk) const {
    return chunk_reset && chunk < NT && chunk_reset[int64_t(b) * NT + chunk] != 0;
  }
};

__device__ __forceinline__ float bf(bf16 x) { return __bfloat162float(x); }

// One warp's inclusive cumsum of a chunk's 64 gate values held two a lane (x0 = g_{2 lane}, x1 =
// g_{2 lane + 1}): G0 = G[2 lane], G1 = G[2 lane + 1] (G[t] = g_0 + ... + g_t).
__device__ __forceinline__ void warp_cumsum_pair(float x0, float x1, float& G0, float& G1) {
  const int lane = threadIdx.x % 32;
  float s = x0 + x1;
#pragma unroll
  for (int off = 1; off < 32; off <<= 1) {
    const float y = __shfl_up_sync(0xffffffffu, s, off);
    if (lane >= off) s += y;
  }
  G0 = s - x1, G1 = s;
}

// The calling lane's two gate values of a chunk, g_{2 lane} and g_{2 lane + 1} (0 past n).
__device__ __forceinline__ void load_gate_pair(float& x0, float& x1, const bf16* g, int64_t stride, int n) {
  const int lane = threadIdx.x % 32;
  x0 = 2 * lane < n ? bf(g[2 * lane * stride]) : 0.f;
  x1 = 2 * lane + 1 < n ? bf(g[(2 * lane + 1) * stride]) : 0.f;
}

// Warp 0 only: G[t] = g_0 + ... + g_t for the chunk's tokens (g past n = 0), two tokens a lane.
__device__ __forceinline__ void chunk_cumsum(float* G, const bf16* g, int64_t stride, int n) {
  float x0, x1;
  load_gate_pair(x0, x1, g, stride, n);
  warp_cumsum_pair(x0, x1, G[2 * threadIdx.x], G[2 * threadIdx.x + 1]);
}

// The 8 bf16 values of a 16-byte piece as floats, by value (a bf16 pointer into the piece would
// read it through another type).
__device__ __forceinline__ void unpack_bf16x8(const uint4& piece, float x[8]) {
  const uint32_t w[4] = {piece.x, piece.y, piece.z, piece.w};
#pragma unroll
  for (int i = 0; i < 4; i++) {
    x[2 * i] = __uint_as_float(w[i] << 16);              // the low half is the first element
    x[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

// The 8 consecutive values at p (16-byte aligned) as floats: bf16 (a row of a tile) or fp32 (of G);
// store8 the other way (fp32).
__device__ __forceinline__ void load8(const bf16* p, float x[8]) { unpack_bf16x8(*reinterpret_cast<const uint4*>(p), x); }
__device__ __forceinline__ void load8(const float* p, float x[8]) {
  const float4 lo = *reinterpret_cast<const float4*>(p), hi = *reinterpret_cast<const float4*>(p + 4);
  x[0] = lo.x, x[1] = lo.y, x[2] = lo.z, x[3] = lo.w, x[4] = hi.x, x[5] = hi.y, x[6] = hi.z, x[7] = hi.w;
}

__device__ __forceinline__ void store8(float* p, const float x[8]) {
  *reinterpret_cast<float4*>(p) = make_float4(x[0], x[1], x[2], x[3]);
  *reinterpret_cast<float4*>(p + 4) = make_float4(x[4], x[5], x[6], x[7]);
}

// e^x on the ex2 unit, for the elementwise decays of the vector gate's loops (every x <= 0 there;
// relative error ~2 ulp plus |x| 2^-24 from the scaling, flushed to zero below ~1e-38).
__device__ __forceinline__ float exp_ex2(float x) { return exp2f(x * 1.4426950408889634f); }

// Vector gate, all threads: G[t * ld + d] = g_0[d] + ... + g_t[d] for the chunk's tokens (g past
// n = 0; g points at token 0 channel 0, tokens `stride` apart) and, where glast is not null,
// glast[d] = G[C - 1][d] (= the last valid token's). kParts = kThreads / DK threads share a
// channel, kLen = C / kParts consecutive tokens each, loaded at once before any sum (one memory
// round trip); each part's local sums are then offset by the earlier parts' totals, added in
// part order (so G is still non-increasing where g <= 0). EXCLUSIVE (RWKV-6's query gate): G[t]
// holds the sum up to token t - 1 instead (0 at t = 0); glast stays the inclusive G[C - 1]. Ends
// with __syncthreads.
template <int DK, bool EXCLUSIVE = false>
__device__ __forceinline__ void vector_cumsum(float* G, int ld, float* glast, const bf16* g, int64_t stride, int n) {
  constexpr int kParts = kThreads / DK, kLen = C / kParts;
  static_assert(kThreads % DK == 0 && C % kParts == 0, "whole parts of a channel's tokens");
  const int d = threadIdx.x % DK, part = threadIdx.x / DK, t0 = part * kLen;
  float x[kLen];
#pragma unroll
  for (int i = 0; i < kLen; i++) x[i] = t0 + i < n ? bf(g[(t0 + i) * stride + d]) : 0.f;
#pragma unroll
  for (int i = 1; i < kLen; i++) x[i] += x[i - 1];
  G[(t0 + kLen - 1) * ld + d] = x[kLen - 1];  // the part's total, read by the later parts
  __syncthreads();
  float before = 0.f;
  for (int p = 0; p < part; p++) before += G[((p + 1) * kLen - 1) * ld + d];
  __syncthreads();  // every total is read before it is overwritten
#pragma unroll
  for (int i = 0; i < kLen; i++)
    G[(t0 + i) * ld + d] = EXCLUSIVE ? (i > 0 ? before + x[i - 1] : before) : before + x[i];
  if (glast && part == kParts - 1) glast[d] = before + x[kLen - 1];
  __syncthreads();
}

// put(r, c, scale * s(r, c) * exp(G[r] - G[c])) for c <= r, else put(r, c, 0): a (C x C) product of
// this chunk's rows with its columns, decayed and causally masked (masked BEFORE the exp, so
// every exponent is <= 0).
template <class Put>
__device__ __forceinline__ void store_decayed_scores(WarpTile<C, C>& s, const float* G, float scale, Put&& put) {
  s.each([&](int r, int c, float x, int) { put(r, c, c <= r ? scale * x * expf(G[r] - G[c]) : 0.f); });
}

// The reference-decayed rows of Aqk's below-diagonal product (forward pass 2, backward 3a, 3c):
// row tile i (16 rows, first row 16 i, last 16 i + 15) takes k's rows s < 16 i decayed to 16 i
// (kref: Aqk, and dQ in 3c) or q's rows t > 16 i + 15 decayed to 16 i + 15 (qlast, dK in 3c), the
// tiles of the four row tiles one after another.
constexpr int kDecayedRows = 96;  // 16 + 32 + 48 rows of kref; 48 + 32 + 16 of qlast
// The first row of row tile `tile`'s kref (tiles 1-3) or qlast (tiles 0-2) in the staged rows.
__device__ __forceinline__ int kref_offset(int tile) { return 8 * tile * (tile - 1); }
__device__ __forceinline__ int qlast_offset(int tile) { return 48 * tile - 8 * tile * (tile - 1); }

// Forward pass 2 (output_kernel, grid (NT, HV, B), every chunk in parallel, after the scan has
// stored every chunk-start state h[n]); every mma operand a bf16 swizzled tile read by ldmatrix
// (cuda/staged_mma.cuh), each decayed operand rounded to bf16 once, as the local backward's 3a.
// Scalar gate (VG false):
//   1  q, k, v (bf16, swizzled) by cp.async; G by chunk_cumsum
//   2  Aqk = scale (Q K^T) (.) exp(G_t - G_s), s <= t (masked before the exp)     (mma), staged
// Vector gate (Gq = G; RWKV-6 (RW): the exclusive Gq_t = G_{t-1} and the bonus u on Aqk's
// diagonal, see vector_diagonal_scores; its state update is the decay attention's, so the scan
// is shared):
//   1  q, k, v (bf16, swizzled) by cp.async; G (fp32) by vector_cumsum
//   2  Aqk below the diagonal blocks, kOutputSlice key channels at a time (the slice's qr =
//      q_t (.) exp(Gq_t - Gq_r) and kref = k_s (.) exp(Gq_r - G_s), r = the row tile's first row,
//      staged; one mma per row tile, accumulated over the slices), so the staging is 20 KB at any
//      dk; the diagonal blocks pair by pair in fp32 (vector_diagonal_scores); Aqk staged as bf16
//   3  qg = scale q (.) exp(Gq) staged as bf16 in qr's and kref's place
// Both:
//   4  kOutputPiece state columns c0.. at a time, h[n]'s bf16 pieces by cp.async into two padded
//      tiles by parity (the next piece in flight while this one's products run; in q's and k's
//      place, the scalar gate's in qg's and k's: q stays; its first piece with the chunk's tiles)
//      o = qg h[n] + Aqk V, the scalar gate's o = scale exp(G) (.) (Q h[n]) + Aqk V        (mma)
// (Its budget: the file's header.)
constexpr int kOutputSlice = 64;  // key channels of Aqk's below-diagonal product a step
constexpr int kOutputPiece = 32;  // state columns a step of o

// Vector gate (mixers.md 4.4): Aqk[t, s] = scale sum_d q_t[d] k_s[d] exp(G_t[d] - G_s[d]), s <= t,
// in sub-chunks of kSub = 16 rows. Below the diagonal blocks (s in an earlier sub-chunk than t)
// it is one mma per row tile, with the tile's first row r as the reference point:
//   ( q_t (.) exp(G_t - G_r) ) . ( k_s (.) exp(G_r - G_s) ),   s < r <= t,
// both exponents <= 0 (G decreases), so neither factor overflows whatever the gate; a factor
// underflows only where exp(G_t - G_s) itself is below fp32's range (~1e-38 against the
// diagonal's q_t . k_t). The 16 x 16 diagonal blocks are formed pair by pair in fp32 with the
// exponent G_t - G_s, s <= t, masked before the exp (no reference point can bound both signs
// there without a floor on the per-step gate).
constexpr int kSub = 16;

// The 16 x 16 diagonal blocks of the vector gate's Aqk (the entries the row tiles' mma leaves),
// pair by pair: put(t, s, Aqk[t, s]) for t, s in one sub-chunk, zero above the diagonal. q8(t, d,
// x), k8(s, d, x) read channels d .. d + 7 of a row of the tiles, G8(s, d, x) of the gate, Gq8(t, d,
// x) of the query side's (RW: the bonus u on the diagonal, the pairs s < t).
template <int DK, bool RW, class Put, class FQ, class FK, class FG, class FGq>
__device__ __forceinline__ void vector_diagonal_scores(Put&& put, const FQ& q8, const FK& k8, const FG& G8, const FGq& Gq8,
                                                       float scale, const float* u) {
  // The lower triangles (with the diagonal) only, so no thread idles: pair p of a block is row
  // rl, column p - rl (rl + 1) / 2 with rl (rl + 1) / 2 <= p.
  constexpr int kPairs = kSub * (kSub + 1) / 2;
  for (int i = threadIdx.x; i < C / kSub * kPairs; i += kThreads) {
    const int p = i % kPairs, rl = int((sqrtf(8.f * p + 1.f) - 1.f) / 2.f);
    const int r = i / kPairs * kSub + rl, c = r - rl + p - rl * (rl + 1) / 2;
    float x = 0.f;
    for (int d = 0; d < DK; d += 8) {
      float qv[8], kv[8], gq[8], gk[8];
      q8(r, d, qv), k8(c, d, kv);
      if (RW && c == r) {
#pragma unroll
        for (int e = 0; e < 8; e++) x += qv[e] * u[d + e] * kv[e];
      } else {
        Gq8(r, d, gq), G8(c, d, gk);
#pragma unroll
        for (int e = 0; e < 8; e++) x += qv[e] * kv[e] * exp_ex2(gq[e] - gk[e]);
      }
    }
    put(r, c, scale * x);
  }
  for (int i = threadIdx.x; i < C * kSub; i += kThreads) {  // above the diagonal
    const int r = i / kSub, c = r / kSub * kSub + i % kSub;
    if (c > r) put(r, c, 0.f);
  }
}

template <int DK, int DV, bool VG, bool RW>
struct OutputSmem {
  static constexpr int kLdG = DK + 4;  // fp32 row stride of the vector gate's G
  static constexpr int kLdP = kOutputPiece + 8;  // row stride of a state piece's padded bf16 tile
  // The vector gate's qg, and its qr and kref of one slice (pass 2) before it, in one place; the
  // scalar gate's first state piece there
  static constexpr size_t kDecayedHalves = VG ? std::max(size_t(C) * DK, size_t(C + kDecayedRows) * kOutputSlice)
                                              : size_t(DK) * kLdP;
  static_assert(kLdP <= C, "a state piece's tile fits in q's or k's place");
  float* G;         // vector gate (C, kLdG); scalar gate (C)
  float* row_scale; // scalar gate (C): scale exp(G), o's factor on the rows of Q h[n]
  float* u;         // RW (DK): the bonus
  bf16 *q, *k;      // (C, DK) swizzled
  bf16* v;          // (C, DV) swizzled
  bf16* aqk;        // (C, C) swizzled
  bf16 *qr, *kref;  // vector gate (C, kOutputSlice), (kDecayedRows, kOutputSlice) swizzled: one slice's decayed rows
  bf16* qg;         // vector gate (C, DK) swizzled, in qr's and kref's place
  bf16* piece[2];   // (DK, kLdP): pieces of h[n] by parity, as cp.async lands them: in q's place (the scalar
                    // gate: qg's) and in k's
  static constexpr size_t floats() { return VG ? size_t(C) * kLdG + (RW ? DK : 0) : size_t(2) * C; }
  static constexpr size_t halves() { return size_t(2) * C * DK + size_t(C) * DV + C * C + kDecayedHalves; }
  static constexpr size_t bytes() { return sizeof(float) * floats() + sizeof(bf16) * halves(); }
  static_assert(floats() % 4 == 0 && kDecayedHalves % 8 == 0, "the bf16 tiles start 16-byte aligned");
  __device__ explicit OutputSmem(void* p) {
    G = static_cast<float*>(p), row_scale = VG ? nullptr : G + C, u = RW ? G + C * kLdG : nullptr;
    q = reinterpret_cast<bf16*>(static_cast<float*>(p) + floats()), k = q + C * DK, v = k + C * DK;
    aqk = v + C * DV, qr = aqk + C * C, kref = qr + C * kOutputSlice, qg = qr;
    piece[0] = VG ? q : qg, piece[1] = k;
  }
};

// CTAs an SM output_kernel is compiled for: two where two fit in shared memory (dk <= 128,
// dv <= 128: at most 109 KB each), one elsewhere.
template <int DK, int DV>
constexpr int kOutputCtasPerSm = DK <= 128 && DV <= 128 ? 2 : 1;

// Pass 2, vector gate: Aqk into sm.aqk (scale, decays and the causal mask in it), then qg =
// scale q (.) exp(Gq) into sm.qg. Ends with __syncthreads.
template <int DK, int DV, bool RW>
__device__ __forceinline__ void stage_vector_scores(const OutputSmem<DK, DV, true, RW>& sm, const Args& a) {
  using chunk_mma::mma_staged;
  using chunk_mma::Staged;
  using chunk_mma::stage;
  constexpr int kLdG = OutputSmem<DK, DV, true, RW>::kLdG, kSlice = kOutputSlice;
  // Channels d .. d + 7 of a row (d % 8 == 0), as floats: of q, k, G, Gq (the query side's gate).
  auto q8 = [&](int r, int d, float* x) { load8(sm.q + swizzle<DK>(r, d), x); };
  auto k8 = [&](int r, int d, float* x) { load8(sm.k + swizzle<DK>(r, d), x); };
  auto G8 = [&](int r, int d, float* x) { load8(sm.G + r * kLdG + d, x); };
  auto Gq8 = [&](int r, int d, float* x) {
    if (!RW || r > 0) G8(r - RW, d, x);
    else for (int e = 0; e < 8; e++) x[e] = 0.f;
  };
  // stage8(tile, row, d, f (x (.) exp(ga - gb))) for 8 channels of a row: a decayed operand.
  auto stage_decayed = [&](bf16* tile, auto width, int row, int d, float f, const float* x, const float* ga,
                           const float* gb) {
    float y[8];
#pragma unroll
    for (int e = 0; e < 8; e++) y[e] = f * x[e] * exp_ex2(ga[e] - gb[e]);
    chunk_mma::stage8<decltype(width)::value>(tile, row, d, y);
  };
  using SliceWidth = std::integral_constant<int, kSlice>;
  // Aqk below the diagonal blocks, a slice of channels ds.. at a time, then the diagonal blocks.
  WarpTile<C, C> qk;
  const int ref = qk.row0;  // this warp's row tile's first row
  for (int ds = 0; ds < DK; ds += kSlice) {
    if (ds > 0) __syncthreads();  // the previous slice's products are done with qr, kref
    for (int i = threadIdx.x; i < C * kSlice / 8; i += kThreads) {  // qr
      const int t = i / (kSlice / 8), d = i % (kSlice / 8) * 8;
      float x[8], gt[8], gr[8];
      q8(t, ds + d, x), Gq8(t, ds + d, gt), Gq8(t / kSub * kSub, ds + d, gr);
      stage_decayed(sm.qr, SliceWidth{}, t, d, 1.f, x, gt, gr);
    }
    for (int i = threadIdx.x; i < kDecayedRows * kSlice / 8; i += kThreads) {  // kref of row tiles 1, 2, 3
      const int row = i / (kSlice / 8), d = i % (kSlice / 8) * 8, tile = row < 16 ? 1 : row < 48 ? 2 : 3;
      const int s = row - kref_offset(tile);
      float x[8], gr[8], gs[8];
      k8(s, ds + d, x), Gq8(kSub * tile, ds + d, gr), G8(s, ds + d, gs);
      stage_decayed(sm.kref, SliceWidth{}, row, d, 1.f, x, gr, gs);
    }
    __syncthreads();
    if (ref > 0)
      mma_staged(qk, Staged<kSlice, false>{sm.qr}, Staged<kSlice, true>{sm.kref, kref_offset(ref / kSub)}, 0, kSlice,
                 ref);
  }
  qk.each([&](int r, int c, float x, int) {
    if (c < ref) stage<C>(sm.aqk, r, c, a.scale * x);
    else if (c >= ref + kSub) stage<C>(sm.aqk, r, c, 0.f);
  });
  vector_diagonal_scores<DK, RW>([&](int r, int c, float x) { stage<C>(sm.aqk, r, c, x); }, q8, k8, G8, Gq8, a.scale,
                                 sm.u);
  __syncthreads();  // the last slice's products are done with qr, kref
  // qg = scale q (.) exp(Gq) in their place.
  for (int i = threadIdx.x; i < C * DK / 8; i += kThreads) {
    const int t = i / (DK / 8), d = i % (DK / 8) * 8;
    float x[8], gt[8];
    const float zero[8] = {};
    q8(t, d, x), Gq8(t, d, gt);
    stage_decayed(sm.qg, std::integral_constant<int, DK>{}, t, d, a.scale, x, gt, zero);
  }
  __syncthreads();
}

// Pass 2, scalar gate: Aqk = scale (Q K^T) (.) exp(G_t - G_s), s <= t, into sm.aqk (each warp's
// column pairs past its row tile skipped: masked). Ends with __syncthreads (k is free after).
template <int DK, int DV>
__device__ __forceinline__ void stage_scalar_scores(const OutputSmem<DK, DV, false, false>& sm, const Args& a) {
  using chunk_mma::Staged;
  WarpTile<C, C> qk;
  chunk_mma::mma_staged(qk, Staged<DK, false>{sm.q}, Staged<DK, true>{sm.k}, 0, DK, qk.row0 + 16);
  store_decayed_scores(qk, sm.G, a.scale, [&](int r, int c, float x) { chunk_mma::stage<C>(sm.aqk, r, c, x); });
  __syncthreads();
}

template <int DK, int DV, bool VG, bool RW>
__global__ void __launch_bounds__(kThreads, kOutputCtasPerSm<DK, DV>) output_kernel(Args a) {
  static_assert(VG || !RW, "RWKV-6 has a vector gate");
  extern __shared__ float4 smem_raw[];
  using Smem = OutputSmem<DK, DV, VG, RW>;
  using chunk_mma::mma_staged;
  using chunk_mma::Staged;
  const Smem sm(smem_raw);
  constexpr int kPiece = kOutputPiece;
  const int chunk = blockIdx.x, j = blockIdx.y, b = blockIdx.z, hq = j / (a.HV / a.H);
  const int t0 = chunk * C, n = min(C, a.T - t0);
  const int64_t tok0 = (int64_t(b) * a.T + t0) * a.HV + j;  // (B, T, HV) index of token t0
  const int64_t qk0 = ((int64_t(b) * a.T + t0) * a.H + hq) * DK;
  const int64_t state0 = ((int64_t(b) * a.HV + j) * a.NT + chunk) * DK * DV;  // h[n]
  // 1: the chunk's tiles (one round trip) and G.
  load_tile_async<C, DK, kThreads>(sm.q, a.q + qk0, int64_t(a.H) * DK, 0, n);
  load_tile_async<C, DK, kThreads>(sm.k, a.k + qk0, int64_t(a.H) * DK, 0, n);
  load_tile_async<C, DV, kThreads>(sm.v, a.v + tok0 * DV, int64_t(a.HV) * DV, 0, n);
  if constexpr (VG) {
    if constexpr (RW)
      for (int d = threadIdx.x; d < DK; d += kThreads) sm.u[d] = bf(a.bonus[hq * DK + d]);
    vector_cumsum<DK>(sm.G, Smem::kLdG, nullptr, a.g + tok0 * DK, int64_t(a.HV) * DK, n);
  } else if (threadIdx.x < 32) {
    chunk_cumsum(sm.G, a.g + tok0, a.HV, n);
  }
  // 4's state pieces, by parity: (a select, not sm.piece[i & 1]: an indexed member array would put
  // sm in local memory)
  auto piece_tile = [&](int c0) { return (c0 / kPiece) & 1 ? sm.piece[1] : sm.piece[0]; };
  auto load_piece = [&](int c0) {
    load_bf16_rows_async<DK, kPiece>(piece_tile(c0), a.h_start + state0 + c0, DV, DK);
  };
  if (!VG) load_piece(0);  // (its place, qg's, is free from the start)
  wait_tiles();
  // 2, 3: Aqk (and the vector gate's qg) staged; k (and the vector gate's q and G) free after.
  if constexpr (VG) {
    stage_vector_scores(sm, a);
    load_piece(0);
  } else {
    stage_scalar_scores(sm, a);
    if (threadIdx.x < C) sm.row_scale[threadIdx.x] = a.scale * expf(sm.G[threadIdx.x]);
  }
  // 4: o, kPiece state columns c0.. at a time.
  for (int c0 = 0; c0 < DV; c0 += kPiece) {
    wait_tiles();  // this piece has landed; the previous piece's products are done with the other tile
    if (c0 + kPiece < DV) load_piece(c0 + kPiece);  // in flight during the products below
    const chunk_mma::Padded<Smem::kLdP, false> h{piece_tile(c0)};
    WarpTile<C, kPiece> o;
    if constexpr (VG) {
      mma_staged(o, Staged<DK, false>{sm.qg}, h, 0, DK);
    } else {
      mma_staged(o, Staged<DK, false>{sm.q}, h, 0, DK);
      o.each([&](int r, int, float& x, int) { x *= sm.row_scale[r]; });
    }
    mma_staged(o, Staged<C, false>{sm.aqk}, Staged<DV, false>{sm.v, 0, c0}, 0, C);
    o.each_pair([&](int r, int c, float x0, float x1, int) {  // columns c, c + 1 in one 4-byte store
      if (r < n)
        *reinterpret_cast<uint32_t*>(a.o + (tok0 + int64_t(r) * a.HV) * DV + c0 + c) = pack_bf16(x0, x1);
    });
  }
}

// ---- The scans over chunks (forward pass 2 and its replay, backward pass 2) ----

// Rows of the state one vector-gate scan CTA carries. The vector gate's update
// h[d, :] <- exp(G_last[d]) h[d, :] + sum_s kg[s, d] v_s touches row d alone, so its CTAs split
// the state along dk as well as dv: (dk / 64) (dv / BV) CTAs a head, 8 at dk = dv = 128 (512
// CTAs at B4 H16, every one resident). A scalar-gate scan CTA holds all dk rows of its BV
// columns in registers (StateTile) and reads each chunk's k (or q) tile once for all of them.
constexpr int kVectorScanRows = 64;
// CTAs an SM the scans are compiled for: 4 vector-gate CTAs (48,384 B each, so at most 64
// registers a thread) an SM keep all 512 of B4 H16 dk = dv = 128 resident, where 80 registers
// would allow 3 and leave a second wave; 2 scalar-gate CTAs (at most 81 KB each, 128 registers a
// thread), so the 256 CTAs of B4 H16 dk = dv = 128, B8 H16 dk = dv = 64 or B8 H4 dk = dv = 256
// are all resident on 132 SMs.
template <bool VG>
constexpr int kScanCtasPerSm = VG ? 4 : 2;

// A scan CTA's state tile (h forward, dS reverse), ROWS rows of its BV columns, in registers
// (chunk_mma::StateTile).
template <int ROWS>
using StateTile = chunk_mma::StateTile<ROWS, BV, kWarps>;

// A vector-gate scan CTA's shared memory: the raw bf16 tiles of its KT channels of k (forward)
// or q (reverse) and of g, the gated tile xg formed from them (kg = k (.) exp(G_last - G)
// forward, scale q (.) exp(G) reverse; every exponent <= 0) split into bf16 hi and lo tiles,
// G_last and the gate's part sums (gate_chunk), and two V (or dO) tiles (vector_scan). The state
// tile (KT x BV) is in registers (StateTile).
template <int KT>
struct VectorScanSmem {
  static constexpr int kLdK = KT + 8, kLdV = BV + 8;
  static constexpr int kParts = kThreads / KT, kLen = C / kParts;  // gate_chunk: threads a channel, tokens each
  static_assert(kThreads % KT == 0 && C % kParts == 0, "whole parts of a channel's tokens");
  float* glast;             // (KT): G_last
  float* totals;            // (kParts, KT): each part's sum of g
  bf16 *raw_x, *raw_g;      // (C, kLdK): k (forward) or q (reverse), and g
  bf16 *xg_hi, *xg_lo;      // (C, kLdK): the gated k (forward) or q (reverse), split
  bf16* v[2];               // (C, kLdV)   columns v0 .. v0 + BV - 1 of V (forward) or dO (reverse), by chunk parity
  static constexpr size_t floats() { return size_t(KT) * (1 + kParts); }
  static constexpr size_t bytes() { return sizeof(float) * floats() + sizeof(bf16) * (4 * C * kLdK + 2 * C * kLdV); }
  static_assert(floats() % 4 == 0, "the bf16 tiles start 16-byte aligned");
  __device__ explicit VectorScanSmem(void* p) {
    glast = static_cast<float*>(p), totals = glast + KT;
    raw_x = reinterpret_cast<bf16*>(totals + kParts * KT), raw_g = raw_x + C * kLdK;
    xg_hi = raw_g + C * kLdK, xg_lo = xg_hi + C * kLdK;
    v[0] = xg_lo + C * kLdK, v[1] = v[0] + C * kLdV;
  }
  // glast and xg_hi + xg_lo = weight (x (.) exp(Gx)) from the chunk's raw tiles (rows past its
  // end zero), Gx = G_last - G (forward) or G (query; EXCLUSIVE, RWKV-6's query side: G_{t-1}).
  // G as vector_cumsum forms it, in registers: kParts threads a channel, kLen consecutive tokens
  // each, each part's local sums offset by the earlier parts' totals, added in part order. The
  // caller's __syncthreads publishes glast and xg.
  template <bool EXCLUSIVE>
  __device__ void gate_chunk(bool query, float weight) const {
    const int d = threadIdx.x % KT, part = threadIdx.x / KT, t0 = part * kLen;
    float G[kLen];
#pragma unroll
    for (int i = 0; i < kLen; i++) G[i] = bf(raw_g[(t0 + i) * kLdK + d]) + (i > 0 ? G[i - 1] : 0.f);
    totals[part * KT + d] = G[kLen - 1];
    __syncthreads();
    float before = 0.f, all = 0.f;  // the earlier parts' sum; G_last
#pragma unroll
    for (int p = 0; p < kParts; p++) {
      const float x = totals[p * KT + d];
      if (p < part) before += x;
      all += x;
    }
    if (part == 0) glast[d] = all;
#pragma unroll
    for (int i = 0; i < kLen; i++) {
      const int t = t0 + i;
      const float g_at = EXCLUSIVE ? (i > 0 ? before + G[i - 1] : before) : before + G[i];
      const float xg = bf(raw_x[t * kLdK + d]) * exp_ex2(query ? g_at : all - g_at);
      const bf16 hi = __float2bfloat16_rn(weight * xg);
      xg_hi[t * kLdK + d] = hi, xg_lo[t * kLdK + d] = __float2bfloat16_rn(weight * xg - bf(hi));
    }
  }
};

// What a scan reads and writes: forward (and its replay) h0, every h[n], ht, with k and V;
// reverse dht, every dh[n], dh0, with q and dO.
template <bool REVERSE>
struct ScanBuffers {
  const float* init;  // the carried state's start (null: zeros)
  bf16* states;       // every chunk-start (forward) or chunk-end (reverse) state (bf16), or null
  float* last;        // the final state, or null
  const bf16 *x, *y;  // the update's X^T Y operands
  __device__ explicit ScanBuffers(const Args& a)
      : init(REVERSE ? a.dht : a.h0), states(REVERSE ? a.dh_end : a.h_start), last(REVERSE ? a.dh0 : a.ht),
        x(REVERSE ? a.q : a.k), y(REVERSE ? a.d_o : a.v) {}
};

// The state tile of a scan CTA: blockIdx.x = (row tile) (DV / BV) + column tile.
template <int KT>
struct ScanTile {
  int d0, v0;
  __device__ explicit ScanTile(int DV) : d0(blockIdx.x / (DV / BV) * KT), v0(blockIdx.x % (DV / BV) * BV) {}
};

// The vector gate's scans, one state tile a CTA in registers: forward pass 1 and its replay
// (REVERSE false: h from h0, every chunk-start h[n] into a.h_start where not null, the final
// state into a.ht) and backward pass 2 (REVERSE: dS from dht, dh[n] into a.dh_end, dh0). The
// next chunk's tiles are copied (cp.async) while this chunk's state update runs: its raw q / k
// and g tiles are consumed by the gating before the update, and V / dO is double-buffered by
// chunk parity, so the sequential chain holds no memory round trip. RW (RWKV-6, REVERSE only):
// dO meets the state through q (.) exp(Gq), the exclusive query gate.
template <int DK, int KT, bool REVERSE, bool RW>
__device__ void vector_scan(const VectorScanSmem<KT>& sm, const Args& a, int DV) {
  using Smem = VectorScanSmem<KT>;
  const ScanTile<KT> tile(DV);
  const int v0 = tile.v0, j = blockIdx.y, b = blockIdx.z, hq = j / (a.HV / a.H);
  const int64_t head = int64_t(b) * a.HV + j;  // (b, j) of the (B, HV, ..) buffers
  const int64_t row0 = int64_t(tile.d0) * DV;  // the tile's first row in a (dk, DV) state
  const ScanBuffers<REVERSE> io(a);
  StateTile<KT> h;
  h.load(io.init ? io.init + head * DK * DV + row0 : nullptr, v0, DV);
  // (a select, not sm.v[chunk & 1]: an indexed member array would put sm in local memory)
  auto v_tile = [&](int chunk) { return chunk & 1 ? sm.v[1] : sm.v[0]; };
  auto copy_tiles = [&](int chunk) {
    const int n = min(C, a.T - chunk * C);
    const int64_t tok = int64_t(b) * a.T + chunk * C;  // first (b, t) row of the chunk
    load_bf16_rows_async<C, KT>(sm.raw_x, io.x + (tok * a.H + hq) * DK + tile.d0, int64_t(a.H) * DK, n);
    load_bf16_rows_async<C, KT>(sm.raw_g, a.g + (tok * a.HV + j) * DK + tile.d0, int64_t(a.HV) * DK, n);
    load_bf16_rows_async<C, BV>(v_tile(chunk), io.y + (tok * a.HV + j) * DV + v0, int64_t(a.HV) * DV, n);
  };
  const int step = REVERSE ? -1 : 1;
  auto in_range = [&](int chunk) { return chunk >= 0 && chunk < a.NT; };
  copy_tiles(REVERSE ? a.NT - 1 : 0);
  for (int chunk = REVERSE ? a.NT - 1 : 0; in_range(chunk); chunk += step) {
    // a packed document starts this chunk (forward: h = 0 entering it) or the next one (reverse:
    // no gradient reaches this chunk's end state); the flag read before the wait, its load
    // overlapping the tiles', then a block-uniform branch
    const bool reset = a.resets(b, REVERSE ? chunk + 1 : chunk);
    wait_tiles();  // this chunk's tiles; the previous update's reads of xg are done
    if (reset) h.load(nullptr, v0, DV);
    if (io.states) h.store(io.states + (head * a.NT + chunk) * DK * DV + row0, v0, DV);
    sm.template gate_chunk<RW>(REVERSE, REVERSE ? a.scale : 1.f);
    __syncthreads();  // xg and glast are published and the raw tiles are free
    if (in_range(chunk + step)) copy_tiles(chunk + step);
    // forward: h <- Diag(exp(G_last)) h + (K (.) exp(G_last - G))^T V
    // reverse: dS <- Diag(exp(G_last)) dS + (Q (.) scale exp(Gq))^T dO
    const bf16* vt = v_tile(chunk);
    h.template advance<Smem::kLdK, Smem::kLdV, C>([&](int d) { return exp_ex2(sm.glast[d]); }, sm.xg_hi, vt, sm.xg_lo,
                                                  vt);
  }
  if (!io.last) return;
  if (REVERSE && a.resets(b, 0)) h.load(nullptr, v0, DV);  // chunk 0 started from h = 0, not from h0
  h.store(io.last + head * DK * DV + row0, v0, DV);
}

// A scalar-gate scan CTA's shared memory: the chunk's bf16 tiles of k (forward) or q (reverse),
// all DK channels, by chunk parity (the next chunk's copy lands while this chunk's update reads
// its own); columns v0 .. v0 + BV - 1 of V (forward) or dO (reverse); and the update's fp32
// operand diag(w) V (or dO) split into bf16 hi and lo tiles.
template <int DK>
struct ScalarScanSmem {
  static constexpr int kLdK = DK + 8, kLdV = BV + 8;
  bf16* x[2];          // (C, kLdK)
  bf16* v;             // (C, kLdV)
  bf16 *wv_hi, *wv_lo;  // (C, kLdV)
  static constexpr size_t bytes() { return sizeof(bf16) * (2 * C * kLdK + 3 * C * kLdV); }
  __device__ explicit ScalarScanSmem(void* p) {
    x[0] = static_cast<bf16*>(p), x[1] = x[0] + C * kLdK;
    v = x[1] + C * kLdK, wv_hi = v + C * kLdV, wv_lo = wv_hi + C * kLdV;
  }
};

template <int KT, bool VG>
using ScanSmem = std::conditional_t<VG, VectorScanSmem<KT>, ScalarScanSmem<KT>>;

// The scalar gate's scans, the (dk x BV) state tile of a CTA in registers: forward pass 1 and its
// replay (REVERSE false: h from h0, every chunk-start h[n] into a.h_start, the final state into
// a.ht) and backward pass 2 (REVERSE: dS from dht, dh[n] into a.dh_end, dh0). A chunk's step:
//   forward  h  <- exp(G_last) h  + K^T diag(exp(G_last - G)) V
//   reverse  dS <- exp(G_last) dS + Q^T diag(scale exp(G)) dO
// Every warp holds the chunk's 64 gate values two a lane and forms G itself (warp_cumsum_pair), so
// a thread weighs its own piece of V (or dO) with no wait on another warp; the next chunk's tiles
// (cp.async) and gate values (into registers) are in flight during this chunk's update, so the
// sequential chain holds no memory round trip.
template <int DK, bool REVERSE>
__device__ void scalar_scan(const ScalarScanSmem<DK>& sm, const Args& a, int DV) {
  using Smem = ScalarScanSmem<DK>;
  constexpr int kLdK = Smem::kLdK, kLdV = Smem::kLdV;
  static_assert(C * BV / 8 == kThreads, "one 8-column piece of the weighted tile a thread");
  const int v0 = blockIdx.x * BV, j = blockIdx.y, b = blockIdx.z, hq = j / (a.HV / a.H);
  const int64_t head = int64_t(b) * a.HV + j;  // (b, j) of the (B, HV, ..) buffers
  const ScanBuffers<REVERSE> io(a);
  StateTile<DK> h;
  h.load(io.init ? io.init + head * DK * DV : nullptr, v0, DV);
  // (a select, not sm.x[chunk & 1]: an indexed member array would put sm in local memory)
  auto x_tile = [&](int chunk) { return chunk & 1 ? sm.x[1] : sm.x[0]; };
  float g0, g1;  // this lane's two gate values of the chunk in flight
  auto copy_chunk = [&](int chunk) {
    const int n = min(C, a.T - chunk * C);
    const int64_t tok = int64_t(b) * a.T + chunk * C;  // first (b, t) row of the chunk
    load_bf16_rows_async<C, DK>(x_tile(chunk), io.x + (tok * a.H + hq) * DK, int64_t(a.H) * DK, n);
    load_bf16_rows_async<C, BV>(sm.v, io.y + (tok * a.HV + j) * DV + v0, int64_t(a.HV) * DV, n);
    load_gate_pair(g0, g1, a.g + tok * a.HV + j, a.HV, n);
  };
  const int step = REVERSE ? -1 : 1;
  auto in_range = [&](int chunk) { return chunk >= 0 && chunk < a.NT; };
  copy_chunk(REVERSE ? a.NT - 1 : 0);
  for (int chunk = REVERSE ? a.NT - 1 : 0; in_range(chunk); chunk += step) {
    // a packed document starts this chunk (forward: h = 0 entering it) or the next one (reverse:
    // no gradient reaches this chunk's end state)
    const bool reset = a.resets(b, REVERSE ? chunk + 1 : chunk);
    wait_tiles();  // this chunk's tiles; the previous update's reads of the tiles are done
    if (reset) h.load(nullptr, v0, DV);
    if (io.states) h.store(io.states + (head * a.NT + chunk) * DK * DV, v0, DV);
    float G0, G1;
    warp_cumsum_pair(g0, g1, G0, G1);
    const float glast = __shfl_sync(0xffffffffu, G1, 31);
    {  // this thread's piece of diag(w) V: row s, columns c .. c + 7
      const int s = threadIdx.x / (BV / 8), c = threadIdx.x % (BV / 8) * 8;
      const float Ga = __shfl_sync(0xffffffffu, G0, s / 2), Gb = __shfl_sync(0xffffffffu, G1, s / 2);
      const float Gs = s % 2 ? Gb : Ga;
      const float w = REVERSE ? a.scale * expf(Gs) : expf(glast - Gs);
      float yv[8];
      unpack_bf16x8(*reinterpret_cast<const uint4*>(sm.v + s * kLdV + c), yv);
      uint32_t hi[4], lo[4];
#pragma unroll
      for (int e = 0; e < 4; e++) chunk_mma::split_pair(w * yv[2 * e], w * yv[2 * e + 1], hi[e], lo[e]);
      *reinterpret_cast<uint4*>(sm.wv_hi + s * kLdV + c) = make_uint4(hi[0], hi[1], hi[2], hi[3]);
      *reinterpret_cast<uint4*>(sm.wv_lo + s * kLdV + c) = make_uint4(lo[0], lo[1], lo[2], lo[3]);
    }
    __syncthreads();  // the weighted tiles are staged; the V tile is free
    if (in_range(chunk + step)) copy_chunk(chunk + step);
    const float decay = expf(glast);
    const bf16* xt = x_tile(chunk);
    h.template advance<kLdK, kLdV, C>([&](int) { return decay; }, xt, sm.wv_hi, xt, sm.wv_lo);
  }
  if (!io.last) return;
  if (REVERSE && a.resets(b, 0)) h.load(nullptr, v0, DV);  // chunk 0 started from h = 0, not from h0
  h.store(io.last + head * DK * DV, v0, DV);
}

// Forward pass 1, or the backward's replay of it: every chunk-start state h[n] into a.h_start
// (where not null) and the final state into a.ht.
template <int DK, int KT, bool VG>
__global__ void __launch_bounds__(kThreads, kScanCtasPerSm<VG>) scan_kernel(Args a, int DV) {
  extern __shared__ float4 smem_raw[];
  const ScanSmem<KT, VG> sm(smem_raw);
  if constexpr (VG) vector_scan<DK, KT, false, false>(sm, a, DV);
  else scalar_scan<DK, false>(sm, a, DV);
}

// Backward pass 2: dS carried backwards over the chunks. RW: RWKV-6's (vector gate only), see
// vector_scan.
template <int DK, int KT, bool VG, bool RW>
__global__ void __launch_bounds__(kThreads, kScanCtasPerSm<VG>) reverse_scan_kernel(Args a, int DV) {
  static_assert(VG || !RW, "RWKV-6 has a vector gate");
  extern __shared__ float4 smem_raw[];
  const ScanSmem<KT, VG> sm(smem_raw);
  if constexpr (VG) vector_scan<DK, KT, true, RW>(sm, a, DV);
  else scalar_scan<DK, true>(sm, a, DV);
}

// ---- Backward pass 3: every chunk's gradients from h[n], dh[n] and its own tokens ----

// DK here: the key channels of one CTA (kKeyBlock of the head's dk). Every mma operand is a bf16
// tile, swizzled (cuda/tile.cuh) and read by ldmatrix (mma_staged): q, k, v, dO as loaded; the
// scores Aqk, Ps and the state pieces rounded to bf16 once when they are formed; the vector gate's
// decayed operands (q, k times a per-channel exp) rounded once when they are staged.
constexpr int kStatePiece = 32;  // state columns a 3b step (bf16 tiles of h[n] and dh[n] as loaded)

template <int DK, int DV, bool VG, bool RW>
struct LocalSmem {
  static constexpr int kLdG = DK + 4;  // fp32 row stride of the vector gate's G
  static constexpr int kLdP = kStatePiece + 8;  // row stride of a state piece's padded bf16 tile
  float *G, *expG, *kdecay, *dG;   // scalar gate (C): G, exp(G), exp(G_last - G), the gate gradient
  float *rowQ, *rowK, *rowKs;      // scalar gate (2, C) per-row partial sums (WarpTile::add_row_sums)
  float* red;                      // scalar gate (32) block_sum scratch
  float* Gv;                       // vector gate (C, kLdG): G, in 3d the per-channel dG
  float *glast, *hdh, *colKs;      // vector gate (DK): G_last, rowsum(h (.) dh); (C / 16, DK) column sums
  float* u;                        // RW (DK): RWKV-6's bonus
  bf16 *q, *k;                     // (C, DK) swizzled
  bf16 *v, *dov;                   // (C, DV): V, dO
  bf16 *aqk, *ps;                  // (C, C): Aqk, and Ps = the masked scale dO V^T (scalar: decayed)
  // (DK, kLdP) each: pieces of h[n] and dh[n] by parity as cp.async lands them (3b); piece 0 comes
  // with the chunk's tiles, so 3a's qr (VG, (C, DK) swizzled) takes the odd pieces' place, and 3c's
  // own pairs (VG, (C, DK) fp32) all four tiles' once 3b is done
  bf16 *h_even, *dh_even, *h_odd, *dh_odd;
  bf16* qr;
  float* own;
  bf16* decayed;                   // VG (kDecayedRows, DK): kref or qlast (3a, 3c), kd = k (.) exp(G_last - G) (3b)
  static constexpr size_t gate_floats() {
    return VG ? size_t(C) * kLdG + (RW ? 3 : 2) * DK + C / 16 * DK : 10 * C + 32;
  }
  static constexpr size_t floats() { return gate_floats(); }
  static constexpr size_t halves() {
    return size_t(2) * C * DK + 2 * C * DV + 2 * C * C + 4 * DK * kLdP + (VG ? kDecayedRows * DK : 0);
  }
  static constexpr size_t bytes() { return sizeof(float) * floats() + sizeof(bf16) * halves(); }
  static_assert(floats() % 4 == 0, "the bf16 tiles start 16-byte aligned");
  static_assert(C * DK <= 2 * DK * kLdP && sizeof(float) * C * DK <= sizeof(bf16) * 4 * DK * kLdP,
                "3a's qr fits in the odd pieces' place, 3c's own pairs in the four pieces'");
  __device__ explicit LocalSmem(void* p) {
    float* gate = static_cast<float*>(p);
    G = gate, expG = G + C, kdecay = expG + C, dG = kdecay + C;  // (scalar gate)
    rowQ = dG + C, rowK = rowQ + 2 * C, rowKs = rowK + 2 * C, red = rowKs + 2 * C;
    Gv = gate, glast = Gv + C * kLdG, hdh = glast + DK, colKs = hdh + DK;  // (vector gate)
    u = RW ? colKs + C / 16 * DK : nullptr;
    q = reinterpret_cast<bf16*>(static_cast<float*>(p) + floats()), k = q + C * DK;
    v = k + C * DK, dov = v + C * DV, aqk = dov + C * DV, ps = aqk + C * C;
    h_even = ps + C * C, dh_even = h_even + DK * kLdP, h_odd = dh_even + DK * kLdP, dh_odd = h_odd + DK * kLdP;
    qr = h_odd, own = reinterpret_cast<float*>(h_even), decayed = dh_odd + DK * kLdP;
  }
};

// CTAs an SM local_backward_kernel is compiled for: 2 for the scalar gate at (64, 64), whose
// 76,416 B of shared memory allow two once the registers are held to 128 a thread; one elsewhere.
template <int DK, int DV, bool VG>
constexpr int kLocalCtasPerSm = !VG && DK == 64 && DV == 64 ? 2 : 1;

// Key channels one local_backward_kernel CTA takes: all of them up to dk = 128; at dk = 256 two
// CTAs a chunk take 128 each (64 x 256 dQ and dK accumulators, and the q, k, G and state tiles of
// 256 channels, would not fit a CTA's registers and 227 KB). dQ, dK, a vector gate's dG and du are
// per channel, so each CTA writes its own; dV and a scalar gate's dG sum over the channels, so
// each CTA writes its part in fp32 (Args::dv_part, dg_part) and launch_backward adds the parts in
// block order (write_column_sums: no atomics).
constexpr int key_blocks(int64_t dk) { return dk > 128 ? int(dk / 128) : 1; }
template <int DK>
constexpr int kKeyBlock = DK / key_blocks(DK);

// RW: RWKV-6's (vector gate only; mixers.md 11, CPU decay_chunk::backward with
// ReadAt::before_update). Its differences from the vector gate's passes below:
//   the query side reads the exclusive gate Gq_t = G_{t-1} (0 at t = 0): Aqk as output_kernel<RW>,
//     dQ = scale exp(Gq) (.) (dO h^T), and the pairs s < t with exp(Gq_t - G_s) (the reference
//     rows enter through Gq_r for dQ, through G_last of the row tile for dK, as in output_kernel);
//   the diagonal is the bonus, Aqk[t,t] = scale q_t . (u (.) k_t), so dQ_t += Ps[t,t] u (.) k_t,
//     dK_t += Ps[t,t] u (.) q_t (added after dG: the bonus is not gated) and du = sum_t Ps[t,t]
//     q_t (.) k_t, this chunk's part into a.dbonus;
//   g_j enters Gq_t only for t > j: dG's row j takes q_{j+1} (.) dQ_{j+1} (the rows shifted by one).
template <int DK, int DV, bool VG, bool RW>
__global__ void __launch_bounds__(kThreads, kLocalCtasPerSm<DK, DV, VG>) local_backward_kernel(Args a) {
  static_assert(VG || !RW, "RWKV-6 has a vector gate");
  extern __shared__ float4 smem_raw[];
  constexpr int KB = kKeyBlock<DK>, kBlocks = key_blocks(DK);  // this CTA's key channels d0 .. d0 + KB - 1
  using Smem = LocalSmem<KB, DV, VG, RW>;
  using chunk_mma::mma_staged;
  using chunk_mma::stage;
  const Smem sm(smem_raw);
  constexpr int kLdG = Smem::kLdG;
  const int chunk = blockIdx.x / kBlocks, kb = blockIdx.x % kBlocks, d0 = kb * KB;
  const int j = blockIdx.y, b = blockIdx.z, hq = j / (a.HV / a.H);
  const int t0 = chunk * C, n = min(C, a.T - t0);
  const int64_t head = int64_t(b) * a.HV + j;
  const int64_t tok0 = (int64_t(b) * a.T + t0) * a.HV + j;  // (B, T, HV) index of token t0
  const int64_t qk0 = ((int64_t(b) * a.T + t0) * a.H + hq) * DK + d0;
  const int64_t state0 = (head * a.NT + chunk) * DK * DV + int64_t(d0) * DV;  // rows d0.. of h[n], dh[n]
  const int64_t part0 = kb * (int64_t(a.B) * a.T * a.HV);  // kBlocks > 1: this block's part of dV, dG
  load_tile_async<C, KB, kThreads>(sm.q, a.q + qk0, int64_t(a.H) * DK, 0, n);
  load_tile_async<C, KB, kThreads>(sm.k, a.k + qk0, int64_t(a.H) * DK, 0, n);
  load_tile_async<C, DV, kThreads>(sm.v, a.v + tok0 * DV, int64_t(a.HV) * DV, 0, n);
  load_tile_async<C, DV, kThreads>(sm.dov, a.d_o + tok0 * DV, int64_t(a.HV) * DV, 0, n);
  // 3b's tiles of piece `piece` of h[n] and dh[n] (rows d0.., kStatePiece columns), by parity (a
  // select, not an indexed member array, which would put sm in local memory)
  auto h_tile = [&](int piece) { return piece & 1 ? sm.h_odd : sm.h_even; };
  auto dh_tile = [&](int piece) { return piece & 1 ? sm.dh_odd : sm.dh_even; };
  auto load_state = [&](int piece) {
    const int64_t at = state0 + piece * kStatePiece;
    load_bf16_rows_async<KB, kStatePiece>(h_tile(piece), a.h_start + at, DV, KB);
    load_bf16_rows_async<KB, kStatePiece>(dh_tile(piece), a.dh_end + at, DV, KB);
  };
  load_state(0);  // with the chunk's tiles: 3b starts on it without a round trip
  if constexpr (VG) {
    vector_cumsum<KB>(sm.Gv, kLdG, sm.glast, a.g + tok0 * DK + d0, int64_t(a.HV) * DK, n);
    for (int i = threadIdx.x; i < C / 16 * KB; i += kThreads) sm.colKs[i] = 0.f;
    if constexpr (RW)
      for (int d = threadIdx.x; d < KB; d += kThreads) sm.u[d] = bf(a.bonus[hq * DK + d0 + d]);
  } else {
    if (threadIdx.x < 32) {
      chunk_cumsum(sm.G, a.g + tok0, a.HV, n);
      __syncwarp();
      const float last = sm.G[C - 1];
      for (int t = threadIdx.x; t < C; t += 32) {
        sm.expG[t] = expf(sm.G[t]);
        sm.kdecay[t] = expf(last - sm.G[t]);
      }
    }
    for (int i = threadIdx.x; i < 6 * C; i += kThreads) sm.rowQ[i] = 0.f;  // rowQ, rowK, rowKs
  }
  wait_tiles();
  auto q_rows = [&](int r, int d) { return bf(sm.q[swizzle<KB>(r, d)]); };  // Q[r][d]
  auto k_rows = [&](int r, int d) { return bf(sm.k[swizzle<KB>(r, d)]); };  // K[r][d]
  auto ps_at = [&](int t, int s) { return bf(sm.ps[swizzle<C>(t, s)]); };   // Ps[t][s]
  auto G_at = [&](int r, int d) { return sm.Gv[r * kLdG + d]; };            // vector gate G_r[d]
  auto Gq_at = [&](int r, int d) { return RW ? (r > 0 ? G_at(r - 1, d) : 0.f) : G_at(r, d); };  // query side
  // Channels d .. d + 7 of a row (d % 8 == 0), as floats: of q, k, G, Gq.
  auto q8 = [&](int r, int d, float* x) { load8(sm.q + swizzle<KB>(r, d), x); };
  auto k8 = [&](int r, int d, float* x) { load8(sm.k + swizzle<KB>(r, d), x); };
  auto G8 = [&](int r, int d, float* x) { load8(sm.Gv + r * kLdG + d, x); };
  auto Gq8 = [&](int r, int d, float* x) {
    if (!RW || r > 0) G8(r - RW, d, x);
    else for (int e = 0; e < 8; e++) x[e] = 0.f;
  };
  // stage8(tile, row, d, x (.) exp(ga - gb)) for 8 channels of a row: a decayed operand.
  auto stage_decayed = [&](bf16* tile, int row, int d, const float* x, const float* ga, const float* gb) {
    float y[8];
#pragma unroll
    for (int e = 0; e < 8; e++) y[e] = x[e] * exp_ex2(ga[e] - gb[e]);
    chunk_mma::stage8<KB>(tile, row, d, y);
  };
  const chunk_mma::Staged<KB, false> Q{sm.q}, K{sm.k}, QR{sm.qr}, KD{sm.decayed};
  const chunk_mma::Staged<KB, true> Kt{sm.k};
  const chunk_mma::Staged<C, false> Ps{sm.ps};
  const chunk_mma::Staged<C, true> Pst{sm.ps}, Aqkt{sm.aqk};
  const chunk_mma::Staged<DV, true> Vt{sm.v};
  const chunk_mma::Staged<DV, false> dO{sm.dov};
  // The vector gate's kref tiles (see kDecayedRows): rows s < 16 i of k (.) exp(Gq_{16 i} - G_s) for
  // row tiles i = 1, 2, 3 (every exponent <= 0: G decreases, Gq_r <= G_s for s < r).
  auto stage_kref = [&] {
    for (int i = threadIdx.x; i < kDecayedRows * KB / 8; i += kThreads) {
      const int row = i / (KB / 8), d = i % (KB / 8) * 8, tile = row < 16 ? 1 : row < 48 ? 2 : 3;
      const int s = row - kref_offset(tile);
      float x[8], gr[8], gs[8];
      k8(s, d, x), Gq8(kSub * tile, d, gr), G8(s, d, gs);
      stage_decayed(sm.decayed, row, d, x, gr, gs);
    }
  };
  // 3a: Aqk = scale (Q K^T) (.) Gamma and Ps = scale (dO V^T) (.) Gamma, Gamma[t,s] = exp(G_t - G_s)
  //     on s <= t (o = Aqk V  =>  dAqk = dO V^T, and Aqk's gated factor is q_t . k_s). Vector
  //     gate: Aqk as output_kernel forms it, Ps = scale dO V^T masked (the decays are per channel);
  //     below the diagonal blocks qr = q_t (.) exp(Gq_t - Gq_r) (r = the row tile's first row,
  //     staged in the state pieces' place) against the row tile's kref; the diagonal blocks pair
  //     by pair, fused with 3c's own-sub-chunk part of dQ, which takes the same decays
  //     E = e^{Gq_t - G_s}, s <= t in one sub-chunk (RW: s < t, and the bonus on the diagonal):
  //       Aqk[t,s] = scale sum_d q_t k_s E,   own_dq[t] = sum_s Ps[t,s] k_s (.) E,
  //     a thread taking row t and 8 channels (own_dq in its registers until 3c), the row's
  //     kRowThreads threads summing Aqk[t,s] by shuffles.
  constexpr int kRowThreads = KB / 8, kOwnRows = C * kRowThreads / kThreads;  // own_dq: rows a thread
  static_assert(C * kRowThreads % kThreads == 0 && 32 % kRowThreads == 0, "a row's threads in one warp");
  float own_dq[kOwnRows][8];  // vector gate: row threadIdx.x / kRowThreads + p * (kThreads / kRowThreads)
  {
    WarpTile<C, C> qk, da;
    mma_staged(da, dO, Vt, 0, DV);
    if constexpr (VG) {
      da.each([&](int r, int c, float x, int) { stage<C>(sm.ps, r, c, c <= r ? a.scale * x : 0.f); });
      for (int i = threadIdx.x; i < C * KB / 8; i += kThreads) {  // qr
        const int t = i / (KB / 8), d = i % (KB / 8) * 8;
        float x[8], gt[8], gr[8];
        q8(t, d, x), Gq8(t, d, gt), Gq8(t / kSub * kSub, d, gr);
        stage_decayed(sm.qr, t, d, x, gt, gr);
      }
      stage_kref();
      __syncthreads();
      const int ref = qk.row0;  // this warp's row tile's first row
      if (ref > 0) mma_staged(qk, QR, chunk_mma::Staged<KB, true>{sm.decayed, kref_offset(ref / kSub)}, 0, KB, ref);
      qk.each([&](int r, int c, float x, int) {
        if (c < ref) stage<C>(sm.aqk, r, c, a.scale * x);
        else if (c >= ref + kSub) stage<C>(sm.aqk, r, c, 0.f);
      });
#pragma unroll
      for (int p = 0; p < kOwnRows; p++) {
        const int i = threadIdx.x + p * kThreads, t = i / kRowThreads, d = i % kRowThreads * 8;
        const int t_warp = __shfl_sync(0xffffffffu, t, 31);  // the warp's last row: one loop for its rows
        float qv[8], gt[8];
        q8(t, d, qv), Gq8(t, d, gt);
#pragma unroll
        for (int e = 0; e < 8; e++) own_dq[p][e] = 0.f;
        for (int s = t / kSub * kSub; s <= t_warp; s++) {
          float kv[8], gs[8];
          k8(s, d, kv), G8(s, d, gs);
          const bool pair = RW ? s < t : s <= t;
          const float ps = ps_at(t, s);
          float dot = 0.f;
#pragma unroll
          for (int e = 0; e < 8; e++) {
            const float decay = pair ? exp_ex2(gt[e] - gs[e]) : 0.f;
            own_dq[p][e] += ps * kv[e] * decay;
            dot += qv[e] * (RW && s == t ? sm.u[d + e] : decay) * kv[e];
          }
#pragma unroll
          for (int off = 1; off < kRowThreads; off <<= 1) dot += __shfl_xor_sync(0xffffffffu, dot, off);
          if (d == 0 && s <= t) stage<C>(sm.aqk, t, s, a.scale * dot);
        }
      }
      for (int i = threadIdx.x; i < C * kSub; i += kThreads) {  // above the diagonal in the diagonal blocks
        const int r = i / kSub, c = r / kSub * kSub + i % kSub;
        if (c > r) stage<C>(sm.aqk, r, c, 0.f);
      }
    } else {
      mma_staged(qk, Q, Kt, 0, KB);
      store_decayed_scores(qk, sm.G, a.scale, [&](int r, int c, float x) { stage<C>(sm.aqk, r, c, x); });
      store_decayed_scores(da, sm.G, a.scale, [&](int r, int c, float x) { stage<C>(sm.ps, r, c, x); });
    }
  }
  // 3b: the inter-chunk terms, kStatePiece state columns c0 .. c0 + kStatePiece - 1 at a time:
  //     o = scale exp(G) (.) (Q h)       =>  dQ  = scale exp(G) (.) (dO h^T)   (scaled in 3c)
  //     S_end = ... + (K (.) exp(G_last - G))^T V
  //                                      =>  dK^state = exp(G_last - G) (.) (V dh^T)   (3c)
  //                                          dV = exp(G_last - G) (.) (K dh) + Aqk^T dO
  //                                          (vector gate: kd dh, kd = K (.) exp(G_last - G)
  //                                          staged once)
  //     S_end = exp(G_last) h + ...      =>  <h, dh> for dG_last (3d); a vector gate keeps it per
  //                                          state row (rowsum(h (.) dh) into hdh, summed by
  //                                          the warp that converts the row)
  //     Each piece of h and dh lands as bf16 tiles by cp.async (piece 0 with the chunk's tiles,
  //     piece p + 1 while piece p's products run), which the products read by ldmatrix and
  //     <h, dh> sums.
  WarpTile<C, KB> dq, dk;
  // <h, dh>: a thread takes column c = its lane of the piece and state rows d .. d + 7 (the warp's
  // 32 columns read conflict-free), the same rows in every piece, so its parts of rowsum(h (.) dh)
  // stay in registers until the warp sums them after the last piece.
  static_assert(kStatePiece == 32, "a warp's lanes are a piece's columns");
  constexpr int kRowGroups = KB / 8 * kStatePiece / kThreads;  // 8-row groups a thread
  static_assert(KB / 8 * kStatePiece % kThreads == 0, "whole row groups per thread");
  constexpr int kLdP = Smem::kLdP;
  float hdh[kRowGroups][8] = {};
  for (int c0 = 0; c0 < DV; c0 += kStatePiece) {
    const int piece = c0 / kStatePiece;
    wait_tiles();  // this piece has landed; every read of the other parity's tiles (3a's qr, or the previous piece) is done
    if (c0 + kStatePiece < DV) load_state(piece + 1);  // in flight during the products below
    const bf16 *h_piece = h_tile(piece), *dh_piece = dh_tile(piece);
#pragma unroll
    for (int p = 0; p < kRowGroups; p++) {
      const int i = threadIdx.x + p * kThreads, c = i % kStatePiece, d = i / kStatePiece * 8;
#pragma unroll
      for (int e = 0; e < 8; e++) hdh[p][e] += bf(h_piece[(d + e) * kLdP + c]) * bf(dh_piece[(d + e) * kLdP + c]);
    }
    if constexpr (VG) {
      if (c0 == 0) {  // kd in the kref tiles' place (their last reads, 3a's, ended before the barrier above)
        for (int i = threadIdx.x; i < C * KB / 8; i += kThreads) {
          const int t = i / (KB / 8), d = i % (KB / 8) * 8;
          float x[8], gl[8], gt[8];
          k8(t, d, x), load8(sm.glast + d, gl), G8(t, d, gt);
          stage_decayed(sm.decayed, t, d, x, gl, gt);
        }
        __syncthreads();
      }
    }
    const chunk_mma::Staged<DV, false> dO_piece{sm.dov, 0, c0};
    const chunk_mma::Padded<kLdP, true> hT{h_piece}, dhT{dh_piece};  // h^T, dh^T (rows: state columns)
    mma_staged(dq, dO_piece, hT, 0, kStatePiece);
    mma_staged(dk, chunk_mma::Staged<DV, false>{sm.v, 0, c0}, dhT, 0, kStatePiece);
    WarpTile<C, kStatePiece> dv;
    const chunk_mma::Padded<kLdP, false> dh{dh_piece};
    if constexpr (VG) {
      mma_staged(dv, KD, dh, 0, KB);
    } else {
      mma_staged(dv, K, dh, 0, KB);
      dv.each([&](int r, int, float& x, int) { x *= sm.kdecay[r]; });
    }
    mma_staged(dv, Aqkt, dO_piece, 0, C);
    dv.each_pair([&](int r, int c, float x0, float x1, int) {
      if (r >= n) return;
      const int64_t i = (tok0 + int64_t(r) * a.HV) * DV + c0 + c;
      if constexpr (kBlocks > 1) {  // this block's channels' part
        *reinterpret_cast<float2*>(a.dv_part + part0 * DV + i) = make_float2(x0, x1);
      } else {
        *reinterpret_cast<uint32_t*>(a.dv + i) = pack_bf16(x0, x1);
      }
    });
  }
  // <h, dh>: a vector gate's per row (the warp's 32 columns summed, lane 0 owns rows d .. d + 7),
  // a scalar gate's in total (this thread's part, summed over the block in 3d).
  float hdh_sum = 0.f;
#pragma unroll
  for (int p = 0; p < kRowGroups; p++)
#pragma unroll
    for (int e = 0; e < 8; e++) {
      if constexpr (VG) {
        float row = hdh[p][e];
#pragma unroll
        for (int off = 1; off < 32; off <<= 1) row += __shfl_xor_sync(0xffffffffu, row, off);
        if (threadIdx.x % 32 == 0) sm.hdh[(threadIdx.x + p * kThreads) / kStatePiece * 8 + e] = row;
      } else {
        hdh_sum += hdh[p][e];
      }
    }
  // 3c: the row decays, sum_s k_s . dK^state_s (dG_last), then the in-chunk pairs:
  //     A[t,s] = Gamma[t,s] q_t . k_s  =>  dQ += Ps K,  dK += Ps^T Q   (Ps holds scale, Gamma)
  //     Vector gate, per channel d (every exponent <= 0, as in output_kernel):
  //       dQ_t += sum_{s <= t} Ps[t,s] k_s exp(G_t - G_s): earlier sub-chunks through the row
  //               tile's first row r (exp(G_t - G_r) (.) (Ps kref)), its own pair by pair
  //       dK_s += sum_{t >= s} Ps[t,s] q_t exp(G_t - G_s): later sub-chunks through the row tile's
  //               last row l (exp(G_l - G_s) (.) (Ps^T qlast), qlast = q_t (.) exp(Gq_t - G_l),
  //               t > l), its own pair by pair
  if constexpr (VG) {
    dq.each([&](int r, int d, float& x, int) { x *= a.scale * exp_ex2(Gq_at(r, d)); });
    dk.each([&](int r, int d, float& x, int) { x *= exp_ex2(sm.glast[d] - G_at(r, d)); });
    dk.add_col_sums(sm.colKs, [&](int r, int d, float x) { return x * k_rows(r, d); });
    float* const own = sm.own;  // (C, KB) fp32: the own sub-chunk's pairs, in the state pieces' place
    __syncthreads();  // every read of kd is done
    stage_kref();
#pragma unroll
    for (int p = 0; p < kOwnRows; p++) {  // 3a's own_dq
      const int i = threadIdx.x + p * kThreads;
      store8(own + i / kRowThreads * KB + i % kRowThreads * 8, own_dq[p]);
    }
    __syncthreads();
    {
      WarpTile<C, KB> pairs;
      const int ref = pairs.row0;
      mma_staged(pairs, Ps, chunk_mma::Staged<KB, false>{sm.decayed, kref_offset(ref / kSub)}, 0, ref);
      dq.each([&](int t, int d, float& x, int slot) {
        x += pairs.at(slot) * exp_ex2(Gq_at(t, d) - Gq_at(ref, d)) + own[t * KB + d];
      });
    }
    __syncthreads();  // every read of kref and own is done
    for (int i = threadIdx.x; i < kDecayedRows * KB / 8; i += kThreads) {  // qlast for row tiles 0, 1, 2
      const int row = i / (KB / 8), d = i % (KB / 8) * 8, tile = row < 48 ? 0 : row < 80 ? 1 : 2;
      const int t = row - qlast_offset(tile) + kSub * (tile + 1);
      float x[8], gt[8], gl[8];
      q8(t, d, x), Gq8(t, d, gt), G8(kSub * tile + kSub - 1, d, gl);
      stage_decayed(sm.decayed, row, d, x, gt, gl);
    }
    for (int i = threadIdx.x; i < C * KB / 8; i += kThreads) {  // own[s] = sum_{t >= s} (RW: t > s)
      const int s = i / (KB / 8), d = i % (KB / 8) * 8;
      float gs[8], sum[8] = {};
      G8(s, d, gs);
      for (int t = s + RW; t < s / kSub * kSub + kSub; t++) {
        float qv[8], gt[8];
        q8(t, d, qv), Gq8(t, d, gt);
        const float p = ps_at(t, s);
#pragma unroll
        for (int e = 0; e < 8; e++) sum[e] += p * qv[e] * exp_ex2(gt[e] - gs[e]);
      }
      store8(own + s * KB + d, sum);
    }
    __syncthreads();
    {
      WarpTile<C, KB> pairs;
      const int tile = pairs.row0 / kSub, last = pairs.row0 + kSub - 1;
      mma_staged(pairs, Pst, chunk_mma::Staged<KB, false>{sm.decayed, qlast_offset(tile) - (last + 1)}, last + 1, C);
      dk.each([&](int s, int d, float& x, int slot) {
        x += pairs.at(slot) * exp_ex2(G_at(last, d) - G_at(s, d)) + own[s * KB + d];
      });
    }
  } else {
    dq.each([&](int r, int, float& x, int) { x *= a.scale * sm.expG[r]; });
    dk.each([&](int r, int, float& x, int) { x *= sm.kdecay[r]; });
    dk.add_row_sums(sm.rowKs, [&](int r, int d, float x) { return x * k_rows(r, d); });
    mma_staged(dq, Ps, K, 0, C);
    mma_staged(dk, Pst, Q, 0, C);
  }
  // dQ, dK in bf16 where each key head has one value head (a.dq_direct), else per value head in fp32.
  auto store_grad = [&](WarpTile<C, KB>& t, float* per_head, bf16* direct) {
    t.each_pair([&](int r, int d, float x0, float x1, int) {
      if (r >= n) return;
      const int64_t i = (tok0 + int64_t(r) * a.HV) * DK + d0 + d;
      if (direct) *reinterpret_cast<uint32_t*>(direct + i) = pack_bf16(x0, x1);
      else *reinterpret_cast<float2*>(per_head + i) = make_float2(x0, x1);
    });
  };
  auto store_dq_dk = [&] { store_grad(dq, a.dq, a.dq_direct), store_grad(dk, a.dk, a.dk_direct); };
  // 3d: dG_t = q_t . dQ_t - k_t . dK_t (4.10: q enters as q exp(G), k as k exp(-G)); a vector
  //     gate keeps it per channel: dG_t = q_t (.) dQ_t - k_t (.) dK_t, the last row's terms
  //     exp(G_last) (.) rowsum(h (.) dh) + sum_s k_s (.) dK^state_s, and a per-channel reverse
  //     cumsum (RW: q's terms one row up, then the bonus, see the kernel's head).
  if constexpr (VG) {
    __syncthreads();  // every read of G is done: Gv takes dG
    dk.each([&](int r, int d, float x, int) { sm.Gv[r * kLdG + d] = -x * k_rows(r, d); });
    __syncthreads();  // (RW: another thread's row)
    dq.each([&](int r, int d, float x, int) {
      if (!RW) sm.Gv[r * kLdG + d] += x * q_rows(r, d);
      else if (r > 0) sm.Gv[(r - 1) * kLdG + d] += x * q_rows(r, d);
    });
    if constexpr (RW) {
      dq.each([&](int t, int d, float& x, int) { x += ps_at(t, t) * sm.u[d] * k_rows(t, d); });
      dk.each([&](int t, int d, float& x, int) { x += ps_at(t, t) * sm.u[d] * q_rows(t, d); });
    }
    store_dq_dk();
    __syncthreads();
    if (threadIdx.x < KB) {
      const int d = threadIdx.x;
      float acc = expf(sm.glast[d]) * sm.hdh[d];
      for (int i = 0; i < C / 16; i++) acc += sm.colKs[i * KB + d];
      for (int t = C - 1; t >= 0; t--) {  // g_t enters G_s for s >= t
        acc += sm.Gv[t * kLdG + d];
        if (t < n) a.dg[(tok0 + int64_t(t) * a.HV) * DK + d0 + d] = __float2bfloat16_rn(acc);
      }
      if constexpr (RW) {  // du's part: sum_t Ps[t,t] q_t[d] k_t[d] (rows past the end are zero)
        float du = 0.f;
        for (int t = 0; t < C; t++) du += ps_at(t, t) * q_rows(t, d) * k_rows(t, d);
        a.dbonus[((int64_t(b) * a.NT + chunk) * a.H + hq) * DK + d0 + d] = du;
      }
    }
    return;
  }
  store_dq_dk();
  dq.add_row_sums(sm.rowQ, [&](int r, int d, float x) { return x * q_rows(r, d); });
  dk.add_row_sums(sm.rowK, [&](int r, int d, float x) { return x * k_rows(r, d); });
  const float hdh_total = block_sum(hdh_sum, sm.red);  // its __syncthreads also publish the row sums
  if (threadIdx.x < C) {
    const int r = threadIdx.x;
    sm.dG[r] = sm.rowQ[r] + sm.rowQ[C + r] - sm.rowK[r] - sm.rowK[C + r];
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float kgp = 0.f;  // sum_s k_s . dK^state_s
    for (int i = 0; i < 2 * C; i++) kgp += sm.rowKs[i];
    sm.dG[C - 1] += sm.expG[C - 1] * hdh_total + kgp;
    for (int t = C - 2; t >= 0; t--) sm.dG[t] += sm.dG[t + 1];  // g_t enters G_s for s >= t
  }
  __syncthreads();
  if (threadIdx.x < n) {
    const int64_t i = tok0 + int64_t(threadIdx.x) * a.HV;
    if constexpr (kBlocks > 1) a.dg_part[part0 + i] = sm.dG[threadIdx.x];  // this block's channels' part
    else a.dg[i] = __float2bfloat16_rn(sm.dG[threadIdx.x]);
  }
}

// ---- Host side ----

// Launches `kernel` on `grid` with BYTES of dynamic shared memory.
template <size_t BYTES, class Kernel, class... Params>
void launch_kernel(Kernel kernel, dim3 grid, Params... params) {
  static_assert(BYTES <= 227 * 1024, "at most 227 KB of shared memory per CTA");
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(BYTES)));
  kernel<<<grid, kThreads, BYTES>>>(params...);
  CUDA_CHECK_LAUNCH();
}

// The scans' grid: (dk / KT) (dv / BV) state tiles a head (ScanTile).
template <int DK, bool VG>
constexpr int scan_rows() {
  return VG ? kVectorScanRows : DK;
}
template <int DK, bool VG>
dim3 scan_grid(const Args& a, int DV) {
  return dim3(DK / scan_rows<DK, VG>() * (DV / BV), a.HV, a.B);
}

// Forward pass 2, or the backward's replay of it.
template <int DK, bool VG>
void launch_scan(const Args& a, int DV) {
  constexpr int KT = scan_rows<DK, VG>();
  launch_kernel<ScanSmem<KT, VG>::bytes()>(scan_kernel<DK, KT, VG>, scan_grid<DK, VG>(a, DV), a, DV);
}

// The forward (RW: RWKV-6's): the scan stores every h[n] into a.h_start, the output kernel reads them.
template <int DK, int DV, bool VG, bool RW>
void launch_forward(const Args& a) {
  launch_scan<DK, VG>(a, DV);
  launch_kernel<OutputSmem<DK, DV, VG, RW>::bytes()>(output_kernel<DK, DV, VG, RW>, dim3(a.NT, a.HV, a.B), a);
}

// RW: RWKV-6's (VG), a.dbonus takes every chunk's part of du.
// dk = 256: a.dv_part (and a scalar gate's a.dg_part) take the key blocks' parts (kKeyBlock).
// replay: pass 1 rebuilds every h[n] into a.h_start; else a.h_start holds what the forward kept.
template <int DK, int DV, bool VG, bool RW>
void launch_backward(const Args& a, bool replay) {
  constexpr int kBlocks = key_blocks(DK);
  using Local = LocalSmem<kKeyBlock<DK>, DV, VG, RW>;
  static_assert(Local::floats() % 4 == 0, "the bf16 tiles of LocalSmem start 16-byte aligned");
  constexpr int KT = scan_rows<DK, VG>();
  if (replay) launch_scan<DK, VG>(a, DV);  // pass 1: every h[n]
  launch_kernel<ScanSmem<KT, VG>::bytes()>(reverse_scan_kernel<DK, KT, VG, RW>, scan_grid<DK, VG>(a, DV), a, DV);
  launch_kernel<Local::bytes()>(local_backward_kernel<DK, DV, VG, RW>, dim3(a.NT * kBlocks, a.HV, a.B), a);
  if constexpr (kBlocks > 1) {  // dV and a scalar gate's dG: the key blocks' parts added in block order
    const int64_t rows = int64_t(a.B) * a.T * a.HV;
    write_column_sums(a.dv, a.dv_part, kBlocks, rows * DV);
    if constexpr (!VG) write_column_sums(a.dg, a.dg_part, kBlocks, rows);
  }
}

// The workspaces of launch_backward's key-block parts (one float each where dk <= 128).
struct KeyBlockParts {
  FloatScratch dv, dg;
  static int64_t rows(const DecayAttentionDims& d) {
    return key_blocks(d.dk) > 1 ? key_blocks(d.dk) * d.B * d.T * d.HV : 0;  // (blocks, B, T, HV)
  }
  explicit KeyBlockParts(const DecayAttentionDims& d) : dv(rows(d) * d.dv), dg(d.vector_gate ? 0 : rows(d)) {}
  void set(Args& a) const { a.dv_part = dv.get(), a.dg_part = dg.get(); }
};

// fn(dk, dv, vector gate) with each as a compile-time constant, for supported() dims.
template <class Fn>
void dispatch(const DecayAttentionDims& d, Fn&& fn) {
  HLA_CHECK(supported(d.dk, d.dv, DType::BF16), "decay_attention chunk kernel: no kernel at dk = ", d.dk, ", dv = ", d.dv);
  using K64 = std::integral_constant<int, 64>;
  using K128 = std::integral_constant<int, 128>;
  using K256 = std::integral_constant<int, 256>;
  auto gate = [&](auto dk_, auto dv_) {
    if (d.vector_gate) fn(dk_, dv_, std::true_type{});
    else fn(dk_, dv_, std::false_type{});
  };
  if (d.dk == 256 || d.dv == 256) {
    if (d.dk == 128) gate(K128{}, K256{});
    else if (d.dv == 128) gate(K256{}, K128{});
    else gate(K256{}, K256{});
  } else if (d.dk == 64 && d.dv == 64) gate(K64{}, K64{});
  else if (d.dk == 64) gate(K64{}, K128{});
  else if (d.dv == 64) gate(K128{}, K64{});
  else gate(K128{}, K128{});
}

// RWKV-6's dims as the decay attention's (one value head a key head, vector gate, its chunk resets).
DecayAttentionDims decay_dims(const Rwkv6Dims& d) {
  return {d.B, d.T, d.H, d.H, d.dk, d.dv, true, d.scale, 0, DType::F32, nullptr, d.chunk_reset};
}

// The elements of every chunk-start state, (B, HV, NT, dk, dv) bf16: what the forward keeps for
// the backward (and the backward's dh[n]).
int64_t state_elements(const DecayAttentionDims& d) { return d.B * d.HV * ((d.T + C - 1) / C) * d.dk * d.dv; }
using StateScratch = Scratch<bf16>;

// The inputs both directions read; outputs and workspaces are set by the caller.
Args input_args(const void* q, const void* k, const void* v, const void* g, const float* h0,
                const DecayAttentionDims& d) {
  HLA_CHECK(aligned16(q) && aligned16(k) && aligned16(v), "decay_attention chunk kernel: q, k, v must be 16-byte aligned");
  HLA_CHECK(!d.vector_gate || aligned16(g), "decay_attention chunk kernel: a vector gate g must be 16-byte aligned");
  HLA_CHECK(!h0 || aligned16(h0), "decay_attention chunk kernel: the initial state h0 must be 16-byte aligned");
  Args a{};
  a.B = int(d.B), a.T = int(d.T), a.H = int(d.H), a.HV = int(d.HV), a.NT = int((d.T + C - 1) / C);
  a.scale = float(d.scale);
  a.q = static_cast<const bf16*>(q), a.k = static_cast<const bf16*>(k), a.v = static_cast<const bf16*>(v);
  a.g = static_cast<const bf16*>(g), a.h0 = h0, a.chunk_reset = d.chunk_reset;
  return a;
}

}  // namespace

bool supported(int64_t dk, int64_t dv, DType dtype) {
  const bool narrow = (dk == 64 || dk == 128) && (dv == 64 || dv == 128);
  const bool wide = (dk == 128 || dk == 256) && (dv == 128 || dv == 256);  // (256, 256), (128, 256), (256, 128)
  return dtype == DType::BF16 && (narrow || wide);
}

const char* kernel_label(int64_t dk, int64_t dv, DType dtype) {
  return supported(dk, dv, dtype) ? "chunked fwd+bwd (mma)" : "recurrent";
}

bool takes(int64_t B, int64_t T, int64_t dk, int64_t dv, DType dtype, const void* q, const void* k, const void* v,
           const void* vector_gate) {
  return T > 1 && B > 0 && supported(dk, dv, dtype) && aligned16(q) && aligned16(k) && aligned16(v) &&
         (!vector_gate || aligned16(vector_gate));
}

int64_t kept_floats(const DecayAttentionDims& d) { return (state_elements(d) + 1) / 2; }  // bf16 pairs
int64_t kept_floats(const Rwkv6Dims& d) { return kept_floats(decay_dims(d)); }

void forward(void* o, float* ht, const void* q, const void* k, const void* v, const void* g, const float* h0,
             const DecayAttentionDims& d, float* kept) {
  HLA_CHECK(!kept || aligned16(kept), "decay_attention chunk kernel: kept must be 16-byte aligned");
  Args a = input_args(q, k, v, g, h0, d);
  a.o = static_cast<bf16*>(o), a.ht = ht;
  StateScratch h_start(kept ? 0 : state_elements(d));  // (B, HV, NT, dk, dv), where not kept
  a.h_start = kept ? reinterpret_cast<bf16*>(kept) : h_start.get();
  dispatch(d, [&](auto dk_, auto dv_, auto vector_gate) {
    launch_forward<decltype(dk_)::value, decltype(dv_)::value, decltype(vector_gate)::value, false>(a);
  });
}

void rwkv6_forward(void* o, float* ht, const void* r, const void* k, const void* v, const void* w, const void* u,
                   const float* h0, const Rwkv6Dims& d, float* kept) {
  HLA_CHECK(!kept || aligned16(kept), "rwkv6 chunk kernel: kept must be 16-byte aligned");
  const DecayAttentionDims dims = decay_dims(d);
  Args a = input_args(r, k, v, w, h0, dims);
  a.o = static_cast<bf16*>(o), a.ht = ht, a.bonus = static_cast<const bf16*>(u);
  StateScratch h_start(kept ? 0 : state_elements(dims));  // (B, H, NT, dk, dv), where not kept
  a.h_start = kept ? reinterpret_cast<bf16*>(kept) : h_start.get();
  dispatch(dims, [&](auto dk_, auto dv_, auto) {
    launch_forward<decltype(dk_)::value, decltype(dv_)::value, true, true>(a);
  });
}

void backward(void* grad_q, void* grad_k, void* grad_v, void* grad_g, float* grad_h0, const void* grad_o,
              const float* grad_ht, const void* q, const void* k, const void* v, const void* g, const float* h0,
              const DecayAttentionDims& d, const float* kept) {
  HLA_CHECK(aligned16(grad_o), "decay_attention chunk kernel: grad_o must be 16-byte aligned");
  HLA_CHECK(!grad_ht || aligned16(grad_ht), "decay_attention chunk kernel: grad_ht must be 16-byte aligned");
  HLA_CHECK(!kept || aligned16(kept), "decay_attention chunk kernel: kept must be 16-byte aligned");
  HLA_CHECK((d.HV != d.H || (aligned16(grad_q) && aligned16(grad_k))) && aligned16(grad_v),
            "decay_attention chunk kernel: grad_q, grad_k and grad_v must be 16-byte aligned (stored in bf16 pairs)");
  Args a = input_args(q, k, v, g, h0, d);
  const int64_t states = state_elements(d);  // (B, HV, NT, dk, dv)
  // One value head a key head: pass 3 writes dq, dk itself; else per value head in fp32, then summed.
  const bool grouped = d.HV != d.H;
  const int64_t grads = grouped ? d.B * d.T * d.HV * d.dk : 0;  // (B, T, HV, dk)
  StateScratch h_start(kept ? 0 : states), dh_end(states);
  FloatScratch dq(grads), dk(grads);
  // kept is only read here: pass 1, the one writer of a.h_start, does not run then
  a.h_start = kept ? reinterpret_cast<bf16*>(const_cast<float*>(kept)) : h_start.get(), a.dh_end = dh_end.get();
  a.d_o = static_cast<const bf16*>(grad_o), a.dht = grad_ht, a.dh0 = grad_h0;
  if (grouped) a.dq = dq.get(), a.dk = dk.get();
  else a.dq_direct = static_cast<bf16*>(grad_q), a.dk_direct = static_cast<bf16*>(grad_k);
  a.dv = static_cast<bf16*>(grad_v), a.dg = static_cast<bf16*>(grad_g);
  const KeyBlockParts parts(d);
  parts.set(a);
  dispatch(d, [&](auto dk_, auto dv_, auto vector_gate) {
    launch_backward<decltype(dk_)::value, decltype(dv_)::value, decltype(vector_gate)::value, false>(a, !kept);
  });
  if (!grouped) return;
  recurrence::group_sum(static_cast<bf16*>(grad_q), dq.get(), d.B * d.T, d.H, d.HV / d.H, d.dk);
  recurrence::group_sum(static_cast<bf16*>(grad_k), dk.get(), d.B * d.T, d.H, d.HV / d.H, d.dk);
}

void rwkv6_backward(void* grad_r, void* grad_k, void* grad_v, void* grad_w, void* grad_u, float* grad_h0,
                    const void* grad_o, const float* grad_ht, const void* r, const void* k, const void* v,
                    const void* w, const void* u, const float* h0, const Rwkv6Dims& d, const float* kept) {
  HLA_CHECK(aligned16(grad_o), "rwkv6 chunk kernel: grad_o must be 16-byte aligned");
  HLA_CHECK(!grad_ht || aligned16(grad_ht), "rwkv6 chunk kernel: grad_ht must be 16-byte aligned");
  HLA_CHECK(!kept || aligned16(kept), "rwkv6 chunk kernel: kept must be 16-byte aligned");
  HLA_CHECK(aligned16(grad_r) && aligned16(grad_k) && aligned16(grad_v),
            "rwkv6 chunk kernel: grad_r, grad_k and grad_v must be 16-byte aligned (stored in bf16 pairs)");
  const DecayAttentionDims dims = decay_dims(d);
  Args a = input_args(r, k, v, w, h0, dims);
  a.bonus = static_cast<const bf16*>(u);
  const int64_t states = state_elements(dims);  // (B, H, NT, dk, dv)
  StateScratch h_start(kept ? 0 : states), dh_end(states);
  FloatScratch du_parts(d.B * a.NT * d.H * d.dk);
  // kept is only read here: pass 1, the one writer of a.h_start, does not run then
  a.h_start = kept ? reinterpret_cast<bf16*>(const_cast<float*>(kept)) : h_start.get(), a.dh_end = dh_end.get();
  a.d_o = static_cast<const bf16*>(grad_o), a.dht = grad_ht, a.dh0 = grad_h0;
  a.dbonus = du_parts.get();  // (B, NT, H, dk)
  a.dq_direct = static_cast<bf16*>(grad_r), a.dk_direct = static_cast<bf16*>(grad_k);  // one value head a head
  a.dv = static_cast<bf16*>(grad_v), a.dg = static_cast<bf16*>(grad_w);
  const KeyBlockParts parts(dims);
  parts.set(a);
  dispatch(dims, [&](auto dk_, auto dv_, auto) {
    launch_backward<decltype(dk_)::value, decltype(dv_)::value, true, true>(a, !kept);
  });
  write_column_sums(static_cast<bf16*>(grad_u), du_parts.get(), int(d.B * a.NT), d.H * d.dk);  // fixed order
}

}  // namespace hla::cuda::decay_chunk
