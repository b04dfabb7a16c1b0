// The HGRN recurrence on the GPU (nn/ops/hgrn.h, mixers.md 6): h_t = exp(g_t) h_{t-1} + x_t,
// o_t = h_t, per channel. The same names and argument order as cpu::hgrn_*, plus the storage
// dtype (F32 or BF16); the state is fp32.
//   x, g, o, dx, dg, dout: (B, T, D);  h0, ht, dh0, dht: (B, D) fp32
// Gradient buffers as on the CPU (nn/ops/hgrn.h): every element written; dh0 null = not wanted.
#pragma once
#include <cstdint>

#include "nn/ops/hgrn_dims.h"
#include "tensor/dtype.h"

namespace hla::cuda {

// h0 null = zeros.
void hgrn_forward(void* o, float* ht, const void* x, const void* g, const float* h0, const HgrnDims& d, DType dtype);
// dht null = no gradient on the final state, h0 null = zeros, dh0 null = not wanted.
void hgrn_backward(void* dx, void* dg, float* dh0, const void* dout, const float* dht, const void* g, const float* h0,
                   const void* o, const HgrnDims& d, DType dtype);

}  // namespace hla::cuda
