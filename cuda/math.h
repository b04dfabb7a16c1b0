// GPU side of tensor/math.h: cuBLAS GEMMs (fp32 accumulation) and elementwise / reduction
// kernels. dtype is F32 or BF16 for every buffer of one call.
#pragma once
#include <cstdint>
#include "tensor/dtype.h"

namespace hla::cuda {

// Row-major C (M, N) = alpha * op(A) op(B) + beta * C; batch_count matrices at the given strides.
// A and B in dtype; C in c_dtype: dtype, or F32 for BF16 A and B (the fp32 accumulator written
// without rounding to bf16: a weight gradient straight into its fp32 master's gradient).
void gemm(void* c, DType c_dtype, const void* a, const void* b, DType dtype, int64_t M, int64_t N, int64_t K,
          bool trans_a, bool trans_b, float alpha, float beta, int64_t batch_count = 1,
          int64_t stride_a = 0, int64_t stride_b = 0, int64_t stride_c = 0);

// Row-major fp32 D (M, N) = alpha * op(A) op(B) + beta * C, C read and D written (the same
// buffer or another, both at stride_c): what gemm needs a copy of C for. cuBLASLt, one plan a
// shape.
void gemm_add(float* d, const float* c, const float* a, const float* b, int64_t M, int64_t N, int64_t K, bool trans_a,
              bool trans_b, float alpha, float beta, int64_t batch_count = 1, int64_t stride_a = 0,
              int64_t stride_b = 0, int64_t stride_c = 0);

enum class Binary { Add, Sub, Mul };
void binary(void* out, const void* a, const void* b, DType dtype, int64_t n, Binary op);
void axpby(void* y, float beta, const void* x, float alpha, DType dtype, int64_t n);  // y = beta*y + alpha*x
void sum_rows(void* out, const void* a, DType dtype, int64_t rows, int64_t cols);
// Reductions return the result to the host as double.
double reduce_sum(const void* a, DType dtype, int64_t n);
double reduce_dot(const void* a, const void* b, DType dtype, int64_t n);
double reduce_max_abs(const void* a, DType dtype, int64_t n);

}  // namespace hla::cuda
