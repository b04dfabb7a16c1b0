// Causal depthwise short convolution on the GPU (mixers.md 2.6), forward and backward, with the
// CPU reference's extended sequence xe = [state ; x] (nn/ops/short_conv.cpp): output t reads
// xe_t .. xe_{t+K-1}, and the final state is xe_L .. xe_{L+K-2}. Packed documents (d.doc_start)
// narrow both to the extended indices e >= first_visible(b, t) of t's document, as on the CPU.
//
// The main kernels work in x's own indices s (x_s = xe_{s+K-1}; s < 0 is the state, s < 1-K
// zero) with the taps padded on the left to KMAX (4, or kMaxTaps for K > 4) by zero weights, so
// every register index is a compile-time constant. Memory traffic is about one read of each input
// row and one write of each output row:
//   forward: one thread owns W consecutive channels (8 bf16 or 4 fp32 in one 16-byte load; 1 when
//     C % W != 0 or a pointer is misaligned) and a run of kForwardRun consecutive tokens of one
//     sequence (consecutive threads take consecutive channel groups, so a warp's loads of one
//     token are coalesced rows), and walks up the tokens keeping the last KMAX-1 inputs in a
//     ring of registers (each x row read once, plus a halo of KMAX-1 rows before the run; the
//     walk unrolled by KMAX tokens so that no register moves from token to token). Runs are
//     halved down to kMinRun while the threads would not give every SM a block (plan_runs), and
//     then the blocks are one warp each.
//   backward, one kernel, on tiles: a block takes kTileTokens tokens of one sequence and kSlab =
//     128 channels (a warp's row, 4 channels a lane), copies the tile's x rows (and KMAX-1 below
//     and above them) and dy rows (and KMAX-1 above) into shared memory, every 16-byte copy in
//     flight at once (element by element when C is not a multiple of 16 bytes or a pointer is
//     misaligned); then each of its 8 warps walks its own run of the tile's rows down, from the
//     KMAX-1 rows above the run (whose dpre its dx reads), with x and dpre in rings of registers:
//     dpre_t = dy_t act'(pre_t), then dx_t = sum_i w_i dpre_{t+K-1-i} (+ dfinal) and the run's dw,
//     dbias, summed over the warps in a fixed order: one fp32 partial per block that
//     cuda/reduce.cuh sums in a fixed order (deterministic). Tiles are halved down to kMinTile
//     while they would not give every SM one; a block then takes per_block consecutive tiles of
//     one sequence, as many as one wave of two blocks an SM leaves each (plan_tiles), its two
//     halves of shared memory taking the tiles by turns: the next tile's copies are in flight
//     while its warps walk this one. A tile inside its sequence (with its halo) and without
//     documents is walked by a second instantiation that tests no visibility (kInterior).
//   History (bench/README): until session 54 a backward thread walked a run of 16 tokens down
//     from rows it had copied into shared memory first (two blocks an SM, one partial per 16-token
//     run); the tiles took H200, bf16, B8 T2048 C1024's backward (fwd+bwd less fwd) 0.147 -> 0.140
//     ms. Their warps then formed every row's dpre into an fp32 tile first (a barrier, each x and
//     dpre row read KMAX times, 4-way bank conflicts), and the activation ran IEEE expf and
//     division, most of both kernels' instructions (ncu: the forward at 890 GB/s, 40% issue
//     busy, 3.5 of 8.7 cycles between issues waiting on loads). Session 59, H100, the same row:
//     sigmoid on MUFU.EX2 and MUFU.RCP: fwd 0.0655 -> 0.0503 ms, backward 0.145 -> 0.136; the
//     forward's ring: fwd -> 0.0475; the backward's walk: -> 0.128 (fwd+bwd 0.211 -> 0.176).
//     The forward on the backward's tiles (256 channels, 8 a lane) ran 0.062 -> 0.075 ms and was
//     not kept (session 54). Session 60, H100: the forward's next row kept as stored (converted
//     where it enters the ring) and addressed from the run's first row: fwd 0.0476 -> 0.0455 ms
//     (fused norm 0.0648 -> 0.0623, B4 T4096 C2048 0.0854 -> 0.0810); loading two rows ahead was
//     not faster (0.0477 against 0.0471). The backward as warps walking global memory, each
//     run's rows loaded 2-4 steps ahead instead of a tile's copies all in flight at once, ran
//     1.27-1.44x the fwd+bwd time (ncu: 62% of its cycles waiting on those loads at 16 warps an
//     SM) and was not kept. Session 61, H100: the backward's blocks in runs of tiles, copies
//     overlapping the walk: fwd+bwd 0.1742 -> 0.1582 ms (backward 0.129 -> 0.113; ncu 95.3 ->
//     84.3 us), the fused norm's 0.2323 -> 0.2182, B4 T4096 C2048 0.3213 -> 0.2947. Lanes of 2
//     channels (runs of 16 rows in 128-token tiles, 3 of 16 recomputed; three blocks an SM) ran
//     1.11-1.21x that fwd+bwd: the per-row work shared by half the channels costs more than the
//     halo's recompute. Not kept. The interior tiles' walk without the visibility tests (the
//     lowest-input reads and comparisons, rows past L, the final state): fwd+bwd 0.1585 -> 0.1438
//     (backward 0.113 -> 0.098), the fused norm's 0.2187 -> 0.2037, B4 T4096 C2048 0.2948 -> 0.2618.
//   Registers (ptxas -v, sm_90a, nvcc 13.0): the forward 128 at bf16's W = 8 (two blocks an SM;
//     no spills, the fused norm too), the backward 128 with 16-byte rows (two blocks
//     an SM; 16 bytes of spills at bf16, 68 at fp32), 187-195 element by element (one); K > 4
//     (KMAX = kMaxTaps) pays ~5 KB of spills a thread for the backward's rings of 16 rows: no
//     mixer here uses it, and it stays exact.
// The state rows take small dedicated kernels: final_state copies xe_L.., dstate gathers
// d(xe_e) = sum_i w_i dpre_{e-i} (+ dfinal) for e < K-1 with dpre recomputed from dy and x.
// The fused norm (d.norm_width > 0, the delta-rule mixers' q/k l2norm): the forward rounds each
// y to T (what the unfused l2norm would read back), and the G = norm_width / W lanes that own one
// head of a token sum its squares by shuffles within the head's lanes and scale y by rstd before
// the store; that saves l2norm's read and write of y. When G is not a power of two <= 32 (W = 1
// or fp32's W = 4 at wide heads) the plain kernel runs, then cuda/l2norm.cu on y in place. The
// backward is l2norm's, run by the caller (nn/ops/short_conv.cpp) before this one.
#include <limits>
#include <type_traits>

