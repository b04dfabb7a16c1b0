// Causal softmax attention (mixers.md section 5) with grouped KV heads and an optional sliding
// window: the reference the CUDA flash kernel is checked against.
//
//   B batch, T tokens, H query heads, Hkv key/value heads (H % Hkv == 0), D = q/k head width,
//   Dv = v head width. Query head j reads kv head m = floor(j / (H / Hkv)) (consecutive groups).
//   s[t, tau]  = scale * q_t . k_tau                 allowed iff tau <= t and (window == 0 or t - tau < window)
//   lse_t      = log sum_{allowed tau} exp(s[t, tau])
//   o_t        = sum_tau exp(s[t, tau] - lse_t) v_tau
// The forward also returns lse (B, H, T), which the backward uses to rebuild the probabilities
// without storing the T x T matrix, exactly as flash attention does.
//
// Gradient buffers, on both devices: the backward WRITES every element of dq, dk and dv
// (callers pass uninitialised buffers); none may be null.
#pragma once
#include <cmath>

#include "autograd/var.h"
#include "nn/ops/attention_dims.h"
#include "nn/ops/attention_reference.h"

namespace hla {

// fla's default query scale for head width D.
inline double default_attention_scale(int64_t head_dim) { return 1.0 / std::sqrt(static_cast<double>(head_dim)); }

// q: (B, T, H, D), k: (B, T, Hkv, D), v: (B, T, Hkv, Dv) -> o: (B, T, H, Dv).
// window 0 = full causal; window w > 0: query t sees keys t-w+1 .. t.
Var attention(const Var& q, const Var& k, const Var& v, double scale, int64_t window = 0);

// The CPU reference, cpu::attention_forward / attention_backward: nn/ops/attention_reference.h.

}  // namespace hla
