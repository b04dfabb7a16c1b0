// Causal softmax attention (mixers.md section 5) with grouped KV heads and an optional sliding
// window: the reference the CUDA flash kernel is checked against.
//
//   B batch, T tokens, H query heads, Hkv key/value heads (H % Hkv == 0), D = q/k head width,
//   Dv = v head width. Query head j reads kv head m = floor(j / (H / Hkv)) (consecutive groups).
//   s[t, tau]  = scale * q_t . k_tau                 allowed iff tau <= t and (window == 0 or t - tau < window)
//                                                    and (packed documents) tau >= doc_start[b, t]
//   lse_t      = log sum_{allowed tau} exp(s[t, tau])
//   o_t        = sum_tau exp(s[t, tau] - lse_t) v_tau
// The forward also returns lse (B, H, T), which the backward uses to rebuild the probabilities
// without storing the T x T matrix, exactly as flash attention does.
//
// Gradient buffers, on both devices: the backward WRITES every element of dq, dk and dv
// (callers pass uninitialised buffers); none may be null.
#pragma once
#include <cmath>
#include <vector>

#include "autograd/var.h"
#include "nn/ops/attention_dims.h"
#include "nn/ops/attention_reference.h"

namespace hla {

// fla's default query scale for head width D.
inline double default_attention_scale(int64_t head_dim) { return 1.0 / std::sqrt(static_cast<double>(head_dim)); }

// q: (B, T, H, D), k: (B, T, Hkv, D), v: (B, T, Hkv, Dv) -> o: (B, T, H, Dv).
// window 0 = full causal; window w > 0: query t sees keys t-w+1 .. t.
// doc_start (varlen: packed documents, attention never crosses a document boundary): (B, T) I32
// on q's device from document_starts, or undefined (one document a row). Each document's
// outputs and gradients are those of the document run alone.
Var attention(const Var& q, const Var& k, const Var& v, double scale, int64_t window = 0,
              const Tensor& doc_start = Tensor());

// doc_start (B, T) I32 on the CPU for documents given as cu_seqlens (fla's name): the offsets, in
// the row-major order of the B * T tokens, of every document's first token, then B * T; every
// row start must be one (a document never spans two rows), repeats (empty documents) are
// allowed. doc_start[b, t] is the row-relative index of the first token of t's document. A bad
// list fails naming the offending entry.
Tensor document_starts(const std::vector<int64_t>& cu_seqlens, int64_t B, int64_t T);
// Fails naming `op` unless doc_start is (B, T) I32 on `device` and, on the CPU, each row a valid
// document split: 0 at the row start, then each entry either its predecessor's or t itself.
void check_document_starts(const Tensor& doc_start, int64_t B, int64_t T, Device device, const char* op);
// Each token's place in its document, t - doc_start[b, t], from document_starts' result: (B, T)
// I32 on the CPU (RoPE's per-token positions).
Tensor document_positions(const Tensor& doc_start);

// The CPU reference, cpu::attention_forward / attention_backward: nn/ops/attention_reference.h.

}  // namespace hla
