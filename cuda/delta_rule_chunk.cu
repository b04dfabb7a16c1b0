// The chunked delta rule on tensor cores (mixers.md 4.6-4.10), forward and backward, pass by pass
// the CPU chunked reference of nn/ops/delta_rule.cpp. See cuda/delta_rule_chunk.cuh for the scope,
// bench/README for what each layout and ordering below measured against the one before it.
//
// Per (batch b, value head j), chunks of C = 64 tokens, local tokens t = 0..63 (rows past the
// end of the sequence are zero: k = q = v = 0, beta = w = g = 0, so they change nothing).
// The gate is none, a scalar per token (G a number a token) or, with the template flag VG (KDA),
// a vector over the dk key channels (G[t][d]; every exp(G ..) below is then per channel, and the
// in-chunk decays are formed the safe way of 4.4: see 1b and add_decayed_pairs). With VG, the
// flag VBW (GDN-2) makes the erase gate a vector b_t over dk and the write gate a vector w_t over
// dv: the erase key e_t = b_t (.) k_t takes beta_t k_t's place (on the t side of L's pairs and in
// Ehat), y_t = w_t (.) v_t takes w_t v_t's, and beta, w as row scales are 1. The scans read W, U,
// Aqk and G, which carry b and w already: GDN-2 runs KDA's scan and reverse scan unchanged.
// Pass 4's gradients of b and w are then per channel (db = k (.) dE, dw = v (.) dY, below).
//
// Forward
//   Pass 1 (prepare_kernel, grid (NT, HV, B), every chunk in parallel; CPU: prepare_chunk):
//     1a  G = inclusive cumsum of g inside the chunk                                   (4.1)
//     1b  L[t,s] = beta_t (k_t . k_s) exp(G_t - G_s), s < t   (GDN-2: sum_d e_t[d] k_s[d] ..);
//         Aqk[t,s] = scale (q_t . k_s) exp(G_t - G_s), s <= t                     (4.6, mma)
//         Vector gate: sum_d k_t[d] k_s[d] exp(G_t[d] - G_s[d]) by sub-blocks of 16 tokens
//         (4.4): for s in an earlier sub-block than t, the mma of k_t exp(G_t - G_ref) and
//         k_s exp(G_ref - G_s), ref = the first token of t's sub-block (exponents <= 0: no
//         overflow whatever the gates), each decayed once and split into bf16 hi + lo tiles;
//         inside a 16 x 16 diagonal block in fp32, the decays carried token by token
//         (exp(G_{s+1} - G_s) staged once: no exponential a pair).
//     1c  A = (I + L)^{-1} by 16 x 16 blocks, fp32 in shared memory: the diagonal blocks'
//         inverses by forward substitution, the others diagonal by diagonal          (4.7)
//     1d  W = A diag(beta exp(G)) K,  U = A diag(w) V                             (4.6, mma)
//         (GDN-2: W = A (E (.) exp(G)),  U = A (w (.) V); a vector gate's K (.) exp(G) formed
//         once in G's place)
//     W goes out as two bf16 planes (hi = W rounded, lo = W - hi rounded), U, Aqk, G (and A
//     when kept) in fp32. From dk = 128 on a vector gate's prepare also writes the scans' gated
//     operands as planes (kGatedPlanes): K (.) exp(G_last - G) for 2c and 3b, scale Q (.)
//     exp(G) for 2b and 3c. Shared memory is reused as the passes go: without a vector gate A
//     is formed in L's place (kInPlace) and v takes q's tile once 1b has read q where 64 < dv
//     <= dk (kVInQ); a vector gate from dk = 128 on with dv <= dk (kLean) puts v in q's tile
//     too (GDN-2: w in G's once 1d's W is formed), its step decays in G's place and 1b's
//     staged operands, 16 channels at a time, in L's and A's places.
//   Pass 2 (scan_kernel, grid (dv / BV, HV, B), sequential over chunks: 2a and 2c; CPU:
//   scan_chunks; then output_kernel, grid (NT dv / VS, HV, B), every chunk in parallel: 2b; CPU:
//   the output loop of chunk_forward):
//     2a  Vnew = U - W h          -> residual (bf16), and over U for 2b            (4.8, mma)
//         the chunk-start state h    -> h[n] (bf16 hi plane, a vector gate's lo plane too, B HV NT dk dv)
//     2c  h <- exp(G_last) h + (K (.) exp(G_last - G))^T Vnew                     (4.8, mma)
//     2b  o = scale (Q (.) exp(G)) h[n] + Aqk Vnew   (output_kernel, after the scan; 4.6, mma)
//   The state h (dk x dv, fp32) is split along dv into column tiles of BV, one per CTA, held in
//   registers (StateTile, cuda/staged_mma.cuh). Every product reads staged bf16 tiles by ldmatrix
//   (an fp32 operand as its hi and lo tiles): W's planes, the state split at the top of each
//   chunk, Vnew split as 2a leaves it (a scalar gate's times exp(G_last - G)), k by
//   ldmatrix.trans for 2c. Up to dk = 128 BV = 32 and two CTAs fit an SM, one CTA's copies
//   overlapping the other's math; at dk = 256, and at dk = 128 where dv >= 128, BV = 64, one CTA
//   an SM, B HV dv / 64 CTAs (one wave at B8 H4 D256 and B4 H16 D128 on 132 SMs). Every tile of
//   the next chunk is copied as soon as this chunk's 2a has read its own (k by chunk parity), so
//   the chain holds no memory round trip; at dk = 128 with BV = 64 a whole step ahead, at the top
//   of this chunk into a second set by chunk parity (kTopAhead).
//   A vector gate's gated K: copied from the prepare's planes at the top of the chunk, in flight
//   during 2a (kGatedPlanes; with kTopAhead among the set's tiles, a step ahead); at dk = 64
//   (kRawGate) the chunk's G rows and k come with its other tiles and the scan forms the gated
//   operands from them.
//   2b reads only what the scan wrote for its chunk, so it is off the sequential path; it reads
//   h[n]'s hi plane alone (a 2^-9 relative error on the q h term, the size of o's own bf16
//   rounding). Vnew comes from U's place, where the scan writes it in fp32. The residual output u
//   is Vnew rounded to bf16: pass 4 reads it as its Vnew operand (the rounding it would make of an
//   fp32 copy, so no fp32 copy of Vnew outlives the forward).
//
// Backward (CPU: chunk_backward, chunk_backward_local), 4.9 step by step (a vector gate: per
// channel as in the forward; pass 4's pair products by sub-blocks, its dG from 4.10's identity):
//   Passes 1-2 replayed (4.9 step 1): the same kernels, also keeping A and every chunk-start
//   state h[n], writing no outputs. Or skipped: a forward given `kept` wrote A, h[n], W, Aqk and
//   G there with the same kernels (bit-identical, kept_floats(d) x 4 bytes held from forward to
//   backward; see README "Training", delta_keep).
//   Pass 3 (reverse_scan_kernel, the scan's grid, 32 state columns a CTA, 64 at dk = 256 and at
//   dk = 128 with dv >= 128; chunks in reverse; step 3), dS in registers as the forward's h:
//     3a  dh[n] = dS (gradient of chunk n's end state)
//     3b  dVnew = Aqk^T dO + Kg dS + dU                                                (mma)
//     3c  dS <- exp(G_last) dS + scale Qg^T dO - W^T dVnew;  finally dh0 = dS          (mma)
//   The tiles 3b reads last (k, Aqk, G) are copied for the next chunk once 3b is done; those 3c
//   reads (q, W, dO, dU) at the top of a chunk, or a chunk ahead in a second set by chunk parity
//   where shared memory allows (kTopAhead: the scalar gate at dk = 64, and at dk = 128 with 64
//   columns a CTA, where no other CTA on the SM covers the round trip; a vector gate there too,
//   with its gated planes in the sets, the copies issued once 3b is done). Aqk is lower
//   triangular and kept packed (row t in t / 4 + 1 pieces of 4 floats). dh[n] goes out in bf16,
//   rounded once from the fp32 dS.
//   Pass 4 (local_backward_kernel, grid (NT, HV, B), every chunk in parallel; steps 2, 4-8;
//   dk-wide work in blocks of 128 key dims, dv-wide operands in slices of 32 columns: the
//   order below is that of the math, the kernel's phases A-C are listed at the kernel):
//     4a  dQ = scale exp(G) dO h^T,  dW = -dVnew h^T                                    (mma)
//     4b  dK = exp(G_last - G) (Vnew dh^T), kg pair terms, h . dh                       (mma)
//     4c  dAqk = scale dO Vnew^T -> Ps = dAqk exp(G_t - G_s), pair terms dAqk (.) Aqk   (mma)
//     4d  dY = A^T dU -> dv = w dY, dw = v . dY       (GDN-2: dv = w (.) dY, dw = v (.) dY)
//     4e  dA = dU Y^T + dW Ehat^T is dVnew Vnew^T (I + L)^T: U = A Y and W = A Ehat (1d), so
//         Y - Ehat h = (I + L) Vnew (2a), and dU = dVnew, dW = -dVnew h^T (4.9 step 4). So
//     4f  dL = -(A^T dA A^T) = -dY Vnew^T strictly lower -> P2 = dL exp(G_t - G_s), pairs
//         dL (.) L: neither dA nor dW is formed for it                                  (mma)
//     4g  dEhat = A^T dW, dE = exp(G) dEhat + P2 K -> dk += beta dE, dbeta = k . dE    (mma)
//         (GDN-2: dk += b (.) dE, db = k (.) dE per channel)
//     4h  dQ += Ps K,  dK += Ps^T Q + (diag(beta) P2)^T K      (GDN-2: + P2^T E)       (mma)
//     4i  dG per token (row sums, pair rowsum - colsum, last-token terms), reverse cumsum -> dg
//         (none of 4i's terms without a gate: DeltaNet skips them and their K K^T product)
//   Every operand is staged once per slice or block as a bf16 tile (cuda/staged_mma.cuh) and
//   each 16 x 16 fragment is one ldmatrix: q, k, dO, V as loaded; h[n]'s planes, dh[n] and
//   dVnew as stored (bf16); A split once; Ps, P2, diag(beta) P2, dA and X rounded or split as
//   they leave the accumulators. Per-row sums (the gate pair terms, dG, dbeta, dw) come from the
//   accumulators without atomics (WarpTile::add_row_sums, add_col_sums): the backward is
//   deterministic. At dk = dv = 64 (kCompact) every tile is C x 64 and the kernel lays them out
//   as eleven such slots taken by turns, two CTAs an SM.
//   Vector gate: 4c and 4e keep Ps and P2 without their decays (bf16 tiles, the 16 x 16 diagonal
//   blocks also in fp32), and 4g's P2 K and 4h's products run in add_decayed_pairs: the pairs of
//   different 16-token sub-blocks as ldmatrix + mma on K and Q staged once, each token decayed
//   inside its own sub-block to a sub-block boundary (exponents <= 0), the running sum carried
//   across the boundaries in fp32; the pairs inside a 16 x 16 diagonal block in fp32 by Horner's
//   rule over the per-token decays exp(G_{t+1} - G_t), staged once: no exponential a pair. dG
//   comes from 4.10's identity per channel instead of 4i's pair terms (GDN-2: dG = q dQ - k dK +
//   2 e (.) dE, e = b (.) k; E's bf16 tile takes k's once dQ's Ps K is done).
//   GDN-2 keeps KDA's shared-memory layout: b is read from global memory where it enters (for 4g
//   into dG's tile, which it holds until dE is formed), w's value slices sit beside dY's during
//   phase B, and k's tile is
//   loaded again once E's last reader is done. At dk = 256 (kWide) a vector gate's q, k and G
//   tiles hold one 128-wide key block: phase A loads k and G for each of its two blocks, phase C
//   q, k and G, and A again for its second block.
//   dq, dk go out in bf16 from 4h when every key head has one value head (HV == H); else per
//   value head in fp32, then summed over the value heads of a group (recurrence::group_sum).
//
// Precision. Every product runs on mma.m16n8k16 bf16 -> fp32. q, k, v are bf16 already and enter
// exactly; the per-row gate factors are folded into whichever operand is already fp32, so that k,
// q, v stay bf16-exact. In the scans an fp32 operand (W, the state, Vnew, dS, dVnew) is split into
// hi + lo bf16 halves and multiplied as hi*x + lo*x (and hi*lo cross terms when both sides are
// fp32), ~16 mantissa bits: the scans carry fp32 state from chunk to chunk and their errors would
// otherwise grow with T. The workspace keeps U and Aqk in fp32 and W as its two planes: the scan
// forms Vnew = U - W h, a difference of two similar terms, and bf16 W or U would put 2^-9 relative
// errors on each term before that cancellation (and on every later state), a large part of the 5e-3
// output budget; the price is twice their traffic. Pass 4's errors stay inside a chunk (its dh[n]
// comes from the fp32 reverse scan), so it rounds most operands to bf16 once: Vnew (the residual
// output as the forward stored it), dVnew, dW, dY (for dL), Ps, P2, the decayed K, h[n] (the hi
// plane; dQ = dO h^T and a scalar gate's dW = -dVnew h^T and h . dh) and dh[n]; it splits only A
// in dEhat = A^T dW (A = (I + L)^{-1} may have large entries) and a vector gate's h[n] for dW,
// which reaches db and dg through it. dY = A^T dVnew takes A's hi plane alone. dL = -dY Vnew^T
// rounds dY and Vnew where the chain it replaced (dA = dU Y^T + dW Ehat^T split, then A^T dA A^T
// with A split) rounded dW: on the emulator's cases db's relative RMS against fp64 is 1.21x the
// chain's on average (at most 1.64x), dk's 1.07x, dg's 1.06x, all inside the bound below. A
// vector gate's pair products round the decayed K and Q and the pair weights
// Ps, P2 to bf16 once where the two tokens are in different 16-token sub-blocks and sum the pairs
// inside a sub-block in fp32 (at most 16 decay factors multiplied, ~1e-6 relative). The host
// emulator's tests (tests/emu) bound every gradient's relative RMS against the CPU reference by
// 1e-2, the output's by 5e-3.
//
// Memory. Every kernel loads its tiles with cp.async (chunk_mma::load_bf16_rows_async,
// load_f32_rows_async), all of a group in flight at once and waited for once (wait_tiles): one
// memory round trip where a load-then-store loop pays one per iteration (the compiler cannot
// move a load above a store that may alias it). W's planes and the states h[n], dh[n] go out by
// rows from staged tiles, 16 bytes a store (store_w_planes, chunk_mma::store_bf16_rows).
// output_kernel has no chain to hide its loads behind: each thread issues all its pieces of a
// tile at once (stage_f32_rows), and two or three CTAs an SM overlap (one with a vector gate at
// dk = 256).
//
// Shared memory a CTA in KB (bytes(); launch_forward and launch_backward check each against its
// CTAs an SM at compile time) and CTAs an SM (launch bounds), 256 threads a CTA:
//   scalar gate or none, dk \ dv   prepare (64/128/256)   scan and reverse scan (dv 64 / >= 128)
//   64                              54.0 / 62.0 / 78.0     55.2 x2   102.2 x2
//   128                             70.0 / 70.0 / 94.0     97.2 x2 / 172.5 x1, 107.2 x2 / 200.2 x1
//   256                             102.0                  221.2 x1  195.2 x1
//                                   output (every dv)      local backward (dv 64 / 128 / 256)
//   64                              54.2 x3                104.6 x2 (kCompact) / 164.6 / 147.6 x1
//   128                             71.2 x3                216.6 / 216.6 / 168.6 x1
//   256                             105.2 x2               200.6 x1
//   vector gate (KDA; GDN-2 where it differs; GDN-2 at dk = 128, dv = 256 runs the recurrent kernel):
//   64                              95.8 / 103.8 / 119.8   81.0 x2   99.5 x2
//                                   (GDN-2: 120.8 at dv = 128, 152.8 at 256)
//   128                             101.8 / 101.8 / 167.8  97.5 x2 / 207.0 x1  107.0 x2 / 217.0 x1
//   256                             165.8                  222.0 x1  195.5 x1
//                                   output                 local backward (every dv)
//   64 / 128 / 256                  63.2 x3 / 88.2 x2 / 138.2 x1     178.6 / 216.9 / 219.4 (kWide) x1
// Registers a thread (ptxas -v, sm_90a, nvcc 13.0): prepare 61-130; scan 69 / 108-156 / 184 at
// dk = 64 / 128 / 256 (vector gate 100 / 116-168 / 218); output_kernel 76-85 (vector gate 76 / 112 /
// 178); reverse scan 109 / 119-192 / 225 (vector gate 113 / 123-207 / 231); local backward 124
// at dk = dv = 64, else 139-234 (vector gate 150-246). No spills but 4-8 bytes in four vector
// gate prepares (KDA at dk = 64, dv = 128 and at dk = dv = 128; GDN-2 at dk = dv = 128 and 256).
#include "cuda/delta_rule_chunk.cuh"

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "cuda/chunk_mma.cuh"
#include "cuda/common.cuh"
#include "cuda/fast_exp2.cuh"
#include "cuda/mma.cuh"
#include "cuda/recurrence.cuh"
#include "cuda/staged_mma.cuh"

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
  const int32_t* chunk_reset;  // (B, NT) 1 where the state entering a chunk is zero (packed documents), or null
  bf16 *o, *residual;   // (B, T, HV, dv)
  float* final_state;   // (B, HV, dk, dv)
  // workspace, written by pass 1 and read by pass 2
  float* W;             // (B, HV, NT * C, dk) floats: the room of W's planes below; pass 4 writes dW over it
                        // in fp32 (pass 3 reads W last)
  bf16 *W_hi, *W_lo;    // (B, HV, NT * C, dk) each, in W's room: W = A diag(beta exp(G)) K split, hi = W
                        // rounded, lo = W - hi rounded (the scans' operand, staged as it is copied)
  bf16 *Kg_hi, *Kg_lo;  // (B, HV, NT * C, dk) each, a vector gate from dk = 128 on (else null): 2c's and
                        // 3b's K (.) exp(G_last - G) split as W (pass 1 writes it, the scans copy it)
  bf16 *Qg_hi, *Qg_lo;  // the same: 2b's and 3c's scale Q (.) exp(G)
  float* U;             // (B, HV, NT * C, dv); 2a writes Vnew over it for 2b
  float* Aqk;           // (B, HV, NT, C, C)
  float* G;             // (B, HV, NT * C)  in-chunk cumulative gate
  // the backward's (A also a keeping forward's, null in a forward that keeps nothing; h_start
  // every forward's, read by 2b)
  float* A;             // (B, HV, NT, C, C)  (I + L)^{-1}, kept by pass 1
  bf16* h_start;        // (B, HV, NT, dk, dv)  state at the start of each chunk, written by pass 2, rounded to
                        // bf16 (2b's and pass 4's dQ operand)
  bf16* h_start_lo;     // (B, HV, NT, dk, dv)  the rest, h[n] - h_start rounded (a vector gate's pass 4 takes
                        // both for dW; null for a scalar gate)
  bf16* dh_end;         // (B, HV, NT, dk, dv)  gradient of each chunk's END state (pass 3), bf16 as h_start
  bf16* dvnew;          // (B, HV, NT * C, dv)  total gradient of Vnew (pass 3), rounded as pass 4 reads it
  const bf16 *d_o, *d_res;  // (B, T, HV, dv)  gradients of o and of the residual output u
  const float* dht;     // (B, HV, dk, dv) or null  gradient of the final state
  const bf16* vnew;     // (B, T, HV, dv)  the forward's residual output u: Vnew rounded to bf16, as pass 4 reads it
  float* dh0;           // (B, HV, dk, dv) or null
  float *dq, *dk;       // (B, T, HV, dk)  per value head: phase A's parts, then (grouped) dQ, dK to sum
  bf16 *dq_direct, *dk_direct;  // HV == H: (B, T, H, dk), phase C writes dQ, dK there in bf16, else null
  bf16 *dv, *db, *dw;   // (B, T, HV, dv), (B, T, HV), (B, T, HV)
  bf16* dg;             // (B, T, HV) or null (no gate)

  // Whether the state entering chunk `chunk` of sequence bi is zeroed (a packed document starts).
  __device__ bool resets(int bi, int chunk) const {
    return chunk_reset && chunk < NT && chunk_reset[int64_t(bi) * NT + chunk] != 0;
  }
};

__device__ __forceinline__ float bf(bf16 x) { return __bfloat162float(x); }

// The bf16 pair tile[i], tile[i + 1] (i even) as floats (a bf16 is the top half of its float).
__device__ __forceinline__ float2 bf16_pair(const bf16* tile, int i) {
  const uint32_t w = *reinterpret_cast<const uint32_t*>(tile + i);
  return make_float2(__uint_as_float(w << 16), __uint_as_float(w & 0xffff0000u));
}

// use(i, load(i)) for the elements i = threadIdx.x, threadIdx.x + kThreads, .. < COUNT, a thread
// issuing BATCH loads before it uses any: for element-wise reads of global memory (a vector gate's
// g, GDN-2's b and w: no alignment asked of them) whose uses store to shared memory. The compiler
// cannot move a load above a store that may alias it, so a plain loop pays a memory round trip an
// element; this one pays one a batch (the prepare: KDA's forward 2.06 -> 2.00 ms, GDN-2's 3.03 ->
// 2.85 at B4 T4096 H16 D128, H200). The local backward reads b (three times a key block) and w
// (once a value slice) in batches of 4: GDN-2's took 3.05 ms a launch with a plain loop at B4
// T4096 H16 D128 on an H100, 2.63 batched (KDA's, without b and w: 1.72); in batches of 8 an
// earlier version of it had gone 3.32 -> 3.70 ms (H200), the unrolled bodies costing more than
// the round trips they hid. BATCH = 1 is the plain loop, left to the compiler: where the loads
// read shared memory or the round trips are few (the prepare's E loop at dk = 64),
// batches of 4 measured 1-4% slower (B8 T2048 H16 D64, H100).
template <int COUNT, int BATCH, class Load, class Use>
__device__ __forceinline__ void batched_loads(Load&& load, Use&& use) {
  constexpr int kPer = COUNT / kThreads;
  static_assert(COUNT % kThreads == 0 && kPer % BATCH == 0, "whole batches a thread");
  if constexpr (BATCH == 1) {
    for (int i = threadIdx.x; i < COUNT; i += kThreads) use(i, load(i));
  } else {
#pragma unroll 1
    for (int p0 = 0; p0 < kPer; p0 += BATCH) {
      decltype(load(0)) x[BATCH];
#pragma unroll
      for (int p = 0; p < BATCH; p++) x[p] = load(int(threadIdx.x) + (p0 + p) * kThreads);
#pragma unroll
      for (int p = 0; p < BATCH; p++) use(int(threadIdx.x) + (p0 + p) * kThreads, x[p]);
    }
  }
}

