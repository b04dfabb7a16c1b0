// The HGRN recurrence's descriptor (nn/ops/hgrn.h): the sizes cpu::hgrn_* (nn/ops/hgrn.cpp)
// and cuda::hgrn_* (cuda/hgrn.cu) both take. Knows nothing of Var.
#pragma once
#include <cstdint>

#include "tensor/dtype.h"

namespace hla {

struct HgrnDims {
  int64_t B, T, D;    // x, g, o: (B, T, D);  h0, ht: (B, D)
  DType state_dtype;  // h0, ht and their gradients: fp32 on the GPU, the storage dtype on the CPU
  // Packed documents (varlen): doc_start (B, T) I32 on the kernels' device, the row-relative
  // index of the first token of t's document (nn/ops/attention.h: document_starts); h = 0 before
  // each document's first token. Null: one document a row.
  const int32_t* doc_start = nullptr;
};

}  // namespace hla
