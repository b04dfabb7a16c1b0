// The shared-memory matrix descriptor through which Hopper's warpgroup MMA (cuda/wgmma.cuh)
// reads an operand, for the 64-wide swizzled tiles of cuda/tile.cuh. Plain code, so that the host
// emulator (tests/emu/include/cuda/wgmma.cuh) builds the same descriptors and decodes them.
//
// The layout (PTX ISA, "Asynchronous Warpgroup Level Matrix Shared Memory Layout": K-major,
// 128-byte swizzling): an operand of R rows (M rows of A, N rows of B) by 16 k is read from a
// (R x 64) bf16 tile whose rows are 128 bytes, k along the row (swizzle<64> of cuda/tile.cuh).
// Rows come in groups of 8 (1024 bytes, one repeat of the swizzle pattern); inside a group the
// 16-byte chunk c of row r sits at chunk c ^ r. The hardware applies that XOR to the bits of the
// shared-memory address (bits 4-6 ^= bits 7-9), so the tile must start on a 1024-byte boundary;
// the k16 step kk of a product starts 32 kk bytes into the tile (the address before the XOR).
//
// Descriptor (PTX ISA, "Matrix Descriptor Format"), 64 bits:
//   bits  0-13  start address >> 4          bits 32-45  stride byte offset >> 4: 1024, from one
//   bits 16-29  leading byte offset >> 4:               group of 8 rows to the next
//               unused by K-major swizzled  bits 49-51  base offset: 0 (the tile is aligned)
//               layouts, 1 by convention    bits 62-63  swizzle: 1 = 128 bytes
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

namespace hla::cuda {

constexpr int kWgmmaTileAlign = 1024;  // bytes: one repeat of the 128-byte swizzle

// The descriptor of the operand whose k16 slice starts at `at`: a swizzled (R x 64) tile that
// starts on a 1024-byte boundary, plus 16 kk elements for the slice kk.
__device__ __forceinline__ uint64_t smem_desc(const __nv_bfloat16* at) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(at));
  constexpr uint64_t kLeadingByteOffset = 1, kStrideByteOffset = 1024 >> 4, kSwizzle128 = 1;
  return uint64_t((addr & 0x3ffff) >> 4) | kLeadingByteOffset << 16 | kStrideByteOffset << 32 | kSwizzle128 << 62;
}

// `smem` advanced to the next 1024-byte boundary of the shared address space (a kernel reserves
// kWgmmaTileAlign extra bytes of dynamic shared memory for it).
__device__ __forceinline__ char* align_wgmma_tiles(void* smem) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  return static_cast<char*>(smem) + (kWgmmaTileAlign - addr % kWgmmaTileAlign) % kWgmmaTileAlign;
}

}  // namespace hla::cuda
