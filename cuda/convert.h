// Device-side dtype conversion and fill (bf16 rounds to nearest even, as on the CPU).
#pragma once
#include <cstdint>
#include "tensor/dtype.h"

namespace hla::cuda {
void convert(void* dst, DType dst_type, const void* src, DType src_type, int64_t n);
void fill(void* dst, DType type, double value, int64_t n);
}  // namespace hla::cuda
