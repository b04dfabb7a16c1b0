// AdamW and Muon updates on the GPU: two elementwise kernels and Newton-Schulz as a handful of
// cuBLAS GEMMs (cuda/math.h), line for line the cpu:: references in train/optim.cpp.
#include <cmath>

#include "cuda/common.cuh"
#include "cuda/math.h"
#include "cuda/optim.h"

namespace hla::cuda {
namespace {

__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, int64_t n, float decay, float b1,
                             float b2, float step_size, float inv_sqrt_bc2, float eps) {
  HLA_GRID_STRIDE(i, n) {
    const float g = grad[i];
    const float mi = b1 * m[i] + (1.0f - b1) * g;      // first moment
    const float vi = b2 * v[i] + (1.0f - b2) * g * g;  // second moment
    m[i] = mi;
    v[i] = vi;
    const float p = param[i] * decay;  // decoupled weight decay
    param[i] = p - step_size * mi / (sqrtf(vi) * inv_sqrt_bc2 + eps);  // lr * (m / bc1) / (sqrt(v / bc2) + eps)
  }
}

__global__ void muon_momentum_kernel(float* buf, float* update, const float* grad, int64_t n, float mu,
                                     bool nesterov) {
  HLA_GRID_STRIDE(i, n) {
    const float b = mu * buf[i] + grad[i];
    buf[i] = b;
    update[i] = nesterov ? grad[i] + mu * b : b;
  }
}

}  // namespace

void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, float lr, float beta1, float beta2,
                  float eps, float weight_decay, float bias_correction1, float bias_correction2) {
  if (n == 0) return;
  adamw_kernel<<<grid_1d(n), 256>>>(param, grad, m, v, n, 1.0f - lr * weight_decay, beta1, beta2,
                                    lr / bias_correction1, 1.0f / std::sqrt(bias_correction2), eps);
  CUDA_CHECK_LAUNCH();
}

void muon_momentum(float* buf, float* update, const float* grad, int64_t n, float momentum, bool nesterov) {
  if (n == 0) return;
  muon_momentum_kernel<<<grid_1d(n), 256>>>(buf, update, grad, n, momentum, nesterov);
  CUDA_CHECK_LAUNCH();
}

void newton_schulz(float* out, const float* g, int64_t rows, int64_t cols, int steps) {
  constexpr float a = 3.4445f, b = -4.7750f, c = 2.0315f;
  const int64_t n = rows * cols, small = std::min(rows, cols);
  if (n == 0) return;
  const bool tall = rows > cols;  // then A = X^T X and products multiply X on the right
  const size_t gram_bytes = small * small * sizeof(float), x_bytes = n * sizeof(float);
  float* A = static_cast<float*>(device_alloc(gram_bytes));    // A: (small, small)
  float* Bm = static_cast<float*>(device_alloc(gram_bytes));   // Bm: (small, small)
  float* Y = static_cast<float*>(device_alloc(x_bytes));       // Y: (rows, cols)
  float* X = out;                                              // X: (rows, cols)
  // X = g / (||g||_F + 1e-7)
  const double norm = std::sqrt(reduce_dot(g, g, DType::F32, n));
  copy_d2d(X, g, x_bytes);
  axpby(X, static_cast<float>(1.0 / (norm + 1e-7)), X, 0.0f, DType::F32, n);
  for (int s = 0; s < steps; s++) {
    if (tall) gemm(A, X, X, DType::F32, cols, cols, rows, true, false, 1.0f, 0.0f);   // A = X^T X
    else gemm(A, X, X, DType::F32, rows, rows, cols, false, true, 1.0f, 0.0f);        // A = X X^T
    copy_d2d(Bm, A, gram_bytes);
    gemm(Bm, A, A, DType::F32, small, small, small, false, false, c, b);               // Bm = b A + c A A
    copy_d2d(Y, X, x_bytes);
    if (tall) gemm(Y, X, Bm, DType::F32, rows, cols, cols, false, false, 1.0f, a);     // Y = a X + X Bm
    else gemm(Y, Bm, X, DType::F32, rows, cols, rows, false, false, 1.0f, a);          // Y = a X + Bm X
    copy_d2d(X, Y, x_bytes);
  }
  device_free(A, gram_bytes);
  device_free(Bm, gram_bytes);
  device_free(Y, x_bytes);
}

}  // namespace hla::cuda
