// Check cases (nn/check/registry.h) of the wgmma building block (cuda/wgmma.cuh), which no model
// op runs yet: the GEMM C = A B^T (B K-major) or A B (B N-major) of cuda/wgmma_gemm.cu against the
// float64 product of the same bf16 inputs, at each wgmma N (64, 128), A by shared-memory
// descriptor and from registers, M and N multiples of the kernel's tiles (64 x N) or not, K from
// one 64-wide k tile to eight. This is where the GPU proves the descriptors, the 128-byte swizzle
// and the fragment layouts that the host emulator (ctest emu.wgmma_gemm) follows from the PTX
// ISA: a wrong one gives an error near 1, a right one the fp32 summation error (~1e-7).
// Threshold 1e-4, not bf16's 5e-3: the output is fp32 and the inputs are exact, so only the
// tensor cores' fp32 accumulation differs from the reference. bf16 only (wgmma's inputs); no
// gradient. Needs a build with sm_90a (HLA_CUDA_ARCH=90a, the default): without, the rows say so
// and fail.
#include <string>

#include "nn/check/registry.h"
#include "tensor/dispatch.h"
#include "tensor/math.h"
#ifdef HLA_CUDA
#include "cuda/wgmma_gemm.h"
#endif

namespace hla::check {
namespace {

using Vars = std::vector<Var>;

struct GemmCase {
  int64_t M, N, K;
  int n_tile;
  bool a_in_registers, b_n_major;
};

// c = a b^T (b: (N, K)), or a b (b_n_major, b: (K, N)): on the CPU the float64 reference, on the
// GPU the wgmma kernel (fp32 out).
OpFn wgmma_gemm_op(const GemmCase& g) {
  return [g](const Vars& x) {
    const Tensor& a = x[0].value();
    const Tensor& b = x[1].value();
    if (!a.is_cuda()) return Vars{Var(matmul(a, b, false, !g.b_n_major))};
    Tensor c = Tensor::empty({g.M, g.N}, DType::F32, Device::CUDA);  // c: (M, N)
    HLA_CUDA_ONLY(cuda::wgmma_gemm(c.data<float>(), a.raw(), b.raw(), g.M, g.N, g.K, g.n_tile, g.a_in_registers,
                                   g.b_n_major));
    return Vars{Var(c)};
  };
}

void add_wgmma_gemm_cases() {
  for (const GemmCase& g : {GemmCase{64, 64, 64, 64, false, false}, GemmCase{130, 250, 192, 64, true, false},
                            GemmCase{130, 250, 192, 128, false, false}, GemmCase{257, 384, 512, 128, true, false},
                            GemmCase{1, 5, 64, 128, false, false}, GemmCase{64, 64, 64, 64, false, true},
                            GemmCase{130, 192, 192, 64, true, true}, GemmCase{130, 192, 192, 128, false, true},
                            GemmCase{257, 384, 512, 128, true, true}}) {
    const std::string name = "wgmma_gemm " + dims_label({{"M", g.M}, {"N", g.N}, {"K", g.K}, {"n", g.n_tile}}) +
                             (g.a_in_registers ? " A regs" : " A smem") + (g.b_n_major ? " B n-major" : " B k-major");
    auto inputs = [g](uint64_t seed) {
      const Shape b_shape = g.b_n_major ? Shape{g.K, g.N} : Shape{g.N, g.K};
      return Inputs{{"a", randn64({g.M, g.K}, seed + 1), false}, {"b", randn64(b_shape, seed + 2), false}};
    };
    Case c = gpu_case("wgmma_gemm", name, named_kernel("wgmma"), inputs, wgmma_gemm_op(g));
    c.gpu_dtypes = {DType::BF16};
    c.tol.bf16_out = 1e-4;
    add_case(std::move(c));
  }
}

const Registrar registered{add_wgmma_gemm_cases};

}  // namespace
}  // namespace hla::check
