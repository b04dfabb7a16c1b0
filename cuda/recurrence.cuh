// The recurrent (token-by-token) GPU kernels of the matrix-state ops: decay linear attention,
// RWKV-6 and the delta rule (mixers.md 4.3, 4.5, 11). They are the readable GPU form of each op
// and the oracle the chunked tensor-core kernels are checked against. Included by
// cuda/decay_attention.cu, cuda/rwkv6.cu and cuda/delta_rule.cu, each instantiating its op.
//
// Per (batch b, value head j) the state S is (dk, dv), fp32, one row per key channel and one
// column per value channel. Forward, per token (a = exp(g), 1 without a gate):
//   decay:  S = Diag(a) S + k v^T;                      o = scale S^T q
//   rwkv6:  o = scale (S^T r + (r . (u * k)) v);        S = Diag(a) S + k v^T   (q holds r)
//   delta:  S' = Diag(a) S;  u = y - S'^T e;  S = S' + k u^T;  o = scale S^T q
//           with e = b * k (erase key) and y = w * v (written value)
//
// Work split. The columns of S evolve independently: column c needs only its own v/y/do values
// and the key-side vectors q, k, e, a of each token. A block owns BV columns of one (b, j); R =
// KMAX / 32 neighbouring lanes share a column, each holding 32 of its rows in registers (rows
// interleaved in groups of 4 so that the lanes' float4 reads of a key vector are
// conflict-free). A dot over rows is a sum over those R lanes. Key-side vectors and per-column
// values come through shared memory in tiles of 16 tokens.
//
// Backward, in two sweeps, so that no per-token state is stored (mixers.md 4.9 at token level):
//   reverse sweep: carries dS = gradient of the state after token t from the tokens after t,
//     and writes what pairs dS with per-token inputs: dv (decay, rwkv6) or du (delta), the
//     key's gradient through the state write dk_w = dS u (u = v outside the delta rule),
//     and a copy of dS every kCheckpoint tokens.
//   replay sweep: replays S from the initial state and writes what pairs S with per-token
//     gradients: dq = scale S do (rwkv6: scale S_{t-1} do), de = S' dr (delta, dr = -du), and
//     at every checkpoint rowsum(S (.) dS) with the reverse sweep's copy of dS.
// Key-side gradients are sums over all dv columns: each block reduces its columns (shuffles
// inside a warp, then per-warp slots added after one barrier per token) and writes one partial
// per block of columns (no atomics, so the results are deterministic).
// The gate gradient is never paired per token. With Z_t = rowsum(S'_t (.) dS'_t) (per key
// channel; = dg_t):  Z_t = Z_{t+1} + q*dq - k*dk_w + e*de (decay: no e term; mixers.md 4.10),
// and at a checkpoint p, Z_p = rowsum(S_after_p (.) dS_p). The finish kernel scans each
// kCheckpoint-token segment backwards from that exact value (parallel over segments; rounding
// never accumulates over more than one segment). RWKV-6 reads S_{t-1}, so its scan adds the
// query term one token later: dw_t = Y_t - k*dk_w, Y_{t-1} = dw_t + r*dr_S.
//
// Packed documents (Args::doc_start, every op): before a document's first token t > 0 the forward
// and the replay set S = 0, and the reverse sweep sets dS = 0 after handling that token (S_{t-1}
// reached nothing); the gate scan then restarts from Z = 0 there (S'_t = 0, so dg_t = 0, and the
// state before t pairs with a zero dS; RWKV-6: dw_t = 0 and Y_{t-1} = 0, its r dr_S term being 0
// as dr_S reads the zeroed S_{t-1}).
#pragma once
#include <algorithm>

#include "cuda/common.cuh"

