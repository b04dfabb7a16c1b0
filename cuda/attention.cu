// Causal softmax attention, forward and backward, flash style (Dao 2022/2023): the T x T
// score matrix exists only as one tile in registers at a time.
//
// Dimension letters: B batch, T tokens, H query heads, Hkv kv heads (query head h reads kv head
// h / (H / Hkv)), D q/k head width, Dv v head width. Key s is visible from query t iff s <= t
// and (window == 0 or t - s < window) and, with packed documents (varlen), s is not before the
// first token of t's document (DocumentMask).
//
// Forward (per tile of queries, keys in blocks, "online softmax"):
//   S = scale Q K^T;  m' = max(m, rowmax S);  P = exp(S - m');  l = l e^(m - m') + rowsum P;
//   O = O e^(m - m') + P V;  at the end O /= l and lse = m + log l.
// Backward (P rebuilt from lse, Delta = rowsum(dO * O) = rowsum(P * dP)):
//   dV = P^T dO;  dP = dO V^T;  dS = P (dP - Delta);  dQ = scale dS K;  dK = scale dS^T Q.
// It runs as two kernels so that nothing is accumulated with atomics (results are
// deterministic, bit for bit from run to run): one per block of keys computes dK and dV (loops
// over queries of every query head of its kv head), one per block of queries computes dQ (loops
// over keys; it recomputes S and dP, the price of no atomics). Both work in the transposed frame
// where needed so that each product is "registers x shared memory", the same shape as the
// forward's.
//
// Three implementations:
//   mma: bf16 tensor cores (mma.sync m16n8k16, fp32 accumulation), D = Dv in {64, 128, 256}. A warp
//        skips the tiles none of its rows sees (above the diagonal, before the window or its
//        document, past T): packed documents cost only the tiles inside documents.
//        Blocks: the forward 128 queries, 4 warps of 32 rows (two m16 row tiles, so every K/V
//        fragment read feeds two mma; two blocks an SM at D = 128, three at D = 64); the
//        backward 64 rows, 4 warps of 16 (two blocks an SM at D = 128, three at D = 64):
//        bwd_blocking. K/V tiles of 64 keys (Q/dO tiles of 32 queries in the dK/dV kernel) are
//        double-buffered with cp.async (swizzled: cuda/tile.cuh); the backward's rows stay in
//        registers as A fragments (Q and dO in dQ; K in dK/dV at D = 64, where V would not fit
//        as well), the forward's Q is read from shared memory
//        (no room beside O); P and dS go from accumulators straight into the next product's A
//        operand (see cuda/mma.cuh). Softmax runs in base 2 with the scale folded in:
//        exp(x) = exp2(x log2 e), in the forward one FFMA and one EX2 (cuda/fast_exp2.cuh), its
//        running max moved only when a score passes it by 2^8 (then O is rescaled). Shared
//        memory at D = 128 / 64: forward 96 / 48 KB, dQ 128 / 48 KB, dK/dV 96.5 / 32.5 KB.
//        D = 256 (twice the registers a row): the forward 64 queries, 4 warps of one m16 row
//        tile, K/V tiles of 32 keys (96 KB, two blocks an SM); the backward 128 rows, 8 warps of
//        16, one block an SM (dQ 192 KB: K/V tiles of 32 keys, Q and dO fragments read from
//        shared memory; dK/dV 192.5 KB: two sweeps over the queries, dV then dK, the second
//        rebuilding P, five products a step instead of four). Every kernel of this file runs in
//        CI on the host emulator against the CPU reference (tests/emu/test_attention_emu.cpp).
//        On the H200 (ncu, commit a485f34, B4 T4096 H16 D128 bf16 causal): forward 1.009 ms
//        (~274 TFLOP/s; 1.156 with one 8-warp block an SM), dQ 1.72 ms, dK/dV 2.50 ms; torch
//        SDPA's flash kernels take 0.499 and ~1.5 (targets.md).
//   wgmma: the forward and the backward at D = Dv = 64, 128 and 256 on Hopper's warpgroup MMA
//        (sm_90a). The forward is warp-specialised: a producer warpgroup loads K/V tiles of 128
//        keys (64 at D = 256) into a ring of 3 (2 at D = 256) for consumer warpgroups of 64
//        queries each (three at D = 64, 192 queries a block; two at D = 128 and 256;
//        wg_blocking), S and O += P V as wgmma products (P from S's registers; a tile's softmax
//        runs while the P V of the tile before does, and at D = 128 the consumers issue their
//        products in turns), the mma forward's mask, online softmax and epilogue (shared
//        helpers): the row max and sum as pairwise trees (tree_reduce), each row deciding its
//        own rescale, every descriptor of a tile advanced from one by adds (advance_desc), the
//        output staged through shared memory. The backward is the mma backward's two kernels
//        with 64-row warpgroup products (at D = 256 dK/dV in two warpgroups, one an output; its
//        section says how); on the emulator its gradients are the mma backward's to the
//        printed digit. At D = 128 on long rows it runs instead as one warp-specialised kernel
//        that adds dQ's shares in a fixed order (set_attention_fused_backward; its section says
//        how). Which pass runs on wgmma: set_attention_wgmma / set_attention_wgmma_backward
//        (cuda/attention.h), by default every pass in sm_90a builds; the defaults and the
//        measurements behind them are at g_wgmma_forward and g_fused_backward below, the
//        sessions' timings against SDPA in bench/README. Emulator groups `wgmma`, `wgmma-bwd`,
//        `fused-bwd`.
//   fma: plain fp32 arithmetic, any D, Dv <= 256, F32 or BF16 storage: one warp per row, keys
//        (or queries) in shared-memory tiles of 32, one per lane. The readable version, and the
//        fp32 path.
#include <algorithm>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "cuda/attention.h"
#include "cuda/common.cuh"
#include "cuda/fast_exp2.cuh"
#include "cuda/mma.cuh"
#include "cuda/tile.cuh"
#include "cuda/wgmma.cuh"

namespace hla::cuda {
namespace {

using bf16 = __nv_bfloat16;
constexpr float kLog2e = 1.4426950408889634f;

// Whether key s is visible from query t by causality and the window; whether some key of
// [s_first, s_last] is visible from some query of [t_first, t_last], and whether every key is
// visible from every query (then no mask is needed).
__device__ __forceinline__ bool visible(int t, int s, int window) { return s <= t && (window == 0 || t - s < window); }
__device__ __forceinline__ bool any_visible(int t_first, int t_last, int s_first, int s_last, int window) {
  return s_first <= t_last && (window == 0 || t_first - s_last < window);
}
__device__ __forceinline__ bool all_visible(int t_first, int t_last, int s_first, int s_last, int window) {
  return s_last <= t_first && (window == 0 || t_last - s_first < window);
}

// Packed documents (varlen): query t of a batch row sees no key before doc_start[t], the first
// token of its document, on top of causality and the window. doc_start never decreases along t,
// so a tile of queries x keys needs only its corners: its last key must reach doc_start[first
// query] for some pair to be visible, its first key doc_start[last query] for all.
// DocumentMask<false> is the window tests alone, so the kernels without documents are the kernels
// they were (the mma kernels' registers are at the cap). Garbage in doc_start could only empty
// rows, never make a kernel read out of bounds.
template <bool DOCS>
struct DocumentMask {
  const int32_t* doc_start;  // (B, T), or (T) once row() picked a row; null: one document a row
  int T;
  __device__ DocumentMask row(int b) const { return {DOCS && doc_start ? doc_start + int64_t(b) * T : nullptr, T}; }
  __device__ bool on() const { return DOCS && doc_start; }
  __device__ int start(int t) const { return doc_start[min(t, T - 1)]; }  // on() only
  // visible, any_visible and all_visible (above) with the documents; without them, those alone.
  __device__ bool visible(int t, int s, int window) const {
    if constexpr (!DOCS) return ::hla::cuda::visible(t, s, window);
    else return ::hla::cuda::visible(t, s, window) && (!on() || s >= start(t));
  }
  __device__ bool any_visible(int t_first, int t_last, int s_first, int s_last, int window) const {
    if constexpr (!DOCS) return ::hla::cuda::any_visible(t_first, t_last, s_first, s_last, window);
    else
      return ::hla::cuda::any_visible(t_first, t_last, s_first, s_last, window) && (!on() || s_last >= start(t_first));
  }
  __device__ bool all_visible(int t_first, int t_last, int s_first, int s_last, int window) const {
    if constexpr (!DOCS) return ::hla::cuda::all_visible(t_first, t_last, s_first, s_last, window);
    else
      return ::hla::cuda::all_visible(t_first, t_last, s_first, s_last, window) && (!on() || s_first >= start(t_last));
  }
  // The first key query t sees, given `first` from causality and the window.
  __device__ int first_key(int t, int first) const { return on() ? max(first, start(t)) : first; }
  // The first key query t sees: key s is visible from t iff first_visible_key(t) <= s <= t. The
  // mma kernels compute it once per row of a thread and mask with these two comparisons.
  __device__ int first_visible_key(int t, int window) const {
    return first_key(t, window > 0 ? max(0, t - window + 1) : 0);
  }
  // The last query that sees key s, given `last` from causality, the window and T: not past the
  // end of s's document (a binary search: doc_start[t] <= s holds exactly for t up to there).
  __device__ int last_query(int s, int last) const {
    if (on()) {
      int lo = min(s, last);  // doc_start[lo] <= lo
      while (lo < last) {
        const int mid = lo + (last - lo + 1) / 2;
        if (doc_start[mid] <= s) lo = mid;
        else last = mid - 1;
      }
    }
    return last;
  }
};

// Launches kernel(params...) on grid x threads with `bytes` of dynamic shared memory (more than
// 48 KB allowed where needed) on `stream` and checks the launch.
template <class Kernel, class... Params>
void launch_on(cudaStream_t stream, Kernel kernel, dim3 grid, int threads, size_t bytes, Params... params) {
  if (bytes > 48 * 1024)
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  kernel<<<grid, threads, bytes, stream>>>(params...);
  CUDA_CHECK_LAUNCH();
}

// launch_on hla's stream.
template <class Kernel, class... Params>
void launch(Kernel kernel, dim3 grid, int threads, size_t bytes, Params... params) {
  launch_on(cudaStreamPerThread, kernel, grid, threads, bytes, params...);
}

// ------------------------------------------------------------------------------------------
// mma path. Every warp owns row tiles of 16 rows (one in the backward, two in the forward, one
// in the forward at D = 256); per-thread rows inside a row tile: lane / 4 and +8 (queries, or
// keys for dK/dV); a warp skips the tiles none of its rows sees.

// Keys per K/V tile of the forward and dQ kernels: 64, and 32 at D = 256 (shared memory).
constexpr int mma_cols(int D) { return D == 256 ? 32 : 64; }
constexpr int kMmaQueries = 32;  // queries per step of the dK/dV kernel

// The forward's block: 4 warps of 32 rows (two m16 row tiles each, so every K and V fragment read
// from shared memory feeds two mma), 128 queries, K/V tiles of 64 keys (mma_cols) taken in two
// steps of 32 (S of 32 rows x 64 keys, 64 registers beside O's 128 at D = 128, spilled at the
// 255 cap). Two blocks an SM at D = 128 (<= 255 registers, 2 x 96 KB), three at D = 64 (<= 168,
// 3 x 48 KB). D = 256: one row tile a warp (O is 128 registers already), 64 queries, K/V tiles
// of 32 keys, one step each: two blocks an SM (<= 255 registers, 2 x 96 KB).
constexpr int kFwdWarps = 4;
constexpr int fwd_row_tiles(int D) { return D == 256 ? 1 : 2; }  // m16 row tiles a warp
constexpr int kFwdThreads = 32 * kFwdWarps;
constexpr int fwd_rows(int D) { return 16 * fwd_row_tiles(D) * kFwdWarps; }  // queries per block of the forward
constexpr int kFwdStep = 32;                                                  // keys per softmax step of the forward
constexpr int fwd_blocks_per_sm(int D) { return D == 64 ? 3 : 2; }
constexpr float kMaxSlack = 8.0f;  // log2 units: the forward's running max may lag the true one by this

// The backward kernels' warps per block and the blocks an SM their registers are capped for.
// D = 128: 4 warps (64-row blocks), two blocks an SM. 128-row blocks of 8 warps, one an SM, were
// measured slower on the H200 twice: at B4 T4096 H16 bf16, dQ 1.755 ms and dK/dV 2.673 against
// the 64-row kernels' 1.628 and 2.485 (ncu, 8e0b4a4 vs 4150e97), as in e9d37a7 before. D = 64:
// 4 warps, three blocks an SM (12 warps): 8 warps an SM at D = 64 (128-row blocks and steps,
// spilling) took 1.90 ms against these 12 warps' 1.35 at B8 T2048 H16 (commit e9d37a7).
// D = 256: 8 warps (128-row blocks), one block an SM (192 KB of shared memory; 4-warp blocks
// would take 128 KB, also one an SM).
struct BwdBlocking {
  int warps, blocks_per_sm;
};
constexpr BwdBlocking bwd_blocking(int D) {
  return D == 64 ? BwdBlocking{4, 3} : D == 128 ? BwdBlocking{4, 2} : BwdBlocking{8, 1};
}

// The mma kernels' grids are (heads, B, row blocks), row blocks slowest, blockIdx.z = 0 the
// longest (the last queries, or the first keys). The scheduler starts blocks in index order, so
// every (head, batch)'s longest block starts before any shorter one and the last blocks to start
// are the shortest: the SMs finish together instead of one running a long block late (~7% of a
// causal backward at B 4, T 4096, H 16, one block an SM, by a list-scheduling count).

// S (16 MT x 8 NT per warp) += A (16 MT x W, rows warp * 16 MT.. of sA) . B^T where B is the
// (8 NT x W) tile sB. Row tile mt's n-tile nt is s[mt * NT + nt]; every B fragment read from
// shared memory feeds MT mma. Row tile 1 is written out under `if constexpr` (as in mma_pb) so
// that the backward's MT = 1 code is what it was. At W = 256 the k loop is unrolled 4 deep, not
// 16: fully unrolled, ptxas hoisted so many fragment loads that the D = 256 backward kernels
// spilled (40 to 56 bytes; none at 4).
template <int W, int NT, int MT = 1>
__device__ __forceinline__ void mma_abt(float (&s)[MT * NT][4], const bf16* sA, const bf16* sB) {
  static_assert(MT == 1 || MT == 2, "one or two row tiles");
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll(W == 256 ? 4 : W / 16)
  for (int kk = 0; kk < W / 16; kk++) {
    uint32_t a[MT][4];
    ldmatrix_x4(a[0], sA + swizzle<W>(warp * 16 * MT + lane % 16, kk * 16 + (lane / 16) * 8));
    if constexpr (MT == 2) ldmatrix_x4(a[1], sA + swizzle<W>(warp * 32 + 16 + lane % 16, kk * 16 + (lane / 16) * 8));
#pragma unroll
    for (int np = 0; np < NT / 2; np++) {
      uint32_t b[4];
      ldmatrix_x4(b, sB + swizzle<W>(np * 16 + lane % 8 + (lane / 16) * 8, kk * 16 + ((lane / 8) % 2) * 8));
      mma_bf16_16816(s[2 * np], a[0], b[0], b[1]);
      mma_bf16_16816(s[2 * np + 1], a[0], b[2], b[3]);
      if constexpr (MT == 2) {
        mma_bf16_16816(s[NT + 2 * np], a[1], b[0], b[1]);
        mma_bf16_16816(s[NT + 2 * np + 1], a[1], b[2], b[3]);
      }
    }
  }
}

// Same with A already in registers (the Q fragments of the forward).
template <int W, int NT>
__device__ __forceinline__ void mma_abt_reg(float (&s)[NT][4], const uint32_t (&a)[W / 16][4], const bf16* sB) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int kk = 0; kk < W / 16; kk++)
#pragma unroll
    for (int np = 0; np < NT / 2; np++) {
      uint32_t b[4];
      ldmatrix_x4(b, sB + swizzle<W>(np * 16 + lane % 8 + (lane / 16) * 8, kk * 16 + ((lane / 8) % 2) * 8));
      mma_bf16_16816(s[2 * np], a[kk], b[0], b[1]);
      mma_bf16_16816(s[2 * np + 1], a[kk], b[2], b[3]);
    }
}

// The A fragment (16 x 16) of P from the accumulators of two neighbouring n-tiles, rounded to
// bf16 (the layouts in cuda/mma.cuh).
__device__ __forceinline__ void pack_fragment(uint32_t (&a)[4], const float (&p0)[4], const float (&p1)[4]) {
  a[0] = pack_bf16(p0[0], p0[1]);
  a[1] = pack_bf16(p0[2], p0[3]);
  a[2] = pack_bf16(p1[0], p1[1]);
  a[3] = pack_bf16(p1[2], p1[3]);
}

// acc (16 MT x W) += P (16 MT x 8 NT, accumulator layout, rounded to bf16) . B where B is the
// (8 NT x W) tile sB. Row tile mt's parts: acc[mt * W / 8 + dt], p[mt * NT + nt]; every B
// fragment read from shared memory feeds MT mma.
template <int W, int NT, int MT = 1>
__device__ __forceinline__ void mma_pb(float (&acc)[MT * W / 8][4], const float (&p)[MT * NT][4], const bf16* sB) {
  // Row tile 1 written out under `if constexpr` rather than as a loop over mt: a loop, even of
  // one trip, made ptxas spill the dQ kernel (12 bytes at D = 128, 44 at D = 64), and a loop in
  // mma_abt changed the dK/dV kernel's code.
  static_assert(MT == 1 || MT == 2, "one or two row tiles");
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int j = 0; j < NT / 2; j++) {
    uint32_t a[MT][4];
    pack_fragment(a[0], p[2 * j], p[2 * j + 1]);
    if constexpr (MT == 2) pack_fragment(a[1], p[NT + 2 * j], p[NT + 2 * j + 1]);
#pragma unroll
    for (int dp = 0; dp < W / 16; dp++) {
      uint32_t b[4];
      ldmatrix_x4_trans(b, sB + swizzle<W>(j * 16 + lane % 8 + ((lane / 8) % 2) * 8, dp * 16 + (lane / 16) * 8));
      mma_bf16_16816(acc[2 * dp], a[0], b[0], b[1]);
      mma_bf16_16816(acc[2 * dp + 1], a[0], b[2], b[3]);
      if constexpr (MT == 2) {
        mma_bf16_16816(acc[W / 8 + 2 * dp], a[1], b[0], b[1]);
        mma_bf16_16816(acc[W / 8 + 2 * dp + 1], a[1], b[2], b[3]);
      }
    }
  }
}

// Writes 16 rows x W of acc (W / 8 n-tiles of an accumulator) times mul as bf16: this thread's
// first row to out + offset0, its second (8 below) to out + offset1.
template <int W>
__device__ __forceinline__ void store_rows(bf16* out, const float (*acc)[4], int64_t offset0, int64_t offset1,
                                           bool valid0, bool valid1, float mul0, float mul1) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int dt = 0; dt < W / 8; dt++) {
    const int c = dt * 8 + (lane % 4) * 2;
    if (valid0) *reinterpret_cast<uint32_t*>(out + offset0 + c) = pack_bf16(acc[dt][0] * mul0, acc[dt][1] * mul0);
    if (valid1) *reinterpret_cast<uint32_t*>(out + offset1 + c) = pack_bf16(acc[dt][2] * mul1, acc[dt][3] * mul1);
  }
}

// The forwards' (mma and wgmma) per-thread view of a step: S's rows in row tiles of 16 as
// mma.m16n8k16's accumulators (wgmma's D fragment is the same in each 8-column block), row tile
// mt's n-tile nt at s[mt * NT + nt]; this thread's row r = 2 mt + half at elements 2 half and
// 2 half + 1 of each, query t_row(r); O likewise at acc[mt * D / 8 + dt].

