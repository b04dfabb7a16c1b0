// Initialisation against fla's rules: for every mixer of the table (and the hybrids and
// routings whose parameters differ), each initial parameter's statistics are compared with the
// distribution fla gives it under transformers 4.x (fla/models/*/modeling_*.py _init_weights,
// fla/layers/*.py constructors). The rules are written out here, name by name, from fla's
// source and independently of nn/layers/common.h, so a layer that drifts from fla fails.
//
// Statistical parameters (normal, uniform) are pooled over the layers and over kSeeds seeds
// (values depend on (seed, name) only), so even a per-head vector has a few hundred values;
// every bound below is five standard errors of the statistic at the pooled size n, and the
// last test case shows that the checks reject the near misses (0.02 vs 0.02 / sqrt(2 L),
// U(1, 16) vs U(0, 16), a uniform of the right std where a normal belongs).
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <sstream>

#include "nn/layers/mixers.h"
#include "nn/model.h"
#include "tensor/random.h"

using namespace hla;

namespace {

constexpr int kSeeds = 4;
constexpr double kRange = 0.02;  // initializer_range
constexpr int kLayers = 2;

// fla's rule for one parameter.
struct Rule {
  enum Kind {
    Normal,      // N(0, a)
    Uniform,     // U(a, b)
    LogOfUniform,  // exp(x) ~ U(a, b)                      (A_log)
    InvSoftplus,   // ln softplus(x) ~ U(ln a, ln b)        (dt_bias: dt log-uniform)
    Constant,      // every value a
    Orthogonal,    // W^T W = a^2 I (rows >= cols) or W W^T = a^2 I
  } kind;
  double a = 0, b = 0;
  std::string fla;  // the rule as fla states it, for the failure message
  double floor = 0;  // InvSoftplus: dt clamped >= floor (matters when floor > a)
};

bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }
bool ends(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

Rule normal_rule(const ModelConfig& c, const char* what) {
  return {Rule::Normal, c.initializer_range, 0, std::string(what) + ": N(0, initializer_range)"};
}

// The rule for parameter `name` of shape `shape` in a model of config c.
Rule fla_rule(const ModelConfig& c, const std::string& name, const Shape& shape) {
  const std::string& type = c.model_type;
  const bool rwkv = type == "rwkv6";
  const bool attention_layer = has(name, ".attn.") && [&] {
    size_t at = name.find("layers.") + 7;
    return c.is_attention_layer(std::stoi(name.substr(at)));
  }();
  // Model-level parameters (the model's _init_weights, or hla's own routing).
  if (ends(name, "embeddings.weight")) return normal_rule(c, "_init_weights, nn.Embedding");
  if (name == "lm_head.weight") return normal_rule(c, "_init_weights, nn.Linear lm_head");
  if (ends(name, "lower_bounds")) return {Rule::Constant, 0, 0, "HGRN model: lower_bounds = zeros"};
  if (has(name, "route_proj") || has(name, "cler_gamma")) return {Rule::Constant, 0, 0, "hla routing: zero (not fla)"};
  if (has(name, "norm") && ends(name, ".weight")) return {Rule::Constant, 1, 0, "norm reset_parameters: weight = 1"};
  if (has(name, "norm") && ends(name, ".bias")) return {Rule::Constant, 0, 0, "norm reset_parameters: bias = 0"};
  // Gate parameters (each layer's own init, repeated by GDN's, KDA's, Mamba-2's _init_weights).
  // Mamba-2's come from its config (A_init_range, dt_min, dt_max, dt_init_floor); the others'
  // are fixed in fla's layers.
  const bool mamba2 = type == "mamba2";
  if (ends(name, "A_log")) {
    if (type == "gated_deltanet") return {Rule::LogOfUniform, 0, 16, "GatedDeltaNet: A_log = log U(0, 16)"};
    if (mamba2)
      return {Rule::LogOfUniform, c.a_init_range[0], c.a_init_range[1], "Mamba2: A_log = log U(*A_init_range)"};
    return {Rule::LogOfUniform, 1, 16, type + ": A_log = log U(1, 16)"};
  }
  if (ends(name, "dt_bias")) {
    if (mamba2)
      return {Rule::InvSoftplus, c.dt_min, c.dt_max, "Mamba2: dt_bias = inverse softplus of exp U(ln dt_min, ln dt_max)",
              c.dt_init_floor};
    return {Rule::InvSoftplus, 0.001, 0.1, "dt_bias = inverse softplus of exp U(ln 0.001, ln 0.1), floor 1e-4", 1e-4};
  }
  if (ends(name, "mixer.D")) return {Rule::Constant, 1, 0, "Mamba2: D = ones"};
  if (mamba2 && ends(name, "conv1d.weight") && c.conv_init > 0)
    return {Rule::Uniform, -c.conv_init, c.conv_init, "Mamba2 conv_init: conv1d.weight = U(-conv_init, conv_init)"};
  if (mamba2 && ends(name, "out_proj.weight") && c.rescale_residual) {
    double b = 1 / std::sqrt(double(shape[1]) * 1 * c.num_hidden_layers);
    return {Rule::Uniform, -b, b, "Mamba2 rescale_prenorm_residual: kaiming_uniform(a=sqrt 5) / sqrt(1 * L)"};
  }
  // RWKV-6: the time mix's own init (the model's rules skip the marked layer), the channel mix's
  // LerpLinear mu, and the model's rescale of attention layers' o_proj.
  if (rwkv && attention_layer && ends(name, "o_proj.weight")) {
    double b = 1 / std::sqrt(double(shape[1]) * 2 * c.num_hidden_layers);
    return {Rule::Uniform, -b, b, "RWKV6 _init_weights rescale: kaiming_uniform(a=sqrt 5) / sqrt(2 L)"};
  }
  if (rwkv && ends(name, ".mu")) return {Rule::Constant, 0, 0, "RWKV6 LerpLinear: mu = zeros"};
  if (rwkv && !attention_layer && has(name, ".attn.")) {
    if (ends(name, "x_bias") || ends(name, "bonus")) return {Rule::Constant, 0, 0, "RWKV6Attention: zeros"};
    if (ends(name, "lora.0.weight")) return {Rule::Constant, 0, 0, "RWKV6 LoRA: lora[0] = zeros"};
    if (ends(name, "lora.2.bias")) return {Rule::Constant, 0, 0, "RWKV6 LoRA: lora[2].bias = zeros"};
    if (ends(name, "lora.2.weight")) {
      double gain = shape[1] > shape[0] ? std::sqrt(double(shape[1]) / double(shape[0])) : 1.0;
      return {Rule::Orthogonal, 0.1 * gain, 0, "RWKV6 LoRA: lora[2] = orthogonal, gain 0.1 * max(1, sqrt(in/out))"};
    }
    if (ends(name, ".weight")) {
      double b = std::pow(2.0, -2.5) * std::sqrt(6.0 / double(shape[0] + shape[1]));
      return {Rule::Uniform, -b, b, "RWKV6Attention: xavier_uniform, gain 2^-2.5"};
    }
  }
  // Everything else is a Linear / Conv1d of the model's _init_weights.
  if (ends(name, ".bias")) return {Rule::Constant, 0, 0, "_init_weights: Linear / Conv1d bias = zeros"};
  if (ends(name, ".weight") && shape.size() >= 2) return normal_rule(c, "_init_weights, nn.Linear / nn.Conv1d");
  return {Rule::Constant, NAN, 0, "no fla rule known for this parameter"};
}

// "model.layers.1.attn.q_proj.weight" -> "model.layers.*.attn.q_proj.weight": one pool per
// parameter kind, over layers of the same kind (linear or attention) and over seeds.
std::string pool_key(const ModelConfig& c, const std::string& name) {
  size_t at = name.find("layers.");
  if (at == std::string::npos) return name;
  size_t start = at + 7, stop = name.find('.', start);
  int layer = std::stoi(name.substr(start, stop - start));
  return name.substr(0, start) + (c.is_attention_layer(layer) ? "A" : "L") + name.substr(stop);
}

double mean_of(const std::vector<double>& x) {
  double s = 0;
  for (double v : x) s += v;
  return s / double(x.size());
}
double std_of(const std::vector<double>& x) {
  double m = mean_of(x), s = 0;
  for (double v : x) s += (v - m) * (v - m);
  return std::sqrt(s / double(x.size()));
}

std::string fmt(const char* what, double got, double want, double tol) {
  std::ostringstream os;
  os << what << " " << got << ", want " << want << " +- " << tol;
  return os.str();
}

// "" when x looks like N(0, sd) at its size: mean, std, the fraction within one sd (0.6827;
// a uniform of the same std has 0.577) and no value past 6.5 sd.
std::string check_normal(const std::vector<double>& x, double sd) {
  const double n = double(x.size());
  double mean = mean_of(x), s = std_of(x), within = 0, peak = 0;
  for (double v : x) {
    within += std::abs(v) < sd;
    peak = std::max(peak, std::abs(v));
  }
  within /= n;
  if (std::abs(mean) > 5 * sd / std::sqrt(n)) return fmt("mean", mean, 0, 5 * sd / std::sqrt(n));
  if (std::abs(s / sd - 1) > 5 / std::sqrt(2 * n)) return fmt("std", s, sd, 5 * sd / std::sqrt(2 * n));
  double p = 0.682689, tol = 5 * std::sqrt(p * (1 - p) / n);
  if (std::abs(within - p) > tol) return fmt("fraction within 1 sd", within, p, tol);
  if (peak > 6.5 * sd) return fmt("max |x|", peak, 0, 6.5 * sd);
  return "";
}

// "" when x looks like U(lo, hi): inside the bounds (fp32 rounding allowed), its extremes within
// 10 / n of the range from the bounds (missed with probability e^-10), mean and std.
std::string check_uniform(const std::vector<double>& x, double lo, double hi) {
  const double n = double(x.size()), w = hi - lo;
  double mn = *std::min_element(x.begin(), x.end()), mx = *std::max_element(x.begin(), x.end());
  const double slack = 1e-6 * std::max(std::abs(lo), std::abs(hi));
  if (mn < lo - slack) return fmt("min", mn, lo, slack);
  if (mx > hi + slack) return fmt("max", mx, hi, slack);
  if (mn - lo > 10 * w / n) return fmt("min", mn, lo, 10 * w / n);
  if (hi - mx > 10 * w / n) return fmt("max", mx, hi, 10 * w / n);
  double mean = mean_of(x), sd = w / std::sqrt(12.0);
  if (std::abs(mean - (lo + hi) / 2) > 5 * sd / std::sqrt(n)) return fmt("mean", mean, (lo + hi) / 2, 5 * sd / std::sqrt(n));
  double s = std_of(x), tol = 5 * 0.45 / std::sqrt(n);  // sd of s / sigma for a uniform: sqrt(0.8 / n) / 2
  if (std::abs(s / sd - 1) > tol) return fmt("std", s, sd, tol * sd);
  return "";
}

// "" when W (rows, cols) is gain times a matrix with orthonormal columns (rows >= cols) or rows.
std::string check_orthogonal(const Tensor& W, double gain) {
  const int64_t rows = W.size(0), cols = W.size(1);
  std::vector<double> w = W.to_f64_vector();
  const bool tall = rows >= cols;
  const int64_t k = tall ? cols : rows, len = tall ? rows : cols;
  auto at = [&](int64_t vec, int64_t i) { return tall ? w[i * cols + vec] : w[vec * cols + i]; };
  double worst = 0;
  for (int64_t a = 0; a < k; a++)
    for (int64_t b = 0; b < k; b++) {
      double dot = 0;
      for (int64_t i = 0; i < len; i++) dot += at(a, i) * at(b, i);
      worst = std::max(worst, std::abs(dot - (a == b ? gain * gain : 0.0)));
    }
  if (worst > 1e-5 * gain * gain) return fmt("max |W^T W - gain^2 I|", worst, 0, 1e-5 * gain * gain);
  return "";
}

// The statistical pools, or the exact check of one tensor.
std::string check_pool(const Rule& r, std::vector<double> x) {
  switch (r.kind) {
    case Rule::Normal: return check_normal(x, r.a);
    case Rule::Uniform: return check_uniform(x, r.a, r.b);
    case Rule::LogOfUniform:
      for (double& v : x) v = std::exp(v);
      return check_uniform(x, r.a, r.b);
    case Rule::InvSoftplus: {
      for (double& v : x) v = std::log(std::log1p(std::exp(v)));  // ln dt
      if (r.floor <= r.a) return check_uniform(x, std::log(r.a), std::log(r.b));
      // dt below the floor is clamped to it: a share ln(floor / a) / ln(b / a) sits at ln floor
      // (fp32 rounding allowed), the rest is uniform above it.
      std::vector<double> above;
      for (double v : x)
        if (v > std::log(r.floor) + 1e-5) above.push_back(v);
      const double n = double(x.size()), p = std::log(r.floor / r.a) / std::log(r.b / r.a);
      const double at_floor = 1 - double(above.size()) / n, tol = 5 * std::sqrt(p * (1 - p) / n);
      if (std::abs(at_floor - p) > tol) return fmt("share at the floor", at_floor, p, tol);
      for (double v : x)
        if (v < std::log(r.floor) - 1e-5) return fmt("ln dt below the floor", v, std::log(r.floor), 1e-5);
      return check_uniform(above, std::log(r.floor), std::log(r.b));
    }
    default: return "not a pooled rule";
  }
}

std::string check_tensor(const Rule& r, const Tensor& t) {
  if (r.kind == Rule::Orthogonal) return check_orthogonal(t, r.a);
  if (std::isnan(r.a)) return r.fla;
  for (double v : t.to_f64_vector())
    if (v != r.a) return fmt("value", v, r.a, 0);
  return "";
}

// Builds the model of c for kSeeds seeds and checks every parameter against fla_rule.
void check_model(const ModelConfig& c) {
  struct Pool {
    Rule rule;
    std::vector<double> values;
  };
  std::map<std::string, Pool> pools;
  int64_t tensors = 0;
  for (uint64_t seed = 1; seed <= kSeeds; seed++) {
    auto model = make_model(c, seed);
    for (const NamedParameter& p : model->parameters()) {
      tensors++;
      Rule r = fla_rule(c, p.name, p.var.shape());
      if (r.kind == Rule::Constant || r.kind == Rule::Orthogonal) {
        std::string failure = check_tensor(r, p.var.value());
        CHECK_MESSAGE(failure == "", c.model_type, " ", p.name, " (fla: ", r.fla, "): ", failure);
        continue;
      }
      Pool& pool = pools.emplace(pool_key(c, p.name), Pool{r, {}}).first->second;
      std::vector<double> v = p.var.value().to_f64_vector();
      pool.values.insert(pool.values.end(), v.begin(), v.end());
    }
  }
  CHECK(tensors > 0);
  for (const auto& entry : pools) {  // not a structured binding: doctest's message lambda captures them
    const std::string& key = entry.first;
    const Pool& pool = entry.second;
    std::string failure = check_pool(pool.rule, pool.values);
    CHECK_MESSAGE(failure == "", c.model_type, " ", key, " (fla: ", pool.rule.fla, "), n = ", pool.values.size(), ": ",
                  failure);
  }
}

// hidden 256 (projections of 65k values per tensor), 32 heads of width 8 (per-head vectors of
// 64 values a model), 2 layers, vocab 258.
ModelConfig stats_config(const std::string& model_type) {
  ModelConfig c;
  c.model_type = model_type;
  c.hidden_size = 256;
  c.num_hidden_layers = kLayers;
  c.num_heads = 32;
  c.vocab_size = 258;
  c.initializer_range = kRange;
  c.state_size = 16;
  if (model_type == "mamba2") {
    c.head_dim = 8;
    c.expand_v = 2.0;
  }
  c.set_hybrid(model_type == "transformer" ? "transformer" : "pure");
  return c;
}

}  // namespace