namespace hla::cuda::recurrence {

enum class Op { Decay, Rwkv6, Delta };
enum class Gate { None, Scalar, Vector };

constexpr int kThreads = 256;    // threads per block
constexpr int kRows = 32;        // state rows (key channels) each thread holds
constexpr int kTile = 16;        // tokens per shared-memory tile
constexpr int kCheckpoint = 64;  // tokens per segment of the backward's gate scan
static_assert(kCheckpoint % kTile == 0, "checkpoints fall on tile ends");

// Which state column and rows a thread owns, for key widths up to KMAX (64, 128 or 256).
template <int KMAX>
struct Lanes {
  static constexpr int R = KMAX / kRows;           // lanes sharing one column
  static constexpr int kColsPerWarp = 32 / R;
  static constexpr int BV = kThreads / R;          // columns per block
  int lane, r, col;                                // col: column within the block's BV
  __device__ Lanes() : lane(threadIdx.x % 32), r(lane % R), col(threadIdx.x / 32 * kColsPerWarp + lane / R) {}
  // The row of the thread's i-th element: groups of 4 rows dealt round-robin to the R lanes.
  __device__ int row(int i) const { return ((i / 4) * R + r) * 4 + i % 4; }
};

// x . v over the thread's rows, v a KMAX-long shared-memory vector (4 partial sums for ILP).
template <int KMAX>
__device__ __forceinline__ float dot_rows(const float* v, const float (&x)[kRows], const Lanes<KMAX>& L) {
  float4 acc = make_float4(0, 0, 0, 0);
#pragma unroll
  for (int c = 0; c < kRows / 4; c++) {
    const float4 y = reinterpret_cast<const float4*>(v)[c * Lanes<KMAX>::R + L.r];
    acc.x += y.x * x[4 * c];
    acc.y += y.y * x[4 * c + 1];
    acc.z += y.z * x[4 * c + 2];
    acc.w += y.w * x[4 * c + 3];
  }
  return (acc.x + acc.y) + (acc.z + acc.w);
}

// The thread's rows of a KMAX-long shared-memory vector.
template <int KMAX>
__device__ __forceinline__ void load_rows(float (&x)[kRows], const float* v, const Lanes<KMAX>& L) {
#pragma unroll
  for (int c = 0; c < kRows / 4; c++) {
    const float4 y = reinterpret_cast<const float4*>(v)[c * Lanes<KMAX>::R + L.r];
    x[4 * c] = y.x, x[4 * c + 1] = y.y, x[4 * c + 2] = y.z, x[4 * c + 3] = y.w;
  }
}

// Sum over the R lanes of one column (every one of them gets it).
template <int R>
__device__ __forceinline__ float column_sum(float v) {
#pragma unroll
  for (int m = 1; m < R; m <<= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
  return v;
}

// Recursive halving over the lanes that hold the same rows of different columns (lane xor
// MASK for MASK = 16, 8, .., R): each step keeps half of the values and adds the partner's.
// Afterwards x[0..R) holds the warp's column sums of local elements lane - r .. lane - r + R - 1.
template <int N, int MASK, int R>
__device__ __forceinline__ void halve_over_columns(float (&x)[kRows], int lane) {
  if constexpr (MASK >= R) {
    const bool upper = lane & MASK;
#pragma unroll
    for (int i = 0; i < N / 2; i++) {
      const float send = upper ? x[i] : x[i + N / 2];
      const float keep = upper ? x[i + N / 2] : x[i];
      x[i] = keep + __shfl_xor_sync(0xffffffffu, send, MASK);
    }
    halve_over_columns<N / 2, MASK / 2, R>(x, lane);
  }
}

constexpr int kWarps = kThreads / 32;

// The warp's sums over its columns of x, into slot (kWarps, KMAX): row r of warp w goes to
// slot[w * KMAX + r]. x is consumed. Within a warp every row lands in exactly one lane, so
// plain stores do; the warps are added up by sum_warps after a barrier.
template <int KMAX>
__device__ __forceinline__ void warp_column_sums(float* slot, float (&x)[kRows], const Lanes<KMAX>& L) {
  constexpr int R = Lanes<KMAX>::R;
  halve_over_columns<kRows, 16, R>(x, L.lane);
  float* mine = slot + (threadIdx.x / 32) * KMAX;
#pragma unroll
  for (int i = 0; i < R; i++) mine[L.row(L.lane - L.r + i)] = x[i];
}

// dst[i] = sum over the warps of slot[w * KMAX + i].
template <int KMAX>
__device__ __forceinline__ void sum_warps(float* dst, const float* slot) {
  for (int i = threadIdx.x; i < KMAX; i += kThreads) {
    float s = 0;
#pragma unroll
    for (int w = 0; w < kWarps; w++) s += slot[w * KMAX + i];
    dst[i] = s;
  }
}

// ---------------------------------------------------------------------------------------------
// Kernel arguments: one struct for every sweep; each kernel reads what its op needs.

template <class S>
struct Args {
  int B, T, H, HV, dk, dv;
  int nvb;           // blocks of columns: ceil(dv / BV)
  int nseg;          // gate-scan segments: ceil(T / kCheckpoint); checkpoints m = 0 .. nseg - 2
  float scale;
  bool erase_vector = false, write_vector = false;  // delta: b (B,T,HV,dk), w (B,T,HV,dv)
  // inputs
  const S* q = nullptr;        // (B, T, H, dk)   rwkv6: r
  const S* k = nullptr;        // (B, T, H, dk)
  const S* v = nullptr;        // (B, T, HV, dv)
  const S* g = nullptr;        // (B, T, HV) or (B, T, HV, dk) log decay;  rwkv6: w (B, T, H, dk)
  const S* b = nullptr;        // delta: (B, T, HV) or (B, T, HV, dk)
  const S* w = nullptr;        // delta: (B, T, HV) or (B, T, HV, dv)
  const S* bonus = nullptr;    // rwkv6: u (H, dk)
  const float* h0 = nullptr;   // (B, HV, dk, dv) or null
  const int32_t* doc_start = nullptr;  // (B, T) first token of each token's document, or null
  // forward outputs
  S* o = nullptr;              // (B, T, HV, dv)
  float* ht = nullptr;         // (B, HV, dk, dv)
  S* residual = nullptr;       // delta: (B, T, HV, dv) u
  float* u_f32 = nullptr;      // delta: (B, T, HV, dv) u in fp32 for the backward, or null
  // backward inputs
  const S* d_o = nullptr;      // (B, T, HV, dv)
  const S* d_res = nullptr;    // delta: (B, T, HV, dv)
  const float* dht = nullptr;  // (B, HV, dk, dv) or null
  const float* u_saved = nullptr;  // delta: the forward's u_f32
  // backward outputs and scratch
  S* dv_out = nullptr;         // decay, rwkv6: (B, T, HV, dv)
  float* du = nullptr;         // delta: (B, T, HV, dv)
  float* dh0 = nullptr;        // (B, HV, dk, dv) or null
  float* ckpt = nullptr;       // (B, HV, nseg - 1, dk, dv) dS at every checkpoint
  float* dkw_part = nullptr;   // (nvb, B, T, HV, dk) dk_w per block of columns
  float* dq_part = nullptr;    // (nvb, B, T, HV, dk) dq (rwkv6: dr_S)
  float* de_part = nullptr;    // delta: (nvb, B, T, HV, dk)
  float* pair_part = nullptr;  // (nvb, B, HV, nseg, dk) rowsum(S (.) dS) at each segment's end
};

// Whether the state is zeroed before token t of sequence b: a packed document starts there.
template <class S>
__device__ __forceinline__ bool starts_document(const Args<S>& a, int b, int t) {
  return a.doc_start && t > 0 && a.doc_start[int64_t(b) * a.T + t] == t;
}

// The thread's rows of a state column set to zero where reset (a packed document starts).
__device__ __forceinline__ void zero_rows_if(float (&s)[kRows], bool reset) {
#pragma unroll
  for (int i = 0; i < kRows; i++) s[i] = reset ? 0.f : s[i];
}

// Offset of row (b, t, h) of a (B, T, H, dk) tensor.
__device__ __forceinline__ int64_t qk_index(int T, int H, int dk, int b, int t, int h) {
  return ((int64_t(b) * T + t) * H + h) * dk;
}

// Shared memory of one block: key-side rows of a tile, per-column values of a tile, and the
// reductions over columns.
template <int KMAX>
struct Shared {
  static constexpr int BV = Lanes<KMAX>::BV;
  static constexpr int kRowFloats = kTile * KMAX, kColFloats = kTile * BV;
  float* q;        // (kTile, KMAX)  q or r
  float* k;        // (kTile, KMAX)
  float* e;        // (kTile, KMAX)  delta: b * k
  float* am1;      // (kTile, KMAX)  vector gate: a - 1 = expm1(g) (see decay())
  float* red0;     // (kTile, KMAX)  sums over the block's columns, per token
  float* red1;     // (kTile, KMAX)
  float* slot0;    // (2, kWarps, KMAX)  per-warp sums of one token for red0 (two token parities,
  float* slot1;    // (2, kWarps, KMAX)  so one barrier per token suffices), and for red1
  float* slotp;    // (kWarps, KMAX)     per-warp sums for pair
  float* pair;     // (KMAX)         rowsum(S (.) dS) at a checkpoint
  float* bonus_u;  // (KMAX)         rwkv6: u of this head
  float* am1_scalar; // (kTile)      scalar gate: a - 1 = expm1(g)
  float* resets;   // (kTile)        1 where a packed document starts (the state is zeroed before the token), else 0
  float* bonus;    // (kTile)        rwkv6: r . (u * k)
  float* col[4];   // (kTile, BV)    per-column values (inputs and outputs of a tile)
  static constexpr size_t bytes() {
    return sizeof(float) * (6 * size_t(kRowFloats) + 5 * kWarps * KMAX + 2 * KMAX + 3 * kTile + 4 * size_t(kColFloats));
  }
  __device__ explicit Shared(float* p) {
    float** rows[] = {&q, &k, &e, &am1, &red0, &red1};
    for (float** r : rows) *r = p, p += kRowFloats;
    slot0 = p, p += 2 * kWarps * KMAX;
    slot1 = p, p += 2 * kWarps * KMAX;
    slotp = p, p += kWarps * KMAX;
    pair = p, p += KMAX;
    bonus_u = p, p += KMAX;
    am1_scalar = p, p += kTile;
    resets = p, p += kTile;
    bonus = p, p += kTile;
    for (float*& c : col) c = p, p += kColFloats;
  }
};

// ---------------------------------------------------------------------------------------------
// Tile loads and stores (all threads of the block; callers synchronise).

// Tile loads come in two steps: get() issues every global load of the tile into registers (so
// that they are all in flight at once), put() converts them into shared memory.

// Key-side rows of tokens t0 .. t0 + kTile - 1: q, k, and as the op needs a - 1 = expm1(g) and
// e = b * k. Rows past dk and tokens past T read as q = k = g = b = 0, so a = 1 and e = 0. With
// packed documents, the tile's document starts too (the sweeps read them from shared memory, so
// no pointer stays live in registers across the token loop).
template <Op op, Gate gate, int KMAX, class S>
struct KeyTile {
  static constexpr int N = kTile * KMAX / kThreads;  // elements per thread
  S q[N], k[N], g[N], b[N];
  S g_scalar;  // scalar gate: threads < kTile hold token threadIdx.x's
  bool starts;  // packed documents: threads < kTile hold whether token threadIdx.x starts one (t > 0)

  __device__ void get(const Args<S>& a, int bi, int j, int t0) {
    const int h = j / (a.HV / a.H);
    const S zero = from_float<S>(0.f);
#pragma unroll
    for (int n = 0; n < N; n++) {
      const int idx = n * kThreads + threadIdx.x;
      const int tt = idx / KMAX, i = idx % KMAX, t = t0 + tt;
      const bool ok = t < a.T && i < a.dk;
      const int64_t qk = qk_index(a.T, a.H, a.dk, bi, t, h) + i;
      const int64_t vec = ((int64_t(bi) * a.T + t) * a.HV + j) * a.dk + i;  // (B, T, HV, dk)
      q[n] = ok ? a.q[qk] : zero;
      k[n] = ok ? a.k[qk] : zero;
      if constexpr (gate == Gate::Vector) g[n] = ok ? a.g[vec] : zero;
      if constexpr (op == Op::Delta) b[n] = ok ? (a.erase_vector ? a.b[vec] : a.b[(int64_t(bi) * a.T + t) * a.HV + j]) : zero;
    }
    if constexpr (gate == Gate::Scalar) {
      const int t = t0 + threadIdx.x;
      g_scalar = threadIdx.x < kTile && t < a.T ? a.g[(int64_t(bi) * a.T + t) * a.HV + j] : zero;
    }
    starts = threadIdx.x < kTile && t0 + int(threadIdx.x) < a.T && starts_document(a, bi, t0 + threadIdx.x);
  }

  __device__ void put(const Shared<KMAX>& sm) const {
#pragma unroll
    for (int n = 0; n < N; n++) {
      const int idx = n * kThreads + threadIdx.x;
      sm.q[idx] = to_float(q[n]);
      sm.k[idx] = to_float(k[n]);
      if constexpr (gate == Gate::Vector) sm.am1[idx] = expm1f(to_float(g[n]));
      if constexpr (op == Op::Delta) sm.e[idx] = to_float(k[n]) * to_float(b[n]);
    }
    if constexpr (gate == Gate::Scalar)
      if (threadIdx.x < kTile) sm.am1_scalar[threadIdx.x] = expm1f(to_float(g_scalar));
    if (threadIdx.x < kTile) sm.resets[threadIdx.x] = starts ? 1.f : 0.f;
  }
};

// rwkv6: bonus[tt] = r_t . (u * k_t), one warp per token; after KeyTile::put and a sync.
template <int KMAX>
__device__ void compute_bonus(const Shared<KMAX>& sm) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int tt = warp; tt < kTile; tt += kThreads / 32) {
    float s = 0;
    for (int i = lane; i < KMAX; i += 32) s += sm.q[tt * KMAX + i] * sm.bonus_u[i] * sm.k[tt * KMAX + i];
    s = warp_sum(s);
    if (lane == 0) sm.bonus[tt] = s;
  }
}