// Invisible keys -> -inf on a step of keys s0 .. s0 + 8 NT - 1 that some row sees only in part.
template <int NT, int MT, bool DOCS, class RowOf>
__device__ __forceinline__ void mask_scores(float (&s)[MT * NT][4], const DocumentMask<DOCS>& docs, int window,
                                            int s0, const RowOf& t_row) {
  const int lane = threadIdx.x % 32;
  int key_first[2 * MT];  // row r sees keys key_first[r] .. t_row(r)
#pragma unroll
  for (int r = 0; r < 2 * MT; r++) key_first[r] = docs.first_visible_key(t_row(r), window);
#pragma unroll
  for (int i = 0; i < MT * NT; i++)
#pragma unroll
    for (int e = 0; e < 4; e++) {
      const int r = 2 * (i / NT) + e / 2, key = s0 + (i % NT) * 8 + (lane % 4) * 2 + e % 2;
      if (key < key_first[r] || key > t_row(r)) s[i][e] = -INFINITY;
    }
}

// v[0] becomes op over v's N values by a pairwise tree: log2 N dependent steps where a running
// op takes N. The forwards' row max and sum of a step were such chains (2 NT long), on the
// wgmma forward's critical path: ncu (H200, D = 128) sampled its consumers in the softmax half
// of their time at ~0.2 instructions a cycle, mostly waiting on the instruction before.
template <int N, class Op>
__device__ __forceinline__ float tree_reduce(float (&v)[N], const Op& op) {
#pragma unroll
  for (int stride = 1; stride < N; stride *= 2)
#pragma unroll
    for (int i = 0; i + stride < N; i += 2 * stride) v[i] = op(v[i], v[i + stride]);
  return v[0];
}

// Online softmax over one step: S (unscaled) becomes P = exp(scale S - m), l and O follow m.
// Each row's max and sum are spread over the 4 lanes of a quad. A row's running max m (log2
// units) only moves (and its O and l are rescaled) when the row sees a score above
// m + kMaxSlack: until then P <= 2^kMaxSlack, exact in fp32 and as precise in bf16, and the
// result O / l, lse = m + log l is the same. Past the first keys of a row that is rare. Each row
// decides for itself (the 4 lanes of its quad agree): a vote of the whole warp, so that its
// branch was uniform, put three more dependent shuffles between the row max and the first
// exponential, on the wgmma forward's critical path. O is rescaled by rescale_row(r, alpha): row
// r times alpha = e^(m - m') (rescale_row below, at once; the wgmma forward keeps alpha until the
// product still writing O is done).
template <int NT, int MT, class RescaleRow>
__device__ __forceinline__ void online_softmax(float (&s)[MT * NT][4], float (&m)[2 * MT], float (&l)[2 * MT],
                                               float scale_log2, const RescaleRow& rescale_row) {
  constexpr int kRowsPerThread = 2 * MT;
  float tile_max[kRowsPerThread];  // log2 units
#pragma unroll
  for (int r = 0; r < kRowsPerThread; r++) {
    const float(*sr)[4] = s + (r / 2) * NT;
    const int e0 = 2 * (r % 2);
    float row[2 * NT];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) row[2 * nt] = sr[nt][e0], row[2 * nt + 1] = sr[nt][e0 + 1];
    float mx = tree_reduce(row, [](float a, float b) { return fmaxf(a, b); });
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    tile_max[r] = mx * scale_log2;
  }
#pragma unroll
  for (int r = 0; r < kRowsPerThread; r++)
    if (tile_max[r] > m[r] + kMaxSlack) {  // true for a row's first visible key (m = -inf)
      const float alpha = exp2_ftz(m[r] - tile_max[r]);  // e^(m - m'); 0 from m = -inf
      m[r] = tile_max[r];
      l[r] *= alpha;
      rescale_row(r, alpha);
    }
#pragma unroll
  for (int r = 0; r < kRowsPerThread; r++) {
    float(*sr)[4] = s + (r / 2) * NT;
    const int e0 = 2 * (r % 2);
    const float base = m[r] == -INFINITY ? 0.0f : m[r];  // a row with no visible key yet
    float row[2 * NT];
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
      for (int e = e0; e < e0 + 2; e++) {
        sr[nt][e] = exp2_ftz(fmaf(sr[nt][e], scale_log2, -base));  // P = exp(scale S - m)
        row[2 * nt + e - e0] = sr[nt][e];
      }
    l[r] += tree_reduce(row, [](float a, float b) { return a + b; });
  }
}

// This thread's row r of O (acc, 16 MT x D as above) times alpha.
template <int D, int MT>
__device__ __forceinline__ void rescale_row(float (&acc)[MT * D / 8][4], int r, float alpha) {
  float(*acc_r)[4] = acc + (r / 2) * (D / 8);
  const int e0 = 2 * (r % 2);
#pragma unroll
  for (int dt = 0; dt < D / 8; dt++) {
    acc_r[dt][e0] *= alpha;
    acc_r[dt][e0 + 1] *= alpha;
  }
}

// Each row's l summed over the 4 lanes of its quad (every lane gets it).
template <int MT>
__device__ __forceinline__ void quad_sums(float (&l)[2 * MT]) {
#pragma unroll
  for (int r = 0; r < 2 * MT; r++) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
}
// lse = (m + log2 l) ln 2 into lse (B, H, T) for this thread's rows (lane 0 of each quad).
template <int MT, class RowOf>
__device__ __forceinline__ void store_lse(float* lse, const float (&m)[2 * MT], const float (&l)[2 * MT],
                                          const RowOf& t_row, int b, int h, int T, int H) {
  if (threadIdx.x % 4 == 0)
#pragma unroll
    for (int r = 0; r < 2 * MT; r++)
      if (t_row(r) < T) lse[(int64_t(b) * H + h) * T + t_row(r)] = (m[r] + log2f(l[r])) / kLog2e;
}

// The forwards' epilogue: O /= l into o (B, T, H, D), lse = (m + log2 l) ln 2 into lse (B, H, T),
// rows past T skipped.
template <int D, int MT, class RowOf>
__device__ __forceinline__ void store_output(bf16* o, float* lse, const float (&acc)[MT * D / 8][4],
                                             const float (&m)[2 * MT], float (&l)[2 * MT], const RowOf& t_row, int b,
                                             int h, int T, int H) {
  quad_sums<MT>(l);
#pragma unroll
  for (int mt = 0; mt < MT; mt++) {
    const int t0 = t_row(2 * mt), t1 = t_row(2 * mt + 1);
    store_rows<D>(o, acc + mt * (D / 8), (int64_t(b) * T + t0) * H * D + int64_t(h) * D,
                  (int64_t(b) * T + t1) * H * D + int64_t(h) * D, t0 < T, t1 < T, 1.0f / l[2 * mt],
                  1.0f / l[2 * mt + 1]);
  }
  store_lse<MT>(lse, m, l, t_row, b, h, T, H);
}

// o: (B, T, H, D), lse: (B, H, T). Grid (H, B, blocks of 128 queries), the longest (last)
// blocks first. Warp w owns rows 32 w .. 32 w + 31 of the block as two m16 row tiles; a warp
// skips the 32-key steps none of its rows sees (above the diagonal, before the window or its
// document, past T) and masks only the steps some of its rows see in part. Per 64 keys at
// D = 128 a warp issues 256 mma (QK^T 128, PV 128) over 96 ldmatrix.x4 (Q 32: re-read every
// 32-key step; K 32, V^T 32): 0.375 a mma, where the 16-row warps with Q in registers before
// needed 0.5; and a thread 64 FFMA + 64 EX2 for P, 64 max, 64 add, 32 packs, 22 shuffles; the
// 128 multiplies of the O rescale only on the rare steps where the max moves (pass 2). Q stays
// in shared memory (in registers it would not fit beside O and S). Registers (ptxas, sm_90, no
// spills): D = 128 248 (O 128, S 32), D = 64 164 (with documents 249 and 167). D = 256: 64-query
// blocks, warp w owns rows 16 w .. 16 w + 15 (one row tile: O is 128 registers), one 32-key step
// a K/V tile; 248 registers (O 128, S 16). The mask (on steps some rows see in part) compares
// keys with each row's first visible key, found once a masked step.
template <int D, bool DOCS>
__global__ void __launch_bounds__(kFwdThreads, fwd_blocks_per_sm(D))
    attention_forward_mma(bf16* o, float* lse, const bf16* q, const bf16* k, const bf16* v, int T, int H, int Hkv,
                          float scale_log2, int window, DocumentMask<DOCS> documents) {
  constexpr int NT = kFwdStep / 8, MT = fwd_row_tiles(D), kRowsPerThread = 2 * MT;
  constexpr int kRows = fwd_rows(D), kCols = mma_cols(D);
  extern __shared__ float4 smem_raw[];
  bf16* sQ = reinterpret_cast<bf16*>(smem_raw);  // sQ: (kRows, D)
  bf16* sK = sQ + kRows * D;                     // sK: 2 x (kCols, D)
  bf16* sV = sK + 2 * kCols * D;                 // sV: 2 x (kCols, D)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int q0 = (gridDim.z - 1 - blockIdx.z) * kRows, h = blockIdx.x, b = blockIdx.y, hk = h / (H / Hkv);
  const int64_t q_stride = int64_t(H) * D, kv_stride = int64_t(Hkv) * D;
  const bf16* qh = q + int64_t(b) * T * q_stride + int64_t(h) * D;  // row t at qh + t * q_stride
  const bf16* kh = k + int64_t(b) * T * kv_stride + int64_t(hk) * D;
  const bf16* vh = v + int64_t(b) * T * kv_stride + int64_t(hk) * D;
  const DocumentMask<DOCS> docs = documents.row(b);
  const int kb_first = docs.first_visible_key(q0, window) / kCols;
  const int kb_last = min(T - 1, q0 + kRows - 1) / kCols;
  const int w_first = q0 + warp * 16 * MT, w_last = w_first + 16 * MT - 1;  // this warp's rows
  // this thread's rows: r = 2 mt + half is row tile mt's lane / 4 + 8 half
  const auto t_row = [&](int r) { return w_first + (r / 2) * 16 + (r % 2) * 8 + lane / 4; };

  load_tile_async<kRows, D, kFwdThreads, 0>(sQ, qh, q_stride, q0, T);
  load_tile_async<kCols, D, kFwdThreads, 0>(sK, kh, kv_stride, kb_first * kCols, T);
  load_tile_async<kCols, D, kFwdThreads, 0>(sV, vh, kv_stride, kb_first * kCols, T);
  cp_async_commit();

  float acc[MT * D / 8][4] = {};  // acc: (16 MT, D) unnormalised O, row tile mt at acc[mt * D / 8..]
  float m[kRowsPerThread], l[kRowsPerThread];  // each row's running max (log2 units; pass 2) and sum
#pragma unroll
  for (int r = 0; r < kRowsPerThread; r++) m[r] = -INFINITY, l[r] = 0;
  for (int kb = kb_first; kb <= kb_last; kb++) {
    const int buf = (kb - kb_first) & 1, k0 = kb * kCols;
    cp_async_wait_all();
    __syncthreads();  // tile kb (and Q) landed; every warp is done with tile kb - 1
    if (kb < kb_last) {
      load_tile_async<kCols, D, kFwdThreads, 0>(sK + (buf ^ 1) * kCols * D, kh, kv_stride, k0 + kCols, T);
      load_tile_async<kCols, D, kFwdThreads, 0>(sV + (buf ^ 1) * kCols * D, vh, kv_stride, k0 + kCols, T);
    }
    cp_async_commit();
    for (int s0 = k0; s0 < k0 + kCols; s0 += kFwdStep) {  // keys s0 .. s0 + kFwdStep - 1
      // A step with no key visible to any row of the warp changes nothing (P = 0).
      if (w_first >= T || !docs.any_visible(w_first, w_last, s0, s0 + kFwdStep - 1, window)) continue;

      // pass 1: S = Q K^T (unscaled), invisible keys -> -inf (only on steps some row sees in part)
      float s[MT * NT][4] = {};
      mma_abt<D, NT, MT>(s, sQ, sK + (buf * kCols + s0 - k0) * D);
      if (!docs.all_visible(w_first, w_last, s0, s0 + kFwdStep - 1, window))
        mask_scores<NT, MT>(s, docs, window, s0, t_row);
      // pass 2: online softmax
      online_softmax<NT, MT>(s, m, l, scale_log2, [&](int r, float alpha) { rescale_row<D, MT>(acc, r, alpha); });
      // pass 3: O += P V
      mma_pb<D, NT, MT>(acc, s, sV + (buf * kCols + s0 - k0) * D);
    }
  }

  store_output<D, MT>(o, lse, acc, m, l, t_row, b, h, T, H);
}

// ------------------------------------------------------------------------------------------
// wgmma path: the forward at D = Dv = 64, 128 and 256 on Hopper's warpgroup MMA (cuda/wgmma.cuh,
// sm_90a), the default at all three (measured faster than the mma forward; at D = 256 on the H100,
// 2026-12-05, B8 T2048 H4: 0.187-0.197 ms against 0.350; set_attention_wgmma, cuda/attention.h,
// chooses); the mma forward stays its oracle. Warp-specialised: a block is a producer warpgroup and wg_blocking(D).consumers consumer
// warpgroups of 64 queries each: three at D = 64 (192 queries), two at D = 128 and 256 (128).
// Warpgroup 0, the producer, only loads: Q, then the K/V tiles (wg_blocking: 128 keys, 64 at
// D = 256) into a ring of buffers, up to stages - 1 tiles ahead of the consumers (cp.async groups), handing
// each tile over to each consumer with a named barrier ("full", one per consumer) once it landed
// and taking its buffer back with another ("free"); it gives its registers to the consumers
// (setmaxnreg, wg_blocking: at D = 128 they hold S 64, P 32 and O 64 a thread in 232; without the
// move, capped at 168, they spilled 240 bytes; at D = 64 three hold O 32 in 160).
// Consumer warpgroup c owns queries 64 c .. 64 c + 63 of the block, its warp w rows
// 16 w .. 16 w + 15, a thread rows lane / 4 and + 8 of them: the layout of the mma forward at
// MT = 1, so masking, online softmax and the epilogue are its code. Every consumer reads each
// K/V tile the producer loaded once. Q, K and V sit in shared memory as 64-wide swizzled panels
// (the 128-byte swizzle of cuda/wgmma_desc.cuh: a (rows x D) matrix is D / 64 (rows x 64) tiles,
// each on a 1024-byte boundary). A consumer per tile:
//   pass 1: S (64 x cols) = Q K^T, D / 16 k16 products, Q and K read K-major through descriptors;
//   pass 2: mask (on tiles some row sees in part) and online softmax, in S's registers;
//   pass 3: O (64 x D) += P V, cols / 16 k16 products, P's A fragments packed from S's registers, V
//           read N-major (its D / 64 panels are N's 64-wide parts), issued with the next tile's S.
// Pipelined (FlashAttention-3's intra-warpgroup overlap): the consumer issues tile n's S = Q K^T,
// then tile n - 1's O += P V, and runs tile n's mask and softmax while the latter is in flight;
// the rescale of O that tile n's max asks for, and the new P, wait for it. At D = 128, ping-pong
// between the consumers (FlashAttention-3's inter-warpgroup scheduling): they issue their
// products in turns, passed round through named barriers, so that the others' softmaxes run
// beside one's products (wg_blocking says where, and what it was measured to give). A product is
// issued by all 128 threads of a consumer, so it skips only the tiles none of its 64 rows sees
// (above its diagonal, before its window or document: a contiguous run; it still takes part in
// their barriers), and masks only those some row sees in part; a warp whose rows see none of a
// tile it computes gets P = 0 there. Shared memory: Q 128 D bytes a
// consumer + stages x 4 cols D (+1 KB for the alignment): 225 KB at D = 128 (of 227), 121 KB at
// D = 64, 193 KB at D = 256; one block an SM.
constexpr int kWgRows = 64;                                   // queries per consumer: wgmma's M
constexpr int kWgThreads = 128;                               // a warpgroup
// The forward's block at head width D:
// its consumer warpgroups, the registers a thread that setmaxnreg gives the producer and each
// consumer (one block an SM: 64 K registers a block), whether the consumers issue their products
// in turns (ping-pong), the keys of a K/V tile (S's N) and the tiles in the ring.
// D = 64: three consumers (192 queries: each K/V tile loaded feeds three, and two softmaxes run
// beside a consumer's products), 128 x 32 + 384 x 160 = 64 K (O 32, S 64, P 32 a thread; ptxas
// spills the consumers at 152, the producer at 24), no turns. D = 128: two (O 64, S 64, P 32 a
// thread would not fit in 160), 128 x 40 + 256 x 232 <= 64 K, in turns. Measured both ways in one
// H200 run (2026-12-04, bf16 causal, hla bench, two runs each): at B8 T2048 H16 D64 turns cost
// 0.311-0.320 ms against 0.289-0.295 without (ncu at D = 64 with turns: consumers waited for
// their turn about a quarter of their time; a round's products are ~26% of its cycles at the
// tensor cores' rate); at B4 T4096 H16 D128 they gave 0.896-0.911 against 0.956-0.961. Tiles of
// 128 keys in a ring of 3 (225 KB at D = 128).
// (D = 64's block at D = 128, three consumers without turns on tiles of 64 keys, measured on the
// H100 (2026-12-05): 0.621 ms against 0.594 at B4 T4096 H16, 2.270 against 2.391 at T = 16384;
// a persistent block, one an SM taking query blocks from a counter with Q in two buffers, was
// slower at both widths: 0.790 at D = 128, 0.233 against 0.217 at B8 T2048 H16 D64.)
// D = 256: two consumers in turns on tiles of 64 keys in a ring of 2 (O 128, S 32, P 16 a thread;
// 192 KB), O += P V as two N = 128 halves (wgmma_xb).
struct WgBlocking {
  int consumers, producer_regs, consumer_regs;
  bool ping_pong;
  int cols, stages;
};
constexpr WgBlocking wg_blocking(int D) {
  if (D == 64) return {3, 32, 160, false, 128, 3};
  if (D == 128) return {2, 40, 232, true, 128, 3};
  return {2, 40, 232, true, 64, 2};
}
constexpr int wg_block_rows(int D) { return wg_blocking(D).consumers * kWgRows; }  // queries per block
constexpr int wg_block_threads(int D) { return (1 + wg_blocking(D).consumers) * kWgThreads; }
// Named barrier ids at head width D: stage s free at kWgFree + s; stage s full for consumer c at
// wg_full(D, s, c), one barrier per consumer (the producer's and that consumer's threads), so
// that a consumer takes a tile as soon as it landed (with one barrier over the block, each took
// it only once the slowest consumer was done with the tile before); consumer c's turn
// (ping-pong) at wg_turn(D, c).
constexpr int kWgFree = 1;
constexpr int wg_full(int D, int stage, int consumer) {
  return kWgFree + wg_blocking(D).stages + stage * wg_blocking(D).consumers + consumer;
}
constexpr int wg_turn(int D, int consumer) { return wg_full(D, wg_blocking(D).stages, consumer); }
constexpr bool wg_blocking_fits(int D) {
  const WgBlocking w = wg_blocking(D);
  return (w.consumers >= 2 || !w.ping_pong) && wg_turn(D, w.consumers) <= 16 &&
         kWgThreads * (w.producer_regs + w.consumers * w.consumer_regs) <= 64 * 1024;
}
static_assert(wg_blocking_fits(64) && wg_blocking_fits(128) && wg_blocking_fits(256),
              "ping-pong takes two consumers; 16 named barriers and 64 K registers a block");
constexpr int kWgPanel = 64;                                  // elements of a swizzled row (128 bytes)
constexpr size_t wg_smem(int D) {
  return kWgmmaTileAlign +
         sizeof(bf16) * (wg_block_rows(D) + 2 * wg_blocking(D).stages * wg_blocking(D).cols) * D;
}

