// Tensor-core products of the chunked recurrence kernels (cuda/decay_attention_chunk.cu,
// cuda/delta_rule_chunk.cu).
//
// WarpTile<M, N, WARPS> is one warp's share of a CTA's (M x N) fp32 result of
// sum_k A(m, k) B(k, n) on mma.m16n8k16 (bf16 x bf16 -> fp32, fragment layouts in cuda/mma.cuh).
// Operands are read through accessors A(m, k), B(k, n) returning floats, so a
// transposed or row-scaled operand is a lambda, not a copy. An operand that is bf16-exact
// (q, k, v) enters as it is; an fp32 operand (a state, a decay-weighted score) is split into
// hi + lo bf16 halves and enters as hi*x + lo*x, ~16 mantissa bits (the lo*lo term, ~2^-18
// relative, is dropped).
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/mma.cuh"

namespace hla::cuda::chunk_mma {

// (x0, x1) -> packed bf16 pairs hi = round(x), lo = round(x - hi).
__device__ __forceinline__ void split_pair(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  const float r0 = __bfloat162float(__float2bfloat16_rn(x0));
  const float r1 = __bfloat162float(__float2bfloat16_rn(x1));
  hi = pack_bf16(r0, r1);
  lo = pack_bf16(x0 - r0, x1 - r1);
}

// The (ROWS x COLS) fp32 tile src (rows ld_src apart, 8-byte aligned, COLS and ld_src even) into
// bf16 halves hi + lo (rows ld_dst apart, ld_dst even), two columns a step, by THREADS threads;
// lo null: hi alone (the tile rounded).
template <int ROWS, int COLS, int THREADS>
__device__ __forceinline__ void split_tile(__nv_bfloat16* hi, __nv_bfloat16* lo, int ld_dst, const float* src,
                                           int ld_src) {
  for (int i = threadIdx.x; i < ROWS * COLS / 2; i += THREADS) {
    const int r = i / (COLS / 2), c = (i % (COLS / 2)) * 2;
    const float2 x = *reinterpret_cast<const float2*>(src + r * ld_src + c);
    uint32_t hi_pair, lo_pair;
    split_pair(x.x, x.y, hi_pair, lo_pair);
    *reinterpret_cast<uint32_t*>(hi + r * ld_dst + c) = hi_pair;
    if (lo) *reinterpret_cast<uint32_t*>(lo + r * ld_dst + c) = lo_pair;
  }
}

// Rows 0 .. ROWS - 1 of a bf16 matrix (rows `stride` elements apart, W % 8 == 0, src 16-byte
// aligned) into a (ROWS, W + 8) shared tile through cp.async, by the whole block; rows n .. ROWS - 1
// become zeros. The 16-byte pieces land in shared memory without passing through registers and
// are all in flight at once (one memory round trip for the whole tile, where a load-then-store
// loop pays one per iteration). The caller waits (wait_tiles) before reading the tile.
template <int ROWS, int W>
__device__ __forceinline__ void load_bf16_rows_async(__nv_bfloat16* dst, const __nv_bfloat16* src, int64_t stride,
                                                     int n) {
  constexpr int kPieces = W / 8;
  for (int i = threadIdx.x; i < ROWS * kPieces; i += blockDim.x) {
    const int r = i / kPieces, c = (i % kPieces) * 8;
    cp_async_16(dst + r * (W + 8) + c, src + (r < n ? r * stride + c : 0), r < n);
  }
}

// The other way: rows 0 .. ROWS - 1 of a (ROWS, LD) shared bf16 tile, columns 0 .. W - 1 (W % 8 ==
// 0), into a bf16 matrix in global memory (rows `stride` elements apart, dst 16-byte aligned), in
// 16-byte pieces, by the whole block.
template <int ROWS, int W, int LD>
__device__ __forceinline__ void store_bf16_rows(__nv_bfloat16* dst, int64_t stride, const __nv_bfloat16* src) {
  constexpr int kPieces = W / 8;
  for (int i = threadIdx.x; i < ROWS * kPieces; i += blockDim.x) {
    const int r = i / kPieces, c = (i % kPieces) * 8;
    *reinterpret_cast<uint4*>(dst + r * stride + c) = *reinterpret_cast<const uint4*>(src + r * LD + c);
  }
}

// The fp32 counterpart: rows 0 .. ROWS - 1, columns 0 .. W - 1 of a float matrix (rows `stride`
// floats apart, W % 4 == 0, src 16-byte aligned) into a shared tile whose rows are `ld` floats
// apart (ld % 4 == 0), through cp.async; rows n .. ROWS - 1 become zeros. The caller waits as above.
template <int ROWS, int W>
__device__ __forceinline__ void load_f32_rows_async(float* dst, int ld, const float* src, int64_t stride,
                                                    int n = ROWS) {
  static_assert(W % 4 == 0, "16-byte pieces of 4 floats");
  constexpr int kPieces = W / 4;
  for (int i = threadIdx.x; i < ROWS * kPieces; i += blockDim.x) {
    const int r = i / kPieces, c = (i % kPieces) * 4;
    cp_async_16(dst + r * ld + c, src + (r < n ? r * stride + c : 0), r < n);
  }
}

// Waits for this thread's cp.async copies, then for the block's: the tiles are ready for all.
__device__ __forceinline__ void wait_tiles() {
  cp_async_commit();
  cp_async_wait_all();
  __syncthreads();
}

// One warp's part of an (M x N) product computed by the block's WARPS warps: M / 16 row tiles
// of 16 rows, each shared by WARPS / (M / 16) warps that split its N columns; each warp holds NT
// accumulator tiles of 16 x 8 (mma's C layout: element i of tile nt is at row g + 8 (i / 2),
// column nt * 8 + 2 t + i % 2 of the warp's block, g = lane / 4, t = lane % 4).
template <int M, int N, int WARPS>
struct WarpTile {
  static constexpr int kRowTiles = M / 16;
  static_assert(M % 16 == 0 && WARPS % kRowTiles == 0, "row tiles must divide the warps");
  static constexpr int kCols = N / (WARPS / kRowTiles);  // columns per warp
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
      split_pair(A(r, kk), A(r, kk + 1), ahi[0], alo[0]);
      split_pair(A(r + 8, kk), A(r + 8, kk + 1), ahi[1], alo[1]);
      split_pair(A(r, kk + 8), A(r, kk + 9), ahi[2], alo[2]);
      split_pair(A(r + 8, kk + 8), A(r + 8, kk + 9), ahi[3], alo[3]);
#pragma unroll
      for (int nt = 0; nt < NT; nt++) {
        const int n = col0 + nt * 8 + g;
        uint32_t bhi0, blo0, bhi1, blo1;
        split_pair(B(kk, n), B(kk + 1, n), bhi0, blo0);
        split_pair(B(kk + 8, n), B(kk + 9, n), bhi1, blo1);
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
  // fn(row, col, x0, x1, slot) for the accumulator pairs (col, col + 1) of a row (elements i,
  // i + 1 of a tile, i even; x0, x1 by reference; slot: x0's, as in each()): memory-adjacent, so
  // a row's 4 lanes move 32 contiguous bytes at once (a float2 each; a bf16 pair: 16) where each()
  // moves half of that, one element at a time, and a global sector (32 bytes) is written or read
  // by two instructions.
  template <class Fn>
  __device__ __forceinline__ void each_pair(Fn&& fn) {
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
      for (int i = 0; i < 4; i += 2) fn(row0 + g + 4 * i, col0 + nt * 8 + 2 * t, acc[nt][i], acc[nt][i + 1], nt * 4 + i);
  }
  __device__ __forceinline__ float at(int slot) const { return acc[slot / 4][slot % 4]; }
  __device__ __forceinline__ float& ref(int slot) { return acc[slot / 4][slot % 4]; }

  // out[part * M + row] += sum over this warp's columns of fn(row, col, acc element), where
  // part = the warp's column group. Every (part, row) slot has one owner lane for every N, so
  // repeated calls add up deterministically without atomics; a row's total is the sum over parts.
  template <class Fn>
  __device__ __forceinline__ void add_row_sums(float* out, Fn&& fn) {
    float s[2] = {0.f, 0.f};  // rows g and g + 8
    each([&](int r, int c, float x, int slot) { s[(slot % 4) / 2] += fn(r, c, x); });
#pragma unroll
    for (int i = 0; i < 2; i++) {
      s[i] += __shfl_xor_sync(0xffffffffu, s[i], 1);
      s[i] += __shfl_xor_sync(0xffffffffu, s[i], 2);
    }
    if (t == 0) {
      const int part = (threadIdx.x / 32) / kRowTiles;
      out[part * M + row0 + g] += s[0];
      out[part * M + row0 + g + 8] += s[1];
    }
  }

  // out[tile * N + col] += sum over this warp's 16 rows of fn(row, col, acc element), where tile =
  // the warp's row tile; a column's total is the sum over the M / 16 tiles. As add_row_sums: one
  // owner lane per (tile, col), no atomics.
  template <class Fn>
  __device__ __forceinline__ void add_col_sums(float* out, Fn&& fn) {
    float s[NT][2];  // columns col0 + nt * 8 + 2 t + {0, 1}, summed over rows g and g + 8
#pragma unroll
    for (int nt = 0; nt < NT; nt++) s[nt][0] = s[nt][1] = 0.f;
    each([&](int r, int c, float x, int slot) { s[slot / 4][slot % 2] += fn(r, c, x); });
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
      for (int i = 0; i < 2; i++)
#pragma unroll
        for (int off = 4; off < 32; off <<= 1) s[nt][i] += __shfl_xor_sync(0xffffffffu, s[nt][i], off);
    if (g == 0) {
      const int tile = (threadIdx.x / 32) % kRowTiles;
#pragma unroll
      for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int i = 0; i < 2; i++) out[tile * N + col0 + nt * 8 + 2 * t + i] += s[nt][i];
    }
  }
};

}  // namespace hla::cuda::chunk_mma
