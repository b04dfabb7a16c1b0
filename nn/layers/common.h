// Small helpers the mixer layers share: projections through the compute dtype, head
// reshapes, and fla's initialisation of A_log and dt_bias (mixers.md 2.12).
#pragma once
#include "nn/config.h"
#include "nn/layers/params.h"
#include "nn/ops/arith.h"
#include "nn/ops/gated_norm.h"
#include "nn/ops/linear.h"

namespace hla {

// y = x W^T (+ b) with the weights in the compute dtype.
inline Var project(const ParamStore& store, const Var& x, const Var& w, const Var& b = Var()) {
  return linear(x, store.use(w), b.defined() ? store.use(b) : Var());
}

// (B, T, H*d) <-> (B, T, H, d)
inline Var split_heads(const Var& x, int64_t H, int64_t d) { return reshape(x, {x.size(0), x.size(1), H, d}); }
inline Var merge_heads(const Var& x) { return reshape(x, {x.size(0), x.size(1), x.size(2) * x.size(3)}); }

// The heads and input projections GLA and RetNet share: H = num_heads, dk = D * expand_k / H,
// dv = D * expand_v / H, and q_proj, k_proj (H*dk, D), v_proj, g_proj (H*dv, D), registered in
// that order (checkpoint names and the init stream follow it).
struct GatedAttentionProjections {
  int64_t H = 0, dk = 0, dv = 0;
  Var q, k, v, g;
};
GatedAttentionProjections gated_attention_projections(const ModelConfig& c, ParamStore& store);

// The output tail GLA and RetNet share: o (B, T, H, dv) through a swish-gated RMSNorm per head
// with gate x W_g^T, heads merged, then o_proj.
inline Var gated_output(const ParamStore& store, const Var& o, const Var& x, const Var& gate_w, const Var& norm_w,
                        const Var& out_w, double eps) {
  int64_t H = o.size(2), dv = o.size(3);
  Var y = gated_rmsnorm(o, split_heads(project(store, x, gate_w), H, dv), store.use(norm_w), eps, GateAct::Swish);
  return project(store, merge_heads(y), out_w);
}

// A_log = ln(A), A ~ U(lo, hi), one per head.
Var init_a_log(ParamStore& store, const std::string& name, int64_t n, double lo = 1.0, double hi = 16.0);
// dt_bias = inverse softplus of dt, dt = exp(U(ln 0.001, ln 0.1)) clamped >= 1e-4.
Var init_dt_bias(ParamStore& store, const std::string& name, int64_t n);

}  // namespace hla
