// exp2 as the one MUFU.EX2 instruction (ex2.approx.ftz.f32): exp2f without --use_fast_math is
// ex2.approx.f32 (checked in nvcc -ptx), which ptxas wraps in a range test and two scalings so
// that results below FLT_MIN come out as denormals (the usual sm_90 expansion; not disassembled
// here). Softmax probabilities that small are zeros for every use here, so the flushed form is
// exact enough (2 ulp, as exp2f).
// The host emulator has its own copy (tests/emu/include/cuda/fast_exp2.cuh).
#pragma once

namespace hla::cuda {

__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// e^x as one multiply and the one MUFU.EX2: for decays e^(G_t - G_s) (exponents <= 0), where a
// result below FLT_MIN is as good as zero and the rounding of x log2 e (relative 2^-24 |x| in the
// result) is far below bf16's; expf spends ~4 more instructions on range and denormals.
__device__ __forceinline__ float exp_ftz(float x) { return exp2_ftz(x * 1.4426950408889634f); }

}  // namespace hla::cuda
