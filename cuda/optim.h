// Optimizer updates on the GPU for fp32 master weights: the kernels behind train/optim.cpp,
// same arguments as its cpu:: references (there in double; here in float).
//
// Multi-tensor form: one call updates `count` tensors of one parameter group. The pointer
// arrays (param[t], grad[t], ..., n[t] for t < count) live on the host and hold device pointers;
// they travel to the GPU as kernel parameters (a table of up to kTensorsPerLaunch tensors), so a
// group of up to that many tensors is one launch, and a captured CUDA graph replays the table.
// grad_scale (AdamW and Muon's momentum, the readers of the gradients): null, or one F64 value on
// the device, the clip factor (train/schedule.h: clip_factor_) each gradient is multiplied by as
// it is read: 1 leaves it, 0 drops it (NaN and Inf too), else g * float(factor), the value
// multi_scale_ would have written, so the clipped gradients are never written out.
// compute_copy (AdamW and the Muon step): per tensor, null or its bf16 compute copy (nn/module.h),
// which the kernel writes with the updated parameter rounded to bf16 (nearest even, as
// cuda::convert), so the copy never needs a cast of its own; compute_copy itself may be null
// (no tensor of the group has one).
#pragma once
#include <cstdint>

#include "tensor/dtype.h"

namespace hla::cuda {

// Tensors per launch of the multi-tensor kernels (a bigger group takes more launches).
constexpr int kTensorsPerLaunch = 256;

// param[t], grad[t], m[t], v[t]: (n[t]); schedule: (3) F64 on the device, {lr, bc1, bc2} of this
// update (written before the update is queued, so a captured CUDA graph replays each update's).
// Decoupled decay, then Adam:
//   p *= 1 - lr wd;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
//   p -= (lr / bc1) m / (sqrt(v) / sqrt(bc2) + eps)
void adamw_update(float* const* param, const float* const* grad, float* const* m, float* const* v, const int64_t* n,
                  int count, const double* schedule, float beta1, float beta2, float eps, float weight_decay,
                  const double* grad_scale, bf16* const* compute_copy);

// buf[t], update[t], grad[t]: (n[t]). buf = momentum buf + grad; update = nesterov ? grad + momentum buf : buf
void muon_momentum(float* const* buf, float* const* update, const float* const* grad, const int64_t* n, int count,
                   float momentum, bool nesterov, const double* grad_scale);

// Quintic Newton-Schulz of each matrix of several batches at once. A batch: out, g (batch, rows,
// cols), row major, out not aliasing g. Per matrix X = g / (||g||_F + 1e-7), then `steps` times
// X = a X + (b A + c A A) X with A = X X^T (X^T X, multiplied on the right, when rows > cols),
// (a, b, c) = (3.4445, -4.7750, 2.0315), in fp32. Matrices up to 256 x 256 of every batch share
// each product's launch; larger ones run strided-batched cuBLASLt GEMMs.
constexpr int64_t kNewtonSchulzSmallSide = 256;  // matrices up to this side share launches
struct NewtonSchulzBatch {
  float* out;
  const float* g;
  int64_t batch, rows, cols;
};
void newton_schulz(const NewtonSchulzBatch* batches, int count, int steps);

// param[t], ortho[t]: (n[t]); schedule: (2) F64 on the device, {decay, step} of this update.
// The Muon step: p *= decay; p -= step * ortho (decay = 1 - lr wd, step = lr * scale(rows, cols)).
void muon_apply(float* const* param, const float* const* ortho, const int64_t* n, int count, const double* schedule,
                bf16* const* compute_copy);

}  // namespace hla::cuda
