// Optimizer updates on the GPU for fp32 master weights: the kernels behind train/optim.cpp,
// same arguments as its cpu:: references (there in double; here in float).
#pragma once
#include <cstdint>

namespace hla::cuda {

// param, grad, m, v: (n). Decoupled decay, then Adam:
//   p *= 1 - lr wd;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
//   p -= (lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps)
void adamw_update(float* param, const float* grad, float* m, float* v, int64_t n, float lr, float beta1, float beta2,
                  float eps, float weight_decay, float bias_correction1, float bias_correction2);

// buf, update, grad: (n). buf = momentum buf + grad; update = nesterov ? grad + momentum buf : buf
void muon_momentum(float* buf, float* update, const float* grad, int64_t n, float momentum, bool nesterov);

// out, g: (rows, cols), row major. Quintic Newton-Schulz on cuBLAS (fp32): X = g / (||g||_F + 1e-7),
// then `steps` times X = a X + (b A + c A A) X with A = X X^T (X^T X, multiplied on the right,
// when rows > cols), (a, b, c) = (3.4445, -4.7750, 2.0315). out may not alias g.
void newton_schulz(float* out, const float* g, int64_t rows, int64_t cols, int steps);

}  // namespace hla::cuda