// Columns vb*BV .. of tokens t0 .. t0 + kTile - 1 of a (B, T, HV, dv) tensor, as a (kTile, BV)
// tile; outside T or dv: 0.
template <int KMAX, class X>
struct ColumnTile {
  static constexpr int BV = Lanes<KMAX>::BV;
  static constexpr int N = kTile * BV / kThreads;  // elements per thread
  X x[N];

  // src: (B, T, HV, dv);  per_token: src is (B, T, HV), one value for every column.
  __device__ void get(const X* src, int b, int j, int t0, int vb, int T, int HV, int dv, bool per_token = false) {
#pragma unroll
    for (int n = 0; n < N; n++) {
      const int idx = n * kThreads + threadIdx.x;
      const int tt = idx / BV, c = vb * BV + idx % BV, t = t0 + tt;
      const int64_t row = (int64_t(b) * T + t) * HV + j;
      x[n] = t < T && c < dv ? src[per_token ? row : row * dv + c] : from_float<X>(0.f);
    }
  }
  __device__ void put(float* dst) const {
#pragma unroll
    for (int n = 0; n < N; n++) dst[n * kThreads + threadIdx.x] = to_float(x[n]);
  }
  // dst = this * other (the delta rule's y = w * v).
  __device__ void put_product(float* dst, const ColumnTile& other) const {
#pragma unroll
    for (int n = 0; n < N; n++) dst[n * kThreads + threadIdx.x] = to_float(x[n]) * to_float(other.x[n]);
  }
};

