// CUDA-vs-CPU checks, and the registry behind `hla gpu-check` and tests/test_cuda.cpp
// (the GPU counterpart of gradcheck.h; ggml's test-backend-ops in spirit).
//
// gpucheck(op, ...) runs one op three times on the same inputs: the CPU reference in float64,
// then CUDA in F32 and in BF16. Inputs are drawn by the case (fresh for every seed) and rounded
// to bf16 once, so every run sees exactly the same values and only the kernels' arithmetic
// differs. Each output gets a fixed random output gradient (also bf16-exact) and the backward
// runs into every differentiable input. While the CUDA runs execute, the allocator fills every
// new block with NaN, so an output element a kernel forgets to write fails the check.
//   rel err = ||cuda - cpu||_2 / ||cpu||_2   (RMS error relative to the reference's RMS)
// Thresholds: F32 1e-5 for outputs and gradients; BF16 5e-3 for outputs, 1e-2 for gradients.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "autograd/var.h"

namespace hla {

constexpr double kGpuTolF32 = 1e-5;
constexpr double kGpuTolBf16Output = 5e-3;
constexpr double kGpuTolBf16Grad = 1e-2;

struct GpucheckResult {
  std::string op, dtype, kernel, tensor;  // tensor: an output ("out", "out1") or "d<input>"
  double rel_err = 0;
  double tol = 0;
  bool pass = false;
};

struct GpucheckInput {
  std::string name;
  Tensor value;  // F64, CPU
  bool differentiable = true;
};

using GpucheckFn = std::function<std::vector<Var>(const std::vector<Var>&)>;
// Names the CUDA kernel that runs for a storage dtype (shown in the table).
using KernelName = std::function<std::string(DType)>;

std::vector<GpucheckResult> gpucheck(const std::string& op, const KernelName& kernel, const GpucheckFn& fn,
                                     const std::vector<GpucheckInput>& inputs, uint64_t seed);

// ||a - ref|| / ||ref|| over all elements (any dtypes and devices); ||a - ref|| when ref is 0.
double rel_rms_error(const Tensor& a, const Tensor& ref);
// One table row comparing a CUDA result with its reference.
GpucheckResult compare(const std::string& op, DType dtype, const std::string& kernel, const std::string& tensor,
                       const Tensor& cuda_value, const Tensor& reference, double tol);
const char* gpu_dtype_label(DType dtype);  // "f32", "bf16"

// While alive, new CUDA blocks are filled with NaN (cuda::set_poison_allocations); for cases
// that call kernels directly.
class PoisonGuard {
 public:
  PoisonGuard();
  ~PoisonGuard();
  PoisonGuard(const PoisonGuard&) = delete;
  PoisonGuard& operator=(const PoisonGuard&) = delete;
};

// Helpers for writing cases: float64 CPU inputs drawn from `seed` (randn(std) + shift, or f
// applied to every element), a kernel label that does not depend on the dtype, and appending
// one check's rows to a case's list.
Tensor randn64(const Shape& shape, uint64_t seed, double std = 1.0, double shift = 0.0);
Tensor map64(Tensor t, double (*f)(double));
KernelName named_kernel(const std::string& name);
void append(std::vector<GpucheckResult>& all, const std::vector<GpucheckResult>& more);

// Registry: each case draws its inputs from `seed`.
struct GpucheckCase {
  std::string op;
  std::function<std::vector<GpucheckResult>(uint64_t seed)> run;
};
std::vector<GpucheckCase>& gpucheck_registry();
bool register_gpucheck(const std::string& op, std::function<std::vector<GpucheckResult>(uint64_t)> run);

}  // namespace hla

#define HLA_GPU_CONCAT2(a, b) a##b
#define HLA_GPU_CONCAT(a, b) HLA_GPU_CONCAT2(a, b)
// Registers a case: HLA_GPUCHECK("rmsnorm", seed) { return gpucheck(...); }
#define HLA_GPUCHECK(op_name, seed_var)                                                            \
  static std::vector<::hla::GpucheckResult> HLA_GPU_CONCAT(hla_gpu_fn_, __LINE__)(uint64_t);        \
  static const bool HLA_GPU_CONCAT(hla_gpu_reg_, __LINE__) =                                        \
      ::hla::register_gpucheck(op_name, HLA_GPU_CONCAT(hla_gpu_fn_, __LINE__));                     \
  static std::vector<::hla::GpucheckResult> HLA_GPU_CONCAT(hla_gpu_fn_, __LINE__)(uint64_t seed_var)