template <int M, int N>
using WarpTile = chunk_mma::WarpTile<M, N, kWarps>;
template <int ROWS, int BV>
using StateTile = chunk_mma::StateTile<ROWS, BV, kWarps>;
using chunk_mma::load_bf16_rows_async;
using chunk_mma::load_f32_rows_async;
using chunk_mma::wait_tiles;

// Whether a vector gate's gated operands K (.) exp(G_last - G) and scale Q (.) exp(G) come as
// planes the prepare writes (from dk = 128 on; at dk = 64, kRawGate, the scans form them from
// tiles). Workspace::planes is its host side.
template <int DK, bool VG>
constexpr bool kGatedPlanes = VG && DK > 64;

// A chunk's C rows (from workspace row row0) of a pair of bf16 planes (B, HV, NT * C, DK), hi and
// lo (W's, or the gated K or Q), into two (C, DK + 8) tiles, through cp.async.
template <int DK>
__device__ __forceinline__ void copy_planes(bf16* hi_tile, bf16* lo_tile, const bf16* hi, const bf16* lo,
                                            int64_t row0) {
  load_bf16_rows_async<C, DK>(hi_tile, hi + row0 * DK, DK, C);
  load_bf16_rows_async<C, DK>(lo_tile, lo + row0 * DK, DK, C);
}

