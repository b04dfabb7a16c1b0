// Decode-step attention against a KV ring cache on the GPU: same name and argument order as
// cpu::attention_decode_forward in nn/ops/attention_decode.h, plus the storage dtype (F32 or
// BF16; scores, softmax and the output sum in fp32). D, Dv <= 256.
//   o, q: (B, H, D|Dv);  k, v: (B, Hkv, D|Dv);  k_cache, v_cache: (B, capacity, Hkv, D|Dv);
//   positions: (B) I32 on the device
#pragma once
#include <cstdint>

#include "nn/ops/attention_decode_dims.h"
#include "tensor/dtype.h"

namespace hla::cuda {

void attention_decode_forward(void* o, void* k_cache, void* v_cache, const void* q, const void* k, const void* v,
                              const int32_t* positions, const AttentionDecodeDims& d, DType dtype);

}  // namespace hla::cuda
