// Causal softmax attention on the GPU, flash style: same names and argument order as
// cpu::attention_* in nn/ops/attention.h (grouped kv heads, optional sliding window), plus
// the storage dtype. lse is always fp32 here. No T x T matrix is ever stored. Gradient buffers
// as on the CPU: dq, dk, dv written in full.
//
//   q: (B, T, H, D), k: (B, T, Hkv, D), v: (B, T, Hkv, Dv), o: (B, T, H, Dv), lse: (B, H, T)
//   window 0 = full causal; window w > 0: query t sees keys t-w+1 .. t; d.doc_start (packed
//   documents, on the device) hides every key before the first token of t's document.
#pragma once
#include <cstdint>

#include "nn/ops/attention_dims.h"
#include "tensor/dtype.h"

namespace hla::cuda {

void attention_forward(void* o, float* lse, const void* q, const void* k, const void* v, const AttentionDims& d,
                       DType dtype);
// dq: (B, T, H, D), dk: (B, T, Hkv, D), dv: (B, T, Hkv, Dv) written (dk, dv summed over each
// kv head's query heads); dout, o: (B, T, H, Dv); lse from the forward.
void attention_backward(void* dq, void* dk, void* dv, const void* dout, const void* q, const void* k, const void* v,
                        const void* o, const float* lse, const AttentionDims& d, DType dtype);

// The kernel these sizes run on under the current settings (set_attention_wgmma below): "mma"
// (tensor cores: BF16 with D = Dv = 64, 128 or 256), "wgmma" (the forward on Hopper's warpgroup
// MMA, the backward on mma), "wgmma fwd+bwd" (both on wgmma), "mma, wgmma bwd" (the backward
// alone), either with ", fused" (the backward as one kernel, D = 64 or 128; ", fused on long rows"
// where the choice depends on the row: where_faster), or
// "fma" (plain fp32 arithmetic: F32, or any D, Dv <= 256).
const char* attention_kernel(int64_t D, int64_t Dv, DType dtype);

// Where the BF16 attention passes run on Hopper's wgmma kernels (sm_90a builds) instead of the mma
// kernels: at D = Dv = 64, 128 and 256 (on), at none (off), or wherever the build has sm_90a code
// (if_built, the default: both passes measured faster there, cuda/attention.cu).
// HLA_ATTENTION_WGMMA (the forward) and HLA_ATTENTION_WGMMA_BWD (the backward), =1 on or =0 off,
// override the default. Each returns the previous setting. Not thread-safe: set them before work.
enum class WgmmaSetting { off, on, if_built };
WgmmaSetting set_attention_wgmma(WgmmaSetting setting);
WgmmaSetting set_attention_wgmma_backward(WgmmaSetting setting);

// The wgmma backward as one warp-specialised kernel (cuda/attention.cu,
// attention_backward_fused_wgmma): blocks of 128 keys compute dK and dV and add their shares of dQ
// into an fp32 sum in a fixed order (five products a step instead of the two kernels' seven;
// deterministic; a (B, T, H, D) fp32 workspace for the sums), at D = 64 and 128. On, off, or
// where_faster (the default): where it measured faster than the two kernels, at D = 128 on rows
// whose queries see kFusedMinKeys keys or more (cuda/attention.cu). HLA_ATTENTION_FUSED_BWD=1 or
// =0 overrides the default. Returns the previous setting. Not thread-safe: set it before work.
enum class FusedSetting { off, on, where_faster };
FusedSetting set_attention_fused_backward(FusedSetting setting);

}  // namespace hla::cuda