TEST_CASE("every mixer's initial parameters follow fla's rules") {
  for (const MixerSpec& m : mixer_table()) {
    check_model(stats_config(m.model_type));
  }
}

TEST_CASE("hybrid attention layers and routing follow fla's rules (RWKV-6 rescales o_proj)") {
  for (const char* type : {"gated_deltanet", "rwkv6", "kda"}) {
    ModelConfig c = stats_config(type);
    c.set_hybrid("2:1");  // layer 1 is attention
    check_model(c);
  }
  ModelConfig clvr = stats_config("delta_net");
  clvr.routing = Routing::Clvr;
  check_model(clvr);
  ModelConfig cler = stats_config("gated_deltanet");
  cler.set_hybrid("2:1");
  cler.routing = Routing::Cler;
  check_model(cler);
}

TEST_CASE("a config's initializer_range and Mamba-2's init fields give those statistics") {
  for (const char* type : {"gated_deltanet", "rwkv6", "mamba2", "transformer"}) {
    ModelConfig c = stats_config(type);
    c.initializer_range = 0.05;
    check_model(c);
  }
  // Mamba-2 as fla's Mamba2Config sets it: A_init_range, dt range, conv_init, no rescaling.
  ModelConfig m = stats_config("mamba2");
  m.a_init_range = {2.0, 8.0};
  m.dt_min = 0.01;
  m.dt_max = 0.05;
  m.conv_init = 0.3;
  m.rescale_residual = false;
  check_model(m);
  // A floor above dt_min clamps ln(0.01 / 0.001) / ln(0.1 / 0.001) = half of the dt values.
  ModelConfig floored = stats_config("mamba2");
  floored.dt_init_floor = 0.01;
  check_model(floored);
  // The checks tell the settings apart: the model built with the defaults fails m's rules.
  auto model = make_model(stats_config("mamba2"), 1);
  int mismatched = 0;
  for (const NamedParameter& p : model->parameters()) {
    if (!ends(p.name, "A_log") && !ends(p.name, "dt_bias") && !ends(p.name, "conv1d.weight") && !ends(p.name, "out_proj.weight"))
      continue;
    mismatched += check_pool(fla_rule(m, p.name, p.var.shape()), p.var.value().to_f64_vector()) != "";
  }
  CHECK(mismatched == 4 * kLayers);
}