// Rows 0 .. ROWS - 1, columns 0 .. W - 1 of a float matrix (rows `stride` floats apart, 16-byte
// aligned) into padded bf16 tiles of row stride W + 8: hi = x rounded, and with SPLIT lo = x - hi
// rounded (hi + lo keeps ~16 mantissa bits); rows n .. ROWS - 1 become zeros. Each thread loads
// all its 16-byte pieces before it stores any (one memory round trip), and hands each fp32 piece
// to piece(row, col, x), which may read it or change it before it is rounded (piece i of the tile
// goes to thread i % kThreads: neighbouring pieces of a row to neighbouring lanes).
template <int ROWS, int W, bool SPLIT, class Fn>
__device__ __forceinline__ void stage_f32_rows(bf16* hi, bf16* lo, const float* src, int64_t stride, int n,
                                               Fn&& piece) {
  constexpr int kPieces = W / 4, kPer = ROWS * kPieces / kThreads;
  static_assert(ROWS * kPieces % kThreads == 0, "whole pieces a thread");
  float4 x[kPer];
#pragma unroll
  for (int p = 0; p < kPer; p++) {
    const int i = threadIdx.x + p * kThreads, r = i / kPieces, c = (i % kPieces) * 4;
    x[p] = r < n ? *reinterpret_cast<const float4*>(src + r * stride + c) : make_float4(0.f, 0.f, 0.f, 0.f);
  }
#pragma unroll
  for (int p = 0; p < kPer; p++) {
    const int i = threadIdx.x + p * kThreads, r = i / kPieces, c = (i % kPieces) * 4;
    piece(r, c, x[p]);
    uint32_t rounded[2], rest[2];  // (rest: the lo halves)
    chunk_mma::split_pair(x[p].x, x[p].y, rounded[0], rest[0]);
    chunk_mma::split_pair(x[p].z, x[p].w, rounded[1], rest[1]);
    uint32_t* hi_pair = reinterpret_cast<uint32_t*>(hi + r * (W + 8) + c);
    hi_pair[0] = rounded[0], hi_pair[1] = rounded[1];
    if constexpr (SPLIT) {
      uint32_t* lo_pair = reinterpret_cast<uint32_t*>(lo + r * (W + 8) + c);
      lo_pair[0] = rest[0], lo_pair[1] = rest[1];
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Pass 1: per chunk, G, L, Aqk, A = (I + L)^{-1}, W, U.

// acc += row r, columns c .. c + 3 of X Y, X and Y 16 x 16 blocks of C-wide fp32 matrices in shared
// memory (rows kLdC floats apart, 16-byte aligned; c a multiple of 4). 1c's block products.
__device__ __forceinline__ void add_block_product_row(float4& acc, const float* X, const float* Y, int r, int c) {
#pragma unroll
  for (int q = 0; q < 4; q++) {
    const float4 x4 = *reinterpret_cast<const float4*>(X + r * kLdC + 4 * q);
    const float x[4] = {x4.x, x4.y, x4.z, x4.w};
#pragma unroll
    for (int u = 0; u < 4; u++) {
      const float4 y = *reinterpret_cast<const float4*>(Y + (4 * q + u) * kLdC + c);
      acc.x += x[u] * y.x, acc.y += x[u] * y.y, acc.z += x[u] * y.z, acc.w += x[u] * y.w;
    }
  }
}

template <int DK, int DV, bool VG, bool VBW = false>
struct PrepareSmem {
  // A vector gate at DK >= 128 with DV <= DK (kLean): the tiles below at their DK = 128 places
  // take 270 KB at DK = 256 (GDN-2 with the b tile it had, 338 KB), and 152 KB at DK = 128, one
  // CTA an SM. So v waits for q's last reader (1b) and takes q's tile, GDN-2's w takes G's once
  // 1d's W is formed, the step decays take G's place (G is read again from the workspace for
  // 1d), and the staged operands of 1b go 16 channels at a time, all in L's and A's places:
  // 101.8 KB at DK = 128, two CTAs an SM (GDN-2 too: it keeps no b tile, see below).
  static constexpr bool kLean = VG && DK >= 128 && DV <= DK;
  // v in q's tile once 1b has read q: kLean, and without a vector gate where v's tile is larger
  // than the lo tile of A diag(col) that then needs a place of its own (64 < dv <= dk; at dk = dv
  // = 256 the prepare took 134 KB without it, one CTA an SM).
  static constexpr bool kVInQ = kLean || (!VG && 64 < DV && DV <= DK);
  static constexpr int kLdK = DK + 8, kLdV = DV + 8;
  static constexpr int kLdG = VG ? DK + 4 : 1;  // G's row stride: a row of DK channels, or one scalar
  bf16 *q, *k, *v;                 // (C, DK + 8), (C, DK + 8), (C, DV + 8)
  float *L, *A;                    // (C, kLdC) strictly lower L, then A = (I + L)^{-1} (kInPlace: over L)
  float* G;                        // (C, kLdG): G[t][d] (vector gate) or G[t]
  float *beta, *colw, *colu;       // (C): beta, W's column scale (beta exp(G); vector gate: beta), w (U's)
  // vector gate only (1b): the decayed operands of the pairs in different 16-token sub-blocks,
  // kCh key channels at a time, split into bf16 hi and lo tiles: e_t, q_t exp(G_t - G_{16 i}) for
  // t in sub-block i, in L's and A's places (free until 1b's products are done); k_s exp(G_{16 i} - G_s)
  // for every s < 16 i, a tile for each i = 1 .. C / 16 - 1 (rows kRefRow0(i) on); then in
  // their place (kLean: after et and qt, and G's place) the step decays exp(G_{t+1} - G_t)
  // inside each sub-block, for its 16 x 16 diagonal block.
  static constexpr int kCh = kLean ? 16 : 32, kLdX = kCh + 8;
  bf16 *et_hi, *et_lo, *qt_hi, *qt_lo;  // (C, kLdX) each
  bf16 *kref_hi, *kref_lo;              // (kRefRows, kLdX) each
  float* estep;                         // (C, kLdG)
  // VBW only: (C, DV + 8) write gate w[t][c]. The erase gate b has no tile: 1b reads each of its
  // elements twice from global memory (the staged rows and the diagonal blocks), and 1d's operand
  // E (.) exp(G) is formed once in G's place. w is read by 1d alone, so it comes late: kLean, into
  // G's place once W is formed; else, when it fits (dv <= dk), into q's place after 1b, else a
  // place of its own.
  bf16* w;
  // No vector gate: 1c forms A in L's place (kInPlace: L's blocks are read before A's take them),
  // and 1d (scaled_A_times) splits A diag(col) into bf16 hi (a place of its own, 9 KB, where L's
  // place held it) and lo (in q's, or with kVInQ a place of its own); then W's hi and lo tiles,
  // staged for 16-byte stores, take k's and q's places. 8 KB less: four CTAs an SM at dk = dv =
  // 64, three at dk = 128, dv <= 128, where three and two fit (GDN's prepare 0.207 -> 0.199 ms a
  // launch at B8 T2048 H16 D64, 0.318 -> 0.288 at B4 T4096 H16 D128, H100).
  static constexpr bool kInPlace = !VG;
  static constexpr int kLdS = C + 8;
  static constexpr int kSplitOwn = VG ? 0 : (kVInQ ? 2 : 1) * C * kLdS;  // bf16 elements of a_hi's (a_lo's) place
  bf16 *a_hi, *a_lo;  // (C, kLdS) each
  static_assert(VG || kLdS <= kLdK, "A's lo tile fits q's place");
  static constexpr bool kWriteGateInQ = !kLean && DV <= DK;
  static constexpr int kRefRow0(int i) { return 8 * i * (i - 1); }  // = 16 (1 + 2 + .. + (i - 1))
  static constexpr int kRefRows = kRefRow0(C / 16);
  static constexpr int kDecays = VG && !kLean ? C * kLdG : 0;  // floats of kref's and estep's place
  static_assert(!VG || (kLean ? (4 * C + 2 * kRefRows) * kLdX <= 2 * 2 * C * kLdC
                              : 4 * C * kLdX <= 2 * 2 * C * kLdC && 2 * kRefRows * kLdX <= 2 * kDecays),
                "the vector gate's staged operands fit the places they take");
  static_assert(!(kLean && VBW) || kLdV <= 2 * kLdG, "w fits in G's place");
  static constexpr size_t bytes() {
    return sizeof(bf16) * (C * (2 * kLdK + (kVInQ ? 0 : kLdV) + (VBW && !kLean && !kWriteGateInQ ? kLdV : 0)) + kSplitOwn) +
           sizeof(float) * ((kInPlace ? 1 : 2) * C * kLdC + C * kLdG + 3 * C + kDecays);
  }
  __device__ explicit PrepareSmem(void* p) {
    q = static_cast<bf16*>(p), k = q + C * kLdK, v = kVInQ ? q : k + C * kLdK;
    L = reinterpret_cast<float*>(k + C * kLdK + (kVInQ ? 0 : C * kLdV)), A = kInPlace ? L : L + C * kLdC;
    G = A + C * kLdC, beta = G + C * kLdG, colw = beta + C, colu = colw + C;
    et_hi = reinterpret_cast<bf16*>(L), et_lo = et_hi + C * kLdX, qt_hi = et_lo + C * kLdX, qt_lo = qt_hi + C * kLdX;
    estep = kLean ? G : colu + C;
    kref_hi = kLean ? qt_lo + C * kLdX : reinterpret_cast<bf16*>(estep), kref_lo = kref_hi + kRefRows * kLdX;
    w = kLean ? reinterpret_cast<bf16*>(G) : kWriteGateInQ ? q : reinterpret_cast<bf16*>(colu + C + kDecays);
    a_hi = reinterpret_cast<bf16*>(colu + C), a_lo = kVInQ ? a_hi + C * kLdS : q;
  }
};

// 1d without a vector gate: A diag(col) X, X a chunk's (C, N) bf16 tile as loaded (rows LDX apart).
// A diag(col) is split once into bf16 hi and lo tiles (a_hi, a_lo: see PrepareSmem), each read by
// ldmatrix against X; a warp's rows of A (lower triangular) reach only the columns up to its last
// row. Starts after a __syncthreads that follows 1c and the last reads of q; ends with one (the
// tiles free again, X's too).
template <int N, int LDX, class Smem>
__device__ __forceinline__ WarpTile<C, N> scaled_A_times(const Smem& sm, const float* col, const bf16* x) {
  using chunk_mma::Padded;
  constexpr int kLdS = Smem::kLdS;
  for (int i = threadIdx.x; i < C * C / 2; i += kThreads) {
    const int r = i / (C / 2), s = i % (C / 2) * 2;
    chunk_mma::split_pair(sm.A[r * kLdC + s] * col[s], sm.A[r * kLdC + s + 1] * col[s + 1],
                          *reinterpret_cast<uint32_t*>(sm.a_hi + r * kLdS + s),
                          *reinterpret_cast<uint32_t*>(sm.a_lo + r * kLdS + s));
  }
  __syncthreads();
  WarpTile<C, N> out;
  chunk_mma::mma_staged(out, Padded<kLdS, false>{sm.a_hi}, Padded<LDX, false>{x}, 0, out.row0 + 16);
  chunk_mma::mma_staged(out, Padded<kLdS, false>{sm.a_lo}, Padded<LDX, false>{x}, 0, out.row0 + 16);
  __syncthreads();
  return out;
}

// 1d's W (a (C, DK) warp tile, fp32) into its bf16 planes hi = W rounded and lo = W - hi rounded
// (rows of DK elements from `hi`, `lo`), staged in shared (C, DK + 8) tiles no warp reads any more
// so that the rows go out in 16-byte pieces (a fragment's pairs would go out as 4-byte stores,
// two planes' worth, and at dk = 256 ncu found the prepare's warps stalled on a full store queue
// most of the time): hi and lo at once where two tiles are free, else (lo_tile null) hi, then lo
// through hi_tile.
template <int DK>
__device__ __forceinline__ void store_w_planes(WarpTile<C, DK> w, bf16* hi_tile, bf16* lo_tile, bf16* hi,
                                               bf16* lo) {
  constexpr int kLd = DK + 8;
  auto stage = [&](bool with_hi, bool with_lo) {
    w.each_pair([&](int r, int d, float x0, float x1, int) {
      uint32_t rounded, rest;
      chunk_mma::split_pair(x0, x1, rounded, rest);
      if (with_hi) *reinterpret_cast<uint32_t*>(hi_tile + r * kLd + d) = rounded;
      if (with_lo) *reinterpret_cast<uint32_t*>((lo_tile ? lo_tile : hi_tile) + r * kLd + d) = rest;
    });
    __syncthreads();
  };
  stage(true, lo_tile != nullptr);
  chunk_mma::store_bf16_rows<C, DK, kLd>(hi, DK, hi_tile);
  if (lo_tile) {
    chunk_mma::store_bf16_rows<C, DK, kLd>(lo, DK, lo_tile);
  } else {
    __syncthreads();  // hi's rows are read: lo takes the tile
    stage(false, true);
    chunk_mma::store_bf16_rows<C, DK, kLd>(lo, DK, hi_tile);
  }
}

// VBW (GDN-2, with VG): the erase gate b (B, T, HV, DK) and the write gate w (B, T, HV, DV) are
// vectors; b enters per channel through the erase keys E = b (.) K (the t side of L's pairs and
// Ehat), w through Y = w (.) V, and beta, w's column scales are 1.
template <int DK, int DV, bool VG, bool VBW = false>
__global__ void __launch_bounds__(kThreads) prepare_kernel(ChunkArgs a) {
  static_assert(!VBW || VG, "GDN-2's vector erase and write gates come with its vector gate");
  extern __shared__ float4 smem_raw[];
  using Smem = PrepareSmem<DK, DV, VG, VBW>;
  const Smem sm(smem_raw);
  constexpr int kLdK = Smem::kLdK, kLdV = Smem::kLdV, kLdG = Smem::kLdG;
  constexpr bool kLean = Smem::kLean;
  const int chunk = blockIdx.x, j = blockIdx.y, bi = blockIdx.z, hq = j / (a.HV / a.H);
  const int t0 = chunk * C, n = min(C, a.T - t0);
  const int64_t head = int64_t(bi) * a.HV + j;  // (b, j) of (B, HV, ..) workspaces
  auto load_v = [&] {
    load_bf16_rows_async<C, DV>(sm.v, a.v + ((int64_t(bi) * a.T + t0) * a.HV + j) * DV, int64_t(a.HV) * DV, n);
  };
  // w[t][c] of (B, T, HV, DV) (GDN-2; no alignment asked of it)
  auto load_w = [&] {
    const int64_t tok = (int64_t(bi) * a.T + t0) * a.HV + j;  // (B, T, HV) index of token t0
    batched_loads<C * DV, 16>([&](int i) {
      const int tt = i / DV;
      return tt < n ? a.w[(tok + int64_t(tt) * a.HV) * DV + i % DV] : __float2bfloat16_rn(0.f);
    }, [&](int i, bf16 x) { sm.w[(i / DV) * kLdV + i % DV] = x; });
  };
  load_bf16_rows_async<C, DK>(sm.q, a.q + ((int64_t(bi) * a.T + t0) * a.H + hq) * DK, int64_t(a.H) * DK, n);
  load_bf16_rows_async<C, DK>(sm.k, a.k + ((int64_t(bi) * a.T + t0) * a.H + hq) * DK, int64_t(a.H) * DK, n);
  if (!Smem::kVInQ) load_v();  // (kVInQ: in q's place once 1b has read q)
  if (threadIdx.x < C) {
    const int tt = threadIdx.x;
    const bool ok = tt < n;
    const int64_t idx = (int64_t(bi) * a.T + t0 + tt) * a.HV + j;  // (B, T, HV)
    sm.beta[tt] = ok ? (VBW ? 1.f : bf(a.b[idx])) : 0.f;
    sm.colu[tt] = ok ? (VBW ? 1.f : bf(a.w[idx])) : 0.f;
    if (!VG) sm.G[tt] = ok && a.g ? bf(a.g[idx]) : 0.f;
  }
  if (VG) {  // g[t][d] of (B, T, HV, DK)
    const bf16* g = a.g + ((int64_t(bi) * a.T + t0) * a.HV + j) * DK;
    batched_loads<C * DK, 16>([&](int i) {
      const int tt = i / DK;
      return tt < n ? bf(g[int64_t(tt) * a.HV * DK + i % DK]) : 0.f;
    }, [&](int i, float x) { sm.G[(i / DK) * kLdG + i % DK] = x; });
  }
  if (VBW && !kLean && !Smem::kWriteGateInQ) load_w();  // (w: see PrepareSmem)
  wait_tiles();
  // 1a: G = inclusive cumsum of g (vector gate: a thread per channel; scalar: warp 0, two tokens a lane).
  if (VG) {
    for (int d = threadIdx.x; d < DK; d += kThreads) {
      float s = 0.f;
      for (int tt = 0; tt < C; tt++) s += sm.G[tt * kLdG + d], sm.G[tt * kLdG + d] = s;
    }
  } else if (threadIdx.x < 32) {
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
    sm.colw[tt] = VG ? sm.beta[tt] : sm.beta[tt] * exp_ftz(sm.G[tt]);  // ehat_t = beta_t k_t exp(G_t)
  }
  // G to its (C, DK or 1) rows of the workspace (B, HV, NT * C, DK or 1) (a pointer formed where it
  // is used: one held from here to 1d made ptxas spill at dk = 64)
  auto G_out = [&] { return a.G + (head * a.NT * C + t0) * (VG ? DK : 1); };
  for (int i = threadIdx.x; i < C * (VG ? DK : 1); i += kThreads)
    G_out()[i] = VG ? sm.G[(i / DK) * kLdG + i % DK] : sm.G[i];
  // The erase key e_t = b_t (.) k_t (GDN-2: b[t][d] of (B, T, HV, DK) from global memory, no
  // alignment asked of it; 0 past n), else k_t (beta enters as a row scale).
  auto e_at = [&](int t, int d) {
    const float erase = VBW && t < n ? bf(a.b[((int64_t(bi) * a.T + t0 + t) * a.HV + j) * DK + d]) : 1.f;
    return erase * bf(sm.k[t * kLdK + d]);
  };
  // 1b: K K^T and Q K^T on tensor cores, then the masks and decays (exponents <= 0 only).
  if constexpr (VG) {
    // Per-channel decays (4.4) by sub-blocks of 16 tokens, every exponent <= 0 (no overflow
    // whatever the gates). A warp's 16-row tile of the (C, C) products is one sub-block i:
    //   1. its pairs with the earlier sub-blocks (s < 16 i) on tensor cores (ldmatrix + mma),
    //      kCh channels at a time: rows e_t, q_t exp(G_t - G_{16 i}) (et, qt), columns k_s
    //      exp(G_{16 i} - G_s) (kref, i's tile), each decayed once and split into hi + lo bf16
    //      tiles (hi*hi + hi*lo + lo*hi: ~16 mantissa bits, as the accessor products had; L
    //      reaches the state through A, W and U);
    //   2. its 16 x 16 diagonal block (s <= t) in fp32, 8 lanes a token t walking s down from t,
    //      the decays carried token by token, exp(G_t - G_s) = exp(G_t - G_{s+1}) exp(G_{s+1} - G_s)
    //      (estep): no exponential a pair.
    using chunk_mma::mma_staged;
    using chunk_mma::Padded;
    constexpr int kCh = Smem::kCh, kLdX = Smem::kLdX;
    auto g = [&](int t, int d) { return sm.G[t * kLdG + d]; };
    auto split_store = [](bf16* hi, bf16* lo, int i, float x0, float x1) {  // pair i, i + 1 (i even)
      chunk_mma::split_pair(x0, x1, *reinterpret_cast<uint32_t*>(hi + i), *reinterpret_cast<uint32_t*>(lo + i));
    };
    WarpTile<C, C> kk, qk;
    const int ref = kk.row0, ib = ref / 16;  // (= qk.row0)
    for (int c0 = 0; c0 < DK; c0 += kCh) {  // 1.
      // (the staging loops kept rolled: see "Registers" above)
#pragma unroll 1
      for (int i = threadIdx.x; i < C * kCh / 2; i += kThreads) {  // channel pairs d, d + 1
        const int t = i / (kCh / 2), c = (i % (kCh / 2)) * 2, d = c0 + c, first = t / 16 * 16;
        const float f0 = exp_ftz(g(t, d) - g(first, d)), f1 = exp_ftz(g(t, d + 1) - g(first, d + 1));
        const float2 q = bf16_pair(sm.q, t * kLdK + d);
        split_store(sm.et_hi, sm.et_lo, t * kLdX + c, e_at(t, d) * f0, e_at(t, d + 1) * f1);
        split_store(sm.qt_hi, sm.qt_lo, t * kLdX + c, q.x * f0, q.y * f1);
      }
      for (int r = 1; r < C / 16; r++) {  // sub-block r's reference token 16 r
        const int row0 = Smem::kRefRow0(r) * kLdX;
#pragma unroll 1
        for (int i = threadIdx.x; i < 16 * r * kCh / 2; i += kThreads) {
          const int s = i / (kCh / 2), c = (i % (kCh / 2)) * 2, d = c0 + c;
          const float2 k = bf16_pair(sm.k, s * kLdK + d);
          split_store(sm.kref_hi, sm.kref_lo, row0 + s * kLdX + c, k.x * exp_ftz(g(16 * r, d) - g(s, d)),
                      k.y * exp_ftz(g(16 * r, d + 1) - g(s, d + 1)));
        }
      }
      __syncthreads();
      if (kk.col0 < ref) {  // columns from ref on (the diagonal block and past it) are left out
        const int row0 = Smem::kRefRow0(ib);  // (k exp(G_ref - G))^T
        const Padded<kLdX, true> kref_hi{sm.kref_hi + row0 * kLdX}, kref_lo{sm.kref_lo + row0 * kLdX};
        const Padded<kLdX, false> et_hi{sm.et_hi}, et_lo{sm.et_lo}, qt_hi{sm.qt_hi}, qt_lo{sm.qt_lo};
        mma_staged(kk, et_hi, kref_hi, 0, kCh, ref), mma_staged(kk, et_hi, kref_lo, 0, kCh, ref);
        mma_staged(kk, et_lo, kref_hi, 0, kCh, ref);
        mma_staged(qk, qt_hi, kref_hi, 0, kCh, ref), mma_staged(qk, qt_hi, kref_lo, 0, kCh, ref);
        mma_staged(qk, qt_lo, kref_hi, 0, kCh, ref);
      }
      __syncthreads();  // the staged tiles are read (after the last: L and the step decays take their places)
    }
    float* aqk = a.Aqk + (head * a.NT + chunk) * C * C;
    kk.each([&](int r, int s, float x, int slot) {
      if (s / 16 == r / 16) return;  // the diagonal block, below
      sm.L[r * kLdC + s] = s < r ? sm.beta[r] * x : 0.f;
      aqk[r * C + s] = s < r ? a.scale * qk.at(slot) : 0.f;
    });
    for (int d = threadIdx.x; d < DK; d += kThreads) {  // a thread a channel, tokens in order (kLean: over G)
      float g_t = g(0, d);
      for (int t = 0; t + 1 < C; t++) {
        const float g_next = g(t + 1, d);
        if (t % 16 != 15) sm.estep[t * kLdG + d] = exp_ftz(g_next - g_t);
        g_t = g_next;
      }
    }
    __syncthreads();
    // 2. Lane `part` of a token's 8 holds its channel pairs d = 2 part + 16 m.
    constexpr int kParts = 8, kPairs = DK / 16;
    for (int i = threadIdx.x; i < C * kParts; i += kThreads) {
      const int t = i / kParts, part = i % kParts, first = t / 16 * 16;
      float2 e[kPairs], q[kPairs], decay[kPairs];
#pragma unroll
      for (int m = 0; m < kPairs; m++) {
        const int d = 2 * part + 16 * m;
        e[m] = make_float2(e_at(t, d), e_at(t, d + 1)), q[m] = bf16_pair(sm.q, t * kLdK + d);
        decay[m] = make_float2(1.f, 1.f);
      }
      // A warp's 4 tokens (t | 3 the last) walk as far as its last one: the same steps for all lanes.
      for (int u = 0; u <= (t | 3) - first; u++) {
        const int s = t - u;
        float kk_ts = 0.f, qk_ts = 0.f;
        if (s >= first) {
#pragma unroll
          for (int m = 0; m < kPairs; m++) {
            const int d = 2 * part + 16 * m;
            if (u > 0) {
              const float2 step = *reinterpret_cast<const float2*>(sm.estep + s * kLdG + d);
              decay[m].x *= step.x, decay[m].y *= step.y;
            }
            const float2 k = bf16_pair(sm.k, s * kLdK + d);
            const float k0 = k.x * decay[m].x, k1 = k.y * decay[m].y;
            kk_ts += e[m].x * k0 + e[m].y * k1, qk_ts += q[m].x * k0 + q[m].y * k1;
          }
        }
#pragma unroll
        for (int off = 1; off < kParts; off <<= 1) {
          kk_ts += __shfl_xor_sync(0xffffffffu, kk_ts, off);
          qk_ts += __shfl_xor_sync(0xffffffffu, qk_ts, off);
        }
        if (part == 0 && s >= first) {
          sm.L[t * kLdC + s] = s < t ? sm.beta[t] * kk_ts : 0.f;
          aqk[t * C + s] = a.scale * qk_ts;
        }
      }
      if (part == 0)
        for (int s = t + 1; s < first + 16; s++) sm.L[t * kLdC + s] = 0.f, aqk[t * C + s] = 0.f;
    }
    // The gated operands of 2b, 2c, 3b and 3c from dk = 128 on, split into bf16 planes as W:
    // K (.) exp(G_last - G) (2c, 3b) and scale Q (.) exp(G) (2b, 3c); G from the workspace.
    // A thread takes 8 channels of a token at a time: 16 bytes of each plane, one store each.
    if constexpr (kGatedPlanes<DK, VG>) {
      struct GateRows {  // G[t][d .. d + 7] and G[C - 1][d .. d + 7]
        float4 g[2], last[2];
      };
      auto token = [](int i) { return i / (DK / 8); };
      auto channel = [](int i) { return i % (DK / 8) * 8; };
      batched_loads<C * DK / 8, 2>([&](int i) {
        const float4* g = reinterpret_cast<const float4*>(G_out() + token(i) * DK + channel(i));
        const float4* last = reinterpret_cast<const float4*>(G_out() + (C - 1) * DK + channel(i));
        return GateRows{{g[0], g[1]}, {last[0], last[1]}};
      }, [&](int i, const GateRows& x) {  // (k, q are 0 past n)
        const int t = token(i), d = channel(i);
        const float g[8] = {x.g[0].x, x.g[0].y, x.g[0].z, x.g[0].w, x.g[1].x, x.g[1].y, x.g[1].z, x.g[1].w};
        const float last[8] = {x.last[0].x, x.last[0].y, x.last[0].z, x.last[0].w,
                               x.last[1].x, x.last[1].y, x.last[1].z, x.last[1].w};
        uint4 kg_hi, kg_lo, qg_hi, qg_lo;
        uint32_t *kh = &kg_hi.x, *kl = &kg_lo.x, *qh = &qg_hi.x, *ql = &qg_lo.x;
#pragma unroll
        for (int p = 0; p < 4; p++) {
          const int e = 2 * p;
          const float2 k = bf16_pair(sm.k, t * kLdK + d + e), q = bf16_pair(sm.q, t * kLdK + d + e);
          chunk_mma::split_pair(k.x * exp_ftz(last[e] - g[e]), k.y * exp_ftz(last[e + 1] - g[e + 1]), kh[p], kl[p]);
          chunk_mma::split_pair(q.x * (a.scale * exp_ftz(g[e])), q.y * (a.scale * exp_ftz(g[e + 1])), qh[p], ql[p]);
        }
        const int64_t at = (head * a.NT * C + t0 + t) * DK + d;
        *reinterpret_cast<uint4*>(a.Kg_hi + at) = kg_hi, *reinterpret_cast<uint4*>(a.Kg_lo + at) = kg_lo;
        *reinterpret_cast<uint4*>(a.Qg_hi + at) = qg_hi, *reinterpret_cast<uint4*>(a.Qg_lo + at) = qg_lo;
      });
    }
    // G is read (the step decays hold what the diagonal blocks need): 1d's operand E (.) exp(G)
    // in its place (kLean: G from the workspace, this CTA's writes above; q is read: v takes its tile).
    if (kLean) {
      __syncthreads();
      load_v();
    }
    // (e, G) at (i / DK, i % DK): kLean reads G from global memory, 4 loads in flight a thread (KDA's
    // forward at B8 T2048 H4 D256 1.73 -> 1.67 ms, H100)
    batched_loads<C * DK, kLean ? 4 : 1>([&](int i) {
      return make_float2(e_at(i / DK, i % DK), kLean ? G_out()[i] : sm.G[(i / DK) * kLdG + i % DK]);
    }, [&](int i, float2 eg) { sm.G[(i / DK) * kLdG + i % DK] = eg.x * exp_ftz(eg.y); });
    if (kLean) wait_tiles();
  } else {  // the tiles as loaded, by ldmatrix (K^T by ldmatrix.trans); each warp's columns past its rows left out
    using chunk_mma::Padded;
    const Padded<kLdK, true> k_cols{sm.k};  // K^T[d][s]
    WarpTile<C, C> kk, qk;
    chunk_mma::mma_staged(kk, Padded<kLdK, false>{sm.k}, k_cols, 0, DK, kk.row0 + 16);
    chunk_mma::mma_staged(qk, Padded<kLdK, false>{sm.q}, k_cols, 0, DK, qk.row0 + 16);
    kk.each([&](int r, int s, float x, int) {
      sm.L[r * kLdC + s] = s < r ? sm.beta[r] * x * exp_ftz(sm.G[r] - sm.G[s]) : 0.f;
    });
    float* aqk = a.Aqk + (head * a.NT + chunk) * C * C;
    qk.each_pair([&](int r, int s, float x0, float x1, int) {
      *reinterpret_cast<float2*>(aqk + r * C + s) = make_float2(s <= r ? a.scale * x0 * exp_ftz(sm.G[r] - sm.G[s]) : 0.f,
                                                                s + 1 <= r ? a.scale * x1 * exp_ftz(sm.G[r] - sm.G[s + 1]) : 0.f);
    });
  }
  __syncthreads();
  if constexpr (VBW && Smem::kWriteGateInQ) load_w();  // q is read (1b done); 1c's sync orders it before 1d
  if constexpr (!VG && Smem::kVInQ) load_v();  // q is read: v takes its tile, in flight during 1c
  // 1c: A = (I + L)^{-1} by 16 x 16 blocks (X_ij: block row i, block column j of X):
  //   (i)   A_ii = (I + L_ii)^{-1}, a lane a column: column c solves (I + L_ii) x = e_c by forward
  //         substitution in registers (16 dependent steps, no synchronisation); A's blocks above
  //         the diagonal are zeroed beside it;
  //   (ii)  N_im = -A_ii L_im (i > m), into L's block (m, i) above the diagonal (zeros nobody reads);
  //   (iii) A_ij = sum_{j <= m < i} N_im A_mj (from (I + L_ii) A_ij + sum_{j <= m < i} L_im A_mj = 0),
  //         diagonal by diagonal, i - j = 1, 2, 3, each reading the ones before.
  //   (ii) and (iii) give a thread a row of 4 columns of an output block. Rows past the end of the
  //   sequence (zero L rows) come out as identity rows. In place (kInPlace, A over L): A_ii takes
  //   L_ii's place once (i) has read it, A_ij (i > j) L_ij's once (ii) has, and the N blocks above
  //   the diagonal become A's zeros once (iii) is done.
  {
    auto blk = [](float* X, int i, int j) { return X + 16 * (i * kLdC + j); };
    const int b = threadIdx.x / 16, c = threadIdx.x % 16;
    float x[16];
    if (threadIdx.x < C) {  // (i)
      const float* l = blk(sm.L, b, b);
#pragma unroll
      for (int i = 0; i < 16; i++) {
        float s = 0.f;
#pragma unroll
        for (int q = 0; 4 * q < i; q++) {
          const float4 l4 = *reinterpret_cast<const float4*>(l + i * kLdC + 4 * q);
          const float lq[4] = {l4.x, l4.y, l4.z, l4.w};
#pragma unroll
          for (int u = 0; u < 4 && 4 * q + u < i; u++) s += lq[u] * x[4 * q + u];
        }
        x[i] = i == c ? 1.f : i > c ? -s : 0.f;
      }
    }
    if (Smem::kInPlace) __syncthreads();  // L_ii is read
    if (threadIdx.x < C) {
#pragma unroll
      for (int i = 0; i < 16; i++) blk(sm.A, b, b)[i * kLdC + c] = x[i];
    }
    auto zero_above_diagonal = [&] {  // A's blocks above the diagonal
      for (int p = threadIdx.x; p < C * C / 4; p += kThreads) {
        const int r = p / (C / 4), c = p % (C / 4) * 4;
        if (c / 16 > r / 16) *reinterpret_cast<float4*>(sm.A + r * kLdC + c) = make_float4(0.f, 0.f, 0.f, 0.f);
      }
    };
    if (!Smem::kInPlace) zero_above_diagonal();
    __syncthreads();
    for (int p = threadIdx.x; p < 6 * 64; p += kThreads) {  // (ii): (i, m) = (1, 0), (2, 0), (2, 1), (3, 0), ..
      const int o = p / 64, i = o < 1 ? 1 : o < 3 ? 2 : 3, m = o - i * (i - 1) / 2, r = p % 64 / 4, c = p % 4 * 4;
      float4 n = make_float4(0.f, 0.f, 0.f, 0.f);
      add_block_product_row(n, blk(sm.A, i, i), blk(sm.L, i, m), r, c);
      *reinterpret_cast<float4*>(blk(sm.L, m, i) + r * kLdC + c) = make_float4(-n.x, -n.y, -n.z, -n.w);
    }
    for (int d = 1; d < 4; d++) {  // (iii)
      __syncthreads();
      for (int p = threadIdx.x; p < (4 - d) * 64; p += kThreads) {
        const int j = p / 64, i = j + d, r = p % 64 / 4, c = p % 4 * 4;
        float4 sum = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int m = j; m < i; m++) add_block_product_row(sum, blk(sm.L, m, i), blk(sm.A, m, j), r, c);
        *reinterpret_cast<float4*>(blk(sm.A, i, j) + r * kLdC + c) = sum;
      }
    }
    if (Smem::kInPlace) {
      __syncthreads();  // the N blocks are read
      zero_above_diagonal();
    }
  }
  __syncthreads();
  if (a.A) {  // the backward keeps A (4.9 step 1)
    float* A = a.A + (head * a.NT + chunk) * C * C;
    for (int i = threadIdx.x; i < C * C / 4; i += kThreads)
      reinterpret_cast<float4*>(A)[i] = *reinterpret_cast<const float4*>(sm.A + (i / (C / 4)) * kLdC + i % (C / 4) * 4);
  }
  // 1d: W = A diag(beta exp(G)) K and U = A diag(w) V (fp32 A with its column scale split; a
  //     vector gate's exp(G) scales K per channel, an fp32 operand then; GDN-2: W = A (E (.) exp(G)),
  //     U = A (w (.) V), per channel). Without a vector gate K and V enter as loaded (scaled_A_times).
  //     W's planes go out through k's tile (store_w_planes; no longer read): without a vector gate
  //     U comes first, v's tile (kVInQ q's) is free after it, and W's lo takes q's tile beside
  //     hi in k's; with one, hi and then lo through k's tile (q's may hold v or w, which U reads
  //     after W). GDN's prepare (with kVInQ) went 0.231 -> 0.156 ms a launch at B8 T2048 H4 D256,
  //     0.382 -> 0.320 at B4 T4096 H16 D128, 0.238 -> 0.203 at B8 T2048 H16 D64 (H100).
  const int64_t w0 = (head * a.NT * C + t0) * DK;
  if constexpr (!VG) {
    if (Smem::kVInQ) wait_tiles();
    scaled_A_times<DV, kLdV>(sm, sm.colu, sm.v).each_pair([&](int r, int c, float x0, float x1, int) {
      *reinterpret_cast<float2*>(a.U + (head * a.NT * C + t0 + r) * DV + c) = make_float2(x0, x1);
    });
    store_w_planes<DK>(scaled_A_times<DK, kLdK>(sm, sm.colw, sm.k), sm.k, sm.q, a.W_hi + w0, a.W_lo + w0);
  } else {
    {
      WarpTile<C, DK> wt;
      wt.mma<C, true, true>([&](int r, int s) { return sm.A[r * kLdC + s] * sm.colw[s]; },
                            [&](int s, int d) { return sm.G[s * kLdG + d]; });  // sm.G holds E (.) exp(G)
      store_w_planes<DK>(wt, sm.k, nullptr, a.W_hi + w0, a.W_lo + w0);
    }
    if (kLean && VBW) {  // E (.) exp(G) is read: w takes its place
      __syncthreads();
      load_w();
      __syncthreads();
    }
    {
      WarpTile<C, DV> ut;
      ut.mma<C, true, VBW>([&](int r, int s) { return sm.A[r * kLdC + s] * sm.colu[s]; }, [&](int s, int c) {
        return VBW ? bf(sm.w[s * kLdV + c]) * bf(sm.v[s * kLdV + c]) : bf(sm.v[s * kLdV + c]);
      });
      float* U = a.U + (head * a.NT * C + t0) * DV;
      ut.each_pair([&](int r, int c, float x0, float x1, int) { *reinterpret_cast<float2*>(U + r * DV + c) = make_float2(x0, x1); });
    }
  }
}

// hi, lo (C, DK) tiles, rows LDX apart <- x[t][d] factor(d, G[t][d]) split, from a chunk's tiles
// in shared memory: x (C, DK) bf16 rows LDX apart, G (C, DK) fp32 rows LDG apart (kRawGate: the
// scans' K (.) exp(G_last - G) and scale Q (.) exp(G) at dk = 64, with no memory round trip).
template <int DK, int LDX, int LDG, class Factor>
__device__ __forceinline__ void stage_gated_tiles(bf16* hi, bf16* lo, const bf16* x, const float* G, Factor&& factor) {
  for (int i = threadIdx.x; i < C * DK / 2; i += kThreads) {  // channel pairs d, d + 1
    const int t = i / (DK / 2), d = (i % (DK / 2)) * 2;
    const float2 x2 = bf16_pair(x, t * LDX + d);
    const float* g = G + t * LDG + d;
    chunk_mma::split_pair(x2.x * factor(d, g[0]), x2.y * factor(d + 1, g[1]), *reinterpret_cast<uint32_t*>(hi + t * LDX + d),
                          *reinterpret_cast<uint32_t*>(lo + t * LDX + d));
  }
}

// ---------------------------------------------------------------------------------------------
// The scans (passes 2 and 3): per (b, j, BV columns of dv), sequential over chunks.

// The reverse scan's shared memory (reverse_scan_kernel). The gradient dS of the state's BV
// columns is in registers (StateTile); here are the chunk's operands as bf16 tiles read by
// ldmatrix: q and k (a vector gate: 3b's K (.) exp(G_last - G), then 3c's scale Q (.) exp(G),
// split, copied from the prepare's planes (kRawGate: formed from tiles), in their places), W's hi
// and lo planes,
// dS split for 3b (then -dVnew split for 3c, in its place; at DK = 256 one 128-row half of dS at a
// time), dO and dU (then the scalar gate's scale exp(G) dO split, in their places), and in fp32
// Aqk's packed rows and G (scalar gate: the chunk's, with exp(G) and exp(G_last - G); vector gate:
// G_last's row). 64 state columns a CTA where DK = 256 or DK = 128 with DV >= 128 (one CTA an
// SM: B HV DV / 64 CTAs, one wave at B8 H4 D256 and at B4 H16 D128 on 132 SMs; 195 KB, and at
// DK = 128 200 / 217 KB with a scalar / vector gate's tiles of kTopAhead), else 32 (two an SM; 107 KB
// at DK = 128; at 64 102 / 99.5 KB, scalar / vector gate, with the tiles of kTopAhead / kRawGate
// below).
template <int DK, int DV, bool VG>
struct ReverseScanSmem {
  static constexpr int BV = DK > 128 || (DK == 128 && DV >= 128) ? 64 : 32;
  static constexpr int kCtasPerSm = BV == 64 ? 1 : 2;  // launch bounds
  static constexpr int kRows = DK < 128 ? DK : 128;  // dS rows staged at a time (3b's K dS by halves at DK = 256)
  // A vector gate at DK = 64 (kRawGate, as the forward's) forms its gated operands from the
  // chunk's G rows, k and q, copied into tiles of their own with the chunk's q, W, dO and dU
  // (100 KB; from the workspace's G and global k, q, two more round trips a chunk, KDA's reverse
  // scan took 0.38 ms at B8 T2048 H16 D64 where the state in shared memory took 0.35, H100).
  static constexpr bool kRawGate = VG && DK == 64;
  // The scalar gate at DK = 64, and at DK = 128 with 64 columns (kTopAhead), keeps two sets of the
  // tiles 3c reads (q, W, dO, dU) by chunk parity and copies the next chunk's at the top of this
  // one, a chunk ahead (102 KB, two CTAs an SM; 200 KB, one CTA an SM, where no other CTA's
  // products cover a round trip: fwd+bwd at B4 T4096 H16 D128, H100, DeltaNet 2.445 -> 2.380 ms,
  // GDN 2.549 -> 2.499); elsewhere they are copied at the top of their own chunk, one round trip
  // a chunk.
  // A vector gate at DK = 128 with 64 columns keeps two sets too (kVgAhead), its gated planes
  // among each set's tiles (below).
  static constexpr bool kVgAhead = VG && DK == 128 && BV == 64;
  static constexpr bool kTopAhead = (!VG && (DK == 64 || (DK == 128 && BV == 64))) || kVgAhead;
  // A vector gate from DK = 128 on copies its gated operands from the prepare's planes into kd_hi,
  // kd_lo: 3b's K (.) exp(G_last - G) with the tiles 3c reads, at the chunk's top (kVgAhead: a
  // chunk ahead, into the other set); 3c's scale Q (.) exp(G) once 3b has read that, waited for
  // just before 3c (a copy group of its own; so kVgAhead issues the next chunk's tiles after it,
  // in flight during -dVnew's split and 3c rather than the whole chunk).
  static constexpr bool kGatedPlanes = delta_chunk::kGatedPlanes<DK, VG>;
  static constexpr int kLdK = DK + 8, kLdO = BV + 8, kLdG = DK + 4;
  // bf16 of a set of q (a vector gate's kd_hi), W_hi, W_lo, dO, dU (kVgAhead: and kd_lo)
  static constexpr int kTop = (kVgAhead ? 4 : 3) * C * kLdK + 2 * C * kLdO;
  static constexpr int kTiles = kRawGate ? 3 : kVgAhead ? 0 : 1;  // (C, kLdK) tiles besides the sets
  // G_last's row (kRawGate: G's rows), or G, exp(G), exp(G_last - G)
  static constexpr int kG = kRawGate ? C * kLdG : VG ? DK : 3 * C;
  // Aqk is lower triangular (s <= t): its rows are stored packed, row t at aqk_row(t), in the
  // t / 4 + 1 pieces of 4 floats that hold s = 0 .. t (kAqk floats in all, half a full tile).
  static constexpr int kAqk = 4 * (C + 2 * (C / 4) * (C / 4 - 1));
  float* aqk;          // (kAqk) packed rows
  float* G;            // (DK) G_last (kRawGate: (C, kLdG) G rows), or (C) G followed by expG, kdecay (C each)
  float *g_last, *expG, *kdecay;
  // The tiles 3c reads, copied at a chunk's top (kTopAhead: one set by chunk parity): q (C,
  // kLdK), W's planes (C, kLdK), dO and dU (C, kLdO; the scalar gate's scale exp(G) dO split in
  // their places: dog_hi over dU, dog_lo over dO); a vector gate's gated planes kd_hi (in q's
  // place) and kd_lo (k's tile; kVgAhead: the set's last tile), 3b's Kg then 3c's Qg
  struct TopTiles {
    bf16 *q, *W_hi, *W_lo, *dov, *dres, *kd_hi, *kd_lo;
  };
  bf16* top0;          // the first set (q, W_hi, W_lo, dov, dres[, kd_lo] in that order), the second kTop after it
  bf16* k;             // (C, kLdK) the scalar gate's k; else a vector gate's kd_lo (none with kVgAhead)
  bf16 *q_raw, *k_raw;  // (C, kLdK) kRawGate: the chunk's q and k
  bf16 *ds_hi, *ds_lo;  // (kRows, kLdO): dS split
  bf16 *dvn_hi, *dvn_lo;  // (C, kLdO): -dVnew split, in ds_hi's place
  static constexpr size_t bytes() {
    return sizeof(float) * (kAqk + kG) +
           sizeof(bf16) * ((kTopAhead ? 2 : 1) * kTop + kTiles * C * kLdK + 2 * kRows * kLdO);
  }
  static_assert((kAqk + kG) % 4 == 0 && kRows >= C, "16-byte aligned tiles; -dVnew fits in dS's place");
  __device__ explicit ReverseScanSmem(void* p) {
    aqk = static_cast<float*>(p), G = aqk + kAqk;
    expG = VG ? nullptr : G + C, kdecay = VG ? nullptr : G + 2 * C;
    g_last = kRawGate ? G + (C - 1) * kLdG : G;
    top0 = reinterpret_cast<bf16*>(G + kG), k = top0 + (kTopAhead ? 2 : 1) * kTop;
    ds_hi = k + (kTiles > 0 ? C * kLdK : 0), ds_lo = ds_hi + kRows * kLdO, dvn_hi = ds_hi, dvn_lo = ds_hi + C * kLdO;
    q_raw = kRawGate ? ds_lo + kRows * kLdO : nullptr, k_raw = kRawGate ? q_raw + C * kLdK : nullptr;
  }
  // chunk's set of the tiles 3c reads
  __device__ TopTiles top(int chunk) const {
    bf16* q = top0 + (kTopAhead && (chunk & 1) ? kTop : 0);
    bf16* W_hi = q + C * kLdK;
    bf16* dov = W_hi + 2 * C * kLdK;
    bf16* dres = dov + C * kLdO;
    return {q, W_hi, W_hi + C * kLdK, dov, dres, q, kVgAhead ? dres + C * kLdO : k};
  }
  __device__ static int aqk_row(int t) {
    const int a = t / 4, b = t % 4;  // pieces before row t: sum over i < t of (i / 4 + 1)
    return 4 * (t + 2 * a * (a - 1) + a * b);
  }
  // Aqk[t][s] (0 above the diagonal).
  __device__ float aqk_at(int t, int s) const { return s <= t ? aqk[aqk_row(t) + s] : 0.f; }
  // The packed lower triangle of chunk `chunk`'s (C, C) Aqk in the workspace, through cp.async.
  __device__ void copy_aqk(const float* src) const {
    for (int i = threadIdx.x; i < C * C / 4; i += kThreads) {
      const int t = i / (C / 4), c = (i % (C / 4)) * 4;
      if (c <= t) cp_async_16(aqk + aqk_row(t) + c, src + t * C + c, true);
    }
  }
  // rows d0 .. d0 + kRows - 1, columns v0 .. v0 + BV - 1 of dh[n] (bf16: dS rounded, the staged
  // hi tile) <- ds_hi, 16-byte pieces
  __device__ void store_rounded(bf16* dst, int d0, int v0) const {
    chunk_mma::store_bf16_rows<kRows, BV, kLdO>(dst + d0 * DV + v0, DV, ds_hi);
  }
};

// Where a scan CTA's chunk tiles start: per (b, value head j) and key width DK.
template <int DK>
struct ScanTiles {
  int T, NT, bi;
  int64_t head, qk0, qk_stride;  // (b, j) of the (B, HV, ..) workspaces; q / k head hq's token 0; row stride
  __device__ ScanTiles(const ChunkArgs& a, int bi_, int j)
      : T(a.T), NT(a.NT), bi(bi_), head(int64_t(bi_) * a.HV + j),
        qk0((int64_t(bi_) * a.T * a.H + j / (a.HV / a.H)) * DK), qk_stride(int64_t(a.H) * DK) {}
  __device__ int rows(int chunk) const { return min(C, T - chunk * C); }            // valid tokens
  __device__ int64_t row0(int chunk) const { return head * NT * C + chunk * C; }    // first workspace row
  __device__ const bf16* qk(const bf16* x, int chunk) const { return x + qk0 + chunk * C * qk_stride; }
};

// The forward scan's shared memory (scan_kernel). The state's BV columns are in registers
// (StateTile); here are the chunk's operands as bf16 tiles read by ldmatrix: W's hi and lo
// planes as prepare_kernel stored them, k by chunk parity (the next chunk's lands while this
// chunk's 2c reads its own; a vector gate: K (.) exp(G_last - G) split, in the two k tiles'
// place), the state split for 2a (then Vnew split for 2c, in its place), U (fp32) and G (scalar
// gate: the chunk's; vector gate: G_last's row). A vector gate's K (.) exp(G_last - G): at
// DK = 64 (kRawGate) staged at the top of a chunk from the chunk's G rows and k, copied into
// tiles of their own with the chunk's other tiles during the previous chunk's 2c; from DK = 128
// on (no room for those at two CTAs an SM) copied from the prepare's planes (kGatedPlanes) at the
// top of the chunk, a copy group of its own waited for before 2c (staged from the workspace's
// G and global k there, a memory round trip in the chain, it took KDA's forward scan 0.71 ms a
// launch at B4 T4096 H16 D128 on an H100, GDN's 0.44; at DK = 64 the same had taken KDA's
// forward from 0.873 to 0.968 ms at B8 T2048 H16).
// At DK = 256 the 64 columns of a CTA take 222 KB (one CTA an SM, B HV DV / 64 CTAs: one wave at
// B8 H4 D256 on 132 SMs), at DK = 64 55.3 KB (81.3 with kRawGate; two an SM), at DK = 128 the 32
// columns 97.5 KB (two an SM), or where DV >= 128 64 columns as the reverse scan's (one CTA an SM,
// one wave at B4 H16 D128). There no other CTA's products cover a copy, so (kTopAhead) the CTA
// keeps two sets of W's planes, U and G by chunk parity, as k's (a vector gate: and its gated K's
// planes, kVgAhead), and copies the next chunk's at the top of this one, a whole step ahead
// (172.5 KB; 207 KB with a vector gate), where copies issued once 2a has read this chunk's have
// only Vnew's staging and 2c to hide behind.
template <int DK, int DV, bool VG>
struct ForwardScanSmem {
  static constexpr int BV = DK > 128 || (DK == 128 && DV >= 128) ? 64 : 32;
  static constexpr int kCtasPerSm = BV == 64 ? 1 : 2;  // launch bounds
  static constexpr bool kRawGate = VG && DK == 64;
  static constexpr bool kTopAhead = DK == 128 && BV == 64;
  static constexpr int kSets = kTopAhead ? 2 : 1;  // sets of W's planes, U and G (and a vector gate's Kg)
  static constexpr bool kGatedPlanes = delta_chunk::kGatedPlanes<DK, VG>;  // kd_hi, kd_lo copied from planes
  static constexpr bool kVgAhead = VG && kTopAhead;  // Kg's planes in the sets too
  static constexpr int kLdK = DK + 8, kLdS = BV + 8, kLdU = BV + 4, kLdG = DK + 4;
  static constexpr int kG = kRawGate ? C * kLdG : VG ? DK : C;
  // a chunk's W planes, U and G (by chunk parity with kTopAhead), and a vector gate's gated K
  struct ChunkTiles {
    float* U;           // (C, kLdU)
    float* G;           // (kG): a scalar gate's G, a vector gate's G_last; kRawGate: (C, kLdG) G rows
    float* g_last;      // (DK) a vector gate's G_last (kRawGate: G's last row)
    bf16 *W_hi, *W_lo;  // (C, kLdK)
    bf16 *kd_hi, *kd_lo;  // (C, kLdK) a vector gate's K (.) exp(G_last - G) split, in k's tiles (kVgAhead: the set's)
  };
  ChunkTiles even, odd;  // (odd = even without kTopAhead)
  bf16* k_raw;        // (C, kLdK) kRawGate: the chunk's k
  bf16* k[2];         // (C, kLdK): a scalar gate's k by chunk parity
  bf16 *s_hi, *s_lo;  // (DK, kLdS): the state split
  bf16 *vn_hi, *vn_lo;  // (C, kLdS): Vnew (a scalar gate: Vnew (.) exp(G_last - G)) split, in s_hi's place on
  static constexpr size_t bytes() {
    return sizeof(float) * kSets * (C * kLdU + kG) +
           sizeof(bf16) * ((2 * kSets + (kVgAhead ? 4 : 2) + (kRawGate ? 1 : 0)) * C * kLdK + 2 * DK * kLdS);
  }
  static_assert((C * kLdU + kG) % 4 == 0, "the bf16 tiles start 16-byte aligned");
  __device__ explicit ForwardScanSmem(void* p) {
    float* f = static_cast<float*>(p);  // floats: the sets' U and G; bf16: the sets' W planes, then the rest
    even.U = f, even.G = f + C * kLdU;
    odd.U = kTopAhead ? even.G + kG : even.U, odd.G = kTopAhead ? odd.U + C * kLdU : even.G;
    even.g_last = kRawGate ? even.G + (C - 1) * kLdG : even.G, odd.g_last = kRawGate ? even.g_last : odd.G;
    even.W_hi = reinterpret_cast<bf16*>(f + kSets * (C * kLdU + kG)), even.W_lo = even.W_hi + C * kLdK;
    odd.W_hi = kTopAhead ? even.W_lo + C * kLdK : even.W_hi, odd.W_lo = kTopAhead ? odd.W_hi + C * kLdK : even.W_lo;
    k[0] = even.W_hi + 2 * kSets * C * kLdK, k[1] = k[0] + C * kLdK;
    even.kd_hi = k[0], even.kd_lo = k[1];
    odd.kd_hi = kVgAhead ? k[1] + C * kLdK : k[0], odd.kd_lo = kVgAhead ? odd.kd_hi + C * kLdK : k[1];
    s_hi = (kVgAhead ? odd.kd_lo : k[1]) + C * kLdK, s_lo = s_hi + DK * kLdS;
    vn_hi = s_hi, vn_lo = s_hi + C * kLdS;  // (2 C <= 2 DK rows: within s_hi, s_lo)
    k_raw = kRawGate ? s_lo + DK * kLdS : nullptr;
  }
  // (a select, not k[chunk & 1]: an indexed member array would put the struct in local memory)
  __device__ bf16* k_tile(int chunk) const { return chunk & 1 ? k[1] : k[0]; }
  __device__ ChunkTiles chunk_tiles(int chunk) const { return chunk & 1 ? odd : even; }
  // columns v0 .. v0 + BV - 1 of h[n]'s hi plane (and lo plane where given) <- the staged split
  // state, 16-byte pieces
  __device__ void store_state(bf16* hi, bf16* lo, int v0) const {
    chunk_mma::store_bf16_rows<DK, BV, kLdS>(hi + v0, DV, s_hi);
    if (lo) chunk_mma::store_bf16_rows<DK, BV, kLdS>(lo + v0, DV, s_lo);
  }
};

// Forward pass 2 (and the backward's replay of it): 2a and 2c, chunk after chunk, the state h in
// registers, writing every chunk-start state h[n] and (with an output) Vnew for output_kernel's
// 2b. A chunk's steps: h split into staged tiles (and stored from them as h[n]'s planes); 2a's
// W h on W's planes and h's (three products: hi hi, hi lo, lo hi); every tile of the next chunk
// copied (cp.async) once 2a has read this chunk's (kTopAhead: at the top, into the other parity's
// tiles); Vnew split in the state's place; 2c's K^T Vnew into the registers. The copies are in
// flight during Vnew's staging and 2c (a vector gate's K (.) exp(G_last - G) from dk = 128 on,
// copied at the top of the chunk, during 2a; kTopAhead's during the whole chunk), so the
// sequential chain holds no memory round trip.
template <int DK, int DV, bool VG>
__global__ void __launch_bounds__(kThreads, (ForwardScanSmem<DK, DV, VG>::kCtasPerSm)) scan_kernel(ChunkArgs a) {
  extern __shared__ float4 smem_raw[];
  using Smem = ForwardScanSmem<DK, DV, VG>;
  using chunk_mma::mma_staged;
  using chunk_mma::Padded;
  const Smem sm(smem_raw);
  constexpr int BV = Smem::BV, kLdK = Smem::kLdK, kLdS = Smem::kLdS, kLdU = Smem::kLdU;
  const int v0 = blockIdx.x * BV, j = blockIdx.y, bi = blockIdx.z;
  const int64_t head = int64_t(bi) * a.HV + j;
  const ScanTiles<DK> tiles(a, bi, j);
  auto copy_chunk = [&](int chunk) {  // W's planes, U, G; a scalar gate's k (kRawGate's too); kVgAhead's Kg
    const int64_t row0 = tiles.row0(chunk);
    const typename Smem::ChunkTiles to = sm.chunk_tiles(chunk);
    copy_planes<DK>(to.W_hi, to.W_lo, a.W_hi, a.W_lo, row0);
    if (Smem::kVgAhead) copy_planes<DK>(to.kd_hi, to.kd_lo, a.Kg_hi, a.Kg_lo, row0);
    load_f32_rows_async<C, BV>(to.U, kLdU, a.U + row0 * DV + v0, DV);
    if (Smem::kRawGate) {
      load_f32_rows_async<C, DK>(to.G, Smem::kLdG, a.G + row0 * DK, DK);
      load_bf16_rows_async<C, DK>(sm.k_raw, tiles.qk(a.k, chunk), tiles.qk_stride, tiles.rows(chunk));
    } else if (VG) {
      load_f32_rows_async<1, DK>(to.G, DK, a.G + (row0 + C - 1) * DK, DK);  // G_last's row
    } else {
      load_f32_rows_async<1, C>(to.G, C, a.G + row0, 0);
      load_bf16_rows_async<C, DK>(sm.k_tile(chunk), tiles.qk(a.k, chunk), tiles.qk_stride, tiles.rows(chunk));
    }
  };
  StateTile<DK, BV> h;
  h.load(a.h0 ? a.h0 + head * DK * DV : nullptr, v0, DV);
  copy_chunk(0);
  for (int chunk = 0; chunk < a.NT; chunk++) {
    const int t0 = chunk * C, n = tiles.rows(chunk);
    const int64_t row0 = tiles.row0(chunk);  // first workspace row of the chunk
    const bool reset = a.resets(bi, chunk);  // a document starts here: from h = 0 (read before the wait)
    wait_tiles();  // this chunk's tiles; the previous chunk's reads of Vnew's and k's tiles are done
    // kTopAhead: the next chunk's tiles into the other parity's, free since the previous chunk's 2c
    if (Smem::kTopAhead && chunk + 1 < a.NT) copy_chunk(chunk + 1);
    const typename Smem::ChunkTiles ct = sm.chunk_tiles(chunk);
    if constexpr (Smem::kGatedPlanes && !Smem::kVgAhead) {  // 2c's K (.) exp(G_last - G), a copy group of its
      copy_planes<DK>(ct.kd_hi, ct.kd_lo, a.Kg_hi, a.Kg_lo, row0);  // own, waited for before 2c: in flight during 2a
      cp_async_commit();
    }
    if (reset) h.load(nullptr, v0, DV);
    h.template stage<kLdS>(sm.s_hi, sm.s_lo);
    if constexpr (Smem::kRawGate) {  // 2c's K (.) exp(G_last - G), split, from the chunk's tiles
      stage_gated_tiles<DK, kLdK, Smem::kLdG>(ct.kd_hi, ct.kd_lo, sm.k_raw, ct.G,
                                              [&](int d, float g_s) { return exp_ftz(ct.g_last[d] - g_s); });
    }
    __syncthreads();  // the state's split is staged
    // every chunk-start state h[n], for 2b (output_kernel) and the backward (4.9 step 1); no lo
    // plane: no backward follows
    const int64_t state = (head * a.NT + chunk) * DK * DV;
    sm.store_state(a.h_start + state, a.h_start_lo ? a.h_start_lo + state : nullptr, v0);
    // 2a: Vnew = U - W h (rows past n are 0 - 0 h = 0); for 2b also in a.U's place (the chunk's
    //     U is read)
    WarpTile<C, BV> wh;
    {
      const Padded<kLdK, false> W_hi{ct.W_hi}, W_lo{ct.W_lo};
      const Padded<kLdS, false> s_hi{sm.s_hi}, s_lo{sm.s_lo};
#pragma unroll 1
      for (int d0 = 0; d0 < DK; d0 += 64)  // (rolled blocks of 64 key dims: unrolled, dk = 256 spilled 104-152 bytes)
        mma_staged(wh, W_hi, s_hi, d0, d0 + 64), mma_staged(wh, W_hi, s_lo, d0, d0 + 64), mma_staged(wh, W_lo, s_hi, d0, d0 + 64);
    }
    wh.each_pair([&](int r, int c, float& x0, float& x1, int) {  // x0, x1 <- 2c's operands
      const float2 u = make_float2(ct.U[r * kLdU + c] - x0, ct.U[r * kLdU + c + 1] - x1);
      if (r < n && a.residual) {  // the backward's replay (4.9 step 1) writes no outputs
        const int64_t idx = ((int64_t(bi) * a.T + t0 + r) * a.HV + j) * DV + v0 + c;  // (B, T, HV, dv)
        *reinterpret_cast<uint32_t*>(a.residual + idx) = pack_bf16(u.x, u.y);
      }
      if (a.o) *reinterpret_cast<float2*>(a.U + (row0 + r) * DV + v0 + c) = u;
      const float decay = VG ? 1.f : exp_ftz(ct.G[C - 1] - ct.G[r]);  // G_last = G[C - 1]: g = 0 past n
      x0 = u.x * decay, x1 = u.y * decay;
    });
    // 2c's decay of the state's rows: exp(G_last) (a vector gate's per channel; exponents <= 0)
    const float glast = VG ? 0.f : ct.G[C - 1];
    h.scale([&](int d) { return exp_ftz(VG ? ct.g_last[d] : glast); });
    __syncthreads();  // W, U, G and the state's split are read
    if (!Smem::kTopAhead && chunk + 1 < a.NT) copy_chunk(chunk + 1);
    wh.each_pair([&](int r, int c, float x0, float x1, int) {
      chunk_mma::split_pair(x0, x1, *reinterpret_cast<uint32_t*>(sm.vn_hi + r * kLdS + c),
                            *reinterpret_cast<uint32_t*>(sm.vn_lo + r * kLdS + c));
    });
    if constexpr (Smem::kGatedPlanes && !Smem::kVgAhead) {  // the next chunk's copies a group (maybe empty);
      cp_async_commit();                                      // this chunk's Kg landed
      cp_async_wait<1>();
    }
    __syncthreads();  // Vnew is staged (and Kg)
    // 2c: h <- Diag(exp(G_last)) h + (K (.) exp(G_last - G))^T Vnew (a scalar gate's decays
    //     scale the rows of Vnew, a vector gate's the channels of K), by ldmatrix.trans of K
    if constexpr (VG) {
      h.template add<kLdK, kLdS, C>(ct.kd_hi, sm.vn_hi), h.template add<kLdK, kLdS, C>(ct.kd_hi, sm.vn_lo);
      h.template add<kLdK, kLdS, C>(ct.kd_lo, sm.vn_hi);
    } else {
      const bf16* kt = sm.k_tile(chunk);
      h.template add<kLdK, kLdS, C>(kt, sm.vn_hi), h.template add<kLdK, kLdS, C>(kt, sm.vn_lo);
    }
  }
  if (a.final_state) h.store(a.final_state + head * DK * DV, v0, DV);
}

// ---------------------------------------------------------------------------------------------
// Forward 2b: per (chunk, value slice), every chunk in parallel once the scan has written h[n]
// and Vnew. Every operand is staged once as bf16 (fp32 ones split into hi and lo tiles, as 2a's
// accessor products split them) and read by ldmatrix (chunk_mma::mma_staged).

template <int DK, int DV, bool VG>
struct OutputSmem {
  // value columns per CTA: 64 (at DK = 256 32 before: the scalar gate's 105 KB with 64 fit two CTAs
  // an SM as its 81 KB with 32 did, a vector gate's 138 KB one as its 114 KB did, and each chunk's q
  // and Aqk tiles are staged half as often; at B8 T2048 H4 D256 on an H100, GDN's 0.172 -> 0.126
  // ms a launch, KDA's 0.343 -> 0.211)
  static constexpr int VS = std::min(DV, 64);
  // launch bounds: three CTAs an SM where their shared memory fits (<= 80 registers a thread)
  static constexpr int kCtasPerSm = VG && DK > 128 ? 1 : DK == 64 || (!VG && DK == 128) ? 3 : 2;
  static constexpr int kLdK = DK + 8, kLdS = VS + 8, kLdA = C + 8;  // bf16 row strides
  bf16 *q_hi, *q_lo;    // (C, kLdK): q (scalar gate or none: q_hi only), or q (.) exp(G) split (from dk = 128 on
                        // scale Q (.) exp(G)'s planes as copied)
  bf16* h;              // (DK, kLdS): the value slice of h[n] (bf16 as the scan stored it)
  bf16 *aqk_hi, *aqk_lo;  // (C, kLdA): Aqk, split
  bf16 *vn_hi, *vn_lo;  // (C, kLdS): the value slice of Vnew, split
  float* expG;          // (C): exp(G) (scalar gate or none)
  static constexpr size_t bytes() {
    return sizeof(bf16) * ((VG ? 2 : 1) * C * kLdK + DK * kLdS + 2 * C * kLdA + 2 * C * kLdS) + sizeof(float) * C;
  }
  __device__ explicit OutputSmem(void* p) {
    h = static_cast<bf16*>(p), aqk_hi = h + DK * kLdS, aqk_lo = aqk_hi + C * kLdA;
    vn_hi = aqk_lo + C * kLdA, vn_lo = vn_hi + C * kLdS, q_hi = vn_lo + C * kLdS, q_lo = q_hi + C * kLdK;
    expG = reinterpret_cast<float*>(q_hi + (VG ? 2 : 1) * C * kLdK);
  }
};

// 2b: o = scale (Q (.) exp(G)) h[n] + Aqk Vnew (Aqk holds scale and the decays already; a scalar
// gate's exp(G) scales the rows of Q h, a vector gate's the channels of Q), for the chunk and
// value slice of blockIdx.x (slices of a chunk side by side: they share its q and Aqk in L2).
template <int DK, int DV, bool VG>
__global__ void __launch_bounds__(kThreads, (OutputSmem<DK, DV, VG>::kCtasPerSm)) output_kernel(ChunkArgs a) {
  extern __shared__ float4 smem_raw[];
  using Smem = OutputSmem<DK, DV, VG>;
  using chunk_mma::mma_staged;
  using chunk_mma::Padded;
  const Smem sm(smem_raw);
  constexpr int VS = Smem::VS, kLdK = Smem::kLdK, kLdS = Smem::kLdS, kLdA = Smem::kLdA;
  const int chunk = blockIdx.x / (DV / VS), v0 = blockIdx.x % (DV / VS) * VS, j = blockIdx.y, bi = blockIdx.z;
  const ScanTiles<DK> tiles(a, bi, j);
  const int t0 = chunk * C, n = tiles.rows(chunk);
  const int64_t row0 = tiles.row0(chunk), tok0 = (int64_t(bi) * a.T + t0) * a.HV + j;  // (B, T, HV) index of t0
  // q into q_hi (cp.async, in flight while the fp32 tiles are staged); a vector gate's then
  // becomes q (.) exp(G) split in place (each thread reads the q of the very pieces it overwrites),
  // or from dk = 128 on is copied as scale Q (.) exp(G)'s planes (the prepare's)
  constexpr bool kPlanes = kGatedPlanes<DK, VG>;
  if constexpr (kPlanes) {
    copy_planes<DK>(sm.q_hi, sm.q_lo, a.Qg_hi, a.Qg_lo, row0);
  } else {
    load_bf16_rows_async<C, DK>(sm.q_hi, tiles.qk(a.q, chunk), tiles.qk_stride, n);
  }
  if (!VG && threadIdx.x < C) sm.expG[threadIdx.x] = exp_ftz(a.G[row0 + threadIdx.x]);
  auto as_is = [](int, int, float4&) {};
  const int64_t state = tiles.head * a.NT + chunk;  // (b, j, chunk) of the (B, HV, NT, ..) buffers
  load_bf16_rows_async<DK, VS>(sm.h, a.h_start + state * DK * DV + v0, DV, DK);
  stage_f32_rows<C, C, true>(sm.aqk_hi, sm.aqk_lo, a.Aqk + state * C * C, C, C, as_is);
  stage_f32_rows<C, VS, true>(sm.vn_hi, sm.vn_lo, a.U + row0 * DV + v0, DV, C, as_is);
  wait_tiles();
  if constexpr (VG && !kPlanes) {
    stage_f32_rows<C, DK, true>(sm.q_hi, sm.q_lo, a.G + row0 * DK, DK, C, [&](int t, int d, float4& x) {
      const float2 q01 = bf16_pair(sm.q_hi, t * kLdK + d), q23 = bf16_pair(sm.q_hi, t * kLdK + d + 2);
      x = make_float4(q01.x * exp_ftz(x.x), q01.y * exp_ftz(x.y), q23.x * exp_ftz(x.z), q23.y * exp_ftz(x.w));
    });
    __syncthreads();
  }
  WarpTile<C, VS> qh, av;
  mma_staged(qh, Padded<kLdK, false>{sm.q_hi}, Padded<kLdS, false>{sm.h}, 0, DK);
  if constexpr (VG) mma_staged(qh, Padded<kLdK, false>{sm.q_lo}, Padded<kLdS, false>{sm.h}, 0, DK);
  const int s_end = av.row0 + 16;  // Aqk[t][s] = 0 for s > t
  mma_staged(av, Padded<kLdA, false>{sm.aqk_hi}, Padded<kLdS, false>{sm.vn_hi}, 0, s_end);
  mma_staged(av, Padded<kLdA, false>{sm.aqk_hi}, Padded<kLdS, false>{sm.vn_lo}, 0, s_end);
  mma_staged(av, Padded<kLdA, false>{sm.aqk_lo}, Padded<kLdS, false>{sm.vn_hi}, 0, s_end);
  qh.each_pair([&](int r, int c, float x0, float x1, int slot) {
    const float e = kPlanes ? 1.f : a.scale * (VG ? 1.f : sm.expG[r]);  // (the planes carry scale)
    if (r < n)
      *reinterpret_cast<uint32_t*>(a.o + (tok0 + int64_t(r) * a.HV) * DV + v0 + c) =
          pack_bf16(e * x0 + av.at(slot), e * x1 + av.at(slot + 1));
  });
}

// ---------------------------------------------------------------------------------------------
// Backward pass 3 (4.9 step 3): per (b, j, BV columns of dv), a reverse scan over chunks
// carrying dS = dL/d(state) in registers, every product on staged bf16 tiles (fp32 operands as
// hi and lo tiles) but 3b's Aqk^T dO (an accessor product over Aqk's packed rows). A chunk's
// steps: dS split into staged tiles (and dh[n] stored from its hi tile); 3b; dS's decay; -dVnew
// split in dS's place (and the scalar gate's scale exp(G) dO in dO's and dU's, a vector gate's
// scale Q (.) exp(G) in its K (.) exp(G_last - G)'s); the next chunk's k, Aqk and G copied
// (cp.async) during 3c, its q, W, dO and dU at its top, once 3c has read this chunk's: one
// memory round trip a chunk (a vector gate from dk = 128 on: its K (.) exp(G_last - G) copied
// with them, its scale Q (.) exp(G) once 3b has read that, in flight during -dVnew's split; the
// scalar gate at dk = 64, and at dk = 128 with 64 columns: none, those tiles a chunk ahead, kTopAhead;
// a vector gate at dk = 128 with 64 columns: those tiles and its Kg in a second set too, issued
// once its Qg's copy is, in flight during -dVnew's split and 3c).
template <int DK, int DV, bool VG>
__global__ void __launch_bounds__(kThreads, (ReverseScanSmem<DK, DV, VG>::kCtasPerSm))
    reverse_scan_kernel(ChunkArgs a) {
  extern __shared__ float4 smem_raw[];
  using Smem = ReverseScanSmem<DK, DV, VG>;
  using chunk_mma::mma_staged;
  using chunk_mma::Padded;
  const Smem sm(smem_raw);
  constexpr int BV = Smem::BV, kRows = Smem::kRows, kLdK = Smem::kLdK, kLdO = Smem::kLdO;
  const int v0 = blockIdx.x * BV, j = blockIdx.y, bi = blockIdx.z;
  const int64_t head = int64_t(bi) * a.HV + j;
  const ScanTiles<DK> tiles(a, bi, j);
  auto copy_k_aqk_g = [&](int chunk) {  // the tiles 3b reads last (kRawGate: G's rows come at the chunk's top, for 3c's Qg)
    const int64_t row0 = tiles.row0(chunk);
    sm.copy_aqk(a.Aqk + (head * a.NT + chunk) * C * C);
    if (VG && !Smem::kRawGate) {
      load_f32_rows_async<1, DK>(sm.G, DK, a.G + (row0 + C - 1) * DK, DK);  // G_last's row
    } else if (!VG) {
      load_f32_rows_async<1, C>(sm.G, C, a.G + row0, 0);
      load_bf16_rows_async<C, DK>(sm.k, tiles.qk(a.k, chunk), tiles.qk_stride, tiles.rows(chunk));
    }
  };
  auto copy_top = [&](int chunk) {  // the tiles 3c reads (and kRawGate's; kGatedPlanes: 3b's Kg)
    const int n = tiles.rows(chunk);
    const int64_t row0 = tiles.row0(chunk);
    const int64_t tok0 = (int64_t(bi) * a.T + chunk * C) * a.HV + j;  // (B, T, HV) index of token t0
    const typename Smem::TopTiles top = sm.top(chunk);
    if (!VG) load_bf16_rows_async<C, DK>(top.q, tiles.qk(a.q, chunk), tiles.qk_stride, n);
    if (Smem::kRawGate) {
      load_f32_rows_async<C, DK>(sm.G, Smem::kLdG, a.G + row0 * DK, DK);
      load_bf16_rows_async<C, DK>(sm.q_raw, tiles.qk(a.q, chunk), tiles.qk_stride, n);
      load_bf16_rows_async<C, DK>(sm.k_raw, tiles.qk(a.k, chunk), tiles.qk_stride, n);
    }
    if (Smem::kGatedPlanes) copy_planes<DK>(top.kd_hi, top.kd_lo, a.Kg_hi, a.Kg_lo, row0);  // 3b's Kg
    copy_planes<DK>(top.W_hi, top.W_lo, a.W_hi, a.W_lo, row0);
    load_bf16_rows_async<C, BV>(top.dov, a.d_o + tok0 * DV + v0, int64_t(a.HV) * DV, n);
    // dU rows past n (and all of them without a residual gradient) are zeros
    load_bf16_rows_async<C, BV>(top.dres, (a.d_res ? a.d_res : a.d_o) + tok0 * DV + v0, int64_t(a.HV) * DV,
                                a.d_res ? n : 0);
  };
  StateTile<DK, BV> ds;
  ds.load(a.dht ? a.dht + head * DK * DV : nullptr, v0, DV);
  copy_k_aqk_g(a.NT - 1);
  if (Smem::kTopAhead) copy_top(a.NT - 1);
  for (int chunk = a.NT - 1; chunk >= 0; chunk--) {
    const int n = tiles.rows(chunk);
    const int64_t row0 = tiles.row0(chunk);  // first workspace row
    // the next chunk started from h = 0: no gradient reaches this end state (read before the wait)
    const bool reset = a.resets(bi, chunk + 1);
    if (!Smem::kTopAhead) copy_top(chunk);
    wait_tiles();  // this chunk's tiles; the previous chunk's 3c is done with its tiles
    if (Smem::kTopAhead && !VG && chunk > 0) copy_top(chunk - 1);  // into the other set, free since that 3c
    const typename Smem::TopTiles top = sm.top(chunk);
    if (reset) ds.load(nullptr, v0, DV);
    bf16* dh_end = a.dh_end + (head * a.NT + chunk) * DK * DV;  // 3a: dh[n] = dS, chunk n's END state's gradient
    ds.template stage_part<kLdO>(0, sm.ds_hi, sm.ds_lo);
    if (!VG && threadIdx.x < C) {
      sm.expG[threadIdx.x] = exp_ftz(sm.G[threadIdx.x]);
      sm.kdecay[threadIdx.x] = exp_ftz(sm.G[C - 1] - sm.G[threadIdx.x]);
    }
    auto kg_factor = [&](int d, float g_s) { return exp_ftz(sm.g_last[d] - g_s); };
    if constexpr (Smem::kRawGate)  // 3b's Kg = K (.) exp(G_last - G), split
      stage_gated_tiles<DK, kLdK, Smem::kLdG>(top.kd_hi, top.kd_lo, sm.k_raw, sm.G, kg_factor);
    __syncthreads();
    sm.store_rounded(dh_end, 0, v0);
    // 3b: dVnew = Aqk^T dO + Kg dS + dU   (Vnew feeds o, the end state and the residual output u);
    //     Kg dS by key blocks of kRows (DK = 256: dS's second half staged once the first is read)
    WarpTile<C, BV> dvn, kds;  // (the scalar gate's K dS, its rows scaled by exp(G_last - G) after)
    dvn.mma<C, true, false>([&](int s, int t) { return sm.aqk_at(t, s); },
                            [&](int t, int c) { return bf(top.dov[t * kLdO + c]); });
#pragma unroll
    for (int p = 0; p < DK / kRows; p++) {
      if (p > 0) {
        __syncthreads();  // the first half is read
        ds.template stage_part<kLdO>(p, sm.ds_hi, sm.ds_lo);
        __syncthreads();
        sm.store_rounded(dh_end, p * kRows, v0);
      }
      const Padded<kLdO, false> ds_hi{sm.ds_hi}, ds_lo{sm.ds_lo};
      if constexpr (VG) {
        const Padded<kLdK, false> kg_hi{top.kd_hi, 0, p * kRows}, kg_lo{top.kd_lo, 0, p * kRows};
        mma_staged(dvn, kg_hi, ds_hi, 0, kRows), mma_staged(dvn, kg_hi, ds_lo, 0, kRows);
        mma_staged(dvn, kg_lo, ds_hi, 0, kRows);
      } else {
        const Padded<kLdK, false> k_op{sm.k, 0, p * kRows};
        mma_staged(kds, k_op, ds_hi, 0, kRows), mma_staged(kds, k_op, ds_lo, 0, kRows);
      }
    }
    dvn.each([&](int s, int c, float& x, int slot) {
      x += bf(top.dres[s * kLdO + c]) + (VG ? 0.f : sm.kdecay[s] * kds.at(slot));
    });
    // 3c's decay: dS <- Diag(exp(G_last)) dS (a vector gate's per channel; exponents <= 0)
    const float glast = VG ? 0.f : sm.G[C - 1];
    ds.scale([&](int d) { return exp_ftz(VG ? sm.g_last[d] : glast); });
    __syncthreads();  // dS's split, dU, k, Kg, Aqk and G are read
    if constexpr (Smem::kGatedPlanes) {  // 3c's Qg into Kg's place, in flight during -dVnew's split
      copy_planes<DK>(top.kd_hi, top.kd_lo, a.Qg_hi, a.Qg_lo, row0);
      cp_async_commit();
    }
    // kVgAhead: the next chunk's tiles into the other set (free since that 3c), after Qg's group
    // (waited for before 3c, with every group before it)
    if (Smem::kVgAhead && chunk > 0) copy_top(chunk - 1);
    dvn.each_pair([&](int s, int c, float x0, float x1, int) {  // 3c's -dVnew, split; dVnew out in bf16
      chunk_mma::split_pair(-x0, -x1, *reinterpret_cast<uint32_t*>(sm.dvn_hi + s * kLdO + c),
                            *reinterpret_cast<uint32_t*>(sm.dvn_lo + s * kLdO + c));
      *reinterpret_cast<uint32_t*>(a.dvnew + (row0 + s) * DV + v0 + c) = pack_bf16(x0, x1);
    });
    auto qg_factor = [&](int, float g_t) { return a.scale * exp_ftz(g_t); };
    if constexpr (Smem::kRawGate) {  // 3c's scale Qg, in Kg's place
      stage_gated_tiles<DK, kLdK, Smem::kLdG>(top.kd_hi, top.kd_lo, sm.q_raw, sm.G, qg_factor);
    } else if constexpr (!VG) {  // 3c's scale exp(G) dO, split: lo over dO in place (each element by the
                                 // thread that reads it), hi over dU
      for (int i = threadIdx.x; i < C * BV / 2; i += kThreads) {
        const int t = i / (BV / 2), c = (i % (BV / 2)) * 2;
        const float2 x = bf16_pair(top.dov, t * kLdO + c);
        const float f = a.scale * sm.expG[t];
        chunk_mma::split_pair(f * x.x, f * x.y, *reinterpret_cast<uint32_t*>(top.dres + t * kLdO + c),
                              *reinterpret_cast<uint32_t*>(top.dov + t * kLdO + c));
      }
    }
    if (chunk > 0) copy_k_aqk_g(chunk - 1);
    if constexpr (Smem::kGatedPlanes) {  // the next chunk's copies a group (maybe empty); Qg landed
      cp_async_commit();
      cp_async_wait<1>();
    }
    __syncthreads();  // -dVnew and 3c's gated operand are staged
    // 3c: dS <- exp(G_last) dS + scale Qg^T dO - W^T dVnew   (h[n] feeds the end state, o and Vnew)
    if constexpr (VG) {
      ds.template add<kLdK, kLdO, C>(top.kd_hi, top.dov), ds.template add<kLdK, kLdO, C>(top.kd_lo, top.dov);
    } else {
      ds.template add<kLdK, kLdO, C>(top.q, top.dres), ds.template add<kLdK, kLdO, C>(top.q, top.dov);
    }
    ds.template add<kLdK, kLdO, C>(top.W_hi, sm.dvn_hi), ds.template add<kLdK, kLdO, C>(top.W_hi, sm.dvn_lo);
    ds.template add<kLdK, kLdO, C>(top.W_lo, sm.dvn_hi);
    if (!Smem::kTopAhead) __syncthreads();  // 3c's tiles are read: the next chunk's copies may land in them
  }
  if (!a.dh0) return;
  if (a.resets(bi, 0)) ds.load(nullptr, v0, DV);  // chunk 0 started from h = 0, not from h0
  ds.store(a.dh0 + head * DK * DV, v0, DV);
}

// ---------------------------------------------------------------------------------------------
// Backward pass 4 (4.9 steps 4-8, CPU: chunk_backward_local): every chunk in parallel, from its
// start state h[n], the gradient dh[n] of its end state and the total gradient dVnew. No wide
// matrix sits whole in shared memory: dk-wide work runs in blocks of KB = min(DK, 128) key dims
// and dv-wide operands enter in slices of VS value columns: 64 up to DK = DV = 128 (217 KB at
// 128 x 128: half the slice loops and barriers of 32-column slices), 32 when a width is 256, so
// that DK = DV = 256 fits. Every mma operand is a bf16 tile read by ldmatrix (see the header).
//   Phase A (per key block; 4a, 4b): the state products of dQ, dK and dW, written to a.dq, a.dk
//     and over W (a.W: pass 3 was its last reader).
//   Phase B (C x C; 4c-4f): per value slice dY and dY Vnew^T; then Ps, P2 and the gate pair terms.
//   Phase C (per key block; 4g, 4h): dEhat, dE and the pair products finish dQ and dK (a vector
//     gate: and dg, per key channel).
//   Then 4i: dg (scalar gate), db, dw.

template <int DK, int DV, bool VG = false>
struct LocalSmem {
  static constexpr int KB = DK < 128 ? DK : 128;  // key dims per block (phases A and C)
  // A scalar gate (or none) at DK = DV = 64 (kCompact): one key block and one value slice, so
  // every tile is C x 64 bf16 and the layout is eleven such slots, each taken by turns (see
  // place_compact); A enters through registers (stage_f32_rows) instead of an fp32 staging tile,
  // so every copy of phase A is in flight at once. 104.6 KB where the general layout takes
  // 168.4: two CTAs an SM, 128 registers a thread where one CTA took 157 (ptxas spills 4 bytes,
  // a value formed at the top). GDN's local backward at B8 T2048 H16 D64 (H100, ms a launch):
  // 0.652 -> 0.490 with the layout (d4d37f8, DeltaNet's 0.551 -> 0.432), -> 0.428 with dW held in
  // its slots and Aqk formed again (eeb7b17; dW had gone to memory in fp32 and come back split in
  // phase C, Aqk had been loaded).
  static constexpr bool kCompact = DK == 64 && DV == 64 && !VG;
  static constexpr int kCtasPerSm = kCompact ? 2 : 1;  // launch bounds
  // A vector gate at DK = 256 (kWide): whole C x DK tiles of q, k and G would take 283 KB, so
  // they hold the current key block alone (kKeys = KB columns), loaded again for each block of
  // phases A and C (phase B reads none of them): 219 KB.
  static constexpr bool kWide = VG && DK > 128;
  static constexpr bool kVectorGate = VG;
  static constexpr int kKeys = kWide ? KB : DK;    // key columns of the q, k and G tiles
  // value columns per slice (a vector gate's G tile leaves no room for 64 at DK = 128)
  static constexpr int VS = DK <= 128 && DV <= 128 && !VG ? 64 : 32;
  static constexpr int kLdG = kKeys + 4;           // row stride of a vector gate's G tile
  static constexpr int kLdK = kKeys + 8;           // bf16 row stride of q, k
  static constexpr int kLdS = VS + 8;              // bf16 row stride of a slice
  static constexpr int kLdKB = KB + 4, kLdKBb = KB + 8;  // row strides of a dW block, fp32 and bf16
  static constexpr int kLdA = C + 8;               // bf16 row stride of C-wide tiles (A, Ps, P2)
  static constexpr int kLdD = 16 + 1;              // fp32 row stride of a vector gate's 16 x 16 diagonal pair blocks
  // The region after the slices holds, phase by phase: the tiles of the h and dh blocks, by
  // parity (A); pair, GDN-2's w slice and the dY slice (B); the hi and lo tiles of a dW block,
  // then a vector gate's step and sub-block decays (C).
  static constexpr int kStates = 4 * KB * kLdS / 2, kPairs = C * kLdC + C * kLdA;
  static constexpr int kDecays = VG ? C * kLdKB + (C / 16 - 1) * KB : 0;
  static constexpr int kDW = 2 * C * kLdKBb / 2;  // in floats
  static constexpr int kRegion = std::max(std::max(kStates, kPairs), std::max(kDW, kDecays));
  float* A;            // (C, kLdC): (I + L)^{-1} as loaded, split into A_hi and A_lo at once
  // Ps = dAqk exp(G_t - G_s), diag(beta) P2 and P2 = dL exp(G_t - G_s) as bf16 (C, kLdA) tiles
  // (a vector gate's without their decays), in the room of two (C, kLdC) fp32 tiles after A
  bf16 *Ps_b, *betaP2_b, *P2_b;
  float *G, *beta, *wv, *expG, *kdecay, *colw, *dG, *kgp;  // (C)
  float *rowG, *rowKg, *rowB, *rowW, *rowPair;  // (2, C) per-row partial sums (WarpTile::add_row_sums)
  float* colPair;      // (4, C) per-column partial sums of the gate pair terms (WarpTile::add_col_sums)
  float* red;          // (32) block_sum scratch
  float* region;       // kRegion floats, phase by phase as below
  // Phase A's tiles by the value slice's parity (A): with 32-column slices (kPipelined) the next
  // slice's copies land in the other parity's tiles while this slice's products run; 64-column
  // slices leave no room for a second set, so they take the even tiles in turn.
  static constexpr bool kPipelined = VS == 32;
  // (KB, kLdS): a (key block, value slice) of h[n] (its bf16 hi and lo planes) and dh[n]: the hi
  // and dh tiles in the region; the lo tiles in A's room (kPipelined), else in the odd hi's place
  bf16 *h_even, *dh_even, *h_odd, *dh_odd, *h_lo_even, *h_lo_odd;
  // The odd slices of dO, Vnew, dVnew (C, kLdS), in the room of A's fp32 tile and the two after it
  // (A is split into A_hi, A_lo before phase A; Ps_b .. are formed in phase B)
  bf16 *dov_odd, *vnew_odd, *dvnew_odd;
  bf16* vv_odd;        // phase B's odd slices of V, in h_lo_even's place (kPipelined)
  float* pair;         // (C, kLdC): Aqk, for the gate pair terms dAqk (.) Aqk          (B)
  bf16 *w_slice, *dy_b;  // (C, kLdS): a value slice of GDN-2's w; of dY rounded to bf16  (B)
  bf16 *dW_hi, *dW_lo;  // (C, kLdKBb): a key block of dW, split                         (C)
  float* estep;        // (C, kLdKB): a vector gate's exp(G_{t+1} - G_t), 0 at t = C - 1  (C)
  float* block_decay;  // (C / 16 - 1, KB): exp(G_{16 (i+1)} - G_{16 i}), sub-block i    (C)
  bf16 *q, *k;         // (C, kLdK)
  bf16 *dov, *vv;      // (C, kLdS): a value slice of dO and of V
  bf16 *vnew, *dvnew;  // (C, kLdS): a value slice of Vnew and of dVnew, in bf16 as stored
  bf16 *A_hi, *A_lo;   // (C, kLdA): A split into bf16 halves (dY = A^T dU takes A_hi alone)
  // vector gate only (no room taken otherwise; one key block, KB = DK, or kWide the tiles of one):
  float* Gv;           // (C, kLdG) G[t][d]
  float* dGv;          // (C, kLdKB = kLdG): the dG block, in Gv's place once phase C has staged the decays
  float* colKg;        // (DK / KB, 4, KB) per-column partial sums k_s . dKg_s (WarpTile::add_col_sums)
  float* hdhv;         // (DK) rowsum(h[n] (.) dh[n]) per key channel (phase C: times exp(G_last))
  float *Ps_d, *P2_d, *betaP2_d;  // (C, kLdD): the 16 x 16 diagonal blocks of Ps, P2, diag(beta) P2 in fp32
  // (C, kLdKBb) the decayed operands of phase C's pair products (add_decayed_pairs), in places
  // phase C does not use: K exp(G_{16 (i+1)} - G) in A's fp32 tile (A is used as A_hi, A_lo), Q and
  // K exp(G - G_{16 i}) in the value slices and in A_hi, A_lo (after dEhat = A^T dW)
  bf16 *kn, *qt, *kt;
  static_assert(!VG || (kKeys == KB && 2 * kLdKBb <= 4 * kLdC && kLdKBb <= 4 * kLdS && kLdKBb <= 2 * kLdA),
                "a vector gate's decayed operands fit the places they take");
  static constexpr size_t vector_floats() { return VG ? size_t(C) * kLdG + 5 * DK + 3 * C * kLdD : 0; }
  static constexpr int kRowFloats = 22 * C + 32;  // G .. red
  static constexpr int kSlots = 11;                // kCompact's C x 64 bf16 tiles
  static constexpr size_t floats() { return size_t(3) * C * kLdC + kRowFloats + kRegion; }
  static constexpr size_t bytes() {
    return kCompact ? sizeof(float) * kRowFloats + sizeof(bf16) * kSlots * C * kLdS
                    : sizeof(float) * (floats() + vector_floats()) + sizeof(bf16) * C * (2 * kLdK + 4 * kLdS + 2 * kLdA);
  }
  // The per-token vectors and partial sums G .. red from f on (kRowFloats floats).
  __device__ void place_rows(float* f) {
    G = f, beta = G + C, wv = beta + C, expG = wv + C, kdecay = expG + C, colw = kdecay + C;
    dG = colw + C, kgp = dG + C;
    rowG = kgp + C, rowKg = rowG + 2 * C, rowB = rowKg + 2 * C, rowW = rowB + 2 * C;
    rowPair = rowW + 2 * C, colPair = rowPair + 2 * C, red = colPair + 4 * C;
  }
  // kCompact: the rows, then slots 0-10, each a (C, 72) bf16 tile, by turns (an fp32 (C, kLdC)
  // tile takes two neighbouring slots):
  //   0 q   1 k   2 A_hi   3 A_lo                                  (the whole kernel)
  //   4 h, then dY's slice   5 h's lo plane, then dW_hi   6 dh, then dW_lo (dW split at the end
  //   of phase A, held to phase C: no fp32 round trip through memory)
  //   7 dO, then Ps   8 Vnew, then diag(beta) P2   9 dVnew, then P2   10 V
  // Aqk (the gate pair terms' dAqk (.) Aqk) is formed again from q and k (the prepare's product
  // and formula: the same bits) where the general layout loads it.
  __device__ void place_compact(void* p) {
    static_assert(kLdK == kLdS && kLdA == kLdS && kLdKBb == kLdS && C * kLdC * sizeof(float) <= 2 * C * kLdS * sizeof(bf16),
                  "one slot a bf16 tile, two an fp32 one");
    place_rows(static_cast<float*>(p));
    bf16* slots = reinterpret_cast<bf16*>(red + 32);
    auto slot = [&](int i) { return slots + i * C * kLdS; };
    q = slot(0), k = slot(1), A_hi = slot(2), A_lo = slot(3);
    h_even = slot(4), h_odd = h_lo_even = h_lo_odd = slot(5), dh_even = slot(6);
    dov = slot(7), vnew = slot(8), dvnew = slot(9), vv = slot(10);
    dW_hi = slot(5), dW_lo = slot(6), dy_b = slot(4);
    Ps_b = slot(7), betaP2_b = slot(8), P2_b = slot(9);
  }
  __device__ explicit LocalSmem(void* p) {
    if constexpr (kCompact) place_compact(p);
    else place_general(p);
  }
  __device__ void place_general(void* p) {
    A = static_cast<float*>(p);
    static_assert(3 * C * kLdA <= 2 * 2 * C * kLdC, "three bf16 tiles in the room of two fp32 ones");
    Ps_b = reinterpret_cast<bf16*>(A + C * kLdC), betaP2_b = Ps_b + C * kLdA, P2_b = betaP2_b + C * kLdA;
    place_rows(A + 3 * C * kLdC);
    region = red + 32;
    h_even = reinterpret_cast<bf16*>(region), dh_even = h_even + KB * kLdS;
    h_odd = dh_even + KB * kLdS, dh_odd = h_odd + KB * kLdS;
    static_assert(sizeof(bf16) * (3 * C + (kPipelined ? 2 * KB : 0)) * kLdS <= sizeof(float) * 3 * C * kLdC,
                  "phase A's odd slices and the lo tiles fit in A's room");
    dov_odd = reinterpret_cast<bf16*>(A), vnew_odd = dov_odd + C * kLdS, dvnew_odd = vnew_odd + C * kLdS;
    h_lo_even = kPipelined ? dvnew_odd + C * kLdS : h_odd;
    h_lo_odd = kPipelined ? h_lo_even + KB * kLdS : h_odd;
    vv_odd = h_lo_even;
    dW_hi = reinterpret_cast<bf16*>(region), dW_lo = dW_hi + C * kLdKBb;
    static_assert(2 * kLdS <= 2 * kLdA && KB >= C, "w and dY slices fit in the room after pair, phase B's odd V in a lo tile's");
    pair = region, w_slice = reinterpret_cast<bf16*>(pair + C * kLdC), dy_b = w_slice + C * kLdS;
    estep = region, block_decay = estep + C * kLdKB;
    q = reinterpret_cast<bf16*>(region + kRegion), k = q + C * kLdK, dov = k + C * kLdK, vv = dov + C * kLdS;
    vnew = vv + C * kLdS, dvnew = vnew + C * kLdS, A_hi = dvnew + C * kLdS, A_lo = A_hi + C * kLdA;
    Gv = reinterpret_cast<float*>(A_lo + C * kLdA), dGv = Gv, colKg = Gv + C * kLdG, hdhv = colKg + 4 * DK;
    Ps_d = hdhv + DK, P2_d = Ps_d + C * kLdD, betaP2_d = P2_d + C * kLdD;
    kn = reinterpret_cast<bf16*>(A), qt = dov, kt = A_hi;
  }
};

// One term of a vector gate's pair products (add_decayed_pairs): the C x C pair weights P (zero
// where there is no pair) rounded to bf16 (its sub-blocks off the diagonal are read) and its
// 16 x 16 diagonal blocks in fp32 (P(t, s) at t * kLdD + s % 16); the C x KB operand X decayed
// inside its 16-token sub-blocks (see add_decayed_pairs) and X as it is (q or k).
struct DecayedTerm {
  const bf16* p;          // (C, kLdA)
  const float* p_diag;    // (C, kLdD)
  const bf16* x_decayed;  // (C, kLdKBb)
  const bf16* x;          // (C, kLdK = kLdKBb)
};

// A vector gate's pair products (4.4; KB = DK, its one key block), summed over N terms (P, X):
//   out(t, d) += sum_{s <= t} P(t, s) exp(G_t[d] - G_s[d]) X(s, d), or with TRANSPOSED
//   out(s, d) += sum_{t >= s} P(t, s) exp(G_t[d] - G_s[d]) X(t, d).
// A warp's 16 rows of out are one sub-block i of 16 tokens; every exponent is <= 0, so no gate
// overflows whatever its size. A running sum per (row, channel), by the staged tiles of the
// kernel's phase C (x_decayed, estep, block_decay):
//   1. the other sub-blocks j, farthest first, one mma each (ldmatrix): X enters decayed inside
//      its sub-block to the boundary on i's side (X_s exp(G_{16 (j+1)} - G_s), or TRANSPOSED
//      X_t exp(G_t - G_{16 j})), rounded to bf16 once; the sum crosses each boundary between
//      sub-blocks in fp32 by exp(G_{16 (j+1)} - G_{16 j}) (block_decay), arriving at i's boundary
//      (token 16 i, or TRANSPOSED 16 (i + 1));
//   2. i's 16 x 16 diagonal block exactly in fp32, token u by token away from that boundary by
//      Horner's rule: sum = sum exp(G_u - G_{u - 1}) + P X at u (TRANSPOSED: exp(G_{u + 1} - G_u),
//      estep), which also carries 1's sum to the row's own token: no exponential is taken here.
template <class Smem, bool TRANSPOSED, int N>
__device__ __forceinline__ void add_decayed_pairs(WarpTile<C, Smem::KB>& out, const DecayedTerm (&terms)[N],
                                                  const float* estep, const float* block_decay) {
  constexpr int KB = Smem::KB, kLdA = Smem::kLdA, kLdX = Smem::kLdKBb, kLdE = Smem::kLdKB, kLdD = Smem::kLdD;
  using chunk_mma::Padded;
  WarpTile<C, KB> sum;
  const int i = sum.row0 / 16, last = C / 16 - 1;
  for (int step = 0; step < (TRANSPOSED ? last - i : i); step++) {  // 1.
    const int j = TRANSPOSED ? last - step : step;
    if (step > 0) sum.each([&](int, int d, float& x, int) { x *= block_decay[j * KB + d]; });
#pragma unroll
    for (int n = 0; n < N; n++)
      chunk_mma::mma_staged(sum, Padded<kLdA, TRANSPOSED>{terms[n].p}, Padded<kLdX, false>{terms[n].x_decayed}, 16 * j,
                            16 * j + 16);
  }
  // 2. rolled (one step's code reused 16 times) where the kernel's code would not fit the
  // instruction cache (ncu, H200, KDA at DK = 128: 44% of the warps' stall cycles waiting for an
  // instruction, 204 KB of SASS straight through; rolled, 134 KB); unrolled at DK = 256 (kWide),
  // where rolled GDN-2's local backward spilled 4 bytes and grew.
  constexpr int kStepUnroll = Smem::kWide ? 16 : 1;
#pragma unroll kStepUnroll
  for (int step = 0; step < 16; step++) {
    const int u = TRANSPOSED ? 15 - step : step, tok = sum.row0 + u;
    float p[2][N];  // P at (this thread's rows g, g + 8, token u), or TRANSPOSED (token u, its rows)
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
      for (int n = 0; n < N; n++)
        p[h][n] = TRANSPOSED ? terms[n].p_diag[tok * kLdD + sum.g + 8 * h]
                             : terms[n].p_diag[(sum.row0 + sum.g + 8 * h) * kLdD + u];
#pragma unroll
    for (int nt = 0; nt < sum.NT; nt++) {
      const int d = sum.col0 + nt * 8 + 2 * sum.t;  // this thread's channels d, d + 1
      const float2 decay = !TRANSPOSED && step == 0 ? make_float2(1.f, 1.f)
                                                     : *reinterpret_cast<const float2*>(estep + (TRANSPOSED ? tok : tok - 1) * kLdE + d);
      float2 x[N];
#pragma unroll
      for (int n = 0; n < N; n++) x[n] = bf16_pair(terms[n].x, tok * kLdX + d);
#pragma unroll
      for (int h = 0; h < 2; h++) {
        const int row = sum.g + 8 * h;  // in the sub-block; P is zero past the row's pairs, the decays must stop there
        if (TRANSPOSED ? u < row : u > row) continue;
        float s0 = sum.acc[nt][2 * h] * decay.x, s1 = sum.acc[nt][2 * h + 1] * decay.y;
#pragma unroll
        for (int n = 0; n < N; n++) s0 += p[h][n] * x[n].x, s1 += p[h][n] * x[n].y;
        sum.acc[nt][2 * h] = s0, sum.acc[nt][2 * h + 1] = s1;
      }
    }
  }
  out.each([&](int, int, float& x, int slot) { x += sum.at(slot); });
}

// A vector gate's decays for add_decayed_pairs, per channel d of the key block d0 .. d0 + KB - 1
// (the tiles' columns 0 .. KB - 1) from the G tile (every exponent <= 0), for a token t of
// sub-block i: kn = k_t exp(G_{16 (i+1)} - G_t) (the last sub-block's rows are never read:
// zeros), qt, kt = (q_t, k_t) exp(G_t - G_{16 i}), rounded to bf16 once; estep[t] =
// exp(G_{t+1} - G_t) (0 at t = C - 1); block_decay[i] = exp(G_{16 (i+1)} - G_{16 i}); and hdhv
// times exp(G_last), for the last token's dG. VBW (GDN-2): kt holds the erase key e_t = b_t (.)
// k_t instead, b read from global memory (b: token 0's channel d0, rows b_stride apart, tokens
// n .. C - 1 zero).
template <class Smem, bool VBW = false>
__device__ __forceinline__ void stage_pair_decays(const Smem& sm, int d0, const bf16* b = nullptr, int b_stride = 0,
                                                  int n = 0) {
  constexpr int KB = Smem::KB, kLdG = Smem::kLdG, kLdK = Smem::kLdK, kLdX = Smem::kLdKBb, kLdE = Smem::kLdKB;
  auto g = [&](int t, int d) { return sm.Gv[t * kLdG + d]; };
  for (int i = threadIdx.x; i < C * KB / 2; i += kThreads) {  // channel pairs d, d + 1
    const int t = i / (KB / 2), d = (i % (KB / 2)) * 2, first = t / 16 * 16, next = first + 16;
    auto decay = [&](int from, int to) {  // exp(G_to - G_from) for the pair, from <= to
      const float2 g_from = *reinterpret_cast<const float2*>(sm.Gv + from * kLdG + d);
      const float2 g_to = *reinterpret_cast<const float2*>(sm.Gv + to * kLdG + d);
      return make_float2(exp_ftz(g_to.x - g_from.x), exp_ftz(g_to.y - g_from.y));
    };
    const float2 k = bf16_pair(sm.k, t * kLdK + d), q = bf16_pair(sm.q, t * kLdK + d);
    const float2 to_next = next < C ? decay(t, next) : make_float2(0.f, 0.f), from_first = decay(first, t);
    *reinterpret_cast<uint32_t*>(sm.kn + t * kLdX + d) = pack_bf16(k.x * to_next.x, k.y * to_next.y);
    *reinterpret_cast<uint32_t*>(sm.qt + t * kLdX + d) = pack_bf16(q.x * from_first.x, q.y * from_first.y);
    if constexpr (VBW) {
      const float b0 = t < n ? bf(b[t * b_stride + d]) : 0.f, b1 = t < n ? bf(b[t * b_stride + d + 1]) : 0.f;
      *reinterpret_cast<uint32_t*>(sm.kt + t * kLdX + d) = pack_bf16(b0 * k.x * from_first.x, b1 * k.y * from_first.y);
    } else {
      *reinterpret_cast<uint32_t*>(sm.kt + t * kLdX + d) = pack_bf16(k.x * from_first.x, k.y * from_first.y);
    }
    *reinterpret_cast<float2*>(sm.estep + t * kLdE + d) = t + 1 < C ? decay(t, t + 1) : make_float2(0.f, 0.f);
  }
  for (int i = threadIdx.x; i < (C / 16 - 1) * KB; i += kThreads) {
    const int b = i / KB, d = i % KB;
    sm.block_decay[i] = exp_ftz(g(16 * b + 16, d) - g(16 * b, d));
  }
  for (int d = threadIdx.x; d < KB; d += kThreads) sm.hdhv[d0 + d] *= exp_ftz(g(C - 1, d));
}

// Runs block(d0) for the key blocks d0 = 0, KB, .. < DK: in a loop, or with UNROLL unrolled, d0
// a constant in each copy. (The vector gate's local backward at DK = 256 (kWide): rolled, ptxas
// spilled 60 bytes, GDN-2 104; unrolled none, GDN-2 16 (none since, see phase C); a pragma with
// a count, unroll 2, spilled as much as rolled. The scalar gate's at DK = 256 stays rolled: unrolled, it spills 28 bytes.)
template <int DK, int KB, bool UNROLL, class Fn>
__device__ __forceinline__ void for_key_blocks(Fn&& block) {
  if constexpr (UNROLL) {
#pragma unroll
    for (int d0 = 0; d0 < DK; d0 += KB) block(d0);
  } else {
    for (int d0 = 0; d0 < DK; d0 += KB) block(d0);
  }
}

// VBW (GDN-2, with VG): the erase gate b over DK and the write gate w over DV. Their gradients
// are per channel: db = k (.) dE, dk += b (.) dE (phase C), dw = v (.) dY, dv = w (.) dY (phase
// B); E = b (.) K replaces diag(beta) K on the t side of L's pairs (phase C, in k's tile once its
// last reader is done), Y = w (.) V replaces V in dA (phase B, in V's slice), Ehat = E exp(G) in
// dW Ehat^T (phase A); beta and w are 1 as row scales. b, w, and k once E holds its tile, are read
// from global memory where they enter: a (C, DK) tile of b does not fit beside the others.
__device__ __forceinline__ float2 add_pairs(float2 x, float2 y) { return make_float2(x.x + y.x, x.y + y.y); }

// h[n] . dh[n] over a staged (key block d0.., value slice) of both, as stored (4 columns
// of a row a thread): a vector gate's per key channel into sm.hdhv (a row's VS / 4 = 8 pieces
// are 8 neighbouring lanes: one owner a row), a scalar gate's summed into this thread's hdh.
template <class Smem>
__device__ __forceinline__ void add_state_dot(const Smem& sm, const bf16* h, const bf16* h_lo, const bf16* dh, int d0,
                                              float& hdh) {
  constexpr int VS = Smem::VS, kLdS = Smem::kLdS, kPieces = VS / 4;
  static_assert(Smem::KB * kPieces % kThreads == 0, "whole pieces a thread");
  for (int i = threadIdx.x; i < Smem::KB * kPieces; i += kThreads) {
    const int d = i / kPieces, c = i % kPieces * 4;
    float2 h01 = bf16_pair(h, d * kLdS + c), h23 = bf16_pair(h, d * kLdS + c + 2);
    if constexpr (Smem::kVectorGate)  // hi + lo (a scalar gate keeps no lo plane)
      h01 = add_pairs(h01, bf16_pair(h_lo, d * kLdS + c)), h23 = add_pairs(h23, bf16_pair(h_lo, d * kLdS + c + 2));
    const float2 y01 = bf16_pair(dh, d * kLdS + c), y23 = bf16_pair(dh, d * kLdS + c + 2);
    float p = h01.x * y01.x + h01.y * y01.y + h23.x * y23.x + h23.y * y23.y;
    if constexpr (Smem::kVectorGate) {
      static_assert(kPieces == 8, "eight pieces a row");
      p += __shfl_xor_sync(0xffffffffu, p, 1);
      p += __shfl_xor_sync(0xffffffffu, p, 2);
      p += __shfl_xor_sync(0xffffffffu, p, 4);
      if (threadIdx.x % 8 == 0) sm.hdhv[d0 + d] += p;
    } else {
      hdh += p;
    }
  }
}

template <int DK, int DV, bool VG, bool VBW = false>
__global__ void __launch_bounds__(kThreads, (LocalSmem<DK, DV, VG>::kCtasPerSm)) local_backward_kernel(ChunkArgs a) {
  static_assert(!VBW || VG, "GDN-2's vector erase and write gates come with its vector gate");
  extern __shared__ float4 smem_raw[];
  using Smem = LocalSmem<DK, DV, VG>;
  static_assert(!VBW || Smem::kLdS <= Smem::kLdA, "w's slice and Y fit in Ps's and diag(beta) P2's places");
  const Smem sm(smem_raw);
  constexpr int KB = Smem::KB, VS = Smem::VS, kLdK = Smem::kLdK, kLdS = Smem::kLdS;
  constexpr int kLdKB = Smem::kLdKB, kLdKBb = Smem::kLdKBb, kLdA = Smem::kLdA, kLdG = Smem::kLdG, kLdD = Smem::kLdD;
  using chunk_mma::mma_staged;
  using chunk_mma::Padded;
  const int chunk = blockIdx.x, j = blockIdx.y, bi = blockIdx.z, hq = j / (a.HV / a.H);
  const int t0 = chunk * C, n = min(C, a.T - t0);
  const int64_t head = int64_t(bi) * a.HV + j;
  const int64_t row0 = head * a.NT * C + t0;                 // first workspace row of the chunk
  const int64_t tok0 = (int64_t(bi) * a.T + t0) * a.HV + j;  // (B, T, HV) index of token t0
  const int64_t state0 = (head * a.NT + chunk) * DK * DV;    // this chunk's h[n] and dh[n]
  const int64_t qk0 = ((int64_t(bi) * a.T + t0) * a.H + hq) * DK;
  const int64_t vrow = int64_t(a.HV) * DV;                   // row stride of (B, T, HV, dv)
  float* dW_global = a.W + row0 * DK;                        // (C, DK) of (B, HV, NT * C, dk)
  // A scalar gate's dG terms (4i) only where dg is asked for: DeltaNet (no gate) skips them,
  // among them phase B's K K^T product and its Aqk load. (A vector gate uses neither the Aqk
  // tile nor hdh's block sum; without the two its kernel measured slower, KDA at B4 T4096 H16
  // D128 on the H200: 1.92 -> 1.97 ms. They stay.)
  const bool scalar_dg = !VG && a.dg;
  constexpr bool kWide = Smem::kWide;
  constexpr int kKeys = Smem::kKeys;
  // k, and with load_keys q (with_q) and a vector gate's G: the whole (C, DK) tiles, or kWide
  // key block d0's columns
  auto load_k = [&](int d0) { load_bf16_rows_async<C, kKeys>(sm.k, a.k + qk0 + d0, int64_t(a.H) * DK, n); };
  auto load_keys = [&](int d0, bool with_q) {
    if (with_q) load_bf16_rows_async<C, kKeys>(sm.q, a.q + qk0 + d0, int64_t(a.H) * DK, n);
    load_k(d0);
    if (VG) load_f32_rows_async<C, kKeys>(sm.Gv, kLdG, a.G + row0 * DK + d0, DK);
  };
  // A = (I + L)^{-1} into its fp32 tile, then (split_a, once it has landed) into bf16 halves;
  // kCompact: through registers into the halves at once
  constexpr bool kCompact = Smem::kCompact;
  auto no_sum = [](int, int, float4) {};
  auto load_a = [&] {
    const float* A = a.A + (head * a.NT + chunk) * C * C;
    if constexpr (kCompact) stage_f32_rows<C, C, true>(sm.A_hi, sm.A_lo, A, C, C, no_sum);
    else load_f32_rows_async<C, C>(sm.A, kLdC, A, C);
  };
  auto split_a = [&] {
    if constexpr (!kCompact) chunk_mma::split_tile<C, C, kThreads>(sm.A_hi, sm.A_lo, kLdA, sm.A, kLdC);
  };
  // phase A's and B's tiles by the value slice's parity (see phase A); select helpers, not indexed
  // member arrays: those would put sm in local memory
  auto h_tile = [&](int odd) { return odd ? sm.h_odd : sm.h_even; };
  auto h_lo_tile = [&](int odd) { return odd ? sm.h_lo_odd : sm.h_lo_even; };
  auto dh_tile = [&](int odd) { return odd ? sm.dh_odd : sm.dh_even; };
  auto dov_tile = [&](int odd) { return odd ? sm.dov_odd : sm.dov; };
  auto vnew_tile = [&](int odd) { return odd ? sm.vnew_odd : sm.vnew; };
  auto dvnew_tile = [&](int odd) { return odd ? sm.dvnew_odd : sm.dvnew; };
  constexpr int kSlices = DV / VS;
  constexpr bool kPipelined = Smem::kPipelined;
  auto odd_slice = [](int s) { return kPipelined ? (kSlices - 1 - s) & 1 : 0; };
  // value slice c0 of dO, Vnew and dVnew into `odd`'s tiles; rows past n zero (dVnew is zero
  // there already)
  auto load_slice = [&](int c0, int odd) {
    load_bf16_rows_async<C, VS>(dov_tile(odd), a.d_o + tok0 * DV + c0, vrow, n);
    load_bf16_rows_async<C, VS>(vnew_tile(odd), a.vnew + tok0 * DV + c0, vrow, n);
    load_bf16_rows_async<C, VS>(dvnew_tile(odd), a.dvnew + row0 * DV + c0, DV, C);
  };
  auto load_step = [&](int d0, int c0, int odd) {  // phase A: the slice and block (d0, c0) of h[n], dh[n]
    const int64_t block = state0 + int64_t(d0) * DV + c0;
    load_bf16_rows_async<KB, VS>(h_tile(odd), a.h_start + block, DV, KB);
    if constexpr (VG) load_bf16_rows_async<KB, VS>(h_lo_tile(odd), a.h_start_lo + block, DV, KB);
    load_bf16_rows_async<KB, VS>(dh_tile(odd), a.dh_end + block, DV, KB);
    load_slice(c0, odd);
  };
  load_keys(0, !kWide);  // (kWide: q is read in phase C alone)
  // phase B's first V slice (c0 = DV - VS) rides with phase A's first copies (V's tile is free until
  // phase B); kCompact: so do phase A's tiles, Vnew and A through registers meanwhile (one memory
  // round trip before phase A, where the general layout's A staging takes the room they land in)
  load_bf16_rows_async<C, VS>(sm.vv, a.v + tok0 * DV + DV - VS, vrow, n);
  if constexpr (kCompact) load_step(0, 0, 0);
  load_a();
  if (threadIdx.x < C) {
    const int r = threadIdx.x;
    const bool ok = r < n;
    sm.beta[r] = ok ? (VBW ? 1.f : bf(a.b[tok0 + int64_t(r) * a.HV])) : 0.f;
    sm.wv[r] = ok ? (VBW ? 1.f : bf(a.w[tok0 + int64_t(r) * a.HV])) : 0.f;
    if (!VG) sm.G[r] = a.G[row0 + r];
  }
  for (int i = threadIdx.x; i < 14 * C; i += kThreads) sm.rowG[i] = 0.f;  // rowG .. rowPair, colPair
  if (VG) for (int i = threadIdx.x; i < 5 * DK; i += kThreads) sm.colKg[i] = 0.f;  // colKg, hdhv
  wait_tiles();
  if (threadIdx.x < C) {
    const int r = threadIdx.x;
    sm.expG[r] = VG ? 0.f : exp_ftz(sm.G[r]);
    sm.kdecay[r] = VG ? 0.f : exp_ftz(sm.G[C - 1] - sm.G[r]);
    sm.colw[r] = VG ? sm.beta[r] : sm.beta[r] * sm.expG[r];  // Ehat = diag(beta exp(G)) K (vector gate: exp(G) per channel)
  }
  __syncthreads();
  auto g = [&](int t, int d) { return sm.Gv[t * kLdG + d]; };  // G[t][d] (vector gate)
  auto k_rows = [&](int r, int d) { return bf(sm.k[r * kLdK + d]); };  // K[r][d]
  // (B, T, HV, DK) index of the chunk's token r, key channel d: GDN-2's b and db, the dq and dk
  // parts and outputs.
  auto key_at = [&](int r, int d) { return (tok0 + int64_t(r) * a.HV) * DK + d; };
  auto erase = [&](int r, int d) { return r < n ? bf(a.b[key_at(r, d)]) : 0.f; };  // GDN-2's b[r][d] (0 past n)
  split_a();
  __syncthreads();  // A's fp32 tile is read: phase A's odd slices and Vnew's staging take its room (kCompact: none)
  const Padded<kLdA, true> A_hi_t{sm.A_hi}, A_lo_t{sm.A_lo};  // A^T
  // Phase A (4a, 4b; steps 4, 5, 7), per key block d0 .. d0 + KB - 1, over the value slices:
  //   dQg = scale dO h^T  ->  dQ = exp(G) dQg,  dG += dQg . Qg;   dW = -dVnew h^T;
  //   dKg = Vnew dh^T  ->  dK = exp(G_last - G) dKg,  kg pair terms kgp_s = Kg_s . dKg_s;
  //   h[n] . dh[n] for the last token's dG.
  //   (Vector gate: exp(G) per channel; dG is formed in phase C from the identity of 4.10, so
  //   phase A keeps only the last token's terms per channel: k . dKg summed over the chunk's
  //   tokens (colKg) and rowsum(h (.) dh) (hdhv).)
  //   The states, dO, Vnew and dVnew enter as bf16 tiles, two sets by the slice's parity: the
  //   next slice's copies (cp.async) are in flight while this one's products run, so a key block
  //   pays one memory round trip, not one a slice. Parities run so that the block's last slice
  //   lands in the even tiles (sm.dov, sm.vnew, sm.dvnew), where phase B reads it first.
  float hdh = 0.f;
  auto phase_a_block = [&](int d0) {
    const int kc = kWide ? 0 : d0;  // block d0's first column in the q, k and G tiles
    if (kWide && d0 > 0) load_keys(d0, false);  // (landed by the first slice's wait)
    WarpTile<C, KB> dq, dw, dk;
    if (!kCompact) load_step(d0, 0, odd_slice(0));
    for (int slice = 0; slice < kSlices; slice++) {
      const int odd = odd_slice(slice);
      wait_tiles();  // this slice has landed; the previous one's products are done with the other tiles
      __syncthreads();  // (every thread's copies)
      const bool more = slice + 1 < kSlices;
      if (kPipelined && more) load_step(d0, (slice + 1) * VS, odd_slice(slice + 1));
      if (VG || scalar_dg) add_state_dot(sm, h_tile(odd), h_lo_tile(odd), dh_tile(odd), d0, hdh);  // h . dh
      const Padded<kLdS, true> h_t{h_tile(odd)}, h_lo_t{h_lo_tile(odd)}, dh_t{dh_tile(odd)};  // h^T, dh^T
      const Padded<kLdS, false> dVnew_s{dvnew_tile(odd)};
      mma_staged(dq, Padded<kLdS, false>{dov_tile(odd)}, h_t, 0, VS);
      mma_staged(dw, dVnew_s, h_t, 0, VS);
      if constexpr (VG) mma_staged(dw, dVnew_s, h_lo_t, 0, VS);
      mma_staged(dk, Padded<kLdS, false>{vnew_tile(odd)}, dh_t, 0, VS);
      if (!kPipelined && more) {
        __syncthreads();  // the slice's tiles are read: the next one takes them
        load_step(d0, (slice + 1) * VS, 0);
      }
    }
    __syncthreads();  // the state tiles are read: the dW block takes their place
    if constexpr (VG) {
      dq.each([&](int r, int d, float& x, int) { x *= a.scale * exp_ftz(g(r, kc + d)); });
      dk.each([&](int r, int d, float& x, int) { x *= exp_ftz(g(C - 1, kc + d) - g(r, kc + d)); });
      dk.add_col_sums(sm.colKg + 4 * d0, [&](int r, int d, float x) { return x * bf(sm.k[r * kLdK + kc + d]); });
    } else {
      dq.each([&](int r, int, float& x, int) { x *= a.scale * sm.expG[r]; });
      if (scalar_dg) {
        dq.add_row_sums(sm.rowG, [&](int r, int d, float x) { return x * bf(sm.q[r * kLdK + kc + d]); });
        dk.add_row_sums(sm.rowKg, [&](int r, int d, float x) { return sm.kdecay[r] * x * bf(sm.k[r * kLdK + kc + d]); });
      }
      dk.each([&](int r, int, float& x, int) { x *= sm.kdecay[r]; });
    }
    auto part_at = [&](float* part, int r, int d) {  // (r, d0 + d) of a (B, T, HV, dk) fp32 part
      return reinterpret_cast<float2*>(part + key_at(r, d0 + d));
    };
    dq.each_pair([&](int r, int d, float x0, float x1, int) { if (r < n) *part_at(a.dq, r, d) = make_float2(x0, x1); });
    dk.each_pair([&](int r, int d, float x0, float x1, int) { if (r < n) *part_at(a.dk, r, d) = make_float2(x0, x1); });
    dw.each_pair([&](int r, int d, float x0, float x1, int) {
      if (kCompact) {
        chunk_mma::split_pair(-x0, -x1, *reinterpret_cast<uint32_t*>(sm.dW_hi + r * kLdKBb + d),
                              *reinterpret_cast<uint32_t*>(sm.dW_lo + r * kLdKBb + d));
      } else {
        *reinterpret_cast<float2*>(dW_global + r * DK + d0 + d) = make_float2(-x0, -x1);
      }
    });
    __syncthreads();  // (kWide: k and G are read, the next block's take their places)
  };
  for_key_blocks<DK, KB, kWide>(phase_a_block);
  if (VG || scalar_dg) hdh = block_sum(hdh, sm.red);
  // Phase B (4c-4f; steps 2, 6, 8), over the value slices: dAqk = scale dO Vnew^T (scale enters
  //   below); dY = A^T dU  ->  dv = w dY,  dw = v . dY  (GDN-2: dv = w (.) dY, dw = v (.) dY); and
  //   dY Vnew^T for dL, dY rounded to bf16 in its slice's tile (4e, 4f: neither dW nor A enters dL).
  if (VG || (scalar_dg && !kCompact)) load_f32_rows_async<C, C>(sm.pair, kLdC, a.Aqk + (head * a.NT + chunk) * C * C, C);
  WarpTile<C, C> da, dyv;  // dAqk / scale, dY Vnew^T
  // The slices go in reverse, slice j at c0 = DV - (j + 1) VS: the first is the one phase A loaded
  // last, still in the even tiles, with its V slice loaded beside phase A's. Pipelined as phase A:
  // slice j in its parity's tiles, slice j + 1's copies in flight while slice j's products run.
  auto vv_tile = [&](int odd) { return odd ? sm.vv_odd : sm.vv; };
  auto slice_c0 = [](int j) { return DV - VS * (j + 1); };
  auto odd_b = [](int j) { return kPipelined ? j & 1 : 0; };
  auto load_b = [&](int j) {  // phase B (j > 0): the slice and its V
    const int c0 = slice_c0(j), odd = odd_b(j);
    load_slice(c0, odd);
    load_bf16_rows_async<C, VS>(vv_tile(odd), a.v + tok0 * DV + c0, vrow, n);
  };
  for (int j = 0; j < kSlices; j++) {
    const int c0 = slice_c0(j), odd = odd_b(j);
    const bf16* vt = vv_tile(odd);
    wait_tiles();  // slice j has landed; slice j - 1's reads of the other tiles are done
    if constexpr (VBW) {  // w's slice
      batched_loads<C * VS, 4>([&](int i) {
        const int r = i / VS;
        return r < n ? a.w[(tok0 + int64_t(r) * a.HV) * DV + c0 + i % VS] : __float2bfloat16_rn(0.f);
      }, [&](int i, bf16 w) { sm.w_slice[(i / VS) * kLdS + i % VS] = w; });
    }
    __syncthreads();  // the slice (and GDN-2's w) ready; slice j - 1's dY tile is read
    const bool more = j + 1 < kSlices;
    if (kPipelined && more) load_b(j + 1);
    mma_staged(da, Padded<kLdS, false>{dov_tile(odd)}, Padded<kLdS, true>{vnew_tile(odd)}, 0, VS);
    WarpTile<C, VS> dy;
    mma_staged(dy, A_hi_t, Padded<kLdS, false>{dvnew_tile(odd)}, 0, C);
    if constexpr (VBW) {
      dy.each_pair([&](int r, int c, float x0, float x1, int) {
        if (r >= n) return;
        const int64_t i = (tok0 + int64_t(r) * a.HV) * DV + c0 + c;  // (B, T, HV, dv)
        const float2 w = bf16_pair(sm.w_slice, r * kLdS + c), v = bf16_pair(vt, r * kLdS + c);
        *reinterpret_cast<uint32_t*>(a.dv + i) = pack_bf16(w.x * x0, w.y * x1);
        *reinterpret_cast<uint32_t*>(a.dw + i) = pack_bf16(v.x * x0, v.y * x1);
      });
    } else {
      dy.add_row_sums(sm.rowW, [&](int r, int c, float x) { return x * bf(vt[r * kLdS + c]); });
      dy.each_pair([&](int r, int c, float x0, float x1, int) {
        if (r < n) *reinterpret_cast<uint32_t*>(a.dv + (tok0 + int64_t(r) * a.HV) * DV + c0 + c) = pack_bf16(sm.wv[r] * x0, sm.wv[r] * x1);
      });
    }
    dy.each_pair([&](int r, int c, float x0, float x1, int) {
      *reinterpret_cast<uint32_t*>(sm.dy_b + r * kLdS + c) = pack_bf16(x0, x1);
    });
    __syncthreads();  // dY's slice is whole
    mma_staged(dyv, Padded<kLdS, false>{sm.dy_b}, Padded<kLdS, true>{vnew_tile(odd)}, 0, VS);
    if (!kPipelined && more) {
      __syncthreads();  // the slice's tiles are read: the next one takes them
      load_b(j + 1);
    }
  }
  __syncthreads();  // every read of the slices is done (Ps takes A's room)
  //   Ps = dAqk exp(G_t - G_s) on s <= t (for dQ, dK);  pair = dAqk (.) Aqk (for dG; Aqk as
  //   stored holds scale).
  //   Vector gate: Ps and P2 without their decays (phase C, add_decayed_pairs), the 16 x 16
  //   diagonal blocks also in fp32.
  auto store_pairs = [&](bf16* tile, float* diag, int r, int s, float p) {
    tile[r * kLdA + s] = __float2bfloat16_rn(p);
    if (r / 16 == s / 16) diag[r * kLdD + s % 16] = p;
  };
  //   (pair is held in da's registers from here on.)
  da.each([&](int r, int s, float& x, int) {
    const bool on = s <= r;
    if constexpr (VG) store_pairs(sm.Ps_b, sm.Ps_d, r, s, on ? a.scale * x : 0.f);
    else sm.Ps_b[r * kLdA + s] = __float2bfloat16_rn(on ? a.scale * x * exp_ftz(sm.G[r] - sm.G[s]) : 0.f);
    if (scalar_dg && !kCompact) x = on ? x * sm.pair[r * kLdC + s] : 0.f;
  });
  if (kCompact && scalar_dg) {  // Aqk as the prepare forms it (its 1b)
    WarpTile<C, C> qk;
    mma_staged(qk, Padded<kLdK, false>{sm.q}, Padded<kLdK, true>{sm.k}, 0, DK, qk.row0 + 16);
    da.each([&](int r, int s, float& x, int slot) {
      x = s <= r ? x * (a.scale * qk.at(slot) * exp_ftz(sm.G[r] - sm.G[s])) : 0.f;
    });
  }
  //   dL = -dY Vnew^T on s < t (4f);  L[t,s] = beta_t (k_t . k_s) exp(G_t - G_s)  ->
  //   P2 = dL exp(G_t - G_s) (for dE, dK),  pair += dL (.) L (for dG).
  if constexpr (VG) {  // P2 = dL (decays in phase C), dG from 4.10's identity in phase C
    dyv.each([&](int r, int s, float x, int) {
      const float p = s < r ? -x : 0.f;
      store_pairs(sm.P2_b, sm.P2_d, r, s, p);
      if (!VBW) store_pairs(sm.betaP2_b, sm.betaP2_d, r, s, sm.beta[r] * p);  // GDN-2: P2 meets E instead
    });
  } else {
    WarpTile<C, C> kk;
    if (scalar_dg) mma_staged(kk, Padded<kLdK, false>{sm.k}, Padded<kLdK, true>{sm.k}, 0, DK);
    dyv.each([&](int r, int s, float x, int slot) {
      const float p = s < r ? -x * exp_ftz(sm.G[r] - sm.G[s]) : 0.f;
      sm.P2_b[r * kLdA + s] = __float2bfloat16_rn(p);
      sm.betaP2_b[r * kLdA + s] = __float2bfloat16_rn(sm.beta[r] * p);
      if (scalar_dg) da.ref(slot) += p * sm.beta[r] * kk.at(slot);
    });
    if (scalar_dg) {  // the pair terms' share of dG_t: rowsum(pair) - colsum(pair), summed in 4i
      da.add_row_sums(sm.rowPair, [](int, int, float x) { return x; });
      da.add_col_sums(sm.colPair, [](int, int, float x) { return x; });
    }
  }
  __syncthreads();  // P2 is written; Aqk is read: the dW blocks take its place
  // Phase C (4g, 4h; steps 5-8), per key block: dEhat = A^T dW,  dG += Ehat . dEhat;
  //   dE = exp(G) dEhat + P2 K  ->  dK += beta dE,  db = k . dE;
  //   dQ += Ps K,  dK += Ps^T Q + (diag(beta) P2)^T K;  dQ and dK written.
  //   Vector gate: the pair products with per-channel decays (add_decayed_pairs, on the tiles
  //   stage_pair_decays forms from G once dEhat is formed), and 4.10's identity per channel:
  //   dG = q dQ - k dK + 2 beta k dE (+ the last token's terms, see phase A), reverse-summed over
  //   the chunk's tokens into dg (the block's dG in G's place, read by then).
  //   dQ, dK go out in bf16 where each key head has one value head (a.dq_direct), else per
  //   value head in fp32 over phase A's parts (summed over the group afterwards).
  auto store_grad = [&](WarpTile<C, KB>& t, int d0, float* per_head, bf16* direct) {
    t.each_pair([&](int r, int d, float x0, float x1, int) {
      if (r >= n) return;
      const int64_t i = key_at(r, d0 + d);
      if (direct) *reinterpret_cast<uint32_t*>(direct + i) = pack_bf16(x0, x1);
      else *reinterpret_cast<float2*>(per_head + i) = make_float2(x0, x1);
    });
  };
  auto phase_c_block = [&](int d0) {
    const int kc = kWide ? 0 : d0;  // block d0's first column in the q, k and G tiles
    // kWide: the block's q, k and G, and after the first block A again (its tiles took the
    // decayed operands' places)
    if (kWide) load_keys(d0, true);
    if (kWide && d0 > 0) load_a();
    // this CTA's phase A writes (before barriers), split into hi and lo tiles
    if (!kCompact) stage_f32_rows<C, KB, true>(sm.dW_hi, sm.dW_lo, dW_global + d0, DK, C, no_sum);
    if constexpr (kWide) {
      wait_tiles();
      if (d0 > 0) split_a();
    }
    __syncthreads();
    auto k_blk = [&](int s, int d) { return k_rows(s, kc + d); };
    const Padded<kLdK, false> K_blk{sm.k, 0, kc};
    // phase A's parts, read back by the threads that wrote them (once dE is formed: fewer live registers)
    auto load_part = [&](WarpTile<C, KB>& t, const float* part) {
      t.each_pair([&](int r, int d, float& x0, float& x1, int) {
        const float2 x = r < n ? *reinterpret_cast<const float2*>(part + key_at(r, d0 + d)) : make_float2(0.f, 0.f);
        x0 = x.x, x1 = x.y;
      });
    };
    WarpTile<C, KB> dq, dk;
    auto q_blk = [&](int t, int d) { return bf(sm.q[t * kLdK + kc + d]); };
    {
      WarpTile<C, KB> de;
      const Padded<kLdKBb, false> dW_hi{sm.dW_hi}, dW_lo{sm.dW_lo};
      mma_staged(de, A_hi_t, dW_hi, 0, C), mma_staged(de, A_hi_t, dW_lo, 0, C), mma_staged(de, A_lo_t, dW_hi, 0, C);
      if constexpr (VG) {
        de.each([&](int r, int d, float& x, int) { x *= exp_ftz(g(r, kc + d)); });
        __syncthreads();  // A's tiles and the dW block are read: the decays take their places
        stage_pair_decays<Smem, VBW>(sm, d0, a.b + tok0 * DK + d0, a.HV * DK, n);
        __syncthreads();  // G is read: the block's dG takes its place (GDN-2: b first, read below)
        if constexpr (VBW) {
          batched_loads<C * KB, 4>([&](int i) { return erase(i / KB, d0 + i % KB); },
                                   [&](int i, float b) { sm.dGv[(i / KB) * kLdKB + i % KB] = b; });
          __syncthreads();
        }
        const DecayedTerm p2_k[] = {{sm.P2_b, sm.P2_d, sm.kn, sm.k}};
        add_decayed_pairs<Smem, false>(de, p2_k, sm.estep, sm.block_decay);
        if constexpr (!VBW) {
          de.each([&](int r, int d, float x, int) { sm.dGv[r * kLdKB + d] = 2.f * sm.beta[r] * k_blk(r, d) * x; });
        }
      } else {
        if (scalar_dg) de.add_row_sums(sm.rowG, [&](int r, int d, float x) { return sm.colw[r] * x * k_blk(r, d); });
        de.each([&](int r, int, float& x, int) { x *= sm.expG[r]; });
        mma_staged(de, Padded<kLdA, false>{sm.P2_b}, K_blk, 0, C);
      }
      if constexpr (VBW) {  // one read of b a channel: dG's 2 e (.) dE, db = k (.) dE, dk += b (.) dE
        // (kWide: added to phase A's part in global memory, read back once E is staged: with dk
        // and dE live together ptxas spilled 16 bytes there; at DK = 128 the same took its
        // spills from 16 to 32 bytes)
        if (!kWide) load_part(dk, a.dk);
        de.each([&](int r, int d, float x, int slot) {
          const float b = sm.dGv[r * kLdKB + d], k = k_blk(r, d);
          sm.dGv[r * kLdKB + d] = 2.f * b * k * x;
          if (r < n) a.db[key_at(r, d0 + d)] = __float2bfloat16_rn(k * x);
          if (!kWide) dk.ref(slot) += b * x;
          else if (r < n) a.dk[key_at(r, d0 + d)] += b * x;
        });
      } else {
        de.add_row_sums(sm.rowB, [&](int r, int d, float x) { return x * k_blk(r, d); });
        load_part(dk, a.dk);
        de.each([&](int r, int, float x, int slot) { dk.ref(slot) += sm.beta[r] * x; });
      }
    }
    load_part(dq, a.dq);
    if constexpr (VG) {
      const DecayedTerm ps_k[] = {{sm.Ps_b, sm.Ps_d, sm.kn, sm.k}};
      add_decayed_pairs<Smem, false>(dq, ps_k, sm.estep, sm.block_decay);
    } else {
      mma_staged(dq, Padded<kLdA, false>{sm.Ps_b}, K_blk, 0, C);
    }
    store_grad(dq, d0, a.dq, a.dq_direct);
    if constexpr (VBW) {  // dQ's share of dG now (dQ is dead across dK's pairs), then E = b (.) K in k's
      dq.each([&](int r, int d, float x, int) { sm.dGv[r * kLdKB + d] += q_blk(r, d) * x; });
      __syncthreads();  // place (its last reader, Ps K, is done; kt holds E decayed)
      batched_loads<C * kKeys, 4>([&](int i) { return erase(i / kKeys, d0 + i % kKeys); },  // (the vector gate's
                                  [&](int i, float b) {                                    // tiles: one key block)
                                    const int t = i / kKeys, d = i % kKeys;
                                    sm.k[t * kLdK + d] = __float2bfloat16_rn(b * k_rows(t, d));
                                  });
      __syncthreads();
      if (kWide) load_part(dk, a.dk);
    }
    if constexpr (VG) {  // (GDN-2: P2 with E, where diag(beta) P2 meets K)
      const DecayedTerm ps_q_beta_p2_k[] = {{sm.Ps_b, sm.Ps_d, sm.qt, sm.q},
                                            {VBW ? sm.P2_b : sm.betaP2_b, VBW ? sm.P2_d : sm.betaP2_d, sm.kt, sm.k}};
      add_decayed_pairs<Smem, true>(dk, ps_q_beta_p2_k, sm.estep, sm.block_decay);
    } else {
      mma_staged(dk, Padded<kLdA, true>{sm.Ps_b}, Padded<kLdK, false>{sm.q, 0, kc}, 0, C);
      mma_staged(dk, Padded<kLdA, true>{sm.betaP2_b}, K_blk, 0, C);
    }
    store_grad(dk, d0, a.dk, a.dk_direct);
    if constexpr (VG) {
      if constexpr (VBW) {  // k back in its tile (E's last reader is done), then dK's share of dG
        __syncthreads();
        load_k(d0);
        wait_tiles();
        dk.each([&](int r, int d, float x, int) { sm.dGv[r * kLdKB + d] -= k_blk(r, d) * x; });
      } else {
        dq.each([&](int r, int d, float x, int slot) {
          sm.dGv[r * kLdKB + d] += q_blk(r, d) * x - k_blk(r, d) * dk.at(slot);
        });
      }
      __syncthreads();
      for (int d = threadIdx.x; d < KB; d += kThreads) {  // + the last token's terms, then the reverse cumsum
        float kgp_total = 0.f;
        for (int tile = 0; tile < 4; tile++) kgp_total += sm.colKg[4 * d0 + tile * KB + d];
        float dG = kgp_total + sm.hdhv[d0 + d];  // (times exp(G_last) by now) rows past n carry only these
        for (int t = C - 1; t >= 0; t--) {
          dG += sm.dGv[t * kLdKB + d];
          if (t < n && a.dg) a.dg[(tok0 + int64_t(t) * a.HV) * DK + d0 + d] = __float2bfloat16_rn(dG);
        }
      }
    }
    __syncthreads();  // the dW block is read
  };
  for_key_blocks<DK, KB, kWide>(phase_c_block);
  // 4i (step 7): dG_t = the row sums + rowsum(pair) - colsum(pair) - kgp_t; at the last token
  //     + exp(G_last) (h . dh) + sum_s kgp_s; then dg = reverse cumsum of dG inside the chunk.
  if (scalar_dg && threadIdx.x < C) {
    const int r = threadIdx.x;
    sm.kgp[r] = sm.rowKg[r] + sm.rowKg[C + r];
    const float pair_cols = sm.colPair[r] + sm.colPair[C + r] + sm.colPair[2 * C + r] + sm.colPair[3 * C + r];
    sm.dG[r] = sm.rowPair[r] + sm.rowPair[C + r] - pair_cols + sm.rowG[r] + sm.rowG[C + r] - sm.kgp[r];
  }
  __syncthreads();
  if (scalar_dg && threadIdx.x == 0) {
    float kgp_total = 0.f;
    for (int s = 0; s < C; s++) kgp_total += sm.kgp[s];
    sm.dG[C - 1] += sm.expG[C - 1] * hdh + kgp_total;  // rows past n carry only these, into row n - 1
    for (int t = C - 2; t >= 0; t--) sm.dG[t] += sm.dG[t + 1];
  }
  __syncthreads();
  if (threadIdx.x < n) {
    const int r = threadIdx.x;
    const int64_t idx = tok0 + int64_t(r) * a.HV;  // (B, T, HV)
    if (scalar_dg) a.dg[idx] = __float2bfloat16_rn(sm.dG[r]);
    if (!VBW) {  // (GDN-2 wrote its per-channel db and dw in phases B and C)
      a.db[idx] = __float2bfloat16_rn(sm.rowB[r] + sm.rowB[C + r]);  // e = beta k   =>  dbeta = k . dE
      a.dw[idx] = __float2bfloat16_rn(sm.rowW[r] + sm.rowW[C + r]);  // y = w v     =>  dw = v . dY
    }
  }
}

// Launches `kernel` on `grid` with BYTES of dynamic shared memory.
template <size_t BYTES, class Kernel>
void launch_kernel(Kernel kernel, dim3 grid, const ChunkArgs& a) {
  static_assert(BYTES <= 227 * 1024, "at most 227 KB of shared memory per CTA");
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(BYTES)));
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared));
  kernel<<<grid, kThreads, BYTES>>>(a);
  CUDA_CHECK_LAUNCH();
}