// Columns of a tile back to a (B, T, HV, dv) tensor.
template <int KMAX, class D>
__device__ void store_column_tile(D* dst, const float* src, int b, int j, int t0, int vb, int T, int HV, int dv) {
  constexpr int BV = Lanes<KMAX>::BV;
  for (int idx = threadIdx.x; idx < kTile * BV; idx += kThreads) {
    const int tt = idx / BV, c = vb * BV + idx % BV, t = t0 + tt;
    if (t < T && c < dv) dst[((int64_t(b) * T + t) * HV + j) * dv + c] = from_float<D>(src[idx]);
  }
}

// A (kTile, KMAX) column-sum tile to its block's partial (nvb, B, T, HV, dk).
template <int KMAX, class S>
__device__ void flush_row_tile(float* part, const float* red, const Args<S>& a, int b, int j, int t0, int vb) {
  for (int idx = threadIdx.x; idx < kTile * KMAX; idx += kThreads) {
    const int tt = idx / KMAX, i = idx % KMAX, t = t0 + tt;
    if (t < a.T && i < a.dk) part[(((int64_t(vb) * a.B + b) * a.T + t) * a.HV + j) * a.dk + i] = red[idx];
  }
}

// rowsum(S (.) dS) for one segment end, to (nvb, B, HV, nseg, dk).
template <int KMAX, class S>
__device__ void flush_pair(const float* pair, const Args<S>& a, int b, int j, int seg, int vb) {
  for (int i = threadIdx.x; i < KMAX; i += kThreads) {
    if (i < a.dk) a.pair_part[(((int64_t(vb) * a.B + b) * a.HV + j) * a.nseg + seg) * a.dk + i] = pair[i];
  }
}

// The thread's rows of column col of a (dk, dv) fp32 state (null: zeros).
template <int KMAX>
__device__ void load_state(float (&s)[kRows], const float* state, int dk, int dv, int col, const Lanes<KMAX>& L) {
#pragma unroll
  for (int i = 0; i < kRows; i++) {
    const int row = L.row(i);
    s[i] = state && row < dk && col < dv ? state[int64_t(row) * dv + col] : 0.f;
  }
}

template <int KMAX>
__device__ void store_state(float* state, const float (&s)[kRows], int dk, int dv, int col, const Lanes<KMAX>& L) {
#pragma unroll
  for (int i = 0; i < kRows; i++) {
    const int row = L.row(i);
    if (row < dk && col < dv) state[int64_t(row) * dv + col] = s[i];
  }
}

// S = Diag(a_t) S for token tt of the tile, as S + (a_t - 1) S in one fma. A decay near 1
// (RetNet's 1 - 2^-8, say) rounded to fp32 is off by up to 6e-8, the same way at every token,
// and over a memory of ~1/(1 - a) tokens that compounds to ~1e-5; a - 1 = expm1(g) carries the
// same relative error on a number 256 times smaller, and the fma rounds once.
template <Gate gate, int KMAX>
__device__ __forceinline__ void decay(float (&s)[kRows], const Shared<KMAX>& sm, int tt, const Lanes<KMAX>& L) {
  if constexpr (gate == Gate::Scalar) {
    const float am1 = sm.am1_scalar[tt];
#pragma unroll
    for (int i = 0; i < kRows; i++) s[i] = fmaf(s[i], am1, s[i]);
  } else if constexpr (gate == Gate::Vector) {
    float am1[kRows];
    load_rows(am1, sm.am1 + tt * KMAX, L);
#pragma unroll
    for (int i = 0; i < kRows; i++) s[i] = fmaf(s[i], am1[i], s[i]);
  }
}

// s += x * c for a KMAX-long shared vector x and a per-column scalar c.
template <int KMAX>
__device__ __forceinline__ void add_scaled_rows(float (&s)[kRows], const float* x, float c, const Lanes<KMAX>& L) {
  float y[kRows];
  load_rows(y, x, L);
#pragma unroll
  for (int i = 0; i < kRows; i++) s[i] += y[i] * c;
}

// ---------------------------------------------------------------------------------------------
// Forward. grid (nvb, HV, B).

template <Op op, Gate gate, int KMAX, class S>
__global__ void __launch_bounds__(kThreads) forward_kernel(Args<S> a) {
  extern __shared__ float4 smem[];
  const Shared<KMAX> sm(reinterpret_cast<float*>(smem));
  const Lanes<KMAX> L;
  constexpr int R = Lanes<KMAX>::R, BV = Lanes<KMAX>::BV;
  const int vb = blockIdx.x, j = blockIdx.y, b = blockIdx.z;
  const int col = vb * BV + L.col;
  const int64_t state0 = (int64_t(b) * a.HV + j) * a.dk * a.dv;
  float* in_col = sm.col[0];   // v (delta: y = w * v)
  float* o_col = sm.col[1];
  float* u_col = sm.col[2];    // delta: u
  if constexpr (op == Op::Rwkv6)
    for (int i = threadIdx.x; i < KMAX; i += kThreads) sm.bonus_u[i] = i < a.dk ? to_float(a.bonus[j * a.dk + i]) : 0.f;
  float s[kRows];
  load_state(s, a.h0 ? a.h0 + state0 : nullptr, a.dk, a.dv, col, L);
  for (int t0 = 0; t0 < a.T; t0 += kTile) {
    KeyTile<op, gate, KMAX, S> keys;
    ColumnTile<KMAX, S> v, w;
    keys.get(a, b, j, t0);
    v.get(a.v, b, j, t0, vb, a.T, a.HV, a.dv);
    if constexpr (op == Op::Delta) w.get(a.w, b, j, t0, vb, a.T, a.HV, a.dv, !a.write_vector);
    keys.put(sm);
    if constexpr (op == Op::Delta) v.put_product(in_col, w);
    else v.put(in_col);
    __syncthreads();
    if constexpr (op == Op::Rwkv6) {
      compute_bonus(sm);
      __syncthreads();
    }
    const int n = min(kTile, a.T - t0);
    for (int tt = 0; tt < n; tt++) {
      zero_rows_if(s, sm.resets[tt] != 0.f);                                 // a document starts from S = 0
      const float x = in_col[tt * BV + L.col];
      const float* q = sm.q + tt * KMAX;
      const float* k = sm.k + tt * KMAX;
      float o;
      if constexpr (op == Op::Rwkv6) {
        o = a.scale * (column_sum<R>(dot_rows(q, s, L)) + sm.bonus[tt] * x);  // o = scale (S^T r + bonus v)
        decay<gate>(s, sm, tt, L);                                             // S = Diag(a) S + k v^T
        add_scaled_rows(s, k, x, L);
      } else {
        decay<gate>(s, sm, tt, L);                                             // S' = Diag(a) S
        float u = x;
        if constexpr (op == Op::Delta) {
          u = x - column_sum<R>(dot_rows(sm.e + tt * KMAX, s, L));             // u = y - S'^T e
          if (L.r == 0) u_col[tt * BV + L.col] = u;
        }
        add_scaled_rows(s, k, u, L);                                           // S = S' + k u^T
        o = a.scale * column_sum<R>(dot_rows(q, s, L));                        // o = scale S^T q
      }
      if (L.r == 0) o_col[tt * BV + L.col] = o;
    }
    __syncthreads();
    store_column_tile<KMAX>(a.o, o_col, b, j, t0, vb, a.T, a.HV, a.dv);
    if constexpr (op == Op::Delta) {
      store_column_tile<KMAX>(a.residual, u_col, b, j, t0, vb, a.T, a.HV, a.dv);
      if (a.u_f32) store_column_tile<KMAX>(a.u_f32, u_col, b, j, t0, vb, a.T, a.HV, a.dv);
    }
  }
  store_state(a.ht + state0, s, a.dk, a.dv, col, L);
}

