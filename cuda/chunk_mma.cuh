// Tensor-core helpers of the chunked recurrence kernels: split_pair (fp32 -> bf16 hi + lo), used
// by cuda/decay_attention_chunk.cu and cuda/delta_rule_chunk.cu, and Product, the warp-tiled
// product of the decay kernel (the delta-rule kernel's WarpTile splits columns across warps and
// keeps per-row sums instead; the two are not yet one type).
//
// Product<M, N, WARPS> is one CTA's (M x N) fp32 result of sum_k A(m, k) B(k, n) on
// mma.m16n8k16 (bf16 x bf16 -> fp32, fragment layouts in cuda/mma.cuh). The WARPS warps split
// the M rows into 16-row tiles (warp w owns tiles w, w + WARPS, ...) and each keeps all N
// columns. Operands are read through accessors A(m, k), B(k, n) returning floats, so a
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

template <int M, int N, int WARPS>
struct Product {
  static_assert(M % (16 * WARPS) == 0, "whole 16-row tiles per warp");
  static_assert(N % 8 == 0, "whole 8-column tiles");
  static constexpr int kRowTiles = M / (16 * WARPS);  // per warp
  static constexpr int kColTiles = N / 8;
  float acc[kRowTiles][kColTiles][4];  // mma C fragments
  int warp, g, t;                      // g = lane / 4, t = lane % 4

  __device__ Product() : warp(threadIdx.x / 32), g(threadIdx.x % 32 / 4), t(threadIdx.x % 4) {
#pragma unroll
    for (int rt = 0; rt < kRowTiles; rt++)
#pragma unroll
      for (int ct = 0; ct < kColTiles; ct++)
#pragma unroll
        for (int i = 0; i < 4; i++) acc[rt][ct][i] = 0.f;
  }

  __device__ __forceinline__ int first_row(int rt) const { return (rt * WARPS + warp) * 16 + g; }

  // acc += A B over K (a multiple of 16); SPLIT_A / SPLIT_B mark fp32 operands.
  template <int K, bool SPLIT_A, bool SPLIT_B, class FA, class FB>
  __device__ __forceinline__ void add(const FA& A, const FB& B) {
    static_assert(K % 16 == 0, "K in steps of 16");
#pragma unroll 1
    for (int k0 = 0; k0 < K; k0 += 16) {
      const int kk = k0 + 2 * t;
      uint32_t ahi[kRowTiles][4], alo[kRowTiles][4];
#pragma unroll
      for (int rt = 0; rt < kRowTiles; rt++) {
        const int r = first_row(rt);
        split_pair(A(r, kk), A(r, kk + 1), ahi[rt][0], alo[rt][0]);
        split_pair(A(r + 8, kk), A(r + 8, kk + 1), ahi[rt][1], alo[rt][1]);
        split_pair(A(r, kk + 8), A(r, kk + 9), ahi[rt][2], alo[rt][2]);
        split_pair(A(r + 8, kk + 8), A(r + 8, kk + 9), ahi[rt][3], alo[rt][3]);
      }
#pragma unroll
      for (int ct = 0; ct < kColTiles; ct++) {
        const int n = ct * 8 + g;
        uint32_t bhi0, blo0, bhi1, blo1;
        split_pair(B(kk, n), B(kk + 1, n), bhi0, blo0);
        split_pair(B(kk + 8, n), B(kk + 9, n), bhi1, blo1);
#pragma unroll
        for (int rt = 0; rt < kRowTiles; rt++) {
          mma_bf16_16816(acc[rt][ct], ahi[rt], bhi0, bhi1);
          if constexpr (SPLIT_B) mma_bf16_16816(acc[rt][ct], ahi[rt], blo0, blo1);
          if constexpr (SPLIT_A) mma_bf16_16816(acc[rt][ct], alo[rt], bhi0, bhi1);
        }
      }
    }
  }

  // fn(row, col, element&) over this thread's elements.
  template <class Fn>
  __device__ __forceinline__ void each(Fn&& fn) {
#pragma unroll
    for (int rt = 0; rt < kRowTiles; rt++)
#pragma unroll
      for (int ct = 0; ct < kColTiles; ct++)
#pragma unroll
        for (int i = 0; i < 4; i++) fn(first_row(rt) + 8 * (i / 2), ct * 8 + 2 * t + i % 2, acc[rt][ct][i]);
  }
};

}  // namespace hla::cuda::chunk_mma
