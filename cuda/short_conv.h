// Causal depthwise short convolution on the GPU: same names and argument order as
// cpu::short_conv_* in nn/ops/short_conv.h. Every buffer is F32 or BF16 (dtype), math in fp32.
#pragma once
#include <cstdint>

#include "nn/ops/short_conv_dims.h"
#include "tensor/dtype.h"

namespace hla::cuda {
// y, x: (B, L, C), w: (C, K), bias: (C) or null, state, final_state: (B, C, K-1), state may be null,
// rstd: (B, L, C / d.norm_width) fp32 (null when d.norm_width == 0)
void short_conv_forward(void* y, void* final_state, float* rstd, const void* x, const void* w, const void* bias,
                        const void* state, const ShortConvDims& d, DType dtype);
// dx: (B, L, C), dw: (C, K), dbias: (C), dstate: (B, C, K-1) written (dbias, dstate may be null);
// dy: (B, L, C), dfinal: (B, C, K-1)
void short_conv_backward(void* dx, void* dw, void* dbias, void* dstate, const void* dy, const void* dfinal,
                         const void* x, const void* w, const void* bias, const void* state, const ShortConvDims& d,
                         DType dtype);
}  // namespace hla::cuda
