// Runs the wgmma GEMM of cuda/wgmma_gemm.cu (C = A B^T or A B, one warpgroup a 64 x N tile) on the
// host emulator's wgmma (tests/emu/include/cuda/wgmma.cuh: descriptors decoded and swizzled as the
// PTX ISA documents them) and compares it with a plain loop in fp64 over the same bf16 inputs:
// each wgmma N (64, 128), A by descriptor and from ldmatrix registers, B K-major and N-major, M
// and N multiples of the tiles or not, K from one 64-wide tile to four, and cases with cp.async
// copies landing at issue and warps run one after another. The products of bf16 are exact in
// fp32, so only the order of the fp32 sums differs: relative RMS error at most 1e-6. The exit
// status is 1 when a row fails.
#include "wgmma_gemm_host.cpp"

#include <random>
#include <string>
#include <vector>

#include "report.h"

using namespace hla;
using Bf16 = __nv_bfloat16;

static void gemm_case(int64_t M, int64_t N, int64_t K, int n_tile, bool a_in_registers, bool b_n_major,
                      uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<Bf16> a(M * K), b(N * K);
  for (Bf16& x : a) x = __float2bfloat16_rn(normal(rng));
  for (Bf16& x : b) x = __float2bfloat16_rn(normal(rng));
  std::vector<float> c(M * N, -1.f);
  cuda::wgmma_gemm(c.data(), a.data(), b.data(), M, N, K, n_tile, a_in_registers, b_n_major);
  Err e;
  for (int64_t i = 0; i < M; i++)
    for (int64_t j = 0; j < N; j++) {
      double ref = 0;
      for (int64_t k = 0; k < K; k++)
        ref += double(__bfloat162float(a[i * K + k])) * __bfloat162float(b[b_n_major ? k * N + j : j * K + k]);
      e.add(c[i * N + j], ref);
    }
  const std::string what = "wgmma_gemm M" + std::to_string(M) + " N" + std::to_string(N) + " K" + std::to_string(K) +
                           " n" + std::to_string(n_tile) + (a_in_registers ? " A regs" : " A smem") +
                           (b_n_major ? " B n-major" : " B k-major") + (emu::cp_async_lands_at_issue ? " early" : "");
  report(what, "c", e, 1e-6);
}

int main() {
  for (int n_tile : {64, 128})
    for (bool a_in_registers : {false, true}) {
      for (bool b_n_major : {false, true}) {
        gemm_case(64, n_tile, 64, n_tile, a_in_registers, b_n_major, 1);  // one block, one k tile
        gemm_case(128, 256, 256, n_tile, a_in_registers, b_n_major, 2);   // 2 x 4 (2) blocks, 4 k tiles
        gemm_case(100, 192, 128, n_tile, a_in_registers, b_n_major, 3);   // partial tiles (n128: half a tile)
      }
      gemm_case(1, 5, 192, n_tile, a_in_registers, false, 4);  // one row, five columns
    }
  emu::cp_async_lands_at_issue = true;
  gemm_case(130, 190, 128, 128, true, false, 5);
  gemm_case(130, 190, 128, 64, false, false, 6);
  gemm_case(130, 192, 128, 128, false, true, 7);
  emu::cp_async_lands_at_issue = false;
  std::printf(g_fail ? "SOME FAILED\n" : "ALL OK\n");
  return g_fail;
}