// Passes 1 and 2 (the forward; also keeping A and every h[n] when a.A and a.h_start are set: the
// backward's replay, or a forward that keeps them for its backward). VG: a vector gate (KDA);
// VBW: with vector erase and write gates too (GDN-2; the scan is KDA's, W and U carry b and w).
template <int DK, int DV, bool VG = false, bool VBW = false>
void launch_forward(const ChunkArgs& a) {
  using Scan = ForwardScanSmem<DK, DV, VG>;
  using Output = OutputSmem<DK, DV, VG>;
  launch_kernel<PrepareSmem<DK, DV, VG, VBW>::bytes()>(prepare_kernel<DK, DV, VG, VBW>, dim3(a.NT, a.HV, a.B), a);
  static_assert(Scan::bytes() <= (228 / Scan::kCtasPerSm - 1) * 1024, "the scan CTAs an SM of its launch bounds");
  launch_kernel<Scan::bytes()>(scan_kernel<DK, DV, VG>, dim3(DV / Scan::BV, a.HV, a.B), a);
  static_assert(Output::bytes() <= (228 / Output::kCtasPerSm - 1) * 1024, "the output CTAs an SM of its launch bounds");
  if (a.o) launch_kernel<Output::bytes()>(output_kernel<DK, DV, VG>, dim3(a.NT * (DV / Output::VS), a.HV, a.B), a);
}

