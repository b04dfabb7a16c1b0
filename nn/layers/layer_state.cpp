// The right-padding helpers of the decoding state (see layer_state.h).
#include "nn/layers/layer_state.h"

#include "nn/ops/arith.h"
#include "nn/ops/last_tokens.h"

namespace hla {

Var zero_at_padding(const Var& x, const LayerState* s) {
  const Padding* p = padding_of(s);
  if (!p || !x.defined()) return x;
  const int64_t tokens = x.size(0) * x.size(1);
  HLA_CHECK(p->valid.numel() == tokens, "zero_at_padding: the padding covers ", p->valid.numel(), " tokens, x ",
            x.value().str());
  return mul_broadcast(x, Var(p->valid.to(x.dtype())), x.numel() / tokens);  // x[b, t, ...] * valid[b, t]
}

void keep_last_inputs(Tensor* slot, const Var& final_state, const Var& input, const LayerState* s) {
  if (!slot) return;
  const Padding* p = padding_of(s);
  if (!p) {
    *slot = final_state.value();
    return;
  }
  const int64_t n = final_state.dim() == 3 ? final_state.size(2) : 1;  // a conv's K-1, or a token shift's 1
  *slot = last_tokens(input.value(), p->lengths_device, n).reshape(final_state.shape());
}

}  // namespace hla