// Copies rows [row0, row0 + ROWS) of a (T, ...) global matrix of D columns, rows `stride`
// apart, into D / 64 swizzled (ROWS x 64) panels, column block p at tile + p ROWS 64; rows at
// or past T become zeros. Threads 0 .. THREADS - 1 (a warpgroup: the producer, or a block; the
// fused backward's loading warps, short of registers: their passes one at a time, UNROLL 1).
template <int ROWS, int D, int THREADS = kWgThreads, int UNROLL = 2>
__device__ __forceinline__ void load_panels_async(bf16* tile, const bf16* g, int64_t stride, int row0, int T) {
#pragma unroll
  for (int p = 0; p < D / kWgPanel; p++)
    load_tile_async<ROWS, kWgPanel, THREADS, UNROLL>(tile + p * ROWS * kWgPanel, g + p * kWgPanel, stride, row0, T);
}
// Bytes from the start of a (ROWS x D) panelled matrix to its k16 slice kk (its K-major
// descriptor's address: advance_desc of the matrix's own).
template <int ROWS>
__device__ __forceinline__ constexpr uint32_t panel_slice_bytes(int kk) {
  return sizeof(bf16) * ((kk / 4) * ROWS * kWgPanel + 16 * (kk % 4));
}
// Bytes from the start of an N-major operand's first panel to its k16 slice j (row 16 j).
__device__ __forceinline__ constexpr uint32_t n_major_slice_bytes(int j) { return sizeof(bf16) * 16 * j * kWgPanel; }
// The two products of the wgmma attention kernels (forward and backward), issued, not committed:
// d = A B^T over the D columns of a panelled (64 x D) tile A and an (N x D) tile B, both read
// K-major, given by their descriptors (D / 16 k16 products; N = 128: the forward's S = Q K^T, 64:
// the backward's S and dP);
template <int D, int N>
__device__ __forceinline__ void wgmma_abt(float (&d)[N / 2], uint64_t a_desc, uint64_t b_desc) {
#pragma unroll
  for (int kk = 0; kk < D / 16; kk++)
    wgmma_m64k16<N>(d, advance_desc(a_desc, panel_slice_bytes<kWgRows>(kk)),
                    advance_desc(b_desc, panel_slice_bytes<N>(kk)), kk > 0);
}
// The descriptor of a panelled (K x D) tile read N-major (wgmma_xb's B).
template <int K>
__device__ __forceinline__ uint64_t n_major_desc(const bf16* b) {
  return smem_desc_n_major(b, K * kWgPanel * sizeof(bf16));
}
// acc (64 x D) += X B: X (64 x K) as A fragments packed from accumulator-layout floats (16
// columns a k16 slice), B that tile (its slice j starts 16 j rows into its first panel): K / 16
// k16 products (the forward's O += P V, the backward's dV, dK and dQ); at D = 256 for each
// half of the columns (N = 128: acc's first and second 64 floats, B's panels 0-1 and 2-3).
template <int D, int K>
__device__ __forceinline__ void wgmma_xb(float (&acc)[D / 2], const uint32_t (&x)[K / 16][4], uint64_t b_desc) {
  constexpr int N = D < 128 ? D : 128;
#pragma unroll
  for (int half = 0; half < D / N; half++) {
    float(&part)[N / 2] = *reinterpret_cast<float(*)[N / 2]>(acc + half * N / 2);
    const uint32_t panels = sizeof(bf16) * half * (N / kWgPanel) * K * kWgPanel;
#pragma unroll
    for (int j = 0; j < K / 16; j++)
      wgmma_m64k16<N, true>(part, x[j], advance_desc(b_desc, panels + n_major_slice_bytes(j)), true);
  }
}
// A float[N][4] seen as the float[4 N] of a wgmma accumulator (the same registers).
template <int N>
__device__ __forceinline__ float (&wgmma_acc(float (&a)[N][4]))[4 * N] {
  return reinterpret_cast<float(&)[4 * N]>(a);
}

// The wgmma forward's epilogue: store_output's sums and lse, but each warp puts its 16 rows of
// O / l, as bf16, into its rows of its consumer's Q tile (read no more once the last S product is
// done; the tile's own panels and swizzle, so the 32-bit writes of a warp hit 32 banks), then
// writes them out 16 bytes a lane, whole rows at a time: a quarter of store_output's store
// instructions, full sectors (bench/README, session 41: 0.623 -> 0.611 ms at B4 T4096 H16 D128).
// Every wgmma forward but the D = 64 documents kernel (below).
// tile: the consumer's (64, D) Q tile as D / 64 panels; c0: its first query.
template <int D, class RowOf>
__device__ __forceinline__ void store_output_staged(bf16* o, float* lse, const float (&acc)[D / 8][4],
                                                    const float (&m)[2], float (&l)[2], const RowOf& t_row, int b,
                                                    int h, int T, int H, bf16* tile, int c0) {
  const int warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
  const auto at = [&](int row, int col) {
    return tile + (col / kWgPanel) * kWgRows * kWgPanel + swizzle<kWgPanel>(row, col % kWgPanel);
  };
  quad_sums<1>(l);
  const float inv_l[2] = {1.0f / l[0], 1.0f / l[1]};
  // pass 1: this thread's pairs, rows 16 warp + lane / 4 + 8 r, columns 8 dt + 2 (lane % 4)
#pragma unroll
  for (int dt = 0; dt < D / 8; dt++)
#pragma unroll
    for (int r = 0; r < 2; r++)
      *reinterpret_cast<uint32_t*>(at(16 * warp + lane / 4 + 8 * r, 8 * dt + 2 * (lane % 4))) =
          pack_bf16(acc[dt][2 * r] * inv_l[r], acc[dt][2 * r + 1] * inv_l[r]);
  __syncwarp();
  // pass 2: the warp's 16 rows, D / 8 chunks of 16 bytes a row
#pragma unroll
  for (int i = lane; i < 16 * D / 8; i += 32) {
    const int row = 16 * warp + i / (D / 8), col = 8 * (i % (D / 8)), t = c0 + row;
    if (t < T)
      *reinterpret_cast<uint4*>(o + ((int64_t(b) * T + t) * H + h) * D + col) = *reinterpret_cast<const uint4*>(at(row, col));
  }
  store_lse<1>(lse, m, l, t_row, b, h, T, H);
}

// o: (B, T, H, D), lse: (B, H, T). Grid (H, B, blocks of wg_block_rows(D) queries), the longest
// (last) blocks first. The block takes the tiles from the first key its first query sees to its
// last query; tile n sits in stage n % kStages.
template <int D, bool DOCS>
__global__ void __launch_bounds__(wg_block_threads(D), 1)
    attention_forward_wgmma(bf16* o, float* lse, const bf16* q, const bf16* k, const bf16* v, int T, int H, int Hkv,
                            float scale_log2, int window, DocumentMask<DOCS> documents) {
  constexpr WgBlocking kBlocking = wg_blocking(D);
  constexpr int kCols = kBlocking.cols, kStages = kBlocking.stages;  // keys a K/V tile, tiles in the ring
  constexpr int NT = kCols / 8, kTile = kCols * D;                  // kTile: elements of a K or V tile
  constexpr int kConsumers = kBlocking.consumers, kBlockRows = wg_block_rows(D);
  constexpr int kBlockThreads = wg_block_threads(D);
  constexpr bool kPingPong = kBlocking.ping_pong;
  extern __shared__ float4 smem_raw[];
  // as D / 64 panels each: sQ: kConsumers x (kWgRows, D); sK, sV: kStages x (kCols, D)
  bf16* sQ = reinterpret_cast<bf16*>(align_wgmma_tiles(smem_raw));
  bf16* sK = sQ + kBlockRows * D;
  bf16* sV = sK + kStages * kTile;
  const int warpgroup = threadIdx.x / kWgThreads, warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
  const int q0 = (gridDim.z - 1 - blockIdx.z) * kBlockRows, h = blockIdx.x, b = blockIdx.y, hk = h / (H / Hkv);
  const int64_t q_stride = int64_t(H) * D, kv_stride = int64_t(Hkv) * D;
  const DocumentMask<DOCS> docs = documents.row(b);
  const int kb_first = docs.first_visible_key(q0, window) / kCols;
  const int tiles = min(T - 1, q0 + kBlockRows - 1) / kCols - kb_first + 1;

  if (warpgroup == 0) {  // the producer
    warpgroup_reg_dealloc<kBlocking.producer_regs>();
    const bf16* qh = q + int64_t(b) * T * q_stride + int64_t(h) * D;  // row t at qh + t * q_stride
    const bf16* kh = k + int64_t(b) * T * kv_stride + int64_t(hk) * D;
    const bf16* vh = v + int64_t(b) * T * kv_stride + int64_t(hk) * D;
    for (int c = 0; c < kConsumers; c++)  // Q, in tile 0's group
      load_panels_async<kWgRows, D>(sQ + c * kWgRows * D, qh, q_stride, q0 + c * kWgRows, T);
    // step n: hand over tile n - (kStages - 1) once it landed (of the n groups committed, the
    // last kStages - 2 may be in flight), then load tile n once its stage is free. A group is
    // committed every step, empty past the last tile, so that the count holds.
    for (int n = 0; n < tiles + kStages - 1; n++) {
      if (n >= kStages - 1) {
        cp_async_wait<kStages - 2>();
        fence_proxy_async();  // the copies, then wgmma's reads of them
        for (int c = 0; c < kConsumers; c++)
          named_barrier_arrive(wg_full(D, (n - (kStages - 1)) % kStages, c), 2 * kWgThreads);
      }
      if (n < tiles) {
        const int stage = n % kStages, s0 = (kb_first + n) * kCols;
        if (n >= kStages) named_barrier_sync(kWgFree + stage, kBlockThreads);
        load_panels_async<kCols, D>(sK + stage * kTile, kh, kv_stride, s0, T);
        load_panels_async<kCols, D>(sV + stage * kTile, vh, kv_stride, s0, T);
      }
      cp_async_commit();
    }
    return;
  }

  warpgroup_reg_alloc<kBlocking.consumer_regs>();
  const int c0 = q0 + (warpgroup - 1) * kWgRows, c_last = c0 + kWgRows - 1;  // this consumer's queries
  bf16* sQc = sQ + (warpgroup - 1) * kWgRows * D;  // (the epilogue's staging tile at the end)
  // this thread's rows: r = 0, 1 is lane / 4 + 8 r of the warp's 16
  const auto t_row = [&](int r) { return c0 + 16 * warp + 8 * r + lane / 4; };
  float acc[D / 8][4] = {};  // acc: (16, D) unnormalised O of this warp's rows, wgmma's D fragment
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0, 0};  // each row's running max (log2 units) and sum
  uint32_t p[kCols / 16][4];  // P of the last tile, as A fragments (16 keys each)
  // The tiles this consumer computes: n_first .. n_last, those some of its rows sees (a
  // contiguous run; none, n_first = tiles, when its rows are past T).
  int n_first = tiles, n_last = tiles - 1;
  for (int n = 0; n < tiles; n++)
    if (c0 < T && docs.any_visible(c0, c_last, (kb_first + n) * kCols, (kb_first + n + 1) * kCols - 1, window))
      n_first = min(n_first, n), n_last = n;
  const int me = warpgroup - 1;
  const auto take = [&](int n) {  // tile n landed
    named_barrier_sync(wg_full(D, n % kStages, me), 2 * kWgThreads);
  };
  // Tile n's buffers are read no more; the producer waits for them only when it has another tile
  // to put there.
  const auto release = [&](int n) {
    if (n + kStages < tiles) named_barrier_arrive(kWgFree + n % kStages, kBlockThreads);
  };
  // pass 1: S = Q K^T (unscaled) over tile n, issued
  const auto issue_s = [&](float(&s)[NT][4], int n) {
    const uint64_t q_desc = smem_desc_k_major(sQc), k_desc = smem_desc_k_major(sK + (n % kStages) * kTile);
    wgmma_fence(wgmma_acc(s));
    wgmma_abt<D, kCols>(wgmma_acc(s), q_desc, k_desc);
    wgmma_commit();
  };
  // pass 2, once S is done: invisible keys -> -inf (only on tiles some row sees in part), online
  // softmax; O's rescale kept in alpha, returns whether there is one
  const auto softmax = [&](float(&s)[NT][4], int n, float(&alpha)[2]) {
    const int k0 = (kb_first + n) * kCols;
    if (!docs.all_visible(c0, c_last, k0, k0 + kCols - 1, window)) mask_scores<NT, 1>(s, docs, window, k0, t_row);
    bool moved = false;
    alpha[0] = alpha[1] = 1.0f;  // rows that do not move
    online_softmax<NT, 1>(s, m, l, scale_log2, [&](int r, float a) { alpha[r] = a, moved = true; });
    return moved;
  };
  // P rounded to bf16 into p (once the product reading the last P is done)
  const auto pack = [&](const float(&s)[NT][4]) {
#pragma unroll
    for (int j = 0; j < kCols / 16; j++) pack_fragment(p[j], s[2 * j], s[2 * j + 1]);
  };
  // pass 3: O += P V over tile n, issued (V's k16 slice starts 16 rows into its first panel)
  const auto issue_pv = [&](int n) {
    const uint64_t v_desc = n_major_desc<kCols>(sV + (n % kStages) * kTile);
    wgmma_fence(wgmma_acc(acc));
    wgmma_xb<D, kCols>(wgmma_acc(acc), p, v_desc);
    wgmma_commit();
  };

  // Ping-pong (FlashAttention-3's inter-warpgroup scheduling), where wg_blocking asks for it: a
  // consumer issues its products only in its turn, after those of the consumer before it in the
  // same round (turns go round 0, 1, .., kConsumers - 1, 0, ..), so that the others' softmaxes
  // run while one's products do.
  // Each consumer has tiles + 1 rounds (one a tile, without products on the tiles it skips, then
  // the last O += P V); consumer 0 has the first turn, and the last consumer passes none on after
  // its last round (every arrival is waited for).
  int rounds = 0;
  const auto in_turn = [&](const auto& issue) {
    if constexpr (kPingPong) named_barrier_sync(wg_turn(D, me), 2 * kWgThreads);
    issue();
    if (kPingPong && (++rounds <= tiles || me < kConsumers - 1))
      named_barrier_arrive(wg_turn(D, (me + 1) % kConsumers), 2 * kWgThreads);
  };
  if (kPingPong && me == kConsumers - 1) named_barrier_arrive(wg_turn(D, 0), 2 * kWgThreads);

  for (int n = 0; n < n_first; n++) take(n), in_turn([] {}), release(n);
  if (n_first <= n_last) {
    float s[NT][4], alpha[2];
    take(n_first);
    in_turn([&] { issue_s(s, n_first); });
    wgmma_wait<0>(wgmma_acc(s));
    softmax(s, n_first, alpha);  // O is still 0: no rescale
    pack(s);
    // tile n's S, then tile n - 1's O += P V; the softmax of tile n while the latter runs; the
    // rescale of O and the new P once it is done
    for (int n = n_first + 1; n <= n_last; n++) {
      take(n);
      in_turn([&] {
        issue_s(s, n);
        issue_pv(n - 1);
      });
      wgmma_wait<1>(wgmma_acc(s));
      const bool moved = softmax(s, n, alpha);
      wgmma_wait<0>(wgmma_acc(acc));
      release(n - 1);
      if (moved)
#pragma unroll
        for (int r = 0; r < 2; r++) rescale_row<D, 1>(acc, r, alpha[r]);
      pack(s);
    }
    in_turn([&] { issue_pv(n_last); });
    wgmma_wait<0>(wgmma_acc(acc));
    release(n_last);
  } else {
    in_turn([] {});
  }
  for (int n = n_last + 1; n < tiles; n++) take(n), in_turn([] {}), release(n);

  // staged (measured faster at D = 128, and at D = 64: 0.207-0.215 ms against 0.237-0.243 at B8
  // T2048 H16, session 42), but for the D = 64 documents kernel, which spilled 8 bytes with it at
  // the consumers' 160 registers
  if constexpr (D == 128 || !DOCS) store_output_staged<D>(o, lse, acc, m, l, t_row, b, h, T, H, sQc, c0);
  else store_output<D, 1>(o, lse, acc, m, l, t_row, b, h, T, H);
}

// dq: (B, T, H, D). Grid (H, B, blocks of 16 bwd_blocking(D).warps queries), longest first.
// Rows of a warp: 16 queries, whose Q and dO stay in registers as A fragments (only the K and V
// tiles are read from shared memory in the loop); as in the forward, a warp skips the key tiles
// none of its rows sees. Occupancy (ptxas, sm_90, no spills): D = 128 in at most 255 registers
// (Q and dO fragments 64, dQ 64, P 32, dS 32; the cap for two 4-warp blocks); D = 64 in 168 (the
// cap for three). D = 256: dQ alone is 128 registers, so Q and dO are read from shared memory
// each step, over K/V tiles of 32 keys; 243 registers (245 with documents; one 8-warp block an
// SM). Per 64 keys at D = 64 a warp issues 96 mma over 48 ldmatrix.x4 (K 16, V 16, K^T 16).
template <int D, bool DOCS>
__global__ void __launch_bounds__(32 * bwd_blocking(D).warps, bwd_blocking(D).blocks_per_sm)
    attention_backward_dq_mma(bf16* dq, const bf16* dout, const bf16* q, const bf16* k, const bf16* v,
                              const float* lse, const float* delta, int T, int H, int Hkv, float scale,
                              int window, DocumentMask<DOCS> documents) {
  constexpr int kWarps = bwd_blocking(D).warps, kThreads = 32 * kWarps, kRows = 16 * kWarps, kCols = mma_cols(D);
  constexpr bool kRowsInRegisters = D <= 128;  // Q and dO fragments; at D = 256 read from shared memory
  extern __shared__ float4 smem_raw[];
  bf16* sQ = reinterpret_cast<bf16*>(smem_raw);  // sQ: (kRows, D)
  bf16* sdO = sQ + kRows * D;                    // sdO: (kRows, D)
  bf16* sK = sdO + kRows * D;                    // sK: 2 x (kCols, D)
  bf16* sV = sK + 2 * kCols * D;                 // sV: 2 x (kCols, D)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int q0 = (gridDim.z - 1 - blockIdx.z) * kRows, h = blockIdx.x, b = blockIdx.y, hk = h / (H / Hkv);
  const int64_t q_stride = int64_t(H) * D, kv_stride = int64_t(Hkv) * D;
  const bf16* qh = q + int64_t(b) * T * q_stride + int64_t(h) * D;
  const bf16* doh = dout + int64_t(b) * T * q_stride + int64_t(h) * D;
  const bf16* kh = k + int64_t(b) * T * kv_stride + int64_t(hk) * D;
  const bf16* vh = v + int64_t(b) * T * kv_stride + int64_t(hk) * D;
  const DocumentMask<DOCS> docs = documents.row(b);
  const int kb_first = docs.first_visible_key(q0, window) / kCols;
  const int kb_last = min(T - 1, q0 + kRows - 1) / kCols;
  const float scale_log2 = scale * kLog2e;
  const int w_first = q0 + warp * 16, w_last = w_first + 15;  // this warp's rows
  const int t_row[2] = {w_first + lane / 4, w_first + lane / 4 + 8};
  // row r sees keys key_first[r] .. t_row[r] (none past T)
  const int key_first[2] = {docs.first_visible_key(t_row[0], window), docs.first_visible_key(t_row[1], window)};
  float lse2[2], dlt[2];  // lse in log2 units and Delta of this thread's two rows
#pragma unroll
  for (int r = 0; r < 2; r++) {
    const int64_t i = (int64_t(b) * H + h) * T + min(t_row[r], T - 1);
    lse2[r] = lse[i] * kLog2e;
    dlt[r] = delta[i];
  }

  load_tile_async<kRows, D, kThreads>(sQ, qh, q_stride, q0, T);
  load_tile_async<kRows, D, kThreads>(sdO, doh, q_stride, q0, T);
  load_tile_async<kCols, D, kThreads>(sK, kh, kv_stride, kb_first * kCols, T);
  load_tile_async<kCols, D, kThreads>(sV, vh, kv_stride, kb_first * kCols, T);
  cp_async_commit();

  uint32_t qf[D / 16][4], dof[D / 16][4];  // this warp's 16 rows of Q and dO as A fragments (kRowsInRegisters)
  float acc[D / 8][4] = {};                 // acc: (16, D) dQ / scale
  for (int kb = kb_first; kb <= kb_last; kb++) {
    const int buf = (kb - kb_first) & 1, k0 = kb * kCols;
    cp_async_wait_all();
    __syncthreads();  // tile kb landed; every warp is done with tile kb - 1
    if (kRowsInRegisters && kb == kb_first)
#pragma unroll
      for (int kk = 0; kk < D / 16; kk++) {
        ldmatrix_x4(qf[kk], sQ + swizzle<D>(warp * 16 + lane % 16, kk * 16 + (lane / 16) * 8));
        ldmatrix_x4(dof[kk], sdO + swizzle<D>(warp * 16 + lane % 16, kk * 16 + (lane / 16) * 8));
      }
    if (kb < kb_last) {
      load_tile_async<kCols, D, kThreads>(sK + (buf ^ 1) * kCols * D, kh, kv_stride, k0 + kCols, T);
      load_tile_async<kCols, D, kThreads>(sV + (buf ^ 1) * kCols * D, vh, kv_stride, k0 + kCols, T);
    }
    cp_async_commit();
    if (w_first >= T || !docs.any_visible(w_first, w_last, k0, k0 + kCols - 1, window)) continue;
    const bf16* k_tile = sK + buf * kCols * D;
    // pass 1: P = exp(scale Q K^T - lse), zero where invisible (S -> -inf, masked only on the tiles
    // some row sees in part)
    float p[kCols / 8][4] = {};
    if constexpr (kRowsInRegisters) mma_abt_reg<D, kCols / 8>(p, qf, k_tile);
    else mma_abt<D, kCols / 8>(p, sQ, k_tile);
    if (!docs.all_visible(w_first, w_last, k0, k0 + kCols - 1, window) || w_last >= T)
#pragma unroll
      for (int nt = 0; nt < kCols / 8; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
          const int t = t_row[e / 2], s = k0 + nt * 8 + (lane % 4) * 2 + e % 2;
          if (t >= T || s < key_first[e / 2] || s > t) p[nt][e] = -INFINITY;
        }
#pragma unroll
    for (int nt = 0; nt < kCols / 8; nt++)
#pragma unroll
      for (int e = 0; e < 4; e++) p[nt][e] = exp2_ftz(fmaf(p[nt][e], scale_log2, -lse2[e / 2]));  // 2^-inf = 0
    // pass 2: dP = dO V^T;  dS = P (dP - Delta)
    float ds[kCols / 8][4] = {};
    if constexpr (kRowsInRegisters) mma_abt_reg<D, kCols / 8>(ds, dof, sV + buf * kCols * D);
    else mma_abt<D, kCols / 8>(ds, sdO, sV + buf * kCols * D);
#pragma unroll
    for (int nt = 0; nt < kCols / 8; nt++)
#pragma unroll
      for (int e = 0; e < 4; e++) ds[nt][e] = p[nt][e] * (ds[nt][e] - dlt[e / 2]);
    // pass 3: dQ += dS K
    mma_pb<D, kCols / 8>(acc, ds, k_tile);
  }
  const int64_t row0 = (int64_t(b) * T + t_row[0]) * q_stride + int64_t(h) * D;
  const int64_t row1 = (int64_t(b) * T + t_row[1]) * q_stride + int64_t(h) * D;
  store_rows<D>(dq, acc, row0, row1, t_row[0] < T, t_row[1] < T, scale, scale);
}

