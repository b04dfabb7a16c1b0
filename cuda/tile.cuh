// Swizzled bf16 tiles in shared memory and their cp.async loads (cuda/attention.cu's K, V, Q,
// dO tiles): plain code over the primitives of cuda/mma.cuh, so the host emulator
// (tests/emu/include) runs it as written.
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/mma.cuh"

namespace hla::cuda {

// A (rows x W) bf16 tile in shared memory, W a multiple of 64, stored in 16-byte chunks whose
// index is XORed with (row % 8): the 8 rows an ldmatrix reads then hit 8 different bank groups.
template <int W>
__device__ __forceinline__ int swizzle(int row, int col) {
  static_assert(W % 64 == 0, "swizzled tiles are a multiple of 64 bf16 wide");
  return row * W + (((col >> 3) ^ (row & 7)) << 3) + (col & 7);
}

// Copies rows [row0, row0 + ROWS) of a (T, ...) global matrix whose rows are `stride` elements
// apart into a swizzled (ROWS x W) tile; rows at or past T become zeros. All THREADS threads
// (threadIdx.x < THREADS), thread t the 16-byte chunks t, t + THREADS, .. in row-major order.
// Where THREADS chunks are whole rows, 8 of them or a multiple (the swizzle's period), a thread's
// chunks sit in one column at rows r, r + kRowsPerPass, .., so its shared address moves by a
// constant and its global one by one 64-bit add a pass, where the general loop spends a division,
// a swizzle and a 64-bit product a chunk. The passes are unrolled UNROLL at a time (0: all): two
// suit a warp short of registers (the wgmma forward's producer, 40 at D = 128, spilled 88 bytes
// with all); the mma forward, whose loads sit between its products, unrolls all (with two it took
// 1.074 ms at B4 T4096 H16 D128 against the general loop's 0.997 in one H200 call; with all,
// 0.855-0.888 in two others). What this loop gave the attention kernels: bench/README.
template <int ROWS, int W, int THREADS, int UNROLL = 2>
__device__ __forceinline__ void load_tile_async(__nv_bfloat16* tile, const __nv_bfloat16* g, int64_t stride,
                                                int row0, int T) {
  constexpr int kChunksPerRow = W / 8, kRowsPerPass = THREADS / kChunksPerRow;
  if constexpr (THREADS % kChunksPerRow == 0 && kRowsPerPass % 8 == 0 && ROWS % kRowsPerPass == 0) {
    const int r = threadIdx.x / kChunksPerRow, c = threadIdx.x % kChunksPerRow * 8;  // this thread's first chunk
    __nv_bfloat16* s = tile + swizzle<W>(r, c);  // rows r + k kRowsPerPass swizzle as row r
    const __nv_bfloat16* from = g + (row0 + r) * stride + c;
    const int64_t pass_stride = kRowsPerPass * stride;  // from one of its chunks in g to the next
    constexpr int kPasses = ROWS / kRowsPerPass, kUnroll = UNROLL > 0 ? UNROLL : kPasses;
#pragma unroll kUnroll
    for (int k = 0; k < kPasses; k++, from += pass_stride) {
      const bool valid = row0 + r + k * kRowsPerPass < T;
      cp_async_16(s + k * kRowsPerPass * W, valid ? from : g, valid);
    }
  } else {
    for (int i = threadIdx.x; i < ROWS * kChunksPerRow; i += THREADS) {
      int r = i / kChunksPerRow, c = (i % kChunksPerRow) * 8;
      bool valid = row0 + r < T;
      cp_async_16(tile + swizzle<W>(r, c), g + (valid ? (row0 + r) * stride + c : 0), valid);
    }
  }
}

}  // namespace hla::cuda
