// Basic tensor math that every layer needs, on CPU (Eigen) and CUDA (cuBLAS + small kernels).
// Float dtypes only: F32 and F64 on the CPU; F32 and BF16 (fp32 accumulation) on the GPU.
// All results are new contiguous tensors on the inputs' device unless the name ends in '_'.
#pragma once
#include "tensor/tensor.h"

namespace hla {

// C = op(A) op(B) for 2-D tensors; op(X) = X^T when the flag is set.
// A: (M, K) or (K, M) when trans_a;  B: (K, N) or (N, K) when trans_b;  C: (M, N).
Tensor matmul(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);
// c = alpha * op(a) op(b) + beta * c, into an existing c. c's dtype is a's and b's, or wider, so a
// gradient lands in an fp32 master's gradient without a cast: F32 for BF16 inputs on the GPU (the
// fp32 accumulator, never rounded to bf16), F64 for F32 inputs on the CPU (the F32 product widened,
// exactly as cast-then-add).
void gemm_(Tensor& c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b,
           double alpha = 1.0, double beta = 0.0);
// Batched over a leading dimension: a (Bt, M, K) etc., c (Bt, M, N).
Tensor bmm(const Tensor& a, const Tensor& b, bool trans_a = false, bool trans_b = false);

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor scale(const Tensor& a, double s);
void add_(Tensor& a, const Tensor& b);                 // a += b
void axpy_(Tensor& y, double alpha, const Tensor& x);  // y += alpha * x
void scale_(Tensor& a, double s);                      // a *= s

Tensor sum_all(const Tensor& a);   // shape {} (one element), fp32/f64 accumulation
Tensor sum_rows(const Tensor& a);  // (N, C) -> (C,): sums over every leading dimension
double dot(const Tensor& a, const Tensor& b);  // sum of a*b, as double
double sq_norm(const Tensor& a);               // sum of a^2, as double
double max_abs(const Tensor& a);

}  // namespace hla