// The steps of the dK/dV kernels (mma and wgmma): a step covers query head h and queries
// j0 .. j0 + COLS - 1. load copies their Q and dO rows into buffer buf of sQ and sdO
// (2 x (COLS, D) each) with copy(tile, rows, j0), the kernel's cp.async tile loader (rows: the
// head's first row of q or dout, rows H D apart), and reads their lse and Delta into registers of
// the threads < COLS a step ahead (their global latency hides behind a step's products);
// store_stats writes those into buffer buf of sStats (2 x (COLS, 2)) at the end of the step: a
// query's lse (log2 units) and Delta side by side, so that stats is one 16-byte read giving a
// thread (lse, Delta, lse, Delta) of its two neighbouring query columns nt * 8 + (lane % 4) * 2
// and + 1.
template <int COLS, int D>
struct DkdvSteps {
  bf16 *sQ, *sdO;
  float* sStats;
  const bf16 *q, *dout;
  const float *lse, *delta;
  int b, T, H;
  float next_lse = 0, next_delta = 0;  // threads < COLS: lse and Delta of query j0 + threadIdx.x

  template <class Copy>
  __device__ void load(int h, int j0, int buf, const Copy& copy) {
    const int64_t head = int64_t(b) * T * (int64_t(H) * D) + int64_t(h) * D;
    copy(sQ + buf * COLS * D, q + head, j0);
    copy(sdO + buf * COLS * D, dout + head, j0);
    if (threadIdx.x < COLS) {
      const int64_t idx = (int64_t(b) * H + h) * T + min(j0 + int(threadIdx.x), T - 1);
      next_lse = lse[idx];
      next_delta = delta[idx];
    }
  }
  __device__ void store_stats(int buf) {
    if (threadIdx.x < COLS) {
      sStats[(buf * COLS + threadIdx.x) * 2] = next_lse * kLog2e;
      sStats[(buf * COLS + threadIdx.x) * 2 + 1] = next_delta;
    }
  }
  __device__ float4 stats(int buf, int nt) const {
    const int lane = threadIdx.x % 32;
    return *reinterpret_cast<const float4*>(sStats + (buf * COLS + nt * 8 + (lane % 4) * 2) * 2);
  }
};

// dk, dv: (B, T, Hkv, D). Grid (Hkv, B, blocks of 16 bwd_blocking(D).warps keys), longest
// first; a block loops over the query tiles of every query head of its kv head, in the
// transposed frame: rows of a warp are 16 keys, and a warp skips the query tiles that see none
// of them. A tile's lse and Delta are read into registers one step ahead (their global latency
// hides behind a step's products) and stored to shared memory at the end of the step
// (DkdvSteps). Occupancy (ptxas, sm_90, no spills): D = 128 in at most 255 registers (dK and dV
// 128, P^T and dS^T 32; the cap for two 4-warp blocks); D = 64 in 168 (the cap for three), the
// warp's K fragments in registers: per 32-query step 64 mma over 36 ldmatrix.x4 (Q 8, dO 8,
// dO^T 8, Q^T 8 and V 4; with K from shared memory 40). D = 256: dV, then dK, one sweep each
// (see sweep); 254 registers (255 with documents; one 8-warp block an SM).
template <int D, bool DOCS>
__global__ void __launch_bounds__(32 * bwd_blocking(D).warps, bwd_blocking(D).blocks_per_sm)
    attention_backward_dkdv_mma(bf16* dk, bf16* dv, const bf16* dout, const bf16* q, const bf16* k, const bf16* v,
                                const float* lse, const float* delta, int T, int H, int Hkv, float scale,
                                int window, DocumentMask<DOCS> documents) {
  constexpr int kWarps = bwd_blocking(D).warps, kThreads = 32 * kWarps, kRows = 16 * kWarps;
  // This warp's K rows stay in registers as A fragments at D = 64 (16 registers; V's as well
  // spilled 16-20 bytes); at D = 128 and 256 they are read from shared memory.
  constexpr bool kKeysInRegisters = D == 64;
  extern __shared__ float4 smem_raw[];
  bf16* sK = reinterpret_cast<bf16*>(smem_raw);  // sK: (kRows, D)
  bf16* sV = sK + kRows * D;                     // sV: (kRows, D)
  bf16* sQ = sV + kRows * D;                     // sQ: 2 x (kMmaQueries, D)
  bf16* sdO = sQ + 2 * kMmaQueries * D;          // sdO: 2 x (kMmaQueries, D)
  float* sStats = reinterpret_cast<float*>(sdO + 2 * kMmaQueries * D);  // sStats: 2 x (kMmaQueries, 2)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int k0 = blockIdx.z * kRows, hk = blockIdx.x, b = blockIdx.y, group = H / Hkv;
  const int64_t q_stride = int64_t(H) * D, kv_stride = int64_t(Hkv) * D;
  const bf16* kh = k + int64_t(b) * T * kv_stride + int64_t(hk) * D;
  const bf16* vh = v + int64_t(b) * T * kv_stride + int64_t(hk) * D;
  const DocumentMask<DOCS> docs = documents.row(b);
  // The query tiles that see some key of the block: from j_first to j_final (32 queries each).
  const int j_first = k0 / kMmaQueries * kMmaQueries;
  const int j_final =
      docs.last_query(k0 + kRows - 1, min(T - 1, window > 0 ? k0 + kRows - 1 + window - 1 : T - 1)) / kMmaQueries *
      kMmaQueries;
  const int h_final = (hk + 1) * group - 1;  // the last query head of kv head hk
  const float scale_log2 = scale * kLog2e;
  const int w_first = k0 + warp * 16, w_last = w_first + 15;  // this warp's keys
  const int s_row[2] = {w_first + lane / 4, w_first + lane / 4 + 8};

  // A step covers query head h and queries j0 .. j0 + 31: the query tiles of head hk * group, then
  // those of the next head, and so on.
  DkdvSteps<kMmaQueries, D> steps{sQ, sdO, sStats, q, dout, lse, delta, b, T, H};
  const auto copy = [&](bf16* tile, const bf16* rows, int row0) {
    load_tile_async<kMmaQueries, D, kThreads>(tile, rows, q_stride, row0, T);
  };
  load_tile_async<kRows, D, kThreads>(sK, kh, kv_stride, k0, T);
  load_tile_async<kRows, D, kThreads>(sV, vh, kv_stride, k0, T);

  // One sweep over the steps accumulates dV (kDv), dK (kDk) or both and writes them out. Both
  // accumulators are 2 x 64 registers at D = 128; at D = 256 they would be 256, so there dV and
  // dK take a sweep each, the second rebuilding P^T (a step's four products of 16 x 32 x D
  // become five: P^T and dV in the first, P^T, dP^T and dK in the second).
  auto sweep = [&](auto grads) {
    constexpr bool kDv = decltype(grads)::value & 1, kDk = decltype(grads)::value & 2;
    steps.load(hk * group, j_first, 0, copy);
    cp_async_commit();
    steps.store_stats(0);

    float dk_acc[D / 8][4] = {}, dv_acc[D / 8][4] = {};  // (16, D) each: dK / scale and dV
    uint32_t kf[D / 16][4];  // this warp's 16 rows of K as A fragments (kKeysInRegisters)
    if (kKeysInRegisters) {
      cp_async_wait_all();
      __syncthreads();  // K landed
#pragma unroll
      for (int kk = 0; kk < D / 16; kk++)
        ldmatrix_x4(kf[kk], sK + swizzle<D>(warp * 16 + lane % 16, kk * 16 + (lane / 16) * 8));
    }
    for (int h = hk * group, j0 = j_first, buf = 0;; buf ^= 1) {
      const int j_last = j0 + kMmaQueries - 1;
      const bool head_done = j0 == j_final, final_step = head_done && h == h_final;
      cp_async_wait_all();
      __syncthreads();  // this step's tiles and stats landed; every warp is done with the last step's
      if (!final_step) steps.load(head_done ? h + 1 : h, head_done ? j_first : j0 + kMmaQueries, buf ^ 1, copy);
      cp_async_commit();
      if (w_first < T && docs.any_visible(j0, j_last, w_first, w_last, window)) {
        const bf16* q_tile = sQ + buf * kMmaQueries * D;
        const bf16* do_tile = sdO + buf * kMmaQueries * D;
        // pass 1: P^T = exp(scale K Q^T - lse), zero where invisible (S^T -> -inf, masked only on the
        // tiles some row sees in part)
        float p[kMmaQueries / 8][4] = {};
        if constexpr (kKeysInRegisters) mma_abt_reg<D, kMmaQueries / 8>(p, kf, q_tile);
        else mma_abt<D, kMmaQueries / 8>(p, sK, q_tile);
        if (!docs.all_visible(j0, j_last, w_first, w_last, window) || j_last >= T)
#pragma unroll
          for (int nt = 0; nt < kMmaQueries / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
              const int t = j0 + nt * 8 + (lane % 4) * 2 + e % 2;
              if (t >= T || !docs.visible(t, s_row[e / 2], window)) p[nt][e] = -INFINITY;
            }
#pragma unroll
        for (int nt = 0; nt < kMmaQueries / 8; nt++) {
          const float4 st = steps.stats(buf, nt);
#pragma unroll
          for (int e = 0; e < 4; e++) p[nt][e] = exp2_ftz(fmaf(p[nt][e], scale_log2, e % 2 ? -st.z : -st.x));
        }
        // pass 2: dP^T = V dO^T;  dS^T = P^T (dP^T - Delta)
        float ds[kMmaQueries / 8][4] = {};
        if constexpr (kDk) {
          mma_abt<D, kMmaQueries / 8>(ds, sV, do_tile);
#pragma unroll
          for (int nt = 0; nt < kMmaQueries / 8; nt++) {
            const float4 st = steps.stats(buf, nt);
#pragma unroll
            for (int e = 0; e < 4; e++) ds[nt][e] = p[nt][e] * (ds[nt][e] - (e % 2 ? st.w : st.y));
          }
        }
        // pass 3: dV += P^T dO;  dK += dS^T Q
        if constexpr (kDv) mma_pb<D, kMmaQueries / 8>(dv_acc, p, do_tile);
        if constexpr (kDk) mma_pb<D, kMmaQueries / 8>(dk_acc, ds, q_tile);
      }
      if (final_step) break;
      steps.store_stats(buf ^ 1);  // read by the next step's barrier
      h += head_done;
      j0 = head_done ? j_first : j0 + kMmaQueries;
    }
    const int64_t row0 = (int64_t(b) * T + s_row[0]) * kv_stride + int64_t(hk) * D;
    const int64_t row1 = (int64_t(b) * T + s_row[1]) * kv_stride + int64_t(hk) * D;
    if constexpr (kDk) store_rows<D>(dk, dk_acc, row0, row1, s_row[0] < T, s_row[1] < T, scale, scale);
    if constexpr (kDv) store_rows<D>(dv, dv_acc, row0, row1, s_row[0] < T, s_row[1] < T, 1.0f, 1.0f);
  };
  if constexpr (D == 256) {
    sweep(std::integral_constant<int, 1>{});
    __syncthreads();  // every warp is done with the last step's buffers before the next sweep reloads them
    sweep(std::integral_constant<int, 2>{});
  } else {
    sweep(std::integral_constant<int, 3>{});
  }
}

// ------------------------------------------------------------------------------------------
// wgmma backward: dQ and dK/dV at D = Dv = 64, 128 and 256 on Hopper's warpgroup MMA
// (cuda/wgmma.cuh, sm_90a), the default at every width (measured faster than the mma backward:
// WgmmaSwitch; set_attention_wgmma_backward, cuda/attention.h); the mma backward stays its
// oracle. The design of the mma backward
// (two kernels, no atomics, deterministic; the transposed frame in dK/dV) with its products as
// 64-row warpgroup products: a block is one warpgroup (4 warps, 128 threads) and 64 rows (queries
// for dQ, keys for dK/dV); warp w owns rows 16 w .. 16 w + 15, a thread rows lane / 4 and + 8 of
// them (the forward's layout, so S, P and dS of a step are mma.m16n8k16 accumulators in each
// 8-column block, and P and dS pack into A fragments). Tiles of 64 columns (keys for dQ, queries
// for dK/dV) are double-buffered with cp.async as the wgmma forward's 64-wide swizzled panels
// (load_panels_async); a block skips the tiles none of its rows sees (whole tiles: the warpgroup
// issues each product together) and masks those some row sees in part. Per tile:
//   pass 1: two groups of D / 16 k16 products, S and dP (both operands K-major); P =
//           exp(scale S - lse) computed while the dP group runs;
//   pass 2: dS = P (dP - Delta);
//   pass 3: the N = D products from registers (P or dS packed to bf16) times a tile read N-major.
// Every product is waited for before the barrier that lets the next copy overwrite its tile.
// Shared memory 98 KB at D = 128, 49 KB at D = 64 (+1 KB for the alignment): two blocks an SM,
// three of dQ at D = 64 (wg_bwd_blocks_per_sm); at D = 256 one block an SM, dQ 194 KB, dK/dV 210
// (P^T handed between its two warpgroups, one for dV and one for dK: wg_dkdv_warpgroups; dK and
// dV would take 256 registers a thread). Registers (ptxas, sm_90a, no spills): at D = 128 dQ 165
// (177 with documents: dQ 64, S and dP 64), dK/dV 232 (239: dK and dV 128, S^T and dP^T 64); at
// D = 64 dQ 128 (141), dK/dV 181 (180); at D = 256 dQ 227 (237: dQ 128), dK/dV 230 (232: dK or
// dV 128).
// On the emulator its gradients equal the mma backward's to the printed digit (the same bf16
// roundings of P and dS, the same k order of the fp32 sums).
constexpr int kWgBwdRows = 64;  // rows per block (queries for dQ, keys for dK/dV): M
constexpr int kWgBwdCols = 64;  // columns per tile (keys for dQ, queries for dK/dV)
// Blocks an SM (__launch_bounds__) of the dQ (DKDV false) or dK/dV kernel at head width D: three
// of dQ at D = 64 (128 registers a thread, 131 with documents: three blocks allow 168), else two
// (dK/dV at D = 64 capped at three blocks' 168 registers spilled 16-20 bytes and serialised its
// wgmma products); at D = 256 one (194 KB of shared memory).
constexpr int wg_bwd_blocks_per_sm(int D, bool dkdv) { return D == 256 ? 1 : D == 64 && !dkdv ? 3 : 2; }
constexpr size_t wg_bwd_smem(int D) {
  return kWgmmaTileAlign + sizeof(bf16) * 6 * kWgBwdCols * D + sizeof(float) * 4 * kWgBwdCols;
}
static_assert(kWgBwdRows == kWgBwdCols && kWgBwdRows == kWgRows,
              "the wgmma backward's row blocks and column tiles are both 64 (K-major A and B), wgmma_abt's A rows");

// x's A fragments: the (64 x 64) accumulator-layout floats f rounded to bf16.
__device__ __forceinline__ void pack_fragments(uint32_t (&x)[kWgBwdCols / 16][4], const float (&f)[kWgBwdCols / 8][4]) {
#pragma unroll
  for (int j = 0; j < kWgBwdCols / 16; j++) pack_fragment(x[j], f[2 * j], f[2 * j + 1]);
}

