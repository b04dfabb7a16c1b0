// Row argmax on the GPU: same name and argument order as cpu::argmax_rows_forward in
// nn/ops/argmax.h, plus the storage dtype (F32 or BF16).
//   ids: (B) I32;  z: (B, V);  widths: (B) I32, on the device
#pragma once
#include <cstdint>

#include "tensor/dtype.h"

namespace hla::cuda {

void argmax_rows_forward(int32_t* ids, const void* z, const int32_t* widths, int64_t B, int64_t V, DType dtype);

}  // namespace hla::cuda
