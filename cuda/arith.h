// The broadcasts and split_last of nn/ops/arith.cpp on the GPU: same names and argument order as
// cpu::broadcast_* there. Buffers are F32 or BF16 (dtype), math in fp32.
#pragma once
#include <cstddef>
#include <cstdint>

#include "tensor/dtype.h"

namespace hla::cuda {
// x, y: (outer, S, inner), s: (S); y = x * s[i] (multiply) or x + s[i]
void broadcast_forward(void* y, const void* x, const void* s, int64_t outer, int64_t S, int64_t inner, bool multiply,
                       DType dtype);
// dx: (outer, S, inner), ds: (S) written
void broadcast_backward(void* dx, void* ds, const void* dy, const void* x, const void* s, int64_t outer, int64_t S,
                        int64_t inner, bool multiply, DType dtype);
// Copies columns [begin, begin + width) of every row of a (rows, C) buffer into a (rows, width)
// one (gather) or back (scatter); elements of elem_size bytes, both buffers on the device.
void copy_columns(void* dst, const void* src, int64_t rows, int64_t C, int64_t begin, int64_t width,
                  size_t elem_size, bool gather);
}  // namespace hla::cuda