// Backward passes 3 and 4 (after launch_forward's replay, or reading what the forward kept).
template <int DK, int DV, bool VG = false, bool VBW = false>
void launch_backward(const ChunkArgs& a) {
  using Scan = ReverseScanSmem<DK, DV, VG>;
  static_assert(Scan::bytes() <= (228 / Scan::kCtasPerSm - 1) * 1024, "the reverse scan CTAs an SM of its launch bounds");
  launch_kernel<Scan::bytes()>(reverse_scan_kernel<DK, DV, VG>, dim3(DV / Scan::BV, a.HV, a.B), a);
  using Local = LocalSmem<DK, DV, VG>;
  static_assert(Local::bytes() <= (228 / Local::kCtasPerSm - 1) * 1024, "the local backward's CTAs an SM of its launch bounds");
  launch_kernel<Local::bytes()>(local_backward_kernel<DK, DV, VG, VBW>, dim3(a.NT, a.HV, a.B), a);
}

// Calls fn(integral_constant DK, integral_constant DV) for supported() widths.
template <class Fn>
void dispatch_widths(const DeltaRuleDims& d, Fn&& fn) {
  auto with_dv = [&](auto dk) {
    if (d.dv == 64) fn(dk, std::integral_constant<int, 64>{});
    else if (d.dv == 128) fn(dk, std::integral_constant<int, 128>{});
    else fn(dk, std::integral_constant<int, 256>{});
  };
  if (d.dk == 64) with_dv(std::integral_constant<int, 64>{});
  else if (d.dk == 128) with_dv(std::integral_constant<int, 128>{});
  else with_dv(std::integral_constant<int, 256>{});
}

