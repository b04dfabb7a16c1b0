// Greedy and sampled token picks on the GPU: same names and argument order as
// cpu::argmax_rows_forward and cpu::sample_tokens_forward in nn/ops/pick_tokens.h, plus the
// storage dtype (F32 or BF16); sampling takes p.top_k in [1, kMaxDeviceTopK].
//   ids: (B) I32;  z: (B, V);  widths: (B) I32;  uniforms: (B) F64, on the device
#pragma once
#include <cstdint>

#include "nn/ops/pick_tokens_dims.h"
#include "tensor/dtype.h"

namespace hla::cuda {

void argmax_rows_forward(int32_t* ids, const void* z, const int32_t* widths, int64_t B, int64_t V, DType dtype);
void sample_tokens_forward(int32_t* ids, const void* z, const int32_t* widths, const double* uniforms, int64_t B,
                           int64_t V, const SampleParams& p, DType dtype);

}  // namespace hla::cuda
