// The training step's multi-tensor reductions on the GPU: same names and arguments as cpu:: in
// nn/ops/grad_norm.h. Every function only queues work on hla's stream: none reads a result back.
#pragma once
#include <cstdint>

#include "nn/ops/grad_norm_dims.h"

namespace hla::cuda {
// sums: (n + 1) F64; sums[i] = sum(xs[i]^2), sums[n] = sum over i in table order. One launch.
void multi_sq_norm(double* sums, const TensorTable& xs);
// xs[i] *= factor[0] for every i (a factor of 1 writes nothing; 0 writes zeros, NaN included).
void multi_scale(const TensorTable& xs, const double* factor);
// record[0] += weight[0] * loss[0] (loss: one F32 or BF16 value; weight: one F64 on the device).
void accumulate_loss(double* record, const void* loss, DType dtype, const double* weight);
// record: (kStepRecordSize), status: (kStepStatusSize), sums: (n + 1) from multi_sq_norm, step: (1)
// the update's number, on the device (a captured graph reads this update's number at each replay).
void finish_step(double* record, double* status, const double* sums, int64_t n, double max_norm, const double* step);
}  // namespace hla::cuda