// The inputs both directions read; outputs and workspaces are set by the caller.
ChunkArgs input_args(const void* q, const void* k, const void* v, const void* g, const void* b, const void* w,
                     const float* h0, const DeltaRuleDims& d) {
  HLA_CHECK(aligned16(q) && aligned16(k) && aligned16(v), "delta_rule chunk kernel: q, k, v must be 16-byte aligned");
  ChunkArgs a{};
  a.B = int(d.B), a.T = int(d.T), a.H = int(d.H), a.HV = int(d.HV), a.NT = int((d.T + C - 1) / C);
  a.scale = float(d.scale);
  a.q = static_cast<const bf16*>(q), a.k = static_cast<const bf16*>(k), a.v = static_cast<const bf16*>(v);
  a.g = static_cast<const bf16*>(g), a.b = static_cast<const bf16*>(b), a.w = static_cast<const bf16*>(w);
  a.h0 = h0;
  a.chunk_reset = d.chunk_reset;
  return a;
}

// Where passes 1-2 write: U in scratch (when they run); W, Aqk, G, A (with `with_kept`), a vector
// gate's gated K and Q planes from dk = 128 on and every h[n] (its bf16 hi plane, what 2b and
// passes 3-4 read, then a vector gate's lo plane, pass 4's) carved in that order from `kept`
// (kept_floats(d) floats) or, when null, from scratch (without `with_kept`, a forward no backward
// follows: no A, no lo plane).
struct Workspace {
  FloatScratch U, own;
  Workspace(const DeltaRuleDims& d, ChunkArgs& a, float* kept, bool with_kept, bool run_passes_1_2)
      : U(run_passes_1_2 ? rows(d) * d.dv : 0),
        own(kept ? 0 : with_kept ? kept_floats(d) : kept_floats(d) - rows(d) * C - (lo_plane(d) ? states(d) / 2 : 0)) {
    float* p = kept ? kept : own.get();
    a.U = run_passes_1_2 ? U.get() : nullptr;
    a.W = p, p += rows(d) * d.dk;
    a.W_hi = reinterpret_cast<bf16*>(a.W), a.W_lo = a.W_hi + rows(d) * d.dk;
    a.Aqk = p, p += rows(d) * C;
    a.G = p, p += rows(d) * gate_width(d);
    if (with_kept) a.A = p, p += rows(d) * C;
    auto carve_planes = [&](bf16*& hi, bf16*& lo) {  // two bf16 planes of rows * dk in rows * dk floats
      hi = reinterpret_cast<bf16*>(p), lo = hi + rows(d) * d.dk, p += planes(d);
    };
    if (planes(d)) carve_planes(a.Kg_hi, a.Kg_lo), carve_planes(a.Qg_hi, a.Qg_lo);
    a.h_start = reinterpret_cast<bf16*>(p);  // (16-byte aligned: rows % C == 0)
    a.h_start_lo = with_kept && lo_plane(d) ? a.h_start + states(d) : nullptr;
  }
  static int64_t rows(const DeltaRuleDims& d) { return d.B * d.HV * ((d.T + C - 1) / C) * C; }  // (B, HV, NT * C)
  static int64_t states(const DeltaRuleDims& d) { return d.B * d.HV * ((d.T + C - 1) / C) * d.dk * d.dv; }
  static int64_t gate_width(const DeltaRuleDims& d) { return d.gate == DeltaGate::Vector ? d.dk : 1; }  // G's
  // whether a backward reads h[n]'s lo plane too (a vector gate's dW; see pass 4)
  static bool lo_plane(const DeltaRuleDims& d) { return d.gate == DeltaGate::Vector; }
  // floats of a pair of the gated planes (the host side of kGatedPlanes: a vector gate from dk = 128 on), or 0
  static int64_t planes(const DeltaRuleDims& d) {
    return d.gate == DeltaGate::Vector && d.dk > 64 ? rows(d) * d.dk : 0;
  }
};

}  // namespace

