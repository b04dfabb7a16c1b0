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
// apart into a swizzled (ROWS x W) tile; rows at or past T become zeros. All THREADS threads.
template <int ROWS, int W, int THREADS>
__device__ __forceinline__ void load_tile_async(__nv_bfloat16* tile, const __nv_bfloat16* g, int64_t stride,
                                                int row0, int T) {
  constexpr int kChunksPerRow = W / 8;
  for (int i = threadIdx.x; i < ROWS * kChunksPerRow; i += THREADS) {
    int r = i / kChunksPerRow, c = (i % kChunksPerRow) * 8;
    bool valid = row0 + r < T;
    cp_async_16(tile + swizzle<W>(r, c), g + (valid ? (row0 + r) * stride + c : 0), valid);
  }
}

}  // namespace hla::cuda
