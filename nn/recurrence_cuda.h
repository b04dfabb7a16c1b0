// The GPU side of the recurrence ops' Var functions: nn/ops/{hgrn,decay_attention,rwkv6,
// delta_rule}.cpp hand over to these when their inputs are on the GPU. Kernels live in
// cuda/{hgrn,decay_attention,rwkv6,delta_rule}.cu.
// On the GPU recurrent states are fp32: the final state comes back as F32 whatever the inputs'
// dtype (F32 or BF16); an initial state may be F32 or the inputs' dtype, and its gradient has
// its dtype. Builds without CUDA have no GPU tensors; these then only fail.
#pragma once
#include "nn/ops/decay_attention.h"
#include "nn/ops/delta_rule.h"
#include "nn/ops/hgrn.h"
#include "nn/ops/rwkv6.h"

namespace hla {

HgrnOutput hgrn_cuda(const Var& x, const Var& g, const Var& initial_state);
DecayAttentionOutput decay_attention_cuda(const Var& q, const Var& k, const Var& v, const Var& g,
                                          const Var& initial_state, double scale, int64_t chunk_size);
Rwkv6Output rwkv6_cuda(const Var& r, const Var& k, const Var& v, const Var& w, const Var& u,
                       const Var& initial_state, double scale, int64_t chunk_size);
// d: the shapes and flags delta_rule() checked (scale resolved).
DeltaRuleOutputs delta_rule_cuda(const Var& q, const Var& k, const Var& v, const Var& g, const Var& b, const Var& w,
                                 const Var& initial_state, const cpu::DeltaRuleDims& d);

}  // namespace hla