bool supported(const DeltaRuleDims& d, DType dtype) {
  auto width_ok = [](int64_t width) { return width == 64 || width == 128 || width == 256; };
  const bool scalar_b_w = !d.erase_vector && !d.write_vector;
  const bool gdn2 = d.gate == DeltaGate::Vector && d.erase_vector && d.write_vector && (d.dk > 128 || d.dv <= 128);
  return dtype == DType::BF16 && width_ok(d.dk) && width_ok(d.dv) && (scalar_b_w || gdn2);
}

int64_t kept_floats(const DeltaRuleDims& d) {
  return Workspace::rows(d) * (d.dk + 2 * C + Workspace::gate_width(d)) + 2 * Workspace::planes(d) +
         Workspace::states(d) / (Workspace::lo_plane(d) ? 1 : 2);  // W, Aqk, G, A; the gated K and Q planes;
                                                                   // h[n]'s bf16 hi plane (and lo plane)
}

void forward(void* o, float* final_state, void* residual, const void* q, const void* k, const void* v, const void* g,
             const void* b, const void* w, const float* h0, const DeltaRuleDims& d, float* kept) {
  ChunkArgs a = input_args(q, k, v, g, b, w, h0, d);
  HLA_CHECK((!o || aligned16(o)) && (!residual || aligned16(residual)),
            "delta_rule chunk kernel: o and residual must be 16-byte aligned (stored in bf16 pairs)");
  a.o = static_cast<bf16*>(o), a.residual = static_cast<bf16*>(residual);
  a.final_state = final_state;
  const Workspace ws(d, a, kept, kept != nullptr, true);
  dispatch_widths(d, [&](auto dk, auto dv) {
    constexpr int DK = decltype(dk)::value, DV = decltype(dv)::value;
    if (d.gate != DeltaGate::Vector) launch_forward<DK, DV>(a);
    else if (!d.erase_vector) launch_forward<DK, DV, true>(a);
    else if constexpr (DK > 128 || DV <= 128) launch_forward<DK, DV, true, true>(a);
  });
}