// ---------------------------------------------------------------------------------------------
// Backward, reverse sweep. grid (nvb, HV, B). dS walks from the final state's gradient down.

template <Op op, Gate gate, int KMAX, class S>
__global__ void __launch_bounds__(kThreads) reverse_kernel(Args<S> a) {
  extern __shared__ float4 smem[];
  const Shared<KMAX> sm(reinterpret_cast<float*>(smem));
  const Lanes<KMAX> L;
  constexpr int R = Lanes<KMAX>::R, BV = Lanes<KMAX>::BV;
  const int vb = blockIdx.x, j = blockIdx.y, b = blockIdx.z;
  const int col = vb * BV + L.col;
  const int64_t state0 = (int64_t(b) * a.HV + j) * a.dk * a.dv;
  float* do_col = sm.col[0];
  float* u_col = sm.col[1];    // u (delta: the forward's u, else v)
  float* dres_col = sm.col[2]; // delta: gradient of the residual output
  float* out_col = sm.col[3];  // delta: du; else dv
  if constexpr (op == Op::Rwkv6)
    for (int i = threadIdx.x; i < KMAX; i += kThreads) sm.bonus_u[i] = i < a.dk ? to_float(a.bonus[j * a.dk + i]) : 0.f;
  float ds[kRows];
  load_state(ds, a.dht ? a.dht + state0 : nullptr, a.dk, a.dv, col, L);
  const int tiles = (a.T + kTile - 1) / kTile;
  for (int tile = tiles - 1; tile >= 0; tile--) {
    const int t0 = tile * kTile;
    KeyTile<op, gate, KMAX, S> keys;
    ColumnTile<KMAX, S> dout, v, dres;
    ColumnTile<KMAX, float> u;
    keys.get(a, b, j, t0);
    dout.get(a.d_o, b, j, t0, vb, a.T, a.HV, a.dv);
    if constexpr (op == Op::Delta) {
      u.get(a.u_saved, b, j, t0, vb, a.T, a.HV, a.dv);
      dres.get(a.d_res, b, j, t0, vb, a.T, a.HV, a.dv);
    } else {
      v.get(a.v, b, j, t0, vb, a.T, a.HV, a.dv);
    }
    keys.put(sm);
    dout.put(do_col);
    if constexpr (op == Op::Delta) {
      u.put(u_col);
      dres.put(dres_col);
    } else {
      v.put(u_col);
    }
    __syncthreads();
    if constexpr (op == Op::Rwkv6) {
      compute_bonus(sm);
      __syncthreads();
    }
    const int n = min(kTile, a.T - t0);
    for (int tt = n - 1; tt >= 0; tt--) {
      const int t = t0 + tt;
      if ((t + 1) % kCheckpoint == 0 && t + 1 < a.T)  // dS after t + 1 tokens, for the replay's pairing
        store_state(a.ckpt + (state0 * (a.nseg - 1)) + int64_t((t + 1) / kCheckpoint - 1) * a.dk * a.dv, ds, a.dk,
                    a.dv, col, L);
      const float d_o = do_col[tt * BV + L.col], u = u_col[tt * BV + L.col];
      const float* q = sm.q + tt * KMAX;
      const float* k = sm.k + tt * KMAX;
      float* slot = sm.slot0 + (tt & 1) * kWarps * KMAX;
      float x[kRows];
      if constexpr (op == Op::Rwkv6) {
        // S_t = Diag(a) S_{t-1} + k v^T  =>  dk_w = dS v,  dv = dS^T k (+ the bonus path of o)
#pragma unroll
        for (int i = 0; i < kRows; i++) x[i] = ds[i] * u;
        const float dv = column_sum<R>(dot_rows(k, ds, L)) + a.scale * sm.bonus[tt] * d_o;
        if (L.r == 0) out_col[tt * BV + L.col] = dv;
        warp_column_sums(slot, x, L);
        // S_{t-1} feeds S_t (decayed) and o_t = scale S_{t-1}^T r + ..: dS = Diag(a) dS + scale r do^T
        decay<gate>(ds, sm, tt, L);
        add_scaled_rows(ds, q, a.scale * d_o, L);
      } else {
        add_scaled_rows(ds, q, a.scale * d_o, L);                   // o = scale S^T q  =>  dS += scale q do^T
        const float kds = column_sum<R>(dot_rows(k, ds, L));        // S = S' + k u^T   =>  du = dS^T k
#pragma unroll
        for (int i = 0; i < kRows; i++) x[i] = ds[i] * u;           //                      dk_w = dS u
        warp_column_sums(slot, x, L);
        if constexpr (op == Op::Delta) {
          const float du = kds + dres_col[tt * BV + L.col];         // u is also an output
          if (L.r == 0) out_col[tt * BV + L.col] = du;
          add_scaled_rows(ds, sm.e + tt * KMAX, -du, L);            // u = y - S'^T e  =>  dS' = dS - e du^T
        } else {
          if (L.r == 0) out_col[tt * BV + L.col] = kds;             // dv = dS^T k
        }
        decay<gate>(ds, sm, tt, L);                                  // S' = Diag(a) S  =>  dS_prev = Diag(a) dS'
      }
      zero_rows_if(ds, sm.resets[tt] != 0.f);                        // S_{t-1} was replaced by 0
      __syncthreads();
      sum_warps<KMAX>(sm.red0 + tt * KMAX, slot);
    }
    __syncthreads();
    flush_row_tile<KMAX>(a.dkw_part, sm.red0, a, b, j, t0, vb);
    if constexpr (op == Op::Delta) store_column_tile<KMAX>(a.du, out_col, b, j, t0, vb, a.T, a.HV, a.dv);
    else store_column_tile<KMAX>(a.dv_out, out_col, b, j, t0, vb, a.T, a.HV, a.dv);
    __syncthreads();
  }
  if (a.dh0) store_state(a.dh0 + state0, ds, a.dk, a.dv, col, L);
}