// dq: (B, T, H, D). Grid (H, B, blocks of 64 queries), the longest (last) blocks first. Loops
// over the key tiles from the first key its first query sees to its last query: dQ += dS K.
template <int D, bool DOCS>
__global__ void __launch_bounds__(kWgThreads, wg_bwd_blocks_per_sm(D, false))
    attention_backward_dq_wgmma(bf16* dq, const bf16* dout, const bf16* q, const bf16* k, const bf16* v,
                                const float* lse, const float* delta, int T, int H, int Hkv, float scale, int window,
                                DocumentMask<DOCS> documents) {
  constexpr int NT = kWgBwdCols / 8, kTile = kWgBwdCols * D;  // kTile: elements of a tile
  extern __shared__ float4 smem_raw[];
  bf16* sQ = reinterpret_cast<bf16*>(align_wgmma_tiles(smem_raw));  // sQ: (kWgBwdRows, D) as D / 64 panels
  bf16* sdO = sQ + kTile;                                           // sdO: (kWgBwdRows, D) as D / 64 panels
  bf16* sK = sdO + kTile;                                           // sK: 2 x (kWgBwdCols, D) as D / 64 panels
  bf16* sV = sK + 2 * kTile;                                        // sV: 2 x (kWgBwdCols, D) as D / 64 panels
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int q0 = (gridDim.z - 1 - blockIdx.z) * kWgBwdRows, h = blockIdx.x, b = blockIdx.y, hk = h / (H / Hkv);
  const int64_t q_stride = int64_t(H) * D, kv_stride = int64_t(Hkv) * D;
  const bf16* qh = q + int64_t(b) * T * q_stride + int64_t(h) * D;  // row t at qh + t * q_stride
  const bf16* doh = dout + int64_t(b) * T * q_stride + int64_t(h) * D;
  const bf16* kh = k + int64_t(b) * T * kv_stride + int64_t(hk) * D;
  const bf16* vh = v + int64_t(b) * T * kv_stride + int64_t(hk) * D;
  const DocumentMask<DOCS> docs = documents.row(b);
  const int q_last = q0 + kWgBwdRows - 1;
  const int kb_first = docs.first_visible_key(q0, window) / kWgBwdCols, kb_last = min(T - 1, q_last) / kWgBwdCols;
  const float scale_log2 = scale * kLog2e;
  // this thread's rows: r = 0, 1 is lane / 4 + 8 r of the warp's 16 (rows past T: computed, not stored)
  const auto t_row = [&](int r) { return q0 + 16 * warp + 8 * r + lane / 4; };
  float lse2[2], dlt[2];  // lse in log2 units and Delta of this thread's two rows
#pragma unroll
  for (int r = 0; r < 2; r++) {
    const int64_t i = (int64_t(b) * H + h) * T + min(t_row(r), T - 1);
    lse2[r] = lse[i] * kLog2e;
    dlt[r] = delta[i];
  }

  load_panels_async<kWgBwdRows, D>(sQ, qh, q_stride, q0, T);
  load_panels_async<kWgBwdRows, D>(sdO, doh, q_stride, q0, T);
  load_panels_async<kWgBwdCols, D>(sK, kh, kv_stride, kb_first * kWgBwdCols, T);
  load_panels_async<kWgBwdCols, D>(sV, vh, kv_stride, kb_first * kWgBwdCols, T);
  cp_async_commit();

  float acc[D / 8][4] = {};  // acc: (16, D) dQ / scale of this warp's rows, wgmma's D fragment
  for (int kb = kb_first; kb <= kb_last; kb++) {
    const int k0 = kb * kWgBwdCols;
    const bf16* sKb = sK + ((kb - kb_first) & 1) * kTile;
    const bf16* sVb = sV + ((kb - kb_first) & 1) * kTile;
    cp_async_wait_all();
    fence_proxy_async();
    __syncthreads();  // tile kb (and Q, dO) landed; the products of tile kb - 1 are done
    if (kb < kb_last) {
      const int64_t next = ((kb + 1 - kb_first) & 1) * kTile;
      load_panels_async<kWgBwdCols, D>(sK + next, kh, kv_stride, k0 + kWgBwdCols, T);
      load_panels_async<kWgBwdCols, D>(sV + next, vh, kv_stride, k0 + kWgBwdCols, T);
    }
    cp_async_commit();
    if (!docs.any_visible(q0, q_last, k0, k0 + kWgBwdCols - 1, window)) continue;  // between documents

    // pass 1: S = Q K^T and dP = dO V^T; P = exp(scale S - lse), zero where invisible (S -> -inf,
    // masked only on the tiles some row sees in part), while dP runs
    float p[NT][4], dp[NT][4];
    wgmma_fence(wgmma_acc(p), wgmma_acc(dp));
    wgmma_abt<D, kWgBwdCols>(wgmma_acc(p), smem_desc_k_major(sQ), smem_desc_k_major(sKb));
    wgmma_commit();
    wgmma_abt<D, kWgBwdCols>(wgmma_acc(dp), smem_desc_k_major(sdO), smem_desc_k_major(sVb));
    wgmma_commit();
    wgmma_wait<1>(wgmma_acc(p));
    if (!docs.all_visible(q0, q_last, k0, k0 + kWgBwdCols - 1, window)) mask_scores<NT, 1>(p, docs, window, k0, t_row);
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
      for (int e = 0; e < 4; e++) p[nt][e] = exp2_ftz(fmaf(p[nt][e], scale_log2, -lse2[e / 2]));  // 2^-inf = 0
    wgmma_wait<0>(wgmma_acc(dp));

    // pass 2: dS = P (dP - Delta), in dp's registers
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
      for (int e = 0; e < 4; e++) dp[nt][e] = p[nt][e] * (dp[nt][e] - dlt[e / 2]);
    uint32_t ds[kWgBwdCols / 16][4];
    pack_fragments(ds, dp);

    // pass 3: dQ += dS K
    wgmma_fence(wgmma_acc(acc));
    wgmma_xb<D, kWgBwdCols>(wgmma_acc(acc), ds, n_major_desc<kWgBwdCols>(sKb));
    wgmma_commit();
    wgmma_wait<0>(wgmma_acc(acc));
  }
  const int64_t row0 = (int64_t(b) * T + t_row(0)) * q_stride + int64_t(h) * D;
  const int64_t row1 = (int64_t(b) * T + t_row(1)) * q_stride + int64_t(h) * D;
  store_rows<D>(dq, acc, row0, row1, t_row(0) < T, t_row(1) < T, scale, scale);
}

// The passes of a dK/dV step on a warpgroup's 64 keys kr0 .. kr0 + 63 (this thread's rows s_row)
// and the 64 queries j0 .. of q_tile and do_tile, in the transposed frame. dkdv_step runs all
// three; the D = 256 kernel's warpgroups run the parts of one output each (dkdv_scores without
// dP^T, then dkdv_dv; dkdv_dp, then dkdv_dk). stats(nt): lse (log2 units) and Delta of this
// thread's queries 8 nt + 2 (lane % 4) and + 1.
// dP^T = V dO^T, issued and committed (fenced by the caller).
template <int D>
__device__ __forceinline__ void dkdv_dp(float (&dp)[kWgBwdCols / 8][4], const bf16* sVr, const bf16* do_tile) {
  wgmma_abt<D, kWgBwdCols>(wgmma_acc(dp), smem_desc_k_major(sVr), smem_desc_k_major(do_tile));
  wgmma_commit();
}
// Pass 1: S^T = K Q^T and, with DP, dP^T = V dO^T; P^T = exp(scale S^T - lse), zero where
// invisible (S^T -> -inf, masked only on the tiles some row sees in part), while dP^T runs.
template <int D, bool DP, bool DOCS, class Stats>
__device__ __forceinline__ void dkdv_scores(float (&p)[kWgBwdCols / 8][4], float (&dp)[kWgBwdCols / 8][4],
                                            const bf16* sKr, const bf16* sVr, const bf16* q_tile, const bf16* do_tile,
                                            const Stats& stats, const DocumentMask<DOCS>& docs, int j0, int kr0,
                                            const int (&s_row)[2], int T, int window, float scale_log2) {
  constexpr int NT = kWgBwdCols / 8;
  const int lane = threadIdx.x % 32, j_last = j0 + kWgBwdCols - 1;
  if constexpr (DP) wgmma_fence(wgmma_acc(p), wgmma_acc(dp));
  else wgmma_fence(wgmma_acc(p));
  wgmma_abt<D, kWgBwdCols>(wgmma_acc(p), smem_desc_k_major(sKr), smem_desc_k_major(q_tile));
  wgmma_commit();
  if constexpr (DP) {
    dkdv_dp<D>(dp, sVr, do_tile);
    wgmma_wait<1>(wgmma_acc(p));
  } else {
    wgmma_wait<0>(wgmma_acc(p));
  }
  if (!docs.all_visible(j0, j_last, kr0, kr0 + kWgBwdRows - 1, window) || j_last >= T)
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
      for (int e = 0; e < 4; e++) {
        const int t = j0 + nt * 8 + (lane % 4) * 2 + e % 2;
        if (t >= T || !docs.visible(t, s_row[e / 2], window)) p[nt][e] = -INFINITY;
      }
#pragma unroll
  for (int nt = 0; nt < NT; nt++) {
    const float4 st = stats(nt);
#pragma unroll
    for (int e = 0; e < 4; e++) p[nt][e] = exp2_ftz(fmaf(p[nt][e], scale_log2, e % 2 ? -st.z : -st.x));
  }
  if constexpr (DP) wgmma_wait<0>(wgmma_acc(dp));
}
// Pass 3a: dV += P^T dO, issued, not waited for (its A fragments pf stay in use until then).
template <int D>
__device__ __forceinline__ void dkdv_dv(float (&dv_acc)[D / 8][4], uint32_t (&pf)[kWgBwdCols / 16][4],
                                        const float (&p)[kWgBwdCols / 8][4], const bf16* do_tile) {
  pack_fragments(pf, p);
  wgmma_fence(wgmma_acc(dv_acc));
  wgmma_xb<D, kWgBwdCols>(wgmma_acc(dv_acc), pf, n_major_desc<kWgBwdCols>(do_tile));
  wgmma_commit();
}
// Pass 2: dS^T = P^T (dP^T - Delta), left in dp; pass 3b: dK += dS^T Q, issued, not waited for
// (its A fragments dsf stay in use until then).
template <int D, class Stats>
__device__ __forceinline__ void dkdv_dk(float (&dk_acc)[D / 8][4], uint32_t (&dsf)[kWgBwdCols / 16][4],
                                        const float (&p)[kWgBwdCols / 8][4], float (&dp)[kWgBwdCols / 8][4],
                                        const bf16* q_tile, const Stats& stats) {
#pragma unroll
  for (int nt = 0; nt < kWgBwdCols / 8; nt++) {
    const float4 st = stats(nt);
#pragma unroll
    for (int e = 0; e < 4; e++) dp[nt][e] = p[nt][e] * (dp[nt][e] - (e % 2 ? st.w : st.y));
  }
  pack_fragments(dsf, dp);
  wgmma_fence(wgmma_acc(dk_acc));
  wgmma_xb<D, kWgBwdCols>(wgmma_acc(dk_acc), dsf, n_major_desc<kWgBwdCols>(q_tile));
  wgmma_commit();
}
// The three passes, dV's product issued before dS^T so that it runs meanwhile; dS^T left in dp.
template <int D, bool DOCS, class Stats>
__device__ __forceinline__ void dkdv_step(float (&dk_acc)[D / 8][4], float (&dv_acc)[D / 8][4],
                                          float (&dp)[kWgBwdCols / 8][4], uint32_t (&pf)[kWgBwdCols / 16][4],
                                          uint32_t (&dsf)[kWgBwdCols / 16][4], const bf16* sKr, const bf16* sVr,
                                          const bf16* q_tile, const bf16* do_tile, const Stats& stats,
                                          const DocumentMask<DOCS>& docs, int j0, int kr0, const int (&s_row)[2],
                                          int T, int window, float scale_log2) {
  float p[kWgBwdCols / 8][4];
  dkdv_scores<D, true>(p, dp, sKr, sVr, q_tile, do_tile, stats, docs, j0, kr0, s_row, T, window, scale_log2);
  dkdv_dv<D>(dv_acc, pf, p, do_tile);
  dkdv_dk<D>(dk_acc, dsf, p, dp, q_tile, stats);
}

// The warpgroups of a dK/dV block, and what each accumulates: one, dK and dV (D = 64 and 128),
// or at D = 256, where the two would take 256 registers a thread, two, one output each, on the
// same 64 keys and the same Q and dO tiles: warpgroup 0 dV (S^T, P^T, then dV += P^T dO),
// warpgroup 1 dK (dP^T while warpgroup 0 forms P^T, which it hands over through shared memory
// in fp32, then dS^T and dK += dS^T Q). Four products a step, two a warpgroup, as one warpgroup
// doing both; the mma kernel's two sweeps over the queries (dV, then dK) take five and load every
// tile twice.
constexpr int wg_dkdv_warpgroups(int D) { return D == 256 ? 2 : 1; }
constexpr int kScoresShared = 1;  // named barrier: warpgroup 0's P^T is in shared memory (D = 256)
// The dK/dV kernel's shared memory: wg_bwd_smem, and at D = 256 a step's P^T in fp32 (16 KB).
constexpr size_t wg_dkdv_smem(int D) {
  return wg_bwd_smem(D) + (wg_dkdv_warpgroups(D) == 2 ? sizeof(float) * kWgBwdRows * kWgBwdCols : 0);
}
// P^T (this thread's accumulator-layout floats) into / out of sP: (kWgBwdCols / 8, kWgThreads)
// float4s, a warpgroup thread's n-tile nt at nt * kWgThreads + its index in the warpgroup
// (consecutive threads, consecutive 16 bytes: no bank conflicts).
__device__ __forceinline__ void share_scores(float4* sP, const float (&p)[kWgBwdCols / 8][4]) {
#pragma unroll
  for (int nt = 0; nt < kWgBwdCols / 8; nt++)
    sP[nt * kWgThreads + threadIdx.x % kWgThreads] = make_float4(p[nt][0], p[nt][1], p[nt][2], p[nt][3]);
}
__device__ __forceinline__ void take_scores(float (&p)[kWgBwdCols / 8][4], const float4* sP) {
#pragma unroll
  for (int nt = 0; nt < kWgBwdCols / 8; nt++) {
    const float4 x = sP[nt * kWgThreads + threadIdx.x % kWgThreads];
    p[nt][0] = x.x, p[nt][1] = x.y, p[nt][2] = x.z, p[nt][3] = x.w;
  }
}

// dk, dv: (B, T, Hkv, D). Grid (Hkv, B, blocks of 64 keys), the longest (first) blocks first.
// Loops over the 64-query tiles of every query head of its kv head that see some key of the
// block, in the transposed frame (rows are keys): S^T = K Q^T, dP^T = V dO^T, dV += P^T dO,
// dK += dS^T Q. A tile's lse and Delta are read into registers one step ahead and stored to
// shared memory at the end of the step (DkdvSteps, as in the mma kernel). dV's product runs
// while dS^T is computed. At D = 256 two warpgroups, one output each (wg_dkdv_warpgroups).
template <int D, bool DOCS>
__global__ void __launch_bounds__(wg_dkdv_warpgroups(D) * kWgThreads, wg_bwd_blocks_per_sm(D, true))
    attention_backward_dkdv_wgmma(bf16* dk, bf16* dv, const bf16* dout, const bf16* q, const bf16* k, const bf16* v,
                                  const float* lse, const float* delta, int T, int H, int Hkv, float scale,
                                  int window, DocumentMask<DOCS> documents) {
  constexpr int NT = kWgBwdCols / 8, kTile = kWgBwdCols * D;  // kTile: elements of a tile
  constexpr int kThreads = wg_dkdv_warpgroups(D) * kWgThreads;
  extern __shared__ float4 smem_raw[];
  bf16* sK = reinterpret_cast<bf16*>(align_wgmma_tiles(smem_raw));  // sK: (kWgBwdRows, D) as D / 64 panels
  bf16* sV = sK + kTile;                                            // sV: (kWgBwdRows, D) as D / 64 panels
  bf16* sQ = sV + kTile;                                            // sQ: 2 x (kWgBwdCols, D) as D / 64 panels
  bf16* sdO = sQ + 2 * kTile;                                       // sdO: 2 x (kWgBwdCols, D) as D / 64 panels
  float* sStats = reinterpret_cast<float*>(sdO + 2 * kTile);        // sStats: 2 x (kWgBwdCols, 2)
  float4* sP = reinterpret_cast<float4*>(sStats + 4 * kWgBwdCols);  // sP: (kWgBwdRows, kWgBwdCols) P^T at D = 256
  const int warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;  // warp of the warpgroup
  const int k0 = blockIdx.z * kWgBwdRows, hk = blockIdx.x, b = blockIdx.y, group = H / Hkv;
  const int64_t q_stride = int64_t(H) * D, kv_stride = int64_t(Hkv) * D;
  const bf16* kh = k + int64_t(b) * T * kv_stride + int64_t(hk) * D;
  const bf16* vh = v + int64_t(b) * T * kv_stride + int64_t(hk) * D;
  const DocumentMask<DOCS> docs = documents.row(b);
  const int k_last = k0 + kWgBwdRows - 1;
  // The query tiles that see some key of the block: from j_first to j_final (64 queries each).
  const int j_first = k0;
  const int j_final =
      docs.last_query(k_last, min(T - 1, window > 0 ? k_last + window - 1 : T - 1)) / kWgBwdCols * kWgBwdCols;
  const int h_final = (hk + 1) * group - 1;  // the last query head of kv head hk
  const float scale_log2 = scale * kLog2e;
  // this thread's rows (keys): r = 0, 1 is lane / 4 + 8 r of the warp's 16
  const int s_row[2] = {k0 + 16 * warp + lane / 4, k0 + 16 * warp + lane / 4 + 8};

  // A step covers query head h and queries j0 .. j0 + 63: the query tiles of head hk * group,
  // then those of the next head, and so on.
  DkdvSteps<kWgBwdCols, D> steps{sQ, sdO, sStats, q, dout, lse, delta, b, T, H};
  const auto copy = [&](bf16* tile, const bf16* rows, int row0) {
    load_panels_async<kWgBwdCols, D, kThreads>(tile, rows, q_stride, row0, T);
  };
  load_panels_async<kWgBwdRows, D, kThreads>(sK, kh, kv_stride, k0, T);
  load_panels_async<kWgBwdRows, D, kThreads>(sV, vh, kv_stride, k0, T);
  steps.load(hk * group, j_first, 0, copy);
  cp_async_commit();
  steps.store_stats(0);

  // The steps into dk_acc and dv_acc; at D = 256 (SPLIT) each warpgroup's one output, the same
  // array given twice: warpgroup 0 (dv_group) dV, warpgroup 1 dK. Both warpgroups run this one
  // loop, so that the block's barrier is one instruction.
  const bool dv_group = threadIdx.x < kWgThreads;
  const auto sweep = [&](auto split, float(&dk_acc)[D / 8][4], float(&dv_acc)[D / 8][4]) {
    constexpr bool kSplit = decltype(split)::value;
    for (int h = hk * group, j0 = j_first, buf = 0;; buf ^= 1) {
      const int j_last = j0 + kWgBwdCols - 1;
      const bool head_done = j0 == j_final, final_step = head_done && h == h_final;
      cp_async_wait_all();
      fence_proxy_async();
      __syncthreads();  // this step's tiles and stats landed; the last step's products are done
      if (!final_step) steps.load(head_done ? h + 1 : h, head_done ? j_first : j0 + kWgBwdCols, buf ^ 1, copy);
      cp_async_commit();
      if (docs.any_visible(j0, j_last, k0, k_last, window)) {
        const bf16 *q_tile = sQ + buf * kTile, *do_tile = sdO + buf * kTile;
        const auto stats = [&](int nt) { return steps.stats(buf, nt); };
        float p[NT][4], dp[NT][4];
        uint32_t pf[kWgBwdCols / 16][4], dsf[kWgBwdCols / 16][4];
        if constexpr (!kSplit) {
          dkdv_step<D>(dk_acc, dv_acc, dp, pf, dsf, sK, sV, q_tile, do_tile, stats, docs, j0, k0, s_row, T, window,
                       scale_log2);
          wgmma_wait<0>(wgmma_acc(dv_acc), wgmma_acc(dk_acc));
        } else if (dv_group) {
          dkdv_scores<D, false>(p, dp, sK, sV, q_tile, do_tile, stats, docs, j0, k0, s_row, T, window, scale_log2);
          share_scores(sP, p);  // read by warpgroup 1 before the next step's barrier
          named_barrier_arrive(kScoresShared, 2 * kWgThreads);
          dkdv_dv<D>(dv_acc, pf, p, do_tile);
          wgmma_wait<0>(wgmma_acc(dv_acc));
        } else {
          wgmma_fence(wgmma_acc(dp));  // dP^T while warpgroup 0 forms P^T
          dkdv_dp<D>(dp, sV, do_tile);
          wgmma_wait<0>(wgmma_acc(dp));
          named_barrier_sync(kScoresShared, 2 * kWgThreads);
          take_scores(p, sP);
          dkdv_dk<D>(dk_acc, dsf, p, dp, q_tile, stats);
          wgmma_wait<0>(wgmma_acc(dk_acc));
        }
      }
      if (final_step) break;
      steps.store_stats(buf ^ 1);  // read by the next step's barrier
      h += head_done;
      j0 = head_done ? j_first : j0 + kWgBwdCols;
    }
  };
  const int64_t row0 = (int64_t(b) * T + s_row[0]) * kv_stride + int64_t(hk) * D;
  const int64_t row1 = (int64_t(b) * T + s_row[1]) * kv_stride + int64_t(hk) * D;
  const auto store = [&](bf16* out, const float(&acc)[D / 8][4], float mul) {
    store_rows<D>(out, acc, row0, row1, s_row[0] < T, s_row[1] < T, mul, mul);
  };
  if constexpr (wg_dkdv_warpgroups(D) == 1) {
    float dk_acc[D / 8][4] = {}, dv_acc[D / 8][4] = {};  // (16, D) each: dK / scale and dV
    sweep(std::false_type{}, dk_acc, dv_acc);
    store(dk, dk_acc, scale);
    store(dv, dv_acc, 1.0f);
  } else {
    float acc[D / 8][4] = {};  // (16, D): dV (warpgroup 0) or dK / scale (warpgroup 1)
    sweep(std::true_type{}, acc, acc);
    store(dv_group ? dv : dk, acc, dv_group ? 1.0f : scale);
  }
}

