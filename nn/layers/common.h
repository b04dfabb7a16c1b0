// Small helpers the mixer layers share: projections through the compute dtype, head
// reshapes, and fla's initialisation rules (the table below, mixers.md 2.12).
//
// fla's initialisation, as a fresh fla model gets it under transformers 4.x: each layer runs
// its own init in its constructor (and may mark its modules initialised), then post_init
// applies the model's _init_weights to every module not marked. One row per parameter kind;
// the layer constructors (nn/layers/*_layer.cpp) and HybridLM (nn/model.cpp) apply the rows.
//   parameter kind                          rule                                       call
//   Linear / Conv1d weight, Embedding       N(0, initializer_range)                    store.normal
//   Mamba-2 conv1d weight, conv_init > 0    U(-conv_init, conv_init)                   store.uniform
//   Linear / Conv1d bias                    0                                          store.constant
//   norm weight (RMSNorm, LayerNorm,        1                                          store.constant
//     GroupNorm, gated RMSNorm); norm bias  0
//   A_log, Gated DeltaNet                   ln U(0, 16), one per value head            init_a_log
//   A_log, KDA, GDN-2                       ln U(1, 16)                                init_a_log
//   A_log, Mamba-2                          ln U(A_init_range), default [1, 16]        init_a_log
//   dt_bias (GDN, KDA, GDN-2, Mamba-2)      softplus^-1(dt), dt = exp U(ln 0.001,      init_dt_bias
//                                           ln 0.1) clamped >= 1e-4 (Mamba-2: dt_min,
//                                           dt_max, dt_init_floor)
//   Mamba-2 D                               1
//   Mamba-2 out_proj                        U(-b, b) / sqrt(L), b = 1 / sqrt(fan_in)   init_residual_out_proj
//                                           (rescale_prenorm_residual, on by default,
//                                           one residual per layer; off: N(0, range))
// The Mamba-2 settings are ModelConfig fields (fla's Mamba2Config); the other mixers' values are
// fixed in fla's layers, and validate() keeps those fields at their defaults there.
//   attention o_proj in an RWKV-6 model     U(-b, b) / sqrt(2 L)  (RWKV-6's model      init_residual_out_proj
//                                           rescales by default, two residuals a layer)
//   RWKV-6 time-mix Linear weights          xavier_uniform, gain 2^-2.5 (the layer's   store.xavier_uniform
//     (x_proj, r/k/v/g_proj, o_proj)        own init; it marks the layer, so the
//                                           model's rules, rescaling included, skip it)
//   RWKV-6 decay LoRA w_proj                lora.0 = 0; lora.2 = orthogonal, gain      store.orthogonal
//                                           0.1 * sqrt(in / out) if in > out else 0.1;
//                                           lora.2 bias 0
//   RWKV-6 mu (time and channel mix),       0
//     x_bias, bonus
//   HGRN / HGRN-2 lower_bounds              0
//   routing (route_proj, cler_gamma; hla's, 0: the routed term starts switched off
//     not fla's)
// Every other fla model leaves the residual projections at N(0, initializer_range): the
// Transformer's rescale_prenorm_residual and the others' prenorm_residual_strategy default off.
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

// x's projections by several weights (w_i: (n_i, D)) as one GEMM on the weights stacked, split
// back into (..., n_i) pieces: for narrow ones (a per-head gate's n = H) separate products would
// each read all of x, and each backward add into x's whole gradient.
inline std::vector<Var> project_stacked(const ParamStore& store, const Var& x, const std::vector<Var>& ws) {
  std::vector<Var> compute;
  std::vector<int64_t> widths;
  for (const Var& w : ws) compute.push_back(store.use(w)), widths.push_back(w.size(0));
  return split_last(linear(x, concat0(compute)), widths);
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
Var init_a_log(ParamStore& store, const std::string& name, int64_t n, double lo, double hi);
// dt_bias = inverse softplus of dt, dt = exp(U(ln dt_min, ln dt_max)) clamped >= dt_floor.
Var init_dt_bias(ParamStore& store, const std::string& name, int64_t n, double dt_min = 0.001, double dt_max = 0.1,
                 double dt_floor = 1e-4);
// A residual output projection (fan_out, fan_in) under GPT-2's rescaling as fla does it:
// kaiming_uniform_(a = sqrt 5), i.e. U(-1/sqrt(fan_in), 1/sqrt(fan_in)), divided by
// sqrt(residuals_per_layer * num_layers).
Var init_residual_out_proj(ParamStore& store, const std::string& name, const Shape& shape, int residuals_per_layer,
                           int num_layers);

}  // namespace hla