// ---------------------------------------------------------------------------------------------
// Backward, replay sweep. grid (nvb, HV, B). S walks forwards again from the initial state.

template <Op op, Gate gate, int KMAX, class S>
__global__ void __launch_bounds__(kThreads) replay_kernel(Args<S> a) {
  extern __shared__ float4 smem[];
  const Shared<KMAX> sm(reinterpret_cast<float*>(smem));
  const Lanes<KMAX> L;
  constexpr int R = Lanes<KMAX>::R, BV = Lanes<KMAX>::BV;
  const int vb = blockIdx.x, j = blockIdx.y, b = blockIdx.z;
  const int col = vb * BV + L.col;
  const int64_t state0 = (int64_t(b) * a.HV + j) * a.dk * a.dv;
  float* do_col = sm.col[0];
  float* in_col = sm.col[1];   // v (delta: y = w * v)
  float* du_col = sm.col[2];   // delta: du from the reverse sweep
  float s[kRows];
  load_state(s, a.h0 ? a.h0 + state0 : nullptr, a.dk, a.dv, col, L);
  for (int t0 = 0; t0 < a.T; t0 += kTile) {
    KeyTile<op, gate, KMAX, S> keys;
    ColumnTile<KMAX, S> dout, v, w;
    ColumnTile<KMAX, float> du;
    keys.get(a, b, j, t0);
    dout.get(a.d_o, b, j, t0, vb, a.T, a.HV, a.dv);
    v.get(a.v, b, j, t0, vb, a.T, a.HV, a.dv);
    if constexpr (op == Op::Delta) {
      w.get(a.w, b, j, t0, vb, a.T, a.HV, a.dv, !a.write_vector);
      du.get(a.du, b, j, t0, vb, a.T, a.HV, a.dv);
    }
    keys.put(sm);
    dout.put(do_col);
    if constexpr (op == Op::Delta) {
      v.put_product(in_col, w);
      du.put(du_col);
    } else {
      v.put(in_col);
    }
    __syncthreads();
    const int n = min(kTile, a.T - t0);
    for (int tt = 0; tt < n; tt++) {
      const float d_o = do_col[tt * BV + L.col], x_in = in_col[tt * BV + L.col];
      const float* k = sm.k + tt * KMAX;
      float* slot0 = sm.slot0 + (tt & 1) * kWarps * KMAX;
      float* slot1 = sm.slot1 + (tt & 1) * kWarps * KMAX;
      float x[kRows];
      zero_rows_if(s, sm.resets[tt] != 0.f);
      if constexpr (op == Op::Rwkv6) {
#pragma unroll
        for (int i = 0; i < kRows; i++) x[i] = a.scale * s[i] * d_o;  // o = scale S_{t-1}^T r  =>  dr_S = scale S do
        warp_column_sums(slot0, x, L);
        decay<gate>(s, sm, tt, L);
        add_scaled_rows(s, k, x_in, L);
      } else {
        decay<gate>(s, sm, tt, L);
        float u = x_in;
        if constexpr (op == Op::Delta) {
          u = x_in - column_sum<R>(dot_rows(sm.e + tt * KMAX, s, L));
          const float dr = -du_col[tt * BV + L.col];                   // u = y - r  =>  dr = -du
#pragma unroll
          for (int i = 0; i < kRows; i++) x[i] = s[i] * dr;            // r = S'^T e  =>  de = S' dr
          warp_column_sums(slot1, x, L);
        }
        add_scaled_rows(s, k, u, L);
#pragma unroll
        for (int i = 0; i < kRows; i++) x[i] = a.scale * s[i] * d_o;  // o = scale S^T q  =>  dq = scale S do
        warp_column_sums(slot0, x, L);
      }
      const int t = t0 + tt;
      const bool checkpoint = (t + 1) % kCheckpoint == 0 && t + 1 < a.T;
      if (checkpoint) {  // pair S after t + 1 tokens with the saved dS
        float dS[kRows];
        load_state(dS, a.ckpt + state0 * (a.nseg - 1) + int64_t((t + 1) / kCheckpoint - 1) * a.dk * a.dv, a.dk, a.dv,
                   col, L);
#pragma unroll
        for (int i = 0; i < kRows; i++) x[i] = s[i] * dS[i];
        warp_column_sums(sm.slotp, x, L);
      }
      __syncthreads();
      sum_warps<KMAX>(sm.red0 + tt * KMAX, slot0);
      if constexpr (op == Op::Delta) sum_warps<KMAX>(sm.red1 + tt * KMAX, slot1);
      if (checkpoint) sum_warps<KMAX>(sm.pair, sm.slotp);
    }
    __syncthreads();
    flush_row_tile<KMAX>(a.dq_part, sm.red0, a, b, j, t0, vb);
    if constexpr (op == Op::Delta) flush_row_tile<KMAX>(a.de_part, sm.red1, a, b, j, t0, vb);
    const int t_end = t0 + n;
    if (t_end % kCheckpoint == 0 && t_end < a.T) flush_pair<KMAX>(sm.pair, a, b, j, t_end / kCheckpoint - 1, vb);
    __syncthreads();
  }
  // The last segment ends at T, where dS is the final state's gradient.
  float x[kRows];
  float dS[kRows];
  load_state(dS, a.dht ? a.dht + state0 : nullptr, a.dk, a.dv, col, L);
#pragma unroll
  for (int i = 0; i < kRows; i++) x[i] = s[i] * dS[i];
  warp_column_sums(sm.slotp, x, L);
  __syncthreads();
  sum_warps<KMAX>(sm.pair, sm.slotp);
  __syncthreads();
  flush_pair<KMAX>(sm.pair, a, b, j, a.nseg - 1, vb);
}

