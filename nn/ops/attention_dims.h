// Causal softmax attention's descriptor (nn/ops/attention.h): the sizes cpu::attention_*
// (nn/ops/attention.cpp) and cuda::attention_* (cuda/attention.cu) both take. Knows nothing of Var.
#pragma once
#include <cstdint>

#include "tensor/dtype.h"

namespace hla {

struct AttentionDims {
  int64_t B, T, H, Hkv, D, Dv;  // q: (B, T, H, D);  k: (B, T, Hkv, D);  v: (B, T, Hkv, Dv);  o: (B, T, H, Dv)
  double scale;
  int64_t window;               // 0 = full causal; w > 0: query t sees keys t-w+1 .. t
  DType lse_dtype;              // lse: (B, H, T), fp32 on the GPU, the storage dtype on the CPU
  // Packed documents (varlen): doc_start (B, T) I32 on the kernels' device, the row-relative
  // index of the first token of t's document; query t sees no key before it. Null: one document
  // a row. Each row's values must be a valid document split (document_starts, nn/ops/attention.h).
  const int32_t* doc_start = nullptr;
};

}  // namespace hla
