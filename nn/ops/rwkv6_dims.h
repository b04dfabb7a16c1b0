// The RWKV-6 recurrence's descriptor (nn/ops/rwkv6.h): the sizes cpu::rwkv6_*
// (nn/ops/rwkv6.cpp) and cuda::rwkv6_* (cuda/rwkv6.cu) both take. Knows nothing of Var.
#pragma once
#include <cstdint>

#include "tensor/dtype.h"

namespace hla {

struct Rwkv6Dims {
  int64_t B, T, H, dk, dv;  // r, k, w: (B, T, H, dk);  v, o: (B, T, H, dv);  u: (H, dk);  states (B, H, dk, dv)
  double scale;
  int64_t chunk_size;       // CPU: 0 = token recurrence, C > 0 = chunked; the GPU picks its own kernel
  DType state_dtype;        // h0, ht and their gradients: fp32 on the GPU, the storage dtype on the CPU
  // Packed documents (varlen), as DeltaRuleDims': doc_start (B, T) I32 on the kernels' device, the
  // first token of each token's document, the state zero before every document's first token
  // t > 0 (the token recurrences; null: one document a row); chunk_reset (B, T / chunk_size) I32,
  // the CPU chunked form on the documents' chunk layout (nn/ops/document_chunks.h): 1 where the
  // state entering a chunk is zero (null: no resets).
  const int32_t* doc_start = nullptr;
  const int32_t* chunk_reset = nullptr;
};

}  // namespace hla