// ---------------------------------------------------------------------------------------------
// Finish: per (b, value head j, segment, key channel i), sums the column partials and scans the
// gate gradient backwards through the segment. Writes fp32 per value head (B, T, HV, dk):
//   dq_v = dq (rwkv6: dr), dk_v = dk, dg_v = dg (rwkv6: dw), db_v = k * de (delta).
// rwkv6 also needs vdo = v . do per (b, t, h) and writes du_part (B, nseg, H, dk).

struct FinishOut {
  float *dq_v, *dk_v, *dg_v, *db_v, *du_part;
  const float* vdo;
};

template <Op op, class S>
__global__ void finish_kernel(Args<S> a, FinishOut f) {
  const int64_t n = int64_t(a.B) * a.HV * a.nseg * a.dk;
  HLA_GRID_STRIDE(idx, n) {
    const int i = idx % a.dk;
    const int seg = (idx / a.dk) % a.nseg;
    const int j = (idx / a.dk / a.nseg) % a.HV;
    const int b = idx / a.dk / a.nseg / a.HV;
    const int h = j / (a.HV / a.H);
    const auto part = [&](const float* p, int vb, int t) {
      return p[(((int64_t(vb) * a.B + b) * a.T + t) * a.HV + j) * a.dk + i];
    };
    float acc = 0;  // Z at the segment's end
    for (int vb = 0; vb < a.nvb; vb++) acc += a.pair_part[(((int64_t(vb) * a.B + b) * a.HV + j) * a.nseg + seg) * a.dk + i];
    const int t_begin = seg * kCheckpoint, t_end = min(a.T, t_begin + kCheckpoint);
    float du_acc = 0;
    const float u_i = op == Op::Rwkv6 ? to_float(a.bonus[h * a.dk + i]) : 0.f;
    // Tiles of kTile tokens from the segment's end down. The scan through a tile is serial, its
    // loads are not: pass 1 issues all of them before pass 2 uses any (token n of the tile is
    // t_top - n; tokens before the segment load t_begin's values and are not used).
    for (int t_top = t_end - 1; t_top >= t_begin; t_top -= kTile) {
      // pass 1: the tile's inputs, column partials summed
      float q[kTile], k[kTile], dq[kTile], dkw[kTile], de[kTile], beta[kTile], vdo[kTile];
      bool starts[kTile];
#pragma unroll
      for (int n = 0; n < kTile; n++) {
        const int t = max(t_top - n, t_begin);
        const int64_t qk = qk_index(a.T, a.H, a.dk, b, t, h) + i;
        const int64_t vec = ((int64_t(b) * a.T + t) * a.HV + j) * a.dk + i;
        q[n] = to_float(a.q[qk]), k[n] = to_float(a.k[qk]);
        dq[n] = part(a.dq_part, 0, t), dkw[n] = part(a.dkw_part, 0, t);
        if constexpr (op == Op::Delta) {
          de[n] = part(a.de_part, 0, t);
          beta[n] = to_float(a.erase_vector ? a.b[vec] : a.b[(int64_t(b) * a.T + t) * a.HV + j]);
        }
        if constexpr (op == Op::Rwkv6) vdo[n] = a.scale * f.vdo[(int64_t(b) * a.T + t) * a.H + h];
        starts[n] = starts_document(a, b, t);
      }
      for (int vb = 1; vb < a.nvb; vb++)
#pragma unroll
        for (int n = 0; n < kTile; n++) {
          const int t = max(t_top - n, t_begin);
          dq[n] += part(a.dq_part, vb, t), dkw[n] += part(a.dkw_part, vb, t);
          if constexpr (op == Op::Delta) de[n] += part(a.de_part, vb, t);
        }
      // pass 2: the gate gradient's scan, token by token down
#pragma unroll
      for (int n = 0; n < kTile; n++) {
        const int t = t_top - n;
        if (t < t_begin) break;
        const int64_t vec = ((int64_t(b) * a.T + t) * a.HV + j) * a.dk + i;
        if constexpr (op == Op::Rwkv6) {
          acc -= k[n] * dkw[n];                            // dw_t = Y_t - k * dk_w
          if (starts[n]) acc = 0;                          // a document's first token: dw_t = 0, Y_{t-1} = 0
          f.dg_v[vec] = acc;
          acc += q[n] * dq[n];                             // Y_{t-1} = dw_t + r * dr_S
          f.dq_v[vec] = dq[n] + u_i * k[n] * vdo[n];       // o += scale (r . (u * k)) v
          f.dk_v[vec] = dkw[n] + u_i * q[n] * vdo[n];
          du_acc += q[n] * k[n] * vdo[n];
        } else {
          float dk = dkw[n], term = q[n] * dq[n] - k[n] * dkw[n];
          if constexpr (op == Op::Delta) {
            term += beta[n] * k[n] * de[n];                // e = b * k
            dk += beta[n] * de[n];
            f.db_v[vec] = k[n] * de[n];
          }
          acc += term;                                     // Z_t = Z_{t+1} + q dq - k dk_w + e de
          if (starts[n]) acc = 0;                          // a document's first token: S'_t = 0, Z_{t-1} starts at 0
          f.dg_v[vec] = acc;
          f.dq_v[vec] = dq[n];
          f.dk_v[vec] = dk;
        }
      }
    }
    if constexpr (op == Op::Rwkv6) f.du_part[((int64_t(b) * a.nseg + seg) * a.H + h) * a.dk + i] = du_acc;
  }
}

// ---------------------------------------------------------------------------------------------
// Small reductions and casts that turn fp32 per-value-head results into the op's gradients.

// out (N, G... ) : out[n, h, i] = sum_{g < G} in[n, h * G + g, i], in: (N, H * G, W), out: (N, H, W).
template <class D>
__global__ void group_sum_kernel(D* out, const float* in, int64_t N, int H, int G, int W) {
  HLA_GRID_STRIDE(idx, N * H * W) {
    const int i = idx % W;
    const int h = (idx / W) % H;
    const int64_t nrow = idx / W / H;
    float s = 0;
    for (int g = 0; g < G; g++) s += in[(nrow * H * G + h * G + g) * W + i];
    out[idx] = from_float<D>(s);
  }
}

