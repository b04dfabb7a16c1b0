// What a GPU forward keeps for its backward: the chunked delta rule's and decay attention's
// chunk-start states (DeltaRuleOptions::keep_states, decay_attention's and rwkv6's keep_states;
// [train] delta_rule_keep), which spare the backward a replay of the forward's scan. An op asks
// whether a backward will follow before it allocates them.
#pragma once
#include <initializer_list>

#include "autograd/var.h"

namespace hla {

// Whether a backward can follow an op with these inputs (what record_op will decide).
inline bool backward_follows(std::initializer_list<const Var*> inputs) {
  bool any = false;
  for (const Var* x : inputs) any = any || x->requires_grad();
  return any && grad_enabled();
}

// `floats` fp32 on `device` for the forward to fill, or an undefined tensor when there are none.
inline Tensor kept_buffer(int64_t floats, Device device) {
  return floats > 0 ? Tensor::empty({floats}, DType::F32, device) : Tensor();
}

}  // namespace hla