TEST_CASE("RWKV-6's decay LoRA gain grows as sqrt(in / out) when the key width is under 64") {
  ModelConfig c = stats_config("rwkv6");
  c.hidden_size = 32;
  c.num_heads = 4;  // key width 32 < lora width 64: gain 0.1 * sqrt(2), orthonormal rows
  auto model = make_model(c, 7);
  int checked = 0;
  for (const NamedParameter& p : model->parameters()) {
    if (!ends(p.name, "lora.2.weight")) continue;
    CHECK(p.var.shape() == Shape{32, 64});
    CHECK(check_orthogonal(p.var.value(), 0.1 * std::sqrt(2.0)) == "");
    CHECK(check_orthogonal(p.var.value(), 0.1) != "");
    checked++;
  }
  CHECK(checked == kLayers);
}

TEST_CASE("the init checks reject the near misses") {
  const int64_t n = 65536;
  const uint64_t seed = 99;
  std::vector<double> normal(n), uniform_0_16(n), uniform_1_16(n), same_std_uniform(n);
  for (int64_t i = 0; i < n; i++) {
    normal[i] = kRange * counter_normal(seed, i);
    uniform_0_16[i] = 16 * counter_uniform(seed, i);
    uniform_1_16[i] = 1 + 15 * counter_uniform(seed, i);
    same_std_uniform[i] = kRange * std::sqrt(3.0) * (2 * counter_uniform(seed, i) - 1);
  }
  CHECK(check_normal(normal, kRange) == "");
  CHECK(check_normal(normal, kRange / std::sqrt(2.0 * kLayers)) != "");  // GPT-2 rescaled std
  CHECK(check_normal(normal, kRange * 1.03) != "");                       // 3% off
  CHECK(check_normal(same_std_uniform, kRange) != "");                    // right std, wrong shape
  CHECK(check_uniform(uniform_0_16, 0, 16) == "");
  CHECK(check_uniform(uniform_1_16, 0, 16) != "");  // KDA's A range where GDN's belongs
  CHECK(check_uniform(uniform_0_16, 1, 16) != "");
  // Per-head sizes: 256 pooled values still tell U(1, 16) from U(0, 16).
  std::vector<double> few(uniform_1_16.begin(), uniform_1_16.begin() + 256);
  CHECK(check_uniform(few, 0, 16) != "");
  CHECK(check_uniform(few, 1, 16) == "");
}