// ------------------------------------------------------------------------------------------
// The fused wgmma backward at D = 64 and 128 (set_attention_fused_backward, cuda/attention.h): one
// kernel computes dK and dV as the dK/dV kernel does and adds each step's share of dQ (dS K) into
// an fp32 sum, so that dQ's kernel, which recomputes S and dP, does not run: five products a step
// instead of the two kernels' seven. FlashAttention-3's layout (Shah et al. 2024, its backward):
// a block is 128 keys and three warpgroups,
//   warpgroup 0, the producer (setmaxnreg down to fused_regs(D).producer): warps 0 and 1 load the
//     block's K and V once, then each step's Q and dO tiles (64 queries) into a ring of
//     kFusedStages, warp 3 the step's lse and Delta beside them, each handing a stage to each
//     consumer by a named barrier ("full") once it landed and taking it back by another ("free");
//     warp 2, the dQ writer, adds each step's staged shares to the sum in its turn (below);
//   warpgroups 1 and 2, the consumers (keys k0 + 64 c ..): per step the dK/dV kernel's passes on
//     their 64 keys (S^T, dP^T, dV += P^T dO, dS^T, dK += dS^T Q), then pass 4: dS^T into the
//     block's dS tile (64 queries x 128 keys, transposed by stmatrix), and consumer c's share of
//     dQ (fp32) into the staging buffer for the writer: at D = 128, once both halves are in, dS K
//     over the 128 keys and dQ columns 64 c .. 64 c + 63 (its registers: 32 a thread beside dK
//     and dV's 128); at D = 64 dS K over its own keys and every column, with no wait for the
//     other consumer (the writer adds the two shares).
// The consumers never wait for global memory: the loads run kFusedStages - 1 tiles ahead, and
// the writer takes the turns and the adds off their path (the dK/dV kernel with two warpgroups
// that did both itself, session 42, lost 18-27% of its time at the step's top barrier).
// Deterministic: the shares of a query tile are summed in one order, a counter per (b, h, tile)
// passing the turn: first that of the block that holds the tile's queries (the diagonal one: it
// stores), then the blocks before it, down to that of the first key the tile's first query sees.
// The grid runs the shortest (last) key blocks of a kv head first, and each block visits its
// tiles from its diagonal on, so block n + 1 reaches a tile two steps before block n does and a
// turn waits only for a block launched earlier. (Longest first, which a list-scheduling count puts
// 6-8% nearer the ideal makespan at B4 T4096 H16 D128 and which cannot deadlock where a kv head's
// key blocks all fit on the GPU at once, measured slower on the H100: 3.02 against 2.61 ms
// fwd+bwd there, 16.2 against 8.5 at T = 16384: its blocks wait on their turns.)
// dq = scale dq_shares in bf16 afterwards (attention_dq_from_shares).
// Shared memory at D = 128: K and V 64 KB, the ring 3 x 32.5 KB, dS 16 KB, staging 32 KB: 210.5 KB,
// one block an SM (D = 64: 130.5 KB; the registers allow one block). Registers (ptxas, sm_90a,
// fused_regs): 40 / 232 at D = 128 and 88 / 208 at D = 64 spill nothing.
constexpr int kFusedKeys = 2 * kWgBwdRows;  // keys a block: two consumers of 64
constexpr int kFusedStages = 3;             // Q / dO tiles (and their lse, Delta) in the ring
constexpr int kFusedLoaders = 64;           // the producer's threads that load Q and dO (warps 0 and 1)
constexpr int kFusedWriterWarp = 2;         // the producer's warp that adds the dQ shares (warp 3: lse, Delta)
constexpr int kFusedThreads = 3 * kWgThreads;
// The registers a thread that setmaxnreg gives the producer and each consumer at head width D.
struct FusedRegs {
  int producer, consumer;
};
constexpr FusedRegs fused_regs(int D) { return D == 128 ? FusedRegs{40, 232} : FusedRegs{88, 208}; }
// setmaxnreg moves registers within the block's launch allocation: 168 a thread (64 K / 384,
// rounded down to 8), 64,512 in all; asking for more waits forever (32 / 240, 65,536, hung the
// D = 128 kernel on the H100).
constexpr int kFusedLaunchRegs = kFusedThreads * (64 * 1024 / kFusedThreads / 8 * 8);
static_assert(kWgThreads * (fused_regs(128).producer + 2 * fused_regs(128).consumer) <= kFusedLaunchRegs &&
                  kWgThreads * (fused_regs(64).producer + 2 * fused_regs(64).consumer) <= kFusedLaunchRegs,
              "setmaxnreg within the block's launch registers");
constexpr int kFusedStatsFloats = 2 * kWgBwdCols + 4;  // a stage's lse and Delta a query, then its j0 (16-byte steps)
constexpr int kShareCols = 64;                         // dQ columns of a consumer's share
constexpr int kShareFloats = kWgBwdCols * kShareCols;  // a share: (64 queries, 64 columns) fp32
// Named barriers: tile of stage s landed for consumer c (the loaders and c); stage s read (both
// consumers and the loaders); dS free and dS in (D = 128: both consumers, at kFusedDs; D = 64:
// consumer c's own, at kFusedDs + c); the shares staged (the consumers arrive, the writer waits)
// and the staging read (the writer arrives, the consumers wait).
constexpr int kFusedFull = 1, kFusedFree = kFusedFull + 2 * kFusedStages, kFusedDs = kFusedFree + kFusedStages;
constexpr int kFusedStaged = kFusedDs + 2, kFusedStagingRead = kFusedStaged + 1;
static_assert(kFusedStagingRead <= 15, "16 named barriers");
// (the full and free barriers count the loading threads, the stats warp and the consumers)
constexpr int kFullThreads = kFusedLoaders + 32 + kWgThreads, kFreeThreads = kFusedLoaders + 32 + 2 * kWgThreads;
constexpr int kStagedThreads = 2 * kWgThreads + 32;
constexpr size_t fused_bwd_smem(int D) {
  return kWgmmaTileAlign +
         sizeof(bf16) * ((4 + 2 * kFusedStages) * kWgBwdRows * D + kWgBwdCols * kFusedKeys) +  // K, V, the ring, dS
         sizeof(float) * (2 * kShareFloats + kFusedStages * kFusedStatsFloats);  // staging, stats
}
static_assert(fused_bwd_smem(128) <= 227 * 1024, "the fused backward's block fits an SM's shared memory");
// Element (row, col) of a (64 x 64) share, its 4-float chunks XORed with row % 8 so that a warp's
// float2 stores of accumulator rows hit distinct banks; dq_shares holds the same layout.
__device__ __forceinline__ int share_at(int row, int col) {
  return row * kShareCols + (((col >> 2) ^ (row & 7)) << 2) + (col & 3);
}
// dq_shares: (B, H, query tiles, D / 64) shares; a turn counter per (B, H, query tile), zeroed
// before the kernel.
struct DqShares {
  float* sums;
  int* turns;
  // The (b, h) query tile holding query t: its counter's index; its shares start at index x D / 64.
  __device__ int64_t tile(int b, int h, int H, int t, int T) const {
    return (int64_t(b) * H + h) * ((T + kWgBwdCols - 1) / kWgBwdCols) + t / kWgBwdCols;
  }
};

// The steps of a fused block in order: query head h from the first of its kv head to the last,
// and within a head the 64-query tiles from the block's first key on, those that see some key
// of the block (every role of the block walks the same list).
template <bool DOCS>
struct FusedSteps {
  DocumentMask<DOCS> docs;
  int k0, window, j_final, h_last;
  int h, j0;  // the next candidate

  __device__ FusedSteps(DocumentMask<DOCS> docs_, int k0_, int T, int window_, int h_first, int h_last_)
      : docs(docs_), k0(k0_), window(window_), h_last(h_last_), h(h_first), j0(k0_) {
    const int k_last = k0 + kFusedKeys - 1;
    j_final = docs.last_query(k_last, min(T - 1, window > 0 ? k_last + window - 1 : T - 1)) / kWgBwdCols * kWgBwdCols;
  }
  // The next step's head and first query; false past the last.
  __device__ bool next(int& step_h, int& step_j0) {
    while (h <= h_last) {
      step_h = h, step_j0 = j0;
      if (j0 == j_final) h++, j0 = k0;
      else j0 += kWgBwdCols;
      if (docs.any_visible(step_j0, step_j0 + kWgBwdCols - 1, k0, k0 + kFusedKeys - 1, window)) return true;
    }
    return false;
  }
  __device__ int count() const {
    FusedSteps rest = *this;
    int n = 0, h_, j0_;
    while (rest.next(h_, j0_)) n++;
    return n;
  }
};

// The producer's loading warps: K and V of the block, then step n's Q and dO tiles into stage
// n % kFusedStages once it is free, handed over kFusedStages - 1 steps after their copies were
// issued (of the groups then committed, the last kFusedStages - 2 may be in flight). A group is
// committed every step, empty past the last tile, so that the count holds.
template <int D, bool DOCS>
__device__ __forceinline__ void fused_load_tiles(FusedSteps<DOCS> steps, int n_steps, bf16* sK, const bf16* q,
                                                 const bf16* dout, const bf16* k, const bf16* v, int b, int hk, int T,
                                                 int H, int Hkv) {
  constexpr int kTile = kWgBwdCols * D;
  bf16 *sV = sK + 2 * kTile, *sQ = sV + 2 * kTile, *sdO = sQ + kFusedStages * kTile;  // the kernel's layout
  const int64_t q_stride = int64_t(H) * D, kv_stride = int64_t(Hkv) * D;
  const int64_t kv_head = int64_t(b) * T * kv_stride + int64_t(hk) * D;
  for (int c = 0; c < 2; c++) {
    const int row0 = steps.k0 + c * kWgBwdRows;
    load_panels_async<kWgBwdRows, D, kFusedLoaders, 1>(sK + c * kTile, k + kv_head, kv_stride, row0, T);
    load_panels_async<kWgBwdRows, D, kFusedLoaders, 1>(sV + c * kTile, v + kv_head, kv_stride, row0, T);
  }
  for (int n = 0; n < n_steps + kFusedStages - 1; n++) {
    if (n >= kFusedStages - 1) {
      cp_async_wait<kFusedStages - 2>();
      fence_proxy_async();  // the copies, then wgmma's reads of them
      for (int c = 0; c < 2; c++)
        named_barrier_arrive(kFusedFull + 2 * ((n - (kFusedStages - 1)) % kFusedStages) + c, kFullThreads);
    }
    int h, j0;
    if (n < n_steps && steps.next(h, j0)) {
      const int stage = n % kFusedStages;
      if (n >= kFusedStages) named_barrier_sync(kFusedFree + stage, kFreeThreads);
      const int64_t q_head = int64_t(b) * T * q_stride + int64_t(h) * D;
      load_panels_async<kWgBwdCols, D, kFusedLoaders, 1>(sQ + stage * kTile, q + q_head, q_stride, j0, T);
      load_panels_async<kWgBwdCols, D, kFusedLoaders, 1>(sdO + stage * kTile, dout + q_head, q_stride, j0, T);
    }
    cp_async_commit();
  }
}

// The producer's stats warp: step n's lse (in log2 units) and Delta, two queries a lane, and its
// first query, into stage n % kFusedStages once it is free (plain loads: the warp runs
// up to kFusedStages steps ahead of the consumers), handed over with the tiles.
template <bool DOCS>
__device__ __forceinline__ void fused_load_stats(FusedSteps<DOCS> steps, int n_steps, float* sStats,
                                                 const float* lse, const float* delta, int b, int T, int H) {
  const int lane = threadIdx.x % 32;
  int h, j0;
  for (int n = 0; n < n_steps && steps.next(h, j0); n++) {
    const int stage = n % kFusedStages;
    if (n >= kFusedStages) named_barrier_sync(kFusedFree + stage, kFreeThreads);
    float* stats = sStats + stage * kFusedStatsFloats;
    for (int i = lane; i < kWgBwdCols; i += 32) {
      const int64_t idx = (int64_t(b) * H + h) * T + min(j0 + i, T - 1);
      stats[2 * i] = lse[idx] * kLog2e, stats[2 * i + 1] = delta[idx];
    }
    if (lane == 0) *reinterpret_cast<int*>(stats + 2 * kWgBwdCols) = j0;
    for (int c = 0; c < 2; c++) named_barrier_arrive(kFusedFull + 2 * stage + c, kFullThreads);
  }
}

// The producer's writer warp: step n's staged shares added to the tile's sum in its turn (stored
// by the diagonal block, whose turn is the first), by one bulk copy of lane 0 (D = 128: the two
// shares are dQ's column halves, 64 queries x 128 columns; D = 64: both are 64 x 64, over each
// consumer's keys, and the warp first adds the second into the first, in that order, in fp32);
// the staging handed back once the copy has read it, the turn passed on once the add is done,
// checked a step later (bulk_wait<1>: all adds but the newest), so that the add's trip to L2
// overlaps the next step's wait for its shares (the block after this one in a tile's order
// reaches the tile two steps after this block).
template <int D, bool DOCS>
__device__ __forceinline__ void fused_write_dq(FusedSteps<DOCS> steps, int n_steps, const DqShares& shares,
                                               float* sStaged, int b, int key_block, int T, int H) {
  constexpr uint32_t kBytes = sizeof(float) * D * kWgBwdCols;  // a tile's sum: (64 queries, D) fp32
  const bool issuer = threadIdx.x % 32 == 0;
  int* pending_turn = nullptr;  // the turn of the newest add, passed on once that add is done
  int pending_next = 0;
  int h, j0;
  for (int n = 0; steps.next(h, j0); n++) {
    const int order = j0 / kFusedKeys - key_block;  // shares of the tile added before this block's
    const int64_t tile = shares.tile(b, h, H, j0, T);
    named_barrier_sync(kFusedStaged, kStagedThreads);
    if constexpr (D == kShareCols) {
      for (int i = 4 * (threadIdx.x % 32); i < kShareFloats; i += 4 * 32) {
        float4& x = *reinterpret_cast<float4*>(sStaged + i);
        const float4 y = *reinterpret_cast<const float4*>(sStaged + kShareFloats + i);
        x.x += y.x, x.y += y.y, x.z += y.z, x.w += y.w;
      }
      fence_proxy_async();
      __syncwarp();
    }
    if (issuer) {
      wait_turn(shares.turns + tile, order);
      float* sum = shares.sums + tile * (D / kShareCols) * kShareFloats;
      if (order == 0) bulk_store(sum, sStaged, kBytes);
      else bulk_add(sum, sStaged, kBytes);
      bulk_commit();
      bulk_wait_read<0>();
    }
    __syncwarp();
    if (n + 1 < n_steps) named_barrier_arrive(kFusedStagingRead, kStagedThreads);
    if (issuer) {
      bulk_wait<1>();
      if (pending_turn) pass_turn(pending_turn, pending_next);
      pending_turn = shares.turns + tile, pending_next = order + 1;
    }
  }
  if (issuer) {
    bulk_wait<0>();
    pass_turn(pending_turn, pending_next);
  }
}

// dS^T (dp's registers: this consumer's 64 keys x the step's 64 queries) into its panel of sdS,
// transposed: its 8 x 8 blocks (keys 16 warp + 8 r .., queries 8 nt ..; dp[nt][2 r], [2 r + 1])
// four a stmatrix, block m = 2 (nt % 2) + r, whose row j is dS's row (query) 8 nt + j, keys
// 16 warp + 8 r .. + 7 of the panel (one 16-byte chunk). The same bf16 roundings as dK's.
__device__ __forceinline__ void store_ds_transposed(bf16* panel, const float (&dp)[kWgBwdCols / 8][4]) {
  const int warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
#pragma unroll
  for (int nt0 = 0; nt0 < kWgBwdCols / 8; nt0 += 2) {
    uint32_t blocks[4];
#pragma unroll
    for (int m = 0; m < 4; m++) blocks[m] = pack_bf16(dp[nt0 + m / 2][2 * (m % 2)], dp[nt0 + m / 2][2 * (m % 2) + 1]);
    const int m = lane / 8;
    stmatrix_x4_trans(panel + swizzle<kWgBwdRows>(8 * (nt0 + m / 2) + lane % 8, 16 * warp + 8 * (m % 2)), blocks);
  }
}

// Consumer c's share of dQ, issued. D = 128: dS (64 queries x 128 keys, K-major in sdS's two
// panels) times K's column panel c (N-major), its k16 slice kk in consumer kk / 4's K tile.
// D = 64: dS over consumer c's keys (its panel) times its K tile: every column, its keys only.
template <int D>
__device__ __forceinline__ void issue_dq_share(float (&share)[kShareCols / 2], const bf16* sdS, const bf16* sK, int c) {
  constexpr bool kOwnKeys = D == kShareCols;
  const uint64_t ds_desc = smem_desc_k_major(sdS + (kOwnKeys ? c * kWgBwdCols * kWgBwdRows : 0));
  wgmma_fence(share);
#pragma unroll
  for (int kk = 0; kk < (kOwnKeys ? kWgBwdRows : kFusedKeys) / 16; kk++) {
    const int keys = kOwnKeys ? c : kk / 4, panel = kOwnKeys ? 0 : c;  // K tile, column panel
    const bf16* k_panel = sK + keys * kWgBwdRows * D + panel * kWgBwdRows * kWgPanel;
    wgmma_m64k16<kShareCols, true>(share, advance_desc(ds_desc, panel_slice_bytes<kWgBwdCols>(kk)),
                                   advance_desc(n_major_desc<kWgBwdRows>(k_panel), n_major_slice_bytes(kk % 4)),
                                   kk > 0);
  }
  wgmma_commit();
}

