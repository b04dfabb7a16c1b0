// C = A B^T (or A B) on Hopper's warpgroup MMA (cuda/wgmma.cuh): the proof of its descriptors,
// swizzles and fragment layouts, on the GPU (gpu-check group wgmma_gemm) and on the host emulator
// (ctest emu.wgmma_gemm), before a kernel that matters relies on them. Not a fast GEMM (one
// 64-wide k tile at a time, no pipelining): cuBLAS is the model's matmul.
//   c: (M, N) fp32;  a: (M, K) bf16;  b: (N, K) bf16, c = a b^T (B K-major, as attention's K in
//   S = Q K^T), or with b_n_major (K, N), c = a b (B N-major, as V in O = P V, N a multiple of 64);
//   K a positive multiple of 64
//   n_tile: the N of each wgmma (64 or 128); a_in_registers: A's operand from registers (loaded
//   with ldmatrix) instead of a shared-memory descriptor.
// Needs a build with sm_90a (HLA_CUDA_ARCH=90a) and an sm_90 GPU.
#pragma once
#include <cstdint>

namespace hla::cuda {

void wgmma_gemm(float* c, const void* a, const void* b, int64_t M, int64_t N, int64_t K, int n_tile,
                bool a_in_registers, bool b_n_major);

}  // namespace hla::cuda