#include "cuda/l2norm.h"
#include "cuda/mma.cuh"
#include "cuda/reduce.cuh"
#include "cuda/short_conv.h"

namespace hla::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxTaps = 16;
constexpr int kForwardRun = 16;   // tokens a forward thread walks, at most
constexpr int kMinRun = 8;        // the shortest run plan_runs cuts
constexpr int kTileTokens = 64;   // tokens a backward tile covers (one dw partial each), at most
constexpr int kMinTile = 16;      // the shortest tile plan_tiles cuts
constexpr int kTileWarps = kThreads / 32;
constexpr int kGroup = 4;         // channels a backward lane owns
constexpr int kSlab = 32 * kGroup;  // channels a backward tile covers: a warp's row
constexpr int kBackwardBlocks = 2;  // backward blocks an SM: the 16-byte K <= 4 launch bounds, plan_tiles' wave
constexpr int64_t kEveryInput = std::numeric_limits<int64_t>::min();  // a lowest input below every input

// y = act(pre)
__device__ __forceinline__ float activation(float pre, ConvAct act) {
  return act == ConvAct::SiLU ? pre * fast_sigmoid(pre) : pre;
}
// y = pre * s(pre)  =>  dpre = dy * s * (1 + pre * (1 - s))
__device__ __forceinline__ float activation_grad(float dy, float pre, ConvAct act) {
  if (act == ConvAct::Identity) return dy;
  const float s = fast_sigmoid(pre);
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

  // x_s of channel c of sequence b for s < 0: the state's row (s >= 1-K), else 0
  __device__ T state_row(int64_t b, int64_t s, int64_t c) const {
    return s >= 1 - K && state ? state[(b * C + c) * (K - 1) + K - 1 + s] : from_float<T>(0.0f);
  }
  // x_s of channels c0 .. c0+W-1 (s < 0: the state, s < 1-K: zeros); one vector load for s >= 0.
  template <int W>
  __device__ Vec<T, W> input_row(int64_t b, int64_t s, int64_t c0) const {
    if (s >= 0) return load_vec<W>(x + (b * L + s) * C + c0);
    Vec<T, W> v;
#pragma unroll
    for (int k = 0; k < W; k++)
      v.v[k] = state_row(b, s, c0 + k);
    return v;
  }
  template <int W>
  __device__ void load_inputs(float (&v)[W], int64_t b, int64_t s, int64_t c0) const {
    to_floats(v, input_row<W>(b, s, c0));
  }
  // wp[j] = w[c, j - (KMAX-K)] for the padded taps j >= KMAX-K, else 0; b = bias[c] or 0 (0 for c >= C).
  template <int KMAX, int W>
  __device__ void load_taps(float (&wp)[KMAX][W], float (&b)[W], int64_t c0) const {
#pragma unroll
    for (int j = 0; j < KMAX; j++)
#pragma unroll
      for (int k = 0; k < W; k++)
        wp[j][k] = j >= KMAX - K && c0 + k < C ? to_float(w[(c0 + k) * K + j - (KMAX - K)]) : 0.0f;
#pragma unroll
    for (int k = 0; k < W; k++) b[k] = bias && c0 + k < C ? to_float(bias[c0 + k]) : 0.0f;
  }
  // pre_t of channels c0.. from the window win[j] = x_{t-KMAX+1+j}: the real (unpadded) taps on
  // visible inputs s >= lowest (a padded tap is skipped, not multiplied by 0: x may hold inf).
  template <int KMAX, int W>
  __device__ __forceinline__ void window_pre(float (&pre)[W], const float (&wp)[KMAX][W], const float (&b)[W],
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

// win[j] = ring[(first + step j) mod KMAX]: a window of KMAX rows out of a ring of registers that a
// walk over the tokens fills one slot a token (step +1 walking up, -1 walking down). With the walk's
// phase unrolled, first and step are constants and the copy is only a renaming: no moves.
template <int KMAX, int W>
__device__ __forceinline__ void ring_window(float (&win)[KMAX][W], const float (&ring)[KMAX][W], int first, int step) {
#pragma unroll
  for (int j = 0; j < KMAX; j++)
#pragma unroll
    for (int k = 0; k < W; k++) win[j][k] = ring[((first + step * j) % KMAX + KMAX) % KMAX][k];
}

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

// Copies rows first .. first+n-1 of src (B, L, C) for sequence b, channels slab0 .. slab0+kSlab-1,
// into tile (n, kSlab): 16-byte copies in flight (kVec: C a multiple of kVecWidth<T> and 16-byte
// aligned rows; the caller commits them as a group), else element by element; rows outside
// 0 .. L-1 and channels past C read as zeros, rows below 0 as row_below(s, c).
template <bool kVec, class T, class Below>
__device__ void copy_tile_rows(T* tile, const T* __restrict__ src, int64_t b, int64_t first, int n, int64_t slab0,
                               int64_t L, int64_t C, Below row_below) {
  constexpr int kPiece = kVec ? kVecWidth<T> : 1, kPieces = kSlab / kPiece;
  for (int i = threadIdx.x; i < n * kPieces; i += kThreads) {
    const int r = i / kPieces, c = (i % kPieces) * kPiece;
    const int64_t s = first + r, ch = slab0 + c;
    T* dst = tile + r * kSlab + c;
    if (s < 0) {
#pragma unroll
      for (int k = 0; k < kPiece; k++) dst[k] = ch + k < C ? row_below(s, ch + k) : from_float<T>(0.0f);
    } else if constexpr (kVec) {
      const bool valid = s < L && ch < C;
      cp_async_16(dst, valid ? src + (b * L + s) * C + ch : src, valid);
    } else {
      *dst = s < L && ch < C ? src[(b * L + s) * C + ch] : from_float<T>(0.0f);
    }
  }
}

// p[k] = v[k] for the k < room that hold channels: one vector store with kVec (C a multiple of W)
template <bool kVec, int W, class T>
__device__ __forceinline__ void store_row(T* p, const float (&v)[W], int64_t room) {
  if constexpr (kVec) {
    store_floats(p, v);
  } else {
#pragma unroll
    for (int k = 0; k < W; k++)
      if (k < room) p[k] = from_float<T>(v[k]);
  }
}

// The tiles of block blockIdx.x: sequence b, tiles first .. first + n - 1 of it (per_block, the last
// group's fewer), channels slab0 .. slab0 + kSlab - 1 (blocks take consecutive slabs of a group of
// tiles, then consecutive groups).
struct TileRun {
  int64_t b, slab0, chunk, first;  // chunk: b * groups + group, the block's partial
  int n;
  __device__ TileRun(int64_t C, int64_t tiles, int64_t per_block) {
    const int64_t slabs = (C + kSlab - 1) / kSlab, groups = (tiles + per_block - 1) / per_block;
    const int64_t group = blockIdx.x / slabs % groups;
    b = blockIdx.x / slabs / groups, slab0 = blockIdx.x % slabs * kSlab, chunk = b * groups + group;
    first = group * per_block;
    n = static_cast<int>(tiles - first < per_block ? tiles - first : per_block);
  }
};

// y: (B, L, C), rstd: (B, L, C / norm_width) when kNorm (the fused norm, normalise_head);
// threads: B * runs * (C / W), runs = ceil(L / run_tokens).
template <class T, int KMAX, int W, bool kNorm>
__global__ void __launch_bounds__(kThreads, 2)
    conv_forward_kernel(T* __restrict__ y, float* __restrict__ rstd, ConvInputs<T> in, int64_t B, int64_t runs,
                        int run_tokens, ConvAct act, int norm_width, float norm_eps) {
  const ThreadRun r = thread_run<W>(in.L, in.C, runs, run_tokens, B);
  if (!r.valid) return;
  float wp[KMAX][W], bias[W];
  in.load_taps(wp, bias, r.c0);
  // The window is a ring: token t = t0 + p (mod KMAX) finds x_{t-KMAX+1+j} in ring[(p + j) % KMAX],
  // so with the phase p unrolled no register moves from token to token.
  float ring[KMAX][W];
#pragma unroll
  for (int j = 0; j < KMAX - 1; j++) in.load_inputs(ring[j], r.b, r.t0 - KMAX + 1 + j, r.c0);
  // x_t as stored, loaded a token ahead (its latency hidden behind the token before) and converted
  // where it enters the ring
  const T* x_run = in.x + (r.b * in.L + r.t0) * in.C + r.c0;  // x_run: row t0 of the run's channels
  Vec<T, W> next = load_vec<W>(x_run);
  for (int64_t tp = r.t0; tp < r.t1; tp += KMAX) {
#pragma unroll
    for (int p = 0; p < KMAX; p++) {
      const int64_t t = tp + p;
      if (t >= r.t1) break;
      to_floats(ring[(p + KMAX - 1) % KMAX], next);  // over x_{t-KMAX}
      if (t + 1 < r.t1) next = load_vec<W>(x_run + (t - r.t0 + 1) * in.C);
      float win[KMAX][W], out[W];
      ring_window(win, ring, p, 1);
      in.window_pre(out, wp, bias, win, t, in.lowest_input(r.b, t));
#pragma unroll
      for (int k = 0; k < W; k++) out[k] = activation(out[k], act);  // y = act(pre)
      if constexpr (kNorm)
        normalise_head<T, W>(out, rstd + (r.b * in.L + t) * (in.C / norm_width), r.c0, norm_width, norm_eps);
      store_floats(y + (r.b * in.L + t) * in.C + r.c0, out);
    }
  }
}

// The backward's tile: R tokens t0 .. t0+R-1 of sequence b and kSlab channels slab0.. (a row of
// the tile, kSlab / kGroup lanes of kGroup channels: one warp). Its rows in shared memory, in this
// order: x_s for s = t0-KMAX+1 .. t0+R+KMAX-2 (T), dy_t for t = t0 .. t0+R+KMAX-2 (T: the tile's
// tokens and the KMAX-1 past them whose dpre its dx reads), and lowest_t, the lowest input output
// t sees (int). A block holds two, by its tiles' parity; after its last tile the same memory holds
// each warp's dw and dbias sums.
template <int KMAX>
__host__ __device__ constexpr int tile_x_rows(int tile_tokens) { return tile_tokens + 2 * (KMAX - 1); }
template <int KMAX>
__host__ __device__ constexpr int tile_dy_rows(int tile_tokens) { return tile_tokens + KMAX - 1; }
template <class T, int KMAX>
__host__ __device__ constexpr size_t tile_bytes(int tile_tokens) {  // one tile's rows, in 16-byte units
  return (sizeof(T) * kSlab * (tile_x_rows<KMAX>(tile_tokens) + tile_dy_rows<KMAX>(tile_tokens)) +
          sizeof(int) * tile_dy_rows<KMAX>(tile_tokens) + 15) / 16 * 16;
}
template <class T, int KMAX>
size_t backward_smem(int tile_tokens) {
  const size_t rows = 2 * tile_bytes<T, KMAX>(tile_tokens);
  const size_t sums = sizeof(float) * kTileWarps * kSlab * (KMAX + 1);
  return rows > sums ? rows : sums;
}

// dx: (B, L, C); partial_w: (B * groups, C, K), partial_b: (B * groups, C) or null: each block's
// sums of dw and dbias; grid: B * groups * slabs blocks of kThreads, groups = ceil(tiles /
// per_block), tiles = ceil(L / tile_tokens), slabs = ceil(C / kSlab). A block takes per_block
// consecutive tiles of one sequence (TileRun), copying the next tile's rows while its warps walk
// this one's. Lane l of warp v owns channels slab0 + kGroup l .. and the run of each tile's rows
// v * rows .. (v + 1) * rows - 1, rows = ceil(tile_tokens / kTileWarps).
template <class T, int KMAX, bool kVec>
__global__ void __launch_bounds__(kThreads, KMAX == 4 && kVec ? kBackwardBlocks : 1)
    conv_backward_kernel(T* __restrict__ dx, float* __restrict__ partial_w, float* __restrict__ partial_b,
                         const T* __restrict__ dy, const T* __restrict__ dfinal, ConvInputs<T> in, int64_t tiles,
                         int64_t per_block, int tile_tokens, ConvAct act) {
  extern __shared__ float4 smem_raw[];
  const int64_t L = in.L, C = in.C, K = in.K;
  const TileRun run(C, tiles, per_block);
  const int64_t b = run.b, slab0 = run.slab0;
  const int x_rows = tile_x_rows<KMAX>(tile_tokens), dy_rows = tile_dy_rows<KMAX>(tile_tokens);
  // tile i's rows: xs (x_rows, kSlab), x_{s0 + r}; dys (dy_rows, kSlab), dy_{t0 + r}; lowest (dy_rows),
  // of output t0 + r; in the half i % 2 of the shared memory
  const auto xs_of = [&](int i) {
    return reinterpret_cast<T*>(reinterpret_cast<char*>(smem_raw) + (i % 2) * tile_bytes<T, KMAX>(tile_tokens));
  };
  const auto dys_of = [&](int i) { return xs_of(i) + x_rows * kSlab; };
  const auto lowest_of = [&](int i) { return reinterpret_cast<int*>(dys_of(i) + dy_rows * kSlab); };
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, c = lane * kGroup;
  const int64_t c0 = slab0 + c;
  const bool owned = c0 < C;  // (kVec: C % kGroup == 0, so a lane's channels are all in or all out)
  // 1. tile i's rows into its half of shared memory (16-byte copies in flight at once, one group
  //    of them a tile), each output's lowest input
  const auto copy_tile = [&](int i) {
    const int64_t t0 = (run.first + i) * tile_tokens;
    copy_tile_rows<kVec>(xs_of(i), in.x, b, t0 - (KMAX - 1), x_rows, slab0, L, C,
                         [&](int64_t s, int64_t ch) { return in.state_row(b, s, ch); });
    copy_tile_rows<kVec>(dys_of(i), dy, b, t0, dy_rows, slab0, L, C,
                         [](int64_t, int64_t) { return from_float<T>(0.0f); });
    if constexpr (kVec) cp_async_commit();
    int* lowest = lowest_of(i);
    for (int r = threadIdx.x; r < dy_rows; r += kThreads)
      lowest[r] = t0 + r < L ? static_cast<int>(in.lowest_input(b, t0 + r)) : 0;  // (L < 2^31)
  };
  float wp[KMAX][kGroup], bias[kGroup];
  in.load_taps(wp, bias, c0);
  float dw[KMAX][kGroup] = {}, db[kGroup] = {};
  const int64_t final_lowest = in.lowest_input(b, L - 1);  // the final state reads x_s for s >= this
  const int rows = (tile_tokens + kTileWarps - 1) / kTileWarps;
  const int r0 = warp * rows, r1 = min(r0 + rows, tile_tokens), top = r1 + KMAX - 2;
  copy_tile(0);
  for (int i = 0; i < run.n; i++) {
    // the next tile's copies go out before this one's are awaited; its half was last read by tile
    // i - 1, whose walk ended at the barrier below
    if (i + 1 < run.n) copy_tile(i + 1);
    if constexpr (kVec) {
      if (i + 1 < run.n) cp_async_wait<1>();
      else cp_async_wait<0>();
    }
    __syncthreads();
    // 2. each warp walks its own rows r0 .. r1-1 of tile i down, from the KMAX-1 rows above them
    //    (whose dpre its dx reads), one xs and one dys row a step, x and dpre in rings of registers
    //    (slot p of the step's phase: row r's x and dpre; x_{t-KMAX+1+j} in slot p - j, dpre_{t+i}
    //    in slot p - i): dpre_t = dy_t act'(pre_t), pre_t from the visible taps (0 past L); then
    //    for the warp's own rows dx_t = sum_j w'_j dpre_{t+KMAX-1-j} over the outputs that see x_t
    //    (+ dfinal_{t-L+K-1} where the final state reads x_t); dw_j += dpre_t x_{t-KMAX+1+j} over
    //    the visible taps, dbias += dpre_t
    const int64_t t0 = (run.first + i) * tile_tokens;
    const T* xs = xs_of(i);
    const T* dys = dys_of(i);
    const int* lowest = lowest_of(i);
    // A tile whose rows and halo lie inside the sequence, without documents (kInterior, on the
    // 16-byte K <= 4 path): every tap is visible, no row is past L and none is read by the final
    // state, so its walk tests none of them.
    const auto walk = [&](auto interior) {
      constexpr bool kInterior = decltype(interior)::value;
      float xring[KMAX][kGroup], dring[KMAX][kGroup] = {};  // xs row r and dpre_r in slot (top - r) % KMAX
#pragma unroll
      for (int j = 1; j < KMAX; j++)  // xs rows top + j .. above the first step's
        load_floats(xring[KMAX - j], xs + (top + j) * kSlab + c);
      for (int base = top; owned && base >= r0; base -= KMAX) {
#pragma unroll
        for (int p = 0; p < KMAX; p++) {
          const int r = base - p;
          if (r < r0) break;
          const int64_t t = t0 + r;
          load_floats(xring[p], xs + r * kSlab + c);
          float win[KMAX][kGroup];  // win[j] = x_{t-KMAX+1+j}, xs row r + j
          ring_window(win, xring, p, -1);
#pragma unroll
          for (int k = 0; k < kGroup; k++) dring[p][k] = 0.0f;
          if (kInterior || t < L) {
            float d[kGroup], pre[kGroup];
            load_floats(d, dys + r * kSlab + c);
            in.window_pre(pre, wp, bias, win, t, kInterior ? kEveryInput : lowest[r]);
#pragma unroll
            for (int k = 0; k < kGroup; k++) dring[p][k] = activation_grad(d[k], pre[k], act);
          }
          if (r >= r1 || (!kInterior && t >= L)) continue;  // a row above the warp's: its dpre only
          float dpre[KMAX][kGroup], g[kGroup];  // dpre[i] = dpre_{t+i}
          ring_window(dpre, dring, p, -1);
          const bool in_final = !kInterior && t >= L - K + 1 && t >= final_lowest;
#pragma unroll
          for (int k = 0; k < kGroup; k++)
            g[k] = in_final && c0 + k < C ? to_float(dfinal[(b * C + c0 + k) * (K - 1) + t - L + K - 1]) : 0.0f;
#pragma unroll
          for (int j = 0; j < KMAX; j++)
            if (j >= KMAX - K && (kInterior || t >= lowest[r + KMAX - 1 - j]))
#pragma unroll
              for (int k = 0; k < kGroup; k++) g[k] += wp[j][k] * dpre[KMAX - 1 - j][k];
          store_row<kVec>(dx + (b * L + t) * C + c0, g, C - c0);
#pragma unroll
          for (int k = 0; k < kGroup; k++) db[k] += dpre[0][k];
#pragma unroll
          for (int j = 0; j < KMAX; j++)
            if (j >= KMAX - K && (kInterior || t - KMAX + 1 + j >= lowest[r]))
#pragma unroll
              for (int k = 0; k < kGroup; k++) dw[j][k] += dpre[0][k] * win[j][k];
        }
      }
    };
    if (KMAX == 4 && kVec && !in.doc_start && t0 + tile_tokens + KMAX - 1 <= L)
      walk(std::integral_constant<bool, KMAX == 4 && kVec>{});  // (the one path that has it)
    else walk(std::false_type{});
    __syncthreads();  // tile i's half is read: tile i + 2's copies may take it
  }
  // 3. the block's partial sums, each warp's in shared memory, summed over the warps in order
  //    (deterministic); the unpadded taps i = j - (KMAX-K)
  float* sums = reinterpret_cast<float*>(smem_raw);  // sums: (kTileWarps, kSlab, KMAX + 1), dw then dbias
#pragma unroll
  for (int k = 0; k < kGroup; k++) {
    float* own = sums + ((warp * kSlab) + c + k) * (KMAX + 1);
#pragma unroll
    for (int j = 0; j < KMAX; j++) own[j] = dw[j][k];
    own[KMAX] = db[k];
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kSlab * (KMAX + 1); i += kThreads) {
    const int ch = i / (KMAX + 1), j = i % (KMAX + 1);
    if (slab0 + ch >= C || (j < KMAX - K)) continue;
    float total = 0;
    for (int v = 0; v < kTileWarps; v++) total += sums[(v * kSlab + ch) * (KMAX + 1) + j];
    if (j < KMAX) partial_w[(run.chunk * C + slab0 + ch) * K + j - (KMAX - K)] = total;
    else if (partial_b) partial_b[run.chunk * C + slab0 + ch] = total;
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

// How the backward cuts B sequences of L tokens and C channels into tiles of kSlab channels:
// kTileTokens tokens, halved down to kMinTile while the B * tiles * slabs tiles would not give
// every SM one; then per_block consecutive tiles of a sequence a block, as many as one wave of
// kBackwardBlocks blocks an SM leaves each.
struct TilePlan {
  int tile_tokens;
  int64_t tiles, per_block, groups;
  unsigned blocks;
};
TilePlan plan_tiles(int64_t B, int64_t L, int64_t C) {
  const int64_t slabs = (C + kSlab - 1) / kSlab, wave = kBackwardBlocks * int64_t(sm_count());
  int tile = kTileTokens;
  while (tile > kMinTile && B * runs_of(L, tile) * slabs < sm_count()) tile /= 2;
  const int64_t tiles = runs_of(L, tile), per_block = (B * tiles * slabs + wave - 1) / wave;
  const int64_t groups = (tiles + per_block - 1) / per_block;
  return {tile, tiles, per_block, groups, static_cast<unsigned>(B * groups * slabs)};
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
      dispatch_taps_width<T, kVecWidth<T>>(K, C, [&](auto taps, auto width) {
        constexpr int KMAX = decltype(taps)::value;
        constexpr bool kVec = decltype(width)::value > 1;
        const TilePlan plan = plan_tiles(B, L, C);
        const int chunks = static_cast<int>(B * plan.groups);  // one partial per block's (b, group)
        FloatScratch partial_w(chunks * C * K);              // partial_w: (chunks, C, K)
        FloatScratch partial_b(dbias ? chunks * C : 0);      // partial_b: (chunks, C)
        launch(conv_backward_kernel<T, KMAX, kVec>, plan.blocks, kThreads, backward_smem<T, KMAX>(plan.tile_tokens),
               static_cast<T*>(dx), partial_w.get(), dbias ? partial_b.get() : nullptr, static_cast<const T*>(dy), dfin,
               in, plan.tiles, plan.per_block, plan.tile_tokens, d.act);
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