// dk, dv: (B, T, Hkv, D); dq_shares as DqShares. Grid (blocks of 128 keys, Hkv, B), the shortest
// (last) key blocks of a kv head first (see above).
template <int D, bool DOCS>
__global__ void __launch_bounds__(kFusedThreads, 1)
    attention_backward_fused_wgmma(bf16* dk, bf16* dv, DqShares shares, const bf16* dout, const bf16* q,
                                   const bf16* k, const bf16* v, const float* lse, const float* delta, int T, int H,
                                   int Hkv, float scale, int window, DocumentMask<DOCS> documents) {
  static_assert(D == kShareCols || D == 2 * kShareCols, "the fused backward runs at D = 64 and 128");
  constexpr int NT = kWgBwdCols / 8, kTile = kWgBwdCols * D;  // kTile: elements of a (64, D) tile
  extern __shared__ float4 smem_raw[];
  bf16* sK = reinterpret_cast<bf16*>(align_wgmma_tiles(smem_raw));  // sK: 2 x (64, D) as D / 64 panels: 128 keys
  bf16* sV = sK + 2 * kTile;                                        // sV: 2 x (64, D) as D / 64 panels
  bf16* sQ = sV + 2 * kTile;                  // sQ: kFusedStages x (64, D) as D / 64 panels
  bf16* sdO = sQ + kFusedStages * kTile;      // sdO: kFusedStages x (64, D) as D / 64 panels
  bf16* sdS = sdO + kFusedStages * kTile;     // sdS: (64 queries, 128 keys) as 2 panels, consumer c's keys in c
  float* sStaged = reinterpret_cast<float*>(sdS + kWgBwdCols * kFusedKeys);  // sStaged: 2 x (64, 64) share_at
  float* sStats = sStaged + 2 * kShareFloats;  // sStats: kFusedStages x ((64, 2): lse (log2 units), Delta; j0)
  const int warpgroup = threadIdx.x / kWgThreads, warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
  const int key_block = gridDim.x - 1 - blockIdx.x, hk = blockIdx.y, b = blockIdx.z, heads = H / Hkv;
  const int k0 = key_block * kFusedKeys;
  const DocumentMask<DOCS> docs = documents.row(b);
  const FusedSteps<DOCS> steps(docs, k0, T, window, hk * heads, (hk + 1) * heads - 1);
  const int n_steps = steps.count();

  if (warpgroup == 0) {  // the producer
    warpgroup_reg_dealloc<fused_regs(D).producer>();
    if (warp < kFusedLoaders / 32) fused_load_tiles<D>(steps, n_steps, sK, q, dout, k, v, b, hk, T, H, Hkv);
    else if (warp == kFusedWriterWarp) fused_write_dq<D>(steps, n_steps, shares, sStaged, b, key_block, T, H);
    else fused_load_stats(steps, n_steps, sStats, lse, delta, b, T, H);
    return;
  }

  warpgroup_reg_alloc<fused_regs(D).consumer>();
  const int me = warpgroup - 1, kc0 = k0 + me * kWgBwdRows;  // this consumer's keys: kc0 .. kc0 + 63
  const bf16* sKc = sK + me * kTile;
  const bf16* sVc = sV + me * kTile;
  const float scale_log2 = scale * kLog2e;
  // this thread's rows (keys): r = 0, 1 is lane / 4 + 8 r of the warp's 16
  const int s_row[2] = {kc0 + 16 * warp + lane / 4, kc0 + 16 * warp + lane / 4 + 8};
  float dk_acc[D / 8][4] = {}, dv_acc[D / 8][4] = {};  // (16, D) each: dK / scale and dV
  for (int n = 0; n < n_steps; n++) {
    const int stage = n % kFusedStages;
    const bf16* q_tile = sQ + stage * kTile;
    const bf16* do_tile = sdO + stage * kTile;
    const float* stage_stats = sStats + stage * kFusedStatsFloats;
    // stats(nt): lse and Delta of this thread's queries 8 nt + 2 (lane % 4), + 1
    const auto stats = [&](int nt) {
      return *reinterpret_cast<const float4*>(stage_stats + (nt * 8 + (lane % 4) * 2) * 2);
    };
    named_barrier_sync(kFusedFull + 2 * stage + me, kFullThreads);  // tile n landed
    const int j0 = *reinterpret_cast<const int*>(stage_stats + 2 * kWgBwdCols);
    float dp[NT][4];
    uint32_t pf[kWgBwdCols / 16][4], dsf[kWgBwdCols / 16][4];
    dkdv_step<D>(dk_acc, dv_acc, dp, pf, dsf, sKc, sVc, q_tile, do_tile, stats, docs, j0, kc0, s_row, T, window,
                 scale_log2);

    // pass 4: dS^T into sdS once the share products that read it a step before are done (D = 64:
    // this consumer's own, waited for; D = 128: both consumers'), then this consumer's share of dQ
    // once its dS is in (D = 128: both halves), staged once the writer has read the last one
    constexpr bool kCoupled = D == 2 * kShareCols;
    if constexpr (kCoupled) named_barrier_sync(kFusedDs, 2 * kWgThreads);
    store_ds_transposed(sdS + me * kWgBwdCols * kWgBwdRows, dp);
    fence_proxy_async();
    if constexpr (kCoupled) named_barrier_sync(kFusedDs, 2 * kWgThreads);
    else named_barrier_sync(kFusedDs + me, kWgThreads);
    float share[kShareCols / 2];
    issue_dq_share<D>(share, sdS, sK, me);
    wgmma_wait<0>(wgmma_acc(dv_acc), wgmma_acc(dk_acc), share);
    if (n + kFusedStages < n_steps) named_barrier_arrive(kFusedFree + stage, kFreeThreads);  // tile n read
    if (n > 0) named_barrier_sync(kFusedStagingRead, kStagedThreads);
    float* staged = sStaged + me * kShareFloats;
#pragma unroll
    for (int nt = 0; nt < kShareCols / 8; nt++)
#pragma unroll
      for (int r = 0; r < 2; r++)
        *reinterpret_cast<float2*>(staged + share_at(16 * warp + lane / 4 + 8 * r, 8 * nt + 2 * (lane % 4))) =
            make_float2(share[4 * nt + 2 * r], share[4 * nt + 2 * r + 1]);
    fence_proxy_async();
    named_barrier_arrive(kFusedStaged, kStagedThreads);
  }
  const int64_t kv_stride = int64_t(Hkv) * D;
  const int64_t row0 = (int64_t(b) * T + s_row[0]) * kv_stride + int64_t(hk) * D;
  const int64_t row1 = (int64_t(b) * T + s_row[1]) * kv_stride + int64_t(hk) * D;
  store_rows<D>(dk, dk_acc, row0, row1, s_row[0] < T, s_row[1] < T, scale, scale);
  store_rows<D>(dv, dv_acc, row0, row1, s_row[0] < T, s_row[1] < T, 1.0f, 1.0f);
}

// dq: (B, T, H, D) = scale dq_shares (the fused backward's sums), in bf16. Grid (row chunks, H,
// B), a thread 8 columns of a row: 16-byte stores, consecutive threads along a row.
template <int D>
__global__ void attention_dq_from_shares(bf16* dq, DqShares shares, int T, float scale) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  const int h = blockIdx.y, b = blockIdx.z, H = gridDim.y;
  if (i >= int64_t(T) * (D / 8)) return;
  const int t = int(i / (D / 8)), col = int(i % (D / 8)) * 8, c = col % kShareCols;
  const float* share = shares.sums + (shares.tile(b, h, H, t, T) * (D / kShareCols) + col / kShareCols) * kShareFloats;
  const float4 x = *reinterpret_cast<const float4*>(share + share_at(t % kWgBwdCols, c));
  const float4 y = *reinterpret_cast<const float4*>(share + share_at(t % kWgBwdCols, c + 4));
  const uint4 out = make_uint4(pack_bf16(scale * x.x, scale * x.y), pack_bf16(scale * x.z, scale * x.w),
                               pack_bf16(scale * y.x, scale * y.y), pack_bf16(scale * y.z, scale * y.w));
  *reinterpret_cast<uint4*>(dq + ((int64_t(b) * T + t) * H + h) * D + col) = out;
}

// ------------------------------------------------------------------------------------------
// fma path: one warp per row, 8 rows per block, tiles of 32 keys (or queries), one per lane;
// a lane owns output columns lane, lane + 32, ... (up to 8 of them: widths <= 256).

constexpr int kFmaRows = 8, kFmaTile = 32, kFmaMaxPerLane = 8, kFmaThreads = kFmaRows * 32;

// Copies rows [row0, row0 + rows) of a strided (T, ...) matrix into a float tile with row
// pitch `pitch`; rows at or past `end` become zeros. All threads of the block.
template <class T>
__device__ void load_rows_f32(float* tile, int pitch, const T* g, int64_t stride, int row0, int rows, int width,
                              int end) {
  for (int i = threadIdx.x; i < rows * width; i += blockDim.x) {
    const int r = i / width, c = i % width;
    tile[r * pitch + c] = row0 + r < end ? to_float(g[(row0 + r) * stride + c]) : 0.0f;
  }
}

// dot(a[0:n], b[0:n]) over two shared-memory rows
__device__ __forceinline__ float dot_row(const float* a, const float* b, int n) {
  float s = 0;
  for (int d = 0; d < n; d++) s = fmaf(a[d], b[d], s);
  return s;
}

// acc[i] (column lane + 32 i) += sum_j w_j tile[j][lane + 32 i], w_j held by lane j
__device__ __forceinline__ void accumulate_rows(float (&acc)[kFmaMaxPerLane], float w, const float* tile, int pitch,
                                                int width) {
  const int lane = threadIdx.x % 32;
  for (int j = 0; j < kFmaTile; j++) {
    const float wj = __shfl_sync(0xffffffffu, w, j);
#pragma unroll
    for (int i = 0; i < kFmaMaxPerLane; i++)
      if (lane + 32 * i < width) acc[i] = fmaf(wj, tile[j * pitch + lane + 32 * i], acc[i]);
  }
}

template <class T>
__device__ void store_row(T* out, const float (&acc)[kFmaMaxPerLane], int width, float mul) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int i = 0; i < kFmaMaxPerLane; i++)
    if (lane + 32 * i < width) out[lane + 32 * i] = from_float<T>(acc[i] * mul);
}

// Grid (ceil(T / 8), H, B): warp w of block x owns query t = 8 x + w.
template <class T>
__global__ void __launch_bounds__(kFmaThreads) attention_forward_fma(T* o, float* lse, const T* q, const T* k,
                                                                     const T* v, int Tn, int H, int Hkv, int D,
                                                                     int Dv, float scale, int window,
                                                                     DocumentMask<true> documents) {
  extern __shared__ float4 smem_raw[];
  float* sQ = reinterpret_cast<float*>(smem_raw);  // sQ: (8, D)
  float* sK = sQ + kFmaRows * D;                   // sK: (32, D + 1), padded so lane j reads row j conflict-free
  float* sV = sK + kFmaTile * (D + 1);             // sV: (32, Dv)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int t0 = blockIdx.x * kFmaRows, t = t0 + warp, h = blockIdx.y, b = blockIdx.z, hk = h / (H / Hkv);
  const int64_t q_stride = int64_t(H) * D, k_stride = int64_t(Hkv) * D, v_stride = int64_t(Hkv) * Dv;
  const T* kh = k + int64_t(b) * Tn * k_stride + int64_t(hk) * D;
  const T* vh = v + int64_t(b) * Tn * v_stride + int64_t(hk) * Dv;
  load_rows_f32(sQ, D, q + int64_t(b) * Tn * q_stride + int64_t(h) * D, q_stride, t0, kFmaRows, D, Tn);
  const DocumentMask<true> docs = documents.row(b);
  const int s_first = docs.first_key(t0, window > 0 ? max(0, t0 - window + 1) : 0), s_end = min(Tn, t0 + kFmaRows);
  float m = -INFINITY, l = 0, acc[kFmaMaxPerLane] = {};
  for (int s0 = s_first; s0 < s_end; s0 += kFmaTile) {
    __syncthreads();  // the previous tile is consumed (and sQ is loaded)
    load_rows_f32(sK, D + 1, kh, k_stride, s0, kFmaTile, D, s_end);
    load_rows_f32(sV, Dv, vh, v_stride, s0, kFmaTile, Dv, s_end);
    __syncthreads();
    const int s = s0 + lane;
    const bool ok = t < Tn && s < s_end && docs.visible(t, s, window);
    const float score = ok ? scale * dot_row(sQ + warp * D, sK + lane * (D + 1), D) : -INFINITY;  // S = scale q k
    const float m_new = fmaxf(m, warp_max(score));
    const float base = m_new == -INFINITY ? 0.0f : m_new;
    const float p = expf(score - base), alpha = expf(m - base);  // P = exp(S - m'), e^(m - m')
    l = l * alpha + warp_sum(p);
    m = m_new;
#pragma unroll
    for (int i = 0; i < kFmaMaxPerLane; i++) acc[i] *= alpha;
    accumulate_rows(acc, p, sV, Dv, Dv);  // O += P V
  }
  if (t >= Tn) return;
  store_row(o + (int64_t(b) * Tn + t) * H * Dv + int64_t(h) * Dv, acc, Dv, 1.0f / l);
  if (lane == 0) lse[(int64_t(b) * H + h) * Tn + t] = m + logf(l);
}

// dq: (B, T, H, D). Same grid as the forward.
template <class T>
__global__ void __launch_bounds__(kFmaThreads) attention_backward_dq_fma(T* dq, const T* dout, const T* q, const T* k,
                                                                         const T* v, const float* lse,
                                                                         const float* delta, int Tn, int H, int Hkv,
                                                                         int D, int Dv, float scale,
                                                                         int window, DocumentMask<true> documents) {
  extern __shared__ float4 smem_raw[];
  float* sQ = reinterpret_cast<float*>(smem_raw);  // sQ: (8, D)
  float* sdO = sQ + kFmaRows * D;                  // sdO: (8, Dv)
  float* sK = sdO + kFmaRows * Dv;                 // sK: (32, D + 1)
  float* sV = sK + kFmaTile * (D + 1);             // sV: (32, Dv + 1)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int t0 = blockIdx.x * kFmaRows, t = t0 + warp, h = blockIdx.y, b = blockIdx.z, hk = h / (H / Hkv);
  const int64_t q_stride = int64_t(H) * D, o_stride = int64_t(H) * Dv, k_stride = int64_t(Hkv) * D,
                v_stride = int64_t(Hkv) * Dv;
  const T* kh = k + int64_t(b) * Tn * k_stride + int64_t(hk) * D;
  const T* vh = v + int64_t(b) * Tn * v_stride + int64_t(hk) * Dv;
  load_rows_f32(sQ, D, q + int64_t(b) * Tn * q_stride + int64_t(h) * D, q_stride, t0, kFmaRows, D, Tn);
  load_rows_f32(sdO, Dv, dout + int64_t(b) * Tn * o_stride + int64_t(h) * Dv, o_stride, t0, kFmaRows, Dv, Tn);
  const int64_t row = (int64_t(b) * H + h) * Tn + min(t, Tn - 1);
  const float lse_t = lse[row], delta_t = delta[row];
  const DocumentMask<true> docs = documents.row(b);
  const int s_first = docs.first_key(t0, window > 0 ? max(0, t0 - window + 1) : 0), s_end = min(Tn, t0 + kFmaRows);
  float acc[kFmaMaxPerLane] = {};  // dQ / scale
  for (int s0 = s_first; s0 < s_end; s0 += kFmaTile) {
    __syncthreads();
    load_rows_f32(sK, D + 1, kh, k_stride, s0, kFmaTile, D, s_end);
    load_rows_f32(sV, Dv + 1, vh, v_stride, s0, kFmaTile, Dv, s_end);
    __syncthreads();
    const int s = s0 + lane;
    float ds = 0;
    if (t < Tn && s < s_end && docs.visible(t, s, window)) {
      const float p = expf(scale * dot_row(sQ + warp * D, sK + lane * (D + 1), D) - lse_t);  // P rebuilt from lse
      const float dp = dot_row(sdO + warp * Dv, sV + lane * (Dv + 1), Dv);                   // dP = dO v
      ds = p * (dp - delta_t);                                                               // dS = P (dP - Delta)
    }
    accumulate_rows(acc, ds, sK, D + 1, D);  // dQ += dS K (times scale at the end)
  }
  if (t < Tn) store_row(dq + (int64_t(b) * Tn + t) * q_stride + int64_t(h) * D, acc, D, scale);
}

// dk, dv: (B, T, Hkv, D / Dv). Grid (ceil(T / 8), Hkv, B): warp w of block x owns key s = 8 x + w
// and loops over the queries of every query head of its kv head, 32 (one per lane) at a time.
template <class T>
__global__ void __launch_bounds__(kFmaThreads) attention_backward_dkdv_fma(T* dk, T* dv, const T* dout, const T* q,
                                                                           const T* k, const T* v, const float* lse,
                                                                           const float* delta, int Tn, int H,
                                                                           int Hkv, int D, int Dv, float scale,
                                                                           int window, DocumentMask<true> documents) {
  extern __shared__ float4 smem_raw[];
  float* sK = reinterpret_cast<float*>(smem_raw);  // sK: (8, D)
  float* sV = sK + kFmaRows * D;                   // sV: (8, Dv)
  float* sQ = sV + kFmaRows * Dv;                  // sQ: (32, D + 1)
  float* sdO = sQ + kFmaTile * (D + 1);            // sdO: (32, Dv + 1)
  float* sLse = sdO + kFmaTile * (Dv + 1);         // sLse: (32)
  float* sDelta = sLse + kFmaTile;                 // sDelta: (32)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int s0 = blockIdx.x * kFmaRows, s = s0 + warp, hk = blockIdx.y, b = blockIdx.z, group = H / Hkv;
  const int64_t q_stride = int64_t(H) * D, o_stride = int64_t(H) * Dv, k_stride = int64_t(Hkv) * D,
                v_stride = int64_t(Hkv) * Dv;
  load_rows_f32(sK, D, k + int64_t(b) * Tn * k_stride + int64_t(hk) * D, k_stride, s0, kFmaRows, D, Tn);
  load_rows_f32(sV, Dv, v + int64_t(b) * Tn * v_stride + int64_t(hk) * Dv, v_stride, s0, kFmaRows, Dv, Tn);
  const DocumentMask<true> docs = documents.row(b);
  const int t_end =
      docs.last_query(s0 + kFmaRows - 1, window > 0 ? min(Tn - 1, s0 + kFmaRows - 2 + window) : Tn - 1) + 1;
  float dk_acc[kFmaMaxPerLane] = {}, dv_acc[kFmaMaxPerLane] = {};  // dK / scale, dV
  for (int h = hk * group; h < (hk + 1) * group; h++)
    for (int j0 = s0; j0 < t_end; j0 += kFmaTile) {
      __syncthreads();
      load_rows_f32(sQ, D + 1, q + int64_t(b) * Tn * q_stride + int64_t(h) * D, q_stride, j0, kFmaTile, D, t_end);
      load_rows_f32(sdO, Dv + 1, dout + int64_t(b) * Tn * o_stride + int64_t(h) * Dv, o_stride, j0, kFmaTile, Dv,
                    t_end);
      if (threadIdx.x < kFmaTile) {
        const int64_t row = (int64_t(b) * H + h) * Tn + min(j0 + int(threadIdx.x), Tn - 1);
        sLse[threadIdx.x] = lse[row];
        sDelta[threadIdx.x] = delta[row];
      }
      __syncthreads();
      const int t = j0 + lane;
      float p = 0, ds = 0;
      if (s < Tn && t < t_end && docs.visible(t, s, window)) {
        p = expf(scale * dot_row(sQ + lane * (D + 1), sK + warp * D, D) - sLse[lane]);  // P[t, s]
        const float dp = dot_row(sdO + lane * (Dv + 1), sV + warp * Dv, Dv);          // dP = dO_t v_s
        ds = p * (dp - sDelta[lane]);
      }
      accumulate_rows(dv_acc, p, sdO, Dv + 1, Dv);  // dV += P^T dO
      accumulate_rows(dk_acc, ds, sQ, D + 1, D);    // dK += dS^T Q (times scale at the end)
    }
  if (s >= Tn) return;
  store_row(dk + (int64_t(b) * Tn + s) * k_stride + int64_t(hk) * D, dk_acc, D, scale);
  store_row(dv + (int64_t(b) * Tn + s) * v_stride + int64_t(hk) * Dv, dv_acc, Dv, 1.0f);
}

// ------------------------------------------------------------------------------------------

// delta: (B, H, T) = rowsum(dO * O) over each (b, t, h) row of dout and o: (B, T, H, Dv), at
// bandwidth: 2^lane_bits lanes per row (at most 32, so a row's lanes sit in one warp), each
// summing vectors of W elements (16-byte loads when W = kVecWidth<T>; Dv % W == 0), then a
// shuffle sum over the row's lanes. Grid (tokens, H, B): a block's rows are consecutive t of one
// (b, h), so a warp's stores to delta are consecutive and each row's loads whole 16-byte vectors.
template <class T, int W>
__global__ void attention_delta_kernel(float* delta, const T* dout, const T* o, int Tn, int Dv, int lane_bits) {
  const int lanes = 1 << lane_bits, lane = threadIdx.x & (lanes - 1);
  const int64_t t = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) >> lane_bits;
  const int64_t h = blockIdx.y, H = gridDim.y, b = blockIdx.z;
  float s = 0;
  if (t < Tn) {
    const int64_t at = ((b * Tn + t) * H + h) * Dv;  // the row's first element in dout and o
    for (int d = lane * W; d < Dv; d += lanes * W) {
      float x[W], y[W];
      load_floats<W>(x, dout + at + d);
      load_floats<W>(y, o + at + d);
#pragma unroll
      for (int k = 0; k < W; k++) s += x[k] * y[k];
    }
  }
  for (int offset = lanes / 2; offset > 0; offset /= 2) s += __shfl_xor_sync(0xffffffffu, s, offset);
  if (t < Tn && lane == 0) delta[(b * H + h) * Tn + t] = s;
}