void backward(void* grad_q, void* grad_k, void* grad_v, void* grad_g, void* grad_b, void* grad_w, float* grad_h0,
              const void* d_o, const float* d_final_state, const void* d_residual, const void* q, const void* k,
              const void* v, const void* g, const void* b, const void* w, const float* h0, const DeltaRuleDims& d,
              const void* residual, float* kept) {
  HLA_CHECK(aligned16(d_o) && aligned16(residual),
            "delta_rule chunk kernel: d_o and residual must be 16-byte aligned (read 16 bytes a copy)");
  ChunkArgs a = input_args(q, k, v, g, b, w, h0, d);
  const int64_t rows = Workspace::rows(d);               // workspace rows: (B, HV, NT * C)
  const int64_t grads = d.B * d.T * d.HV * d.dk;    // (B, T, HV, dk)
  const Workspace ws(d, a, kept, true, !kept);
  Scratch<bf16> dh_end(Workspace::states(d)), dvnew(rows * d.dv);  // (B, HV, NT, dk, dv); (B, HV, NT * C, dv)
  FloatScratch dq(grads), dk(grads);
  a.dh_end = dh_end.get(), a.dvnew = dvnew.get();
  a.d_o = static_cast<const bf16*>(d_o), a.d_res = static_cast<const bf16*>(d_residual);
  a.dht = d_final_state, a.vnew = static_cast<const bf16*>(residual), a.dh0 = grad_h0;
  a.dq = dq.get(), a.dk = dk.get();
  const bool grouped = d.HV != d.H;  // else phase C writes dq, dk itself (no group sum)
  HLA_CHECK((grouped || (aligned16(grad_q) && aligned16(grad_k))) && aligned16(grad_v) &&
                (!d.write_vector || aligned16(grad_w)),
            "delta_rule chunk kernel: grad_q, grad_k, grad_v and a vector grad_w must be 16-byte aligned "
            "(stored in bf16 pairs)");
  if (!grouped) a.dq_direct = static_cast<bf16*>(grad_q), a.dk_direct = static_cast<bf16*>(grad_k);
  a.dv = static_cast<bf16*>(grad_v), a.db = static_cast<bf16*>(grad_b), a.dw = static_cast<bf16*>(grad_w);
  a.dg = d.gate != DeltaGate::None ? static_cast<bf16*>(grad_g) : nullptr;
  auto run = [&](auto dk_, auto dv_, auto vg, auto vbw) {
    constexpr int DK = decltype(dk_)::value, DV = decltype(dv_)::value;
    constexpr bool VG = decltype(vg)::value, VBW = decltype(vbw)::value;
    if (!kept) launch_forward<DK, DV, VG, VBW>(a);  // passes 1-2 replayed: W, U, Aqk, G, A and every h[n]; no outputs
    launch_backward<DK, DV, VG, VBW>(a);            // passes 3-4
  };
  dispatch_widths(d, [&](auto dk_, auto dv_) {
    constexpr int DK = decltype(dk_)::value, DV = decltype(dv_)::value;
    if (d.gate != DeltaGate::Vector) run(dk_, dv_, std::false_type{}, std::false_type{});
    else if (!d.erase_vector) run(dk_, dv_, std::true_type{}, std::false_type{});
    else if constexpr (DK > 128 || DV <= 128) run(dk_, dv_, std::true_type{}, std::true_type{});
  });
  if (!grouped) return;
  recurrence::group_sum(static_cast<bf16*>(grad_q), dq.get(), d.B * d.T, d.H, d.HV / d.H, d.dk);
  recurrence::group_sum(static_cast<bf16*>(grad_k), dk.get(), d.B * d.T, d.H, d.HV / d.H, d.dk);
}

}  // namespace hla::cuda::delta_chunk
