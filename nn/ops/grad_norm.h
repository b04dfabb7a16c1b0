// The training step's multi-tensor ops (train/trainer.cpp): the global gradient norm as one
// reduction over every gradient, clipping by a factor that stays on the device, and the step's
// loss and status kept in device scalars, so an update queues its work without reading anything
// back. The CPU functions are the literal math; cuda:: (cuda/grad_norm.h) has the same names.
//   multi_sq_norm   sums[i] = sum(x_i^2), sums[n] = sum_i sums[i]              (n + 1) F64
//   finish_step     norm = sqrt(sums[n]); the first non-finite step is kept in status;
//                   factor = 0 from that step on, else max_norm / (norm + 1e-6) if
//                   max_norm > 0 and norm > max_norm, else 1
//   multi_scale_    x_i *= factor (0 writes zeros: a non-finite step's gradients are dropped)
// Not Var ops: they run on gradients, after the backward.
#pragma once
#include <vector>

#include "nn/ops/grad_norm_dims.h"
#include "tensor/tensor.h"

namespace hla {

// xs: any float tensors on one device; an undefined one counts 0. Returns sums: (n + 1) F64.
Tensor multi_sq_norm(const std::vector<Tensor>& xs, Device device);
// factor: (1) F64 on the device of xs (the status's clip factor, see step_status_factor).
void multi_scale_(const std::vector<Tensor>& xs, const Tensor& factor);
// records: (W, kStepRecordSize) F64; records[slot][0] += weight * loss (loss: one float value;
// weight: one F64 value on the loss's device, so a captured CUDA graph reads each step's weight).
void accumulate_loss(Tensor& records, int64_t slot, const Tensor& loss, const Tensor& weight);
// records: (W, kStepRecordSize), status: (kStepStatusSize) F64; sums from multi_sq_norm; step: the
// update's number, one F64 value on the records' device.
void finish_step(Tensor& records, int64_t slot, Tensor& status, const Tensor& sums, double max_norm, const Tensor& step);

namespace cpu {
void multi_sq_norm(double* sums, const TensorTable& xs);
void multi_scale(const TensorTable& xs, const double* factor);
void accumulate_loss(double* record, const void* loss, DType dtype, const double* weight);
void finish_step(double* record, double* status, const double* sums, int64_t n, double max_norm, const double* step);
}  // namespace cpu
}  // namespace hla
