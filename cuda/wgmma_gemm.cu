// C = A B^T (or A B) on wgmma (cuda/wgmma_gemm.h). A block is one warpgroup (128 threads) and one
// (64 x BN) tile of C; per 64-wide k tile:
//   pass 1: A (64 x 64) and B into swizzled tiles (cp.async, cuda/tile.cuh) that start on
//           1024-byte boundaries (cuda/wgmma_desc.cuh): B K-major as (BN x 64), or N-major as
//           BN / 64 panels of (64 k x 64 n); proxy fence, barrier;
//   pass 2: four k16 products acc (+)= A B^T (the first of the kernel with accumulate = false,
//           so acc needs no zeroing), A by descriptor or from ldmatrix registers; commit, wait;
// then pass 3 writes acc (cuda/wgmma.cuh's D fragment) to C.
#include "cuda/wgmma_gemm.h"

#include "cuda/common.cuh"
#include "cuda/mma.cuh"
#include "cuda/tile.cuh"
#include "cuda/wgmma.cuh"

namespace hla::cuda {
namespace {

using bf16 = __nv_bfloat16;
constexpr int kThreads = 128;  // one warpgroup
constexpr int kRows = 64;      // rows of A and C per block: wgmma's M
constexpr int kDepth = 64;     // k per tile: one 128-byte swizzled row (and N per panel of an N-major B)

template <int BN, bool A_IN_REGISTERS, bool B_N_MAJOR>
__global__ void __launch_bounds__(kThreads) wgmma_gemm_kernel(float* c, const bf16* a, const bf16* b, int M, int N,
                                                               int K) {
  extern __shared__ float4 smem_raw[];
  bf16* sA = reinterpret_cast<bf16*>(align_wgmma_tiles(smem_raw));  // sA: (kRows, kDepth) swizzled
  bf16* sB = sA + kRows * kDepth;  // sB: (BN, kDepth), or N-major BN / 64 panels (kDepth, 64), swizzled
  constexpr int kPanel = kDepth * 64;  // elements of one N-major panel
  const int row0 = blockIdx.x * kRows, col0 = blockIdx.y * BN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float acc[BN / 2];  // acc: the D fragment of C's (64 x BN) tile
  for (int k0 = 0; k0 < K; k0 += kDepth) {
    // pass 1: the k tile of A and B
    load_tile_async<kRows, kDepth, kThreads>(sA, a + k0, K, row0, M);
    if constexpr (B_N_MAJOR) {
      for (int p = 0; p < BN / 64 && col0 + 64 * p < N; p++)
        load_tile_async<kDepth, 64, kThreads>(sB + p * kPanel, b + col0 + 64 * p, N, k0, K);
    } else {
      load_tile_async<BN, kDepth, kThreads>(sB, b + k0, K, col0, N);
    }
    cp_async_commit();
    cp_async_wait_all();
    fence_proxy_async();
    __syncthreads();
    // pass 2: acc (+)= A B^T, one k16 slice at a time
    uint32_t a_frag[kDepth / 16][4];  // A_IN_REGISTERS: rows 16 warp .. + 15 of each k16 slice
    if constexpr (A_IN_REGISTERS)
      for (int kk = 0; kk < kDepth / 16; kk++)
        ldmatrix_x4(a_frag[kk], sA + swizzle<kDepth>(16 * warp + lane % 16, 16 * kk + 8 * (lane / 16)));
    wgmma_fence(acc);
    for (int kk = 0; kk < kDepth / 16; kk++) {
      const bool accumulate = k0 > 0 || kk > 0;
      const uint64_t desc_b = B_N_MAJOR ? smem_desc_n_major(sB + 16 * kk * 64, kPanel * sizeof(bf16))
                                        : smem_desc_k_major(sB + 16 * kk);
      if constexpr (A_IN_REGISTERS)
        wgmma_m64k16<BN, B_N_MAJOR>(acc, a_frag[kk], desc_b, accumulate);
      else
        wgmma_m64k16<BN, B_N_MAJOR>(acc, smem_desc_k_major(sA + 16 * kk), desc_b, accumulate);
    }
    wgmma_commit();
    wgmma_wait<0>(acc);
    __syncthreads();  // the tiles are read: the next k tile may overwrite them
  }
  // pass 3: C = acc
  const int g = lane / 4, t = lane % 4;
  for (int j = 0; j < BN / 8; j++)
    for (int i = 0; i < 4; i++) {
      const int row = row0 + 16 * warp + g + 8 * (i / 2), col = col0 + 8 * j + 2 * t + i % 2;
      if (row < M && col < N) c[int64_t(row) * N + col] = acc[4 * j + i];
    }
}

template <class Kernel, class... Params>
void launch(Kernel kernel, dim3 grid, size_t bytes, Params... params) {
  kernel<<<grid, kThreads, bytes>>>(params...);
  CUDA_CHECK_LAUNCH();
}

// The kernel for the flags, picked one flag at a time.
template <int BN, bool A_IN_REGISTERS, bool B_N_MAJOR>
void run(float* c, const bf16* a, const bf16* b, int M, int N, int K) {
  const dim3 grid((M + kRows - 1) / kRows, (N + BN - 1) / BN);
  const size_t bytes = kWgmmaTileAlign + (kRows + BN) * kDepth * sizeof(bf16);
  launch(wgmma_gemm_kernel<BN, A_IN_REGISTERS, B_N_MAJOR>, grid, bytes, c, a, b, M, N, K);
}
template <int BN, bool A_IN_REGISTERS>
void run(bool b_n_major, float* c, const bf16* a, const bf16* b, int M, int N, int K) {
  b_n_major ? run<BN, A_IN_REGISTERS, true>(c, a, b, M, N, K) : run<BN, A_IN_REGISTERS, false>(c, a, b, M, N, K);
}
template <int BN>
void run(bool a_in_registers, bool b_n_major, float* c, const bf16* a, const bf16* b, int M, int N, int K) {
  a_in_registers ? run<BN, true>(b_n_major, c, a, b, M, N, K) : run<BN, false>(b_n_major, c, a, b, M, N, K);
}

}  // namespace

void wgmma_gemm(float* c, const void* a, const void* b, int64_t M, int64_t N, int64_t K, int n_tile,
                bool a_in_registers, bool b_n_major) {
#ifndef HLA_WGMMA
  fail("wgmma_gemm: this build has no sm_90a code; configure with -DHLA_CUDA_ARCH=90a");
#endif
  HLA_CHECK(M >= 1 && N >= 1 && K >= kDepth && K % kDepth == 0 && M * K <= INT32_MAX && N * K <= INT32_MAX &&
                M * N <= INT32_MAX,
            "wgmma_gemm: M, N >= 1 and K a positive multiple of ", kDepth, ", each product under 2^31, got M ", M,
            ", N ", N, ", K ", K);
  HLA_CHECK(n_tile == 64 || n_tile == 128, "wgmma_gemm: n_tile is 64 or 128, got ", n_tile);
  HLA_CHECK(!b_n_major || N % 64 == 0, "wgmma_gemm: an N-major b needs N a multiple of 64, got N ", N);
  const auto* a16 = static_cast<const bf16*>(a);
  const auto* b16 = static_cast<const bf16*>(b);
  const int m = int(M), n = int(N), k = int(K);
  if (n_tile == 64)
    run<64>(a_in_registers, b_n_major, c, a16, b16, m, n, k);
  else
    run<128>(a_in_registers, b_n_major, c, a16, b16, m, n, k);
}

}  // namespace hla::cuda