// out[n] = sum_i x[n, i] * (y ? y[n, i] : 1), one warp per row: (N, W) -> (N).
template <class D, class X, class Y>
__global__ void row_dot_kernel(D* out, const X* x, const Y* y, int64_t N, int W) {
  const int64_t warps = int64_t(gridDim.x) * blockDim.x / 32;
  for (int64_t n = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; n < N; n += warps) {
    float s = 0;
    for (int i = threadIdx.x % 32; i < W; i += 32) s += to_float(x[n * W + i]) * (y ? to_float(y[n * W + i]) : 1.f);
    s = warp_sum(s);
    if (threadIdx.x % 32 == 0) out[n] = from_float<D>(s);
  }
}

// out[n, c] = du[n, c] * (per_column ? x[n, c] : x[n]): (N, W).
template <class D>
__global__ void scale_rows_kernel(D* out, const float* du, const D* x, bool per_column, int64_t N, int W) {
  HLA_GRID_STRIDE(idx, N * W) out[idx] = from_float<D>(du[idx] * to_float(per_column ? x[idx] : x[idx / W]));
}

// ---------------------------------------------------------------------------------------------
// Host side.

template <class D>
void group_sum(D* out, const float* in, int64_t N, int64_t H, int64_t G, int64_t W) {
  group_sum_kernel<D><<<grid_1d(N * H * W), 256>>>(out, in, N, static_cast<int>(H), static_cast<int>(G),
                                                   static_cast<int>(W));
  CUDA_CHECK_LAUNCH();
}

template <class D, class X, class Y>
void row_dot(D* out, const X* x, const Y* y, int64_t N, int64_t W) {
  row_dot_kernel<D, X, Y><<<grid_1d(N * 32), 256>>>(out, x, y, N, static_cast<int>(W));
  CUDA_CHECK_LAUNCH();
}

// Calls fn(S{}, std::integral_constant<int, KMAX>{}) for the storage type S of dtype and the
// smallest supported KMAX >= dk.
template <class Fn>
void dispatch_storage_kmax(DType dtype, int64_t dk, const char* op, Fn&& fn) {
  dispatch_storage(dtype, op, [&](auto tag) {
    if (dk <= 64) fn(tag, std::integral_constant<int, 64>{});
    else if (dk <= 128) fn(tag, std::integral_constant<int, 128>{});
    else if (dk <= 256) fn(tag, std::integral_constant<int, 256>{});
    else fail(op, ": the recurrent CUDA kernel takes key widths dk <= 256, got ", dk);
  });
}

template <int KMAX>
int column_blocks(int64_t dv) {
  return static_cast<int>((dv + Lanes<KMAX>::BV - 1) / Lanes<KMAX>::BV);
}

// The shapes common to every op, the column blocks of KMAX and the inputs q, k, v, filled into Args.
template <class S, int KMAX>
Args<S> make_args(int64_t B, int64_t T, int64_t H, int64_t HV, int64_t dk, int64_t dv, double scale, const void* q,
                  const void* k, const void* v) {
  HLA_CHECK(B > 0 && T > 0 && H > 0 && HV > 0 && dk > 0 && dv > 0 && HV % H == 0, "recurrence: bad shape B = ", B,
            ", T = ", T, ", H = ", H, ", HV = ", HV, ", dk = ", dk, ", dv = ", dv);
  Args<S> a;
  a.B = static_cast<int>(B), a.T = static_cast<int>(T), a.H = static_cast<int>(H), a.HV = static_cast<int>(HV);
  a.dk = static_cast<int>(dk), a.dv = static_cast<int>(dv);
  a.nvb = column_blocks<KMAX>(dv);
  a.nseg = static_cast<int>((T + kCheckpoint - 1) / kCheckpoint);
  a.scale = static_cast<float>(scale);
  a.q = static_cast<const S*>(q), a.k = static_cast<const S*>(k), a.v = static_cast<const S*>(v);
  return a;
}

// Runs the forward kernel of op over grid (nvb, HV, B).
template <Op op, Gate gate, int KMAX, class S>
void run_forward(const Args<S>& a) {
  auto kernel = forward_kernel<op, gate, KMAX, S>;
  constexpr size_t smem = Shared<KMAX>::bytes();
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  kernel<<<dim3(a.nvb, a.HV, a.B), kThreads, smem>>>(a);
  CUDA_CHECK_LAUNCH();
}

// The backward of op: reverse sweep, replay sweep, finish. `a` holds the inputs, d_o (and
// d_res, u_saved for the delta rule), dht, dh0 and dv_out / du; the scratch is allocated here.
// Returns the fp32 per-value-head results through `f` (buffers of (B, T, HV, dk) floats the
// caller owns; du_part (B, nseg, H, dk) for rwkv6, vdo (B, T, H) for rwkv6).
template <Op op, Gate gate, int KMAX, class S>
void run_backward(Args<S> a, const FinishOut& f) {
  const int64_t rows = int64_t(a.B) * a.T * a.HV * a.dk;
  FloatScratch ckpt(int64_t(a.B) * a.HV * (a.nseg - 1) * a.dk * a.dv);
  FloatScratch dkw(a.nvb * rows), dq(a.nvb * rows), de(op == Op::Delta ? a.nvb * rows : 1);
  FloatScratch pair(int64_t(a.nvb) * a.B * a.HV * a.nseg * a.dk);
  a.ckpt = ckpt.get(), a.dkw_part = dkw.get(), a.dq_part = dq.get(), a.de_part = de.get(), a.pair_part = pair.get();
  constexpr size_t smem = Shared<KMAX>::bytes();
  const dim3 grid(a.nvb, a.HV, a.B);
  auto reverse = reverse_kernel<op, gate, KMAX, S>;
  CUDA_CHECK(cudaFuncSetAttribute(reverse, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  reverse<<<grid, kThreads, smem>>>(a);
  CUDA_CHECK_LAUNCH();
  auto replay = replay_kernel<op, gate, KMAX, S>;
  CUDA_CHECK(cudaFuncSetAttribute(replay, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  replay<<<grid, kThreads, smem>>>(a);
  CUDA_CHECK_LAUNCH();
  finish_kernel<op, S><<<grid_1d(int64_t(a.B) * a.HV * a.nseg * a.dk), 256>>>(a, f);
  CUDA_CHECK_LAUNCH();
}

}  // namespace hla::cuda::recurrence
