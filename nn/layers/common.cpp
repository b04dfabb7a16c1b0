// The shared GLA/RetNet projections, and fla's initialisation of A_log, dt_bias and rescaled
// residual projections (the table in common.h), seeded by parameter name.
#include "nn/layers/common.h"

#include <cmath>

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
  std::vector<double> a = Tensor::uniform({n}, store.seed_for(name), lo, hi, DType::F64).to_f64_vector();
  for (double& v : a) v = std::log(v);
  return store.from_tensor(name, Tensor::from_f64(a, {n}, DType::F64));
}

Var init_dt_bias(ParamStore& store, const std::string& name, int64_t n, double dt_min, double dt_max, double dt_floor) {
  std::vector<double> v =
      Tensor::uniform({n}, store.seed_for(name), std::log(dt_min), std::log(dt_max), DType::F64).to_f64_vector();
  for (double& x : v) {
    double dt = std::max(std::exp(x), dt_floor);
    x = dt + std::log(-std::expm1(-dt));  // softplus(dt_bias) = dt
  }
  return store.from_tensor(name, Tensor::from_f64(v, {n}, DType::F64));
}

Var init_residual_out_proj(ParamStore& store, const std::string& name, const Shape& shape, int residuals_per_layer,
                           int num_layers) {
  double bound = 1.0 / std::sqrt(double(shape.at(1))) / std::sqrt(double(residuals_per_layer) * num_layers);
  return store.uniform(name, shape, -bound, bound);
}

}  // namespace hla
