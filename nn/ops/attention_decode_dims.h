// The descriptor of one decoding step of softmax attention against a KV ring cache
// (nn/ops/attention_decode.h), shared by the CPU reference and cuda/attention_decode.cu.
// Knows nothing of Var.
#pragma once
#include <cstdint>

namespace hla {

struct AttentionDecodeDims {
  int64_t B, H, Hkv, D, Dv;  // q: (B, H, D);  k: (B, Hkv, D);  v: (B, Hkv, Dv);  o: (B, H, Dv)
  int64_t capacity;          // k_cache: (B, capacity, Hkv, D);  v_cache: (B, capacity, Hkv, Dv)
  double scale;
  int64_t window;            // 0 = full causal; w > 0: the query sees its last w positions
};

}  // namespace hla