// Launches attention_delta_kernel with 16-byte loads where Dv and the pointers allow them.
template <class T>
void attention_delta(float* delta, const T* dout, const T* o, int B, int Tn, int H, int Dv) {
  auto run = [&](auto width) {
    constexpr int W = decltype(width)::value;
    const int vectors = (Dv + W - 1) / W;  // per row
    int lane_bits = 0;
    while ((1 << lane_bits) < vectors && lane_bits < 5) lane_bits++;
    constexpr int kThreads = 256;
    const int64_t blocks = ((int64_t(Tn) << lane_bits) + kThreads - 1) / kThreads;
    launch(attention_delta_kernel<T, W>, dim3(static_cast<unsigned>(blocks), H, B), kThreads, 0, delta, dout, o, Tn,
           Dv, lane_bits);
  };
  if (Dv % kVecWidth<T> == 0) dispatch_width<T>(run, dout, o);
  else run(Width<1>{});
}

struct Shape4 {
  int B, T, H, Hkv, D, Dv, window;
  const int32_t* doc_start;
  template <bool DOCS> DocumentMask<DOCS> documents() const { return {doc_start, T}; }
};

Shape4 checked_shape(const AttentionDims& dims, const char* op) {
  const int64_t B = dims.B, T = dims.T, H = dims.H, Hkv = dims.Hkv, D = dims.D, Dv = dims.Dv, window = dims.window;
  HLA_CHECK(Hkv > 0 && H % Hkv == 0, op, ": H = ", H, " is not a multiple of Hkv = ", Hkv);
  HLA_CHECK(D > 0 && Dv > 0 && D <= 32 * kFmaMaxPerLane && Dv <= 32 * kFmaMaxPerLane, op, ": head widths D = ", D,
            ", Dv = ", Dv, " must lie in [1, ", 32 * kFmaMaxPerLane, "]");
  HLA_CHECK(B <= 65535 && H <= 65535 && T < (int64_t(1) << 30) && window >= 0 && window < (int64_t(1) << 30), op,
            ": sizes out of range (B = ", B, ", T = ", T, ", H = ", H, ", window = ", window, ")");
  return {int(B), int(T), int(H), int(Hkv), int(D), int(Dv), int(window), dims.doc_start};
}

// The grid of an mma kernel over `heads` and blocks of `rows`: (heads, B, row blocks).
dim3 mma_grid(const Shape4& s, int heads, int rows) {
  const int row_blocks = (s.T + rows - 1) / rows;
  HLA_CHECK(row_blocks <= 65535, "attention: T = ", s.T, " needs ", row_blocks, " blocks of ", rows,
            " rows, more than a CUDA grid's z (65535)");
  return dim3(heads, s.B, row_blocks);
}

bool use_mma(int64_t D, int64_t Dv, DType dtype) {
  return dtype == DType::BF16 && D == Dv && (D == 64 || D == 128 || D == 256);
}

// Calls fn(std::integral_constant<int, D>, std::bool_constant<DOCS>) for the tensor-core head
// widths, with packed documents or without.
template <class Fn>
void dispatch_mma(const Shape4& s, Fn&& fn) {
  auto with_docs = [&](auto d) {
    if (s.doc_start) fn(d, std::true_type{});
    else fn(d, std::false_type{});
  };
  if (s.D == 64) with_docs(std::integral_constant<int, 64>{});
  else if (s.D == 128) with_docs(std::integral_constant<int, 128>{});
  else with_docs(std::integral_constant<int, 256>{});
}

// One wgmma switch (set_attention_wgmma, set_attention_wgmma_backward): on, off, or if built, read
// from its environment variable (=1: on, =0: off, else if built) when first asked. If built (in
// builds with sm_90a code), both passes run on wgmma at every width, where each measured faster
// than the mma kernels on the H200 (commit ade7972, causal bf16, gpu-check PASS in the same call):
//   forward  D = 128: 0.914 ms to 0.990 at B4 T4096 H16 (3.352 to 3.776 at B1 T16384);
//            D = 64: 0.290-0.295 ms to ~0.315 at B8 T2048 H16 (three consumers without turns,
//            2026-12-04; with two consumers, ade7972: 0.338, and with turns, ff76c2d: 0.310);
//   backward D = 128: 2.46 ms to 3.56 at B4 T4096 H16 (fwd+bwd minus fwd);
//            D = 64: 0.773 ms to 1.027 at B8 T2048 H16;
//            D = 256 (two dK/dV warpgroups; H100, 2026-12-07, commit 04af79c, the forward on wgmma
//            in both): fwd+bwd 0.862 ms to 1.421 at B8 T2048 H4, the GDN 3:1 4 x 256 preset 121.11
//            ms an update to 124.42.
#ifdef HLA_WGMMA
constexpr bool kWgmmaBuilt = true;
#else
constexpr bool kWgmmaBuilt = false;
#endif
struct WgmmaSwitch {
  const char* env;
  WgmmaSetting setting = WgmmaSetting::if_built;
  bool read = false;

  WgmmaSetting current() {
    if (!read) {
      const char* value = std::getenv(env);
      if (value) setting = std::string(value) == "1" ? WgmmaSetting::on : WgmmaSetting::off;
      read = true;
    }
    return setting;
  }
  // Whether a BF16 pass at these widths runs on wgmma (D = Dv in 64, 128 and 256).
  bool use(int64_t D, int64_t Dv, DType dtype) {
    if (!use_mma(D, Dv, dtype)) return false;
    switch (current()) {
      case WgmmaSetting::on: return true;
      case WgmmaSetting::off: return false;
      default: return kWgmmaBuilt;
    }
  }
};
WgmmaSwitch g_wgmma_forward{"HLA_ATTENTION_WGMMA"};
WgmmaSwitch g_wgmma_backward{"HLA_ATTENTION_WGMMA_BWD"};
// The fused backward (set_attention_fused_backward); HLA_ATTENTION_FUSED_BWD=1 or =0 overrides
// where_faster.
FusedSetting g_fused_backward = [] {
  const char* value = std::getenv("HLA_ATTENTION_FUSED_BWD");
  if (!value) return FusedSetting::where_faster;
  return std::string(value) == "1" ? FusedSetting::on : std::string(value) == "0" ? FusedSetting::off
                                                                                  : FusedSetting::where_faster;
}();
// where_faster: at D = 128 where a query can see kFusedMinKeys keys or more (no documents; no
// window, or one that wide). On the H100 (2026-12-05, hla bench, fwd+bwd ms, two kernels / fused):
// B4 T4096 H16 2.65 / 2.61, B1 T16384 9.69 / 8.49; in documents of 512 tokens 0.77 / 0.83; at
// D = 64 (B8 T2048 H16) 0.97 / 1.11.
constexpr int kFusedMinKeys = 4096;
// The widths the fused kernel has: 64 and 128 (dK, dV and a dQ share would not fit at 256).
bool fused_width(int64_t D) { return D == 64 || D == 128; }
bool fused_backward_runs(const Shape4& s) {
  if (!fused_width(s.D)) return false;
  switch (g_fused_backward) {
    case FusedSetting::on: return true;
    case FusedSetting::off: return false;
    default: return s.D == 128 && !s.doc_start && std::min(s.T, s.window > 0 ? s.window : s.T) >= kFusedMinKeys;
  }
}
bool use_wgmma_forward(int64_t D, int64_t Dv, DType dtype) { return g_wgmma_forward.use(D, Dv, dtype); }
bool use_wgmma_backward(int64_t D, int64_t Dv, DType dtype) { return g_wgmma_backward.use(D, Dv, dtype); }

size_t fma_forward_smem(int D, int Dv) { return sizeof(float) * (kFmaRows * D + kFmaTile * (D + 1) + kFmaTile * Dv); }
size_t fma_dq_smem(int D, int Dv) {
  return sizeof(float) * (kFmaRows * (D + Dv) + kFmaTile * (D + 1) + kFmaTile * (Dv + 1));
}
size_t fma_dkdv_smem(int D, int Dv) {
  return sizeof(float) * (kFmaRows * (D + Dv) + kFmaTile * (D + 1) + kFmaTile * (Dv + 1) + 2 * kFmaTile);
}

}  // namespace

// Both return the previous setting.
WgmmaSetting set_attention_wgmma(WgmmaSetting setting) {
  const WgmmaSetting was = g_wgmma_forward.current();
  g_wgmma_forward.setting = setting;
  return was;
}

WgmmaSetting set_attention_wgmma_backward(WgmmaSetting setting) {
  const WgmmaSetting was = g_wgmma_backward.current();
  g_wgmma_backward.setting = setting;
  return was;
}

FusedSetting set_attention_fused_backward(FusedSetting setting) {
  const FusedSetting was = g_fused_backward;
  g_fused_backward = setting;
  return was;
}

const char* attention_kernel(int64_t D, int64_t Dv, DType dtype) {
  const bool forward = use_wgmma_forward(D, Dv, dtype), backward = use_wgmma_backward(D, Dv, dtype);
  if (backward && g_fused_backward == FusedSetting::on && fused_width(D))
    return forward ? "wgmma fwd+bwd, fused" : "mma, wgmma bwd, fused";
  if (backward && g_fused_backward == FusedSetting::where_faster && D == 128)
    return forward ? "wgmma fwd+bwd, fused on long rows" : "mma, wgmma bwd, fused on long rows";
  if (forward) return backward ? "wgmma fwd+bwd" : "wgmma";
  if (backward) return "mma, wgmma bwd";
  return use_mma(D, Dv, dtype) ? "mma" : "fma";
}

void attention_forward(void* o, float* lse, const void* q, const void* k, const void* v, const AttentionDims& dims,
                       DType dtype) {
  const Shape4 s = checked_shape(dims, "attention_forward");
  const double scale = dims.scale;
  if (dims.B * dims.T * dims.H == 0) return;
  if (use_wgmma_forward(dims.D, dims.Dv, dtype)) {
#ifndef HLA_WGMMA
    fail("attention_forward: the wgmma forward (HLA_ATTENTION_WGMMA=1) needs a build with sm_90a code; configure "
         "with -DHLA_CUDA_ARCH=90a");
#endif
    dispatch_mma(s, [&](auto d, auto docs) {
      constexpr int kD = decltype(d)::value;
      constexpr bool kDocs = decltype(docs)::value;
      launch(attention_forward_wgmma<kD, kDocs>, mma_grid(s, s.H, wg_block_rows(kD)), wg_block_threads(kD),
             wg_smem(kD), static_cast<bf16*>(o), lse, static_cast<const bf16*>(q), static_cast<const bf16*>(k),
             static_cast<const bf16*>(v), s.T, s.H, s.Hkv, static_cast<float>(scale) * kLog2e, s.window,
             s.documents<kDocs>());
    });
  } else if (use_mma(dims.D, dims.Dv, dtype)) {
    dispatch_mma(s, [&](auto d, auto docs) {
      constexpr int kD = decltype(d)::value;
      constexpr bool kDocs = decltype(docs)::value;
      // fwd_blocks_per_sm(kD) blocks of 96 / 48 / 96 KB (D = 128 / 64 / 256) an SM: the largest
      // shared-memory carveout
      CUDA_CHECK(cudaFuncSetAttribute(attention_forward_mma<kD, kDocs>,
                                      cudaFuncAttributePreferredSharedMemoryCarveout, cudaSharedmemCarveoutMaxShared));
      launch(attention_forward_mma<kD, kDocs>, mma_grid(s, s.H, fwd_rows(kD)), kFwdThreads,
             sizeof(bf16) * (fwd_rows(kD) + 4 * mma_cols(kD)) * kD, static_cast<bf16*>(o), lse,
             static_cast<const bf16*>(q), static_cast<const bf16*>(k), static_cast<const bf16*>(v), s.T, s.H, s.Hkv,
             static_cast<float>(scale) * kLog2e, s.window, s.documents<kDocs>());
    });
  } else {
    dispatch_storage(dtype, "attention_forward", [&](auto tag) {
      using T = decltype(tag);
      launch(attention_forward_fma<T>, dim3((s.T + kFmaRows - 1) / kFmaRows, s.H, s.B), kFmaThreads,
             fma_forward_smem(s.D, s.Dv), static_cast<T*>(o), lse, static_cast<const T*>(q), static_cast<const T*>(k),
             static_cast<const T*>(v), s.T, s.H, s.Hkv, s.D, s.Dv, static_cast<float>(scale), s.window,
             s.documents<true>());
    });
  }
}

void attention_backward(void* dq, void* dk, void* dv, const void* dout, const void* q, const void* k, const void* v,
                        const void* o, const float* lse, const AttentionDims& dims, DType dtype) {
  const Shape4 s = checked_shape(dims, "attention_backward");
  if (dims.B * dims.T * dims.H == 0) return;
  const int64_t rows = dims.B * dims.T * dims.H;
  const FloatScratch delta_buf(rows);
  float* delta = delta_buf.get();  // delta: (B, H, T)
  dispatch_storage(dtype, "attention_backward", [&](auto tag) {
    using T = decltype(tag);
    attention_delta(delta, static_cast<const T*>(dout), static_cast<const T*>(o), s.B, s.T, s.H, s.Dv);
  });
  const float sc = static_cast<float>(dims.scale);
  if (use_wgmma_backward(dims.D, dims.Dv, dtype)) {
#ifndef HLA_WGMMA
    fail("attention_backward: the wgmma backward (HLA_ATTENTION_WGMMA_BWD=1) needs a build with sm_90a code; "
         "configure with -DHLA_CUDA_ARCH=90a");
#endif
    dispatch_mma(s, [&](auto d, auto docs) {
      constexpr int kD = decltype(d)::value;
      constexpr bool kDocs = decltype(docs)::value;
      // the largest shared-memory carveout: room for wg_bwd_blocks_per_sm blocks (three dQ
      // blocks of 50 KB at D = 64; two of 99 KB at D = 128 and one of 194 KB at 256 need it anyway)
      const auto max_carveout = [](auto kernel) {
        CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                        cudaSharedmemCarveoutMaxShared));
      };
      if constexpr (kD != 256) {  // the fused kernel: D = 64 or 128 (fused_width)
        if (fused_backward_runs(s)) {
          // dq_shares: a (64 x D) fp32 sum and a turn counter per (b, h, query tile)
          const int64_t tiles = int64_t(s.B) * s.H * ((s.T + kWgBwdCols - 1) / kWgBwdCols);
          const FloatScratch sums(tiles * kWgBwdCols * kD);
          const Scratch<int> turns(tiles);
          memset_zero(turns.get(), sizeof(int) * tiles);
          const int key_blocks = (s.T + kFusedKeys - 1) / kFusedKeys;
          const DqShares shares{sums.get(), turns.get()};
          launch(attention_backward_fused_wgmma<kD, kDocs>, dim3(key_blocks, s.Hkv, s.B), kFusedThreads,
                 fused_bwd_smem(kD), static_cast<bf16*>(dk), static_cast<bf16*>(dv), shares,
                 static_cast<const bf16*>(dout), static_cast<const bf16*>(q), static_cast<const bf16*>(k),
                 static_cast<const bf16*>(v), lse, delta, s.T, s.H, s.Hkv, sc, s.window, s.documents<kDocs>());
          constexpr int kThreads = 256;
          launch(attention_dq_from_shares<kD>, dim3((s.T * (kD / 8) + kThreads - 1) / kThreads, s.H, s.B), kThreads,
                 0, static_cast<bf16*>(dq), shares, s.T, sc);
          return;
        }
      }
      max_carveout(attention_backward_dq_wgmma<kD, kDocs>);
      max_carveout(attention_backward_dkdv_wgmma<kD, kDocs>);
      // The two kernels are independent and each leaves SMs idle (one or two warpgroups an SM,
      // its causal tail): dK/dV on hla's stream and dQ beside it fill each other's gaps.
      const cudaStream_t side = fork_side_stream();
      launch(attention_backward_dkdv_wgmma<kD, kDocs>, mma_grid(s, s.Hkv, kWgBwdRows),
             wg_dkdv_warpgroups(kD) * kWgThreads, wg_dkdv_smem(kD), static_cast<bf16*>(dk), static_cast<bf16*>(dv),
             static_cast<const bf16*>(dout), static_cast<const bf16*>(q), static_cast<const bf16*>(k),
             static_cast<const bf16*>(v), lse, delta, s.T, s.H, s.Hkv, sc, s.window, s.documents<kDocs>());
      launch_on(side, attention_backward_dq_wgmma<kD, kDocs>, mma_grid(s, s.H, kWgBwdRows), kWgThreads,
                wg_bwd_smem(kD), static_cast<bf16*>(dq), static_cast<const bf16*>(dout), static_cast<const bf16*>(q),
                static_cast<const bf16*>(k), static_cast<const bf16*>(v), lse, delta, s.T, s.H, s.Hkv, sc, s.window,
                s.documents<kDocs>());
      join_side_stream();
    });
  } else if (use_mma(dims.D, dims.Dv, dtype)) {
    dispatch_mma(s, [&](auto d, auto docs) {
      constexpr int kD = decltype(d)::value;
      constexpr bool kDocs = decltype(docs)::value;
      constexpr int kWarps = bwd_blocking(kD).warps, kRows = 16 * kWarps;
      launch(attention_backward_dq_mma<kD, kDocs>, mma_grid(s, s.H, kRows), 32 * kWarps,
             sizeof(bf16) * (2 * kRows + 4 * mma_cols(kD)) * kD, static_cast<bf16*>(dq), static_cast<const bf16*>(dout),
             static_cast<const bf16*>(q), static_cast<const bf16*>(k), static_cast<const bf16*>(v), lse, delta, s.T,
             s.H, s.Hkv, sc, s.window, s.documents<kDocs>());
      launch(attention_backward_dkdv_mma<kD, kDocs>, mma_grid(s, s.Hkv, kRows), 32 * kWarps,
             sizeof(bf16) * (2 * kRows + 4 * kMmaQueries) * kD + sizeof(float) * 4 * kMmaQueries,
             static_cast<bf16*>(dk), static_cast<bf16*>(dv), static_cast<const bf16*>(dout),
             static_cast<const bf16*>(q), static_cast<const bf16*>(k), static_cast<const bf16*>(v), lse,
             delta, s.T, s.H, s.Hkv, sc, s.window, s.documents<kDocs>());
    });
  } else {
    dispatch_storage(dtype, "attention_backward", [&](auto tag) {
      using T = decltype(tag);
      const unsigned blocks = (s.T + kFmaRows - 1) / kFmaRows;
      launch(attention_backward_dq_fma<T>, dim3(blocks, s.H, s.B), kFmaThreads, fma_dq_smem(s.D, s.Dv),
             static_cast<T*>(dq), static_cast<const T*>(dout), static_cast<const T*>(q), static_cast<const T*>(k),
             static_cast<const T*>(v), lse, delta, s.T, s.H, s.Hkv, s.D, s.Dv, sc, s.window, s.documents<true>());
      launch(attention_backward_dkdv_fma<T>, dim3(blocks, s.Hkv, s.B), kFmaThreads, fma_dkdv_smem(s.D, s.Dv),
             static_cast<T*>(dk), static_cast<T*>(dv), static_cast<const T*>(dout), static_cast<const T*>(q),
             static_cast<const T*>(k), static_cast<const T*>(v), lse, delta, s.T, s.H,
             s.Hkv, s.D, s.Dv, sc, s.window, s.documents<true>());
    });
  }
}

}  // namespace hla::cuda
