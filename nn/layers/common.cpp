// The shared GLA/RetNet projections, and fla's A_log / dt_bias initialisation (mixers.md 2.12),
// seeded by parameter name.
#include "nn/layers/common.h"

#include <cmath>

#include "tensor/random.h"

namespace hla {

GatedAttentionProjections gated_attention_projections(const ModelConfig& c, ParamStore& store) {
  const int64_t D = c.hidden_size;
  GatedAttentionProjections p;
  p.H = c.num_heads;
  p.dk = static_cast<int64_t>(D * c.expand_k) / p.H;
  p.dv = static_cast<int64_t>(D * c.expand_v) / p.H;
  p.q = store.normal("q_proj.weight", {p.H * p.dk, D});
  p.k = store.normal("k_proj.weight", {p.H * p.dk, D});
  p.v = store.normal("v_proj.weight", {p.H * p.dv, D});
  p.g = store.normal("g_proj.weight", {p.H * p.dv, D});
  return p;
}

Var init_a_log(ParamStore& store, const std::string& name, int64_t n, double lo, double hi) {
  std::vector<double> v(n);
  uint64_t seed = store.seed_for(name);
  for (int64_t i = 0; i < n; i++) v[i] = std::log(lo + (hi - lo) * counter_uniform(seed, i));
  return store.from_tensor(name, Tensor::from_f64(v, {n}, DType::F64));
}

Var init_dt_bias(ParamStore& store, const std::string& name, int64_t n) {
  std::vector<double> v(n);
  uint64_t seed = store.seed_for(name);
  const double lo = std::log(0.001), hi = std::log(0.1);
  for (int64_t i = 0; i < n; i++) {
    double dt = std::max(std::exp(lo + (hi - lo) * counter_uniform(seed, i)), 1e-4);
    v[i] = dt + std::log(-std::expm1(-dt));  // softplus(dt_bias) = dt
  }
  return store.from_tensor(name, Tensor::from_f64(v, {n}, DType::F64));
}

}  // namespace hla
