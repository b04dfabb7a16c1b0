// Rotate-half RoPE on the GPU: same names and argument order as cpu::rope_* in nn/ops/rope.h.
// x, y, dx, dy are F32 or BF16 (dtype); angles in fp64 for F32, fp32 for BF16 (see cuda/rope.cu),
// rotation in fp32.
#pragma once
#include <cstdint>
#include "tensor/dtype.h"

namespace hla::cuda {
// x, y: (B, T, H, D)
void rope_forward(void* y, const void* x, int64_t B, int64_t T, int64_t H, int64_t D, double theta,
                  int64_t position_offset, DType dtype);
// dy, dx: (B, T, H, D); dx written
void rope_backward(void* dx, const void* dy, int64_t B, int64_t T, int64_t H, int64_t D, double theta,
                   int64_t position_offset, DType dtype);
// As above with token t of sequence b at positions[b] + t, positions (B) I32 on the device; or,
// per_token, at positions[b * T + t], positions (B, T)
void rope_forward_at(void* y, const void* x, const int32_t* positions, bool per_token, int64_t B, int64_t T, int64_t H,
                     int64_t D, double theta, DType dtype);
void rope_backward_at(void* dx, const void* dy, const int32_t* positions, bool per_token, int64_t B, int64_t T,
                      int64_t H, int64_t D, double theta, DType dtype);
}  // namespace hla::cuda
