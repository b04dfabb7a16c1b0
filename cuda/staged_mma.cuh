// Tensor-core products whose operands are staged once as bf16 in shared tiles, swizzled
// (cuda/tile.cuh) or padded, and read by ldmatrix (cuda/mma.cuh), into the accumulators of a
// chunk_mma::WarpTile: where WarpTile::mma gathers every fragment element by element through an
// accessor (and splits fp32 operands into hi + lo), an operand here is formed once (decayed,
// rounded to bf16, or split into a hi and a lo tile multiplied one after the other) and each
// 16 x 16 fragment is one ldmatrix.
#pragma once
#include <cuda_bf16.h>

#include "cuda/chunk_mma.cuh"
#include "cuda/common.cuh"
#include "cuda/tile.cuh"

namespace hla::cuda::chunk_mma {

// A logical (rows x cols) bf16 operand in a swizzled shared tile of width W: element (i, j) is
// tile[r0 + i][c0 + j], or with TRANS tile[r0 + j][c0 + i] (the operand is the tile's transpose).
// c0 is a multiple of 8 (whole 16-byte pieces), r0 a multiple of 8 (the swizzle's row period).
template <int W, bool TRANS>
struct Staged {
  static constexpr bool kTrans = TRANS;
  const __nv_bfloat16* tile;
  int r0 = 0, c0 = 0;
  __device__ __forceinline__ const __nv_bfloat16* at(int i, int j) const {
    return TRANS ? tile + swizzle<W>(r0 + j, c0 + i) : tile + swizzle<W>(r0 + i, c0 + j);
  }
};

// The same in a padded tile whose rows are LD elements apart (LD % 8 == 0 and LD / 8 odd, e.g.
// width + 8 with width % 16 == 0: the 8 rows an ldmatrix reads start in 8 different bank groups),
// the layout of chunk_mma::load_bf16_rows_async; c0 a multiple of 8.
template <int LD, bool TRANS>
struct Padded {
  static_assert(LD % 8 == 0 && (LD / 8) % 2 == 1, "16-byte rows, an odd number of 16-byte pieces apart");
  static constexpr bool kTrans = TRANS;
  const __nv_bfloat16* tile;
  int r0 = 0, c0 = 0;
  __device__ __forceinline__ const __nv_bfloat16* at(int i, int j) const {
    return TRANS ? tile + (r0 + j) * LD + c0 + i : tile + (r0 + i) * LD + c0 + j;
  }
};

// acc += sum over k in [k_begin, k_end) of A(row, k) B(k, col), A (M x K) and B (K x N) staged
// operands, Staged or Padded (k_begin, k_end multiples of 16); the warp's pairs of 8-column tiles
// at or past n_end (a multiple of 16) are left as they are. A row-major A tile is read by ldmatrix, a transposed one
// by ldmatrix.trans; B the other way round (mma wants B's k pairs adjacent).
template <class Tile, class OpA, class OpB>
__device__ __forceinline__ void mma_staged(Tile& acc, const OpA& A, const OpB& B, int k_begin, int k_end,
                                           int n_end = 1 << 30) {
  constexpr bool TA = OpA::kTrans, TB = OpB::kTrans;
  static_assert(Tile::NT % 2 == 0, "8-column tiles in pairs (one ldmatrix.x4 of B each)");
  const int lane = threadIdx.x % 32;
  // The element (of the logical operand) whose 8-wide row this lane hands to ldmatrix.
  const int a_row = TA ? ((lane / 8) % 2) * 8 : lane % 16, a_k = TA ? lane % 8 + (lane / 16) * 8 : (lane / 16) * 8;
  const int b_n = TB ? lane % 8 + (lane / 16) * 8 : (lane / 16) * 8, b_k = TB ? ((lane / 8) % 2) * 8 : lane % 8 + ((lane / 8) % 2) * 8;
  for (int k0 = k_begin; k0 < k_end; k0 += 16) {
    uint32_t a[4];
    if constexpr (TA) ldmatrix_x4_trans(a, A.at(acc.row0 + a_row, k0 + a_k));
    else ldmatrix_x4(a, A.at(acc.row0 + a_row, k0 + a_k));
#pragma unroll
    for (int nt = 0; nt < Tile::NT; nt += 2) {
      const int n0 = acc.col0 + nt * 8;
      if (n0 >= n_end) break;
      uint32_t b[4];  // b[0], b[1]: tile nt; b[2], b[3]: tile nt + 1
      if constexpr (TB) ldmatrix_x4(b, B.at(k0 + b_k, n0 + b_n));
      else ldmatrix_x4_trans(b, B.at(k0 + b_k, n0 + b_n));
      mma_bf16_16816(acc.acc[nt], a, b[0], b[1]);
      mma_bf16_16816(acc.acc[nt + 1], a, b[2], b[3]);
    }
  }
}

// tile[swizzle(r, c)] = x rounded to bf16: one element of a staged operand.
template <int W>
__device__ __forceinline__ void stage(__nv_bfloat16* tile, int r, int c, float x) {
  tile[swizzle<W>(r, c)] = __float2bfloat16_rn(x);
}

// tile[swizzle(r, c .. c + 7)] = x[0 .. 7] rounded to bf16, one 16-byte store (c % 8 == 0).
template <int W>
__device__ __forceinline__ void stage8(__nv_bfloat16* tile, int r, int c, const float x[8]) {
  uint4 piece;
  piece.x = pack_bf16(x[0], x[1]), piece.y = pack_bf16(x[2], x[3]);
  piece.z = pack_bf16(x[4], x[5]), piece.w = pack_bf16(x[6], x[7]);
  *reinterpret_cast<uint4*>(tile + swizzle<W>(r, c)) = piece;
}

// A scan CTA's state tile (ROWS x BV, fp32: h forward, dS reverse) in registers, for the chunked
// scans of cuda/decay_attention_chunk.cu and cuda/delta_rule_chunk.cu: kParts WarpTiles of kRows
// rows (a WarpTile holds at most 16 rows a warp), part p rows p kRows .. p kRows + kRows - 1.
// Global (dk, DV) states are read and written from the accumulators, a column pair a thread at a
// time (fp32: h0, ht, dht, dh0; bf16, rounded: h[n], dh[n]); stage() splits the tile into bf16 hi
// and lo shared tiles for a product that reads the state as an operand.
template <int ROWS, int BV, int WARPS>
struct StateTile {
  static constexpr int kRows = ROWS < 16 * WARPS ? ROWS : 16 * WARPS, kParts = ROWS / kRows;
  WarpTile<kRows, BV, WARPS> part[kParts];
  // fn(row, col, x0, x1) for every accumulator pair (col, col + 1) of a row, x0 and x1 by reference.
  template <class Fn>
  __device__ __forceinline__ void each_pair(Fn&& fn) {
#pragma unroll
    for (int p = 0; p < kParts; p++)
      part[p].each_pair([&](int r, int c, float& x0, float& x1, int) { fn(p * kRows + r, c, x0, x1); });
  }
  // The tile from columns v0 .. v0 + BV - 1 of a (ROWS.., DV) state whose first row is at src
  // (zeros when null).
  __device__ __forceinline__ void load(const float* src, int v0, int DV) {
    each_pair([&](int r, int c, float& x0, float& x1) {
      const float2 x = src ? *reinterpret_cast<const float2*>(src + r * DV + v0 + c) : make_float2(0.f, 0.f);
      x0 = x.x, x1 = x.y;
    });
  }
  // The same columns of a state of T <- the tile.
  template <class T>
  __device__ __forceinline__ void store(T* dst, int v0, int DV) {
    each_pair([&](int r, int c, float& x0, float& x1) {
      const float pair[2] = {x0, x1};
      store_floats(dst + r * DV + v0 + c, pair);
    });
  }
  // hi, lo (kRows, BV) bf16 tiles, rows LD apart <- part p split (hi + lo: ~16 mantissa bits).
  template <int LD>
  __device__ __forceinline__ void stage_part(int p, __nv_bfloat16* hi, __nv_bfloat16* lo) {
    part[p].each_pair([&](int r, int c, float& x0, float& x1, int) {
      split_pair(x0, x1, *reinterpret_cast<uint32_t*>(hi + r * LD + c), *reinterpret_cast<uint32_t*>(lo + r * LD + c));
    });
  }
  // hi, lo (ROWS, BV) bf16 tiles, rows LD apart <- the tile split.
  template <int LD>
  __device__ __forceinline__ void stage(__nv_bfloat16* hi, __nv_bfloat16* lo) {
#pragma unroll
    for (int p = 0; p < kParts; p++) stage_part<LD>(p, hi + p * kRows * LD, lo + p * kRows * LD);
  }
  // h <- Diag(decay(row)) h
  template <class Decay>
  __device__ __forceinline__ void scale(const Decay& decay) {
#pragma unroll
    for (int p = 0; p < kParts; p++) part[p].each([&](int r, int, float& acc, int) { acc *= decay(p * kRows + r); });
  }
  // h += X^T Y over TOKENS tokens: bf16 tiles, X (TOKENS, ROWS..) read transposed by
  // ldmatrix.trans (rows LDX apart), Y (TOKENS, BV) (rows LDY apart).
  template <int LDX, int LDY, int TOKENS>
  __device__ __forceinline__ void add(const __nv_bfloat16* x, const __nv_bfloat16* y) {
#pragma unroll
    for (int p = 0; p < kParts; p++) mma_staged(part[p], Padded<LDX, true>{x, 0, p * kRows}, Padded<LDY, false>{y}, 0, TOKENS);
  }
  // h <- Diag(decay(row)) h + X0^T Y0 + X1^T Y1. An fp32 operand enters as its hi and lo tiles:
  // X0 = X1 = K with Y0, Y1 the halves of diag(w) V (scalar gate), or X0, X1 the halves of the
  // gated K with Y0 = Y1 = V (vector gate).
  template <int LDX, int LDY, int TOKENS, class Decay>
  __device__ __forceinline__ void advance(const Decay& decay, const __nv_bfloat16* x0, const __nv_bfloat16* y0,
                                          const __nv_bfloat16* x1, const __nv_bfloat16* y1) {
    scale(decay);
    add<LDX, LDY, TOKENS>(x0, y0);
    add<LDX, LDY, TOKENS>(x1, y1);
  }
};

}  // namespace hla::cuda::chunk_mma
