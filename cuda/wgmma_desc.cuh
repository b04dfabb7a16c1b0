// The shared-memory matrix descriptors through which Hopper's warpgroup MMA (cuda/wgmma.cuh)
// reads its operands from the 64-wide swizzled tiles of cuda/tile.cuh. Plain code, so that the
// host emulator (tests/emu/include/cuda/wgmma.cuh) builds the same descriptors and decodes them.
//
// The tiles (PTX ISA 9.7.15.5.1.2, "Shared Memory Matrix Layout", 128-byte swizzling): bf16 rows
// of 128 bytes (64 elements, swizzle<64> of cuda/tile.cuh) in groups of 8 rows (1024 bytes, one
// repeat of the swizzle pattern); inside a group the 16-byte chunk c of row r sits at chunk c ^ r.
// The hardware applies that XOR to the bits of the shared-memory address (bits 4-6 ^= bits 7-9),
// so a tile starts on a 1024-byte boundary. An operand of the product D = A B^T (A: 64 x 16,
// B: N x 16 per k16 slice) is read in one of two ways:
//   K-major (A, or B = K^T of attention's S = Q K^T): a row of the tile is a row of the operand,
//     k along it; the slice kk starts 32 kk bytes into the tile (the address before the XOR);
//     a (R x 64) tile holds R rows.
//   N-major (B = V of attention's O = P V, "transposed"): a row of the tile is one k, N along it;
//     N > 64 spans several (K x 64) tiles ("panels") panel_bytes apart; the slice kk starts
//     16 kk rows (2048 kk bytes) into each panel.
//
// Descriptor (PTX ISA, "Matrix Descriptor Format", in 9.7.15.5.1.2), 64 bits:
//   bits  0-13  start address >> 4
//   bits 16-29  leading byte offset >> 4: K-major: unused by swizzled layouts (1 by convention);
//               N-major: from one 64-wide panel of N to the next
//   bits 32-45  stride byte offset >> 4: 1024, from one group of 8 rows to the next
//   bits 49-51  base offset: 0 (the tile is aligned)
//   bits 62-63  swizzle: 1 = 128 bytes
#pragma once
#include <cuda_bf16.h>

#include <cstdint>

namespace hla::cuda {

constexpr int kWgmmaTileAlign = 1024;  // bytes: one repeat of the 128-byte swizzle

__device__ __forceinline__ uint64_t encode_smem_desc(const __nv_bfloat16* at, uint32_t leading_byte_offset) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(at));
  constexpr uint64_t kStrideByteOffset = 1024, kSwizzle128 = 1;
  return uint64_t((addr & 0x3ffff) >> 4) | uint64_t(leading_byte_offset >> 4) << 16 | (kStrideByteOffset >> 4) << 32 |
         kSwizzle128 << 62;
}
// The K-major operand whose k16 slice starts at `at`: a tile's first row plus 16 kk elements.
__device__ __forceinline__ uint64_t smem_desc_k_major(const __nv_bfloat16* at) { return encode_smem_desc(at, 16); }
// The N-major operand whose k16 slice starts at `at` (the first panel's row 16 kk), its panels
// panel_bytes apart.
__device__ __forceinline__ uint64_t smem_desc_n_major(const __nv_bfloat16* at, uint32_t panel_bytes) {
  return encode_smem_desc(at, panel_bytes);
}

// desc moved `bytes` (a multiple of 16) further into shared memory: one 32-bit add to its low
// word, whose address field (bits 0-13) cannot carry into the next (a shared address is below 256
// KB, so start >> 4 < 2^14). A kernel forms a tile's descriptor once and reaches its k16 slices
// and panels this way: built from the address each time, a descriptor cost ~5 uniform-datapath
// instructions, half of the wgmma attention backward's loop (ncu, H200).
__device__ __forceinline__ uint64_t advance_desc(uint64_t desc, uint32_t bytes) {
  return uint64_t(uint32_t(desc >> 32)) << 32 | (uint32_t(desc) + (bytes >> 4));
}

// `smem` advanced to the next 1024-byte boundary of the shared address space (a kernel reserves
// kWgmmaTileAlign extra bytes of dynamic shared memory for it).
__device__ __forceinline__ char* align_wgmma_tiles(void* smem) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  return static_cast<char*>(smem) + (kWgmmaTileAlign - addr % kWgmmaTileAlign) % kWgmmaTileAlign;
}

}  // namespace hla::cuda
