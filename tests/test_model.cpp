// ModelConfig (hybrid shorthand, the field list through config.json, range and rule errors),
// the mixer table against the layers, and HybridLM (fla names, routing's zero init leaves
// step-0 loss unchanged, a model-level gradcheck, loss falls).
#include <doctest/doctest.h>

#include <cmath>

#include "autograd/gradcheck.h"
#include "nn/layers/mixers.h"
#include "nn/model.h"
#include "tensor/math.h"
#include "tensor/random.h"

using namespace hla;

TEST_CASE("hybrid shorthand expands by the project default rule") {
  CHECK(hybrid_attention_layers(24, "6:1") == std::vector<int>{5, 11, 17, 23});
  CHECK(hybrid_attention_layers(24, "24:1") == std::vector<int>{23});
  CHECK(hybrid_attention_layers(24, "12:1") == std::vector<int>{11, 23});
  CHECK(hybrid_attention_layers(24, "3:1") == std::vector<int>{2, 5, 8, 11, 14, 17, 20, 23});
  CHECK(hybrid_attention_layers(4, "pure").empty());
  CHECK(hybrid_attention_layers(3, "transformer") == std::vector<int>{0, 1, 2});
  CHECK_THROWS_WITH_AS(hybrid_attention_layers(4, "2:3"), doctest::Contains("hybrid '2:3'"), Error);
}

TEST_CASE("layer pattern is printed in groups") {
  ModelConfig c;
  c.num_hidden_layers = 12;
  c.set_hybrid("6:1");
  CHECK(c.pattern() == "LLLLLA LLLLLA");
  c.set_hybrid("pure");
  CHECK(c.pattern() == "LLLLLL LLLLLL");
}

TEST_CASE("config.json round trip stores the explicit layer list") {
  nlohmann::json j = {{"model_type", "gated_deltanet"}, {"hidden_size", 64}, {"num_hidden_layers", 6},
                      {"num_heads", 2}, {"vocab_size", 100}, {"hybrid", "3:1"}};
  ModelConfig c = ModelConfig::from_json(j, "test.json");
  CHECK(c.attn.layers == std::vector<int>{2, 5});
  nlohmann::json out = c.to_json();
  CHECK(out["attn"]["layers"] == nlohmann::json({2, 5}));
  CHECK_FALSE(out.contains("hybrid"));
  ModelConfig back = ModelConfig::from_json(out, "out.json");
  CHECK(back.to_json() == out);
}

TEST_CASE("bad configs are clear errors naming the file and field") {
  nlohmann::json base = {{"model_type", "gla"}, {"hidden_size", 64}, {"num_hidden_layers", 4}, {"num_heads", 2}};
  auto with = [&](const char* key, nlohmann::json v) {
    nlohmann::json j = base;
    j[key] = v;
    return j;
  };
  CHECK_THROWS_WITH_AS(ModelConfig::from_json(with("colour", 3), "c.json"),
                       doctest::Contains("c.json: unknown field 'colour'"), Error);
  CHECK_THROWS_WITH_AS(ModelConfig::from_json(with("model_type", "lstm"), "c.json"),
                       doctest::Contains("model_type 'lstm'"), Error);
  CHECK_THROWS_WITH_AS(ModelConfig::from_json(with("attn", {{"layers", {1, 7}}, {"num_heads", 2}}), "c.json"),
                       doctest::Contains("index 7 outside [0, 4)"), Error);
  CHECK_THROWS_WITH_AS(ModelConfig::from_json(with("hidden_size", "wide"), "c.json"),
                       doctest::Contains("field 'hidden_size' has the wrong type"), Error);
  CHECK_THROWS_WITH_AS(ModelConfig::from_json(with("routing", "sideways"), "c.json"),
                       doctest::Contains("routing 'sideways'"), Error);
}

namespace {

ModelConfig tiny_config(const std::string& type, const std::string& hybrid) {
  ModelConfig c;
  c.model_type = type;
  c.hidden_size = 16;
  c.num_hidden_layers = 2;
  c.num_heads = 2;
  c.vocab_size = 11;
  c.intermediate_size = 24;
  c.conv_size = 3;
  c.set_hybrid(hybrid);
  return c;
}

Tensor tokens(int64_t B, int64_t T, int64_t V, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> ids(B * T);
  for (auto& id : ids) id = static_cast<int32_t>(rng.below(V));
  return Tensor::from_i32(ids, {B, T});
}

}  // namespace

TEST_CASE("transformer parameters carry fla names") {
  auto model = make_model(tiny_config("transformer", "transformer"), 1);
  std::vector<std::string> names;
  for (const auto& p : model->parameters()) names.push_back(p.name);
  for (const char* expected : {"model.embeddings.weight", "model.layers.0.attn_norm.weight",
                               "model.layers.0.attn.q_proj.weight", "model.layers.1.attn.o_proj.weight",
                               "model.layers.1.mlp.gate_proj.weight", "model.layers.1.mlp_norm.weight",
                               "model.norm.weight", "lm_head.weight"})
    CHECK(std::find(names.begin(), names.end(), expected) != names.end());
}

TEST_CASE("model-level gradcheck of a tiny transformer in float64") {
  ModelConfig c = tiny_config("transformer", "transformer");
  c.hidden_size = 8;
  c.intermediate_size = 8;
  c.vocab_size = 5;
  c.num_hidden_layers = 1;
  c.set_hybrid("transformer");
  auto model = make_model(c, 3, Device::CPU, DType::F64);
  Tensor ids = tokens(2, 3, 5, 1), targets = tokens(2, 3, 5, 2);
  Var loss = model->loss(ids, targets);
  loss.backward();
  // Central differences on a few entries of each parameter.
  double worst = 0;
  for (auto& p : model->parameters()) {
    Tensor& w = p.var.mutable_value();
    for (int64_t i = 0; i < std::min<int64_t>(w.numel(), 3); i++) {
      double* x = w.data<double>() + i;
      double orig = *x, eps = 1e-6;
      NoGradGuard ng;
      *x = orig + eps;
      double lp = model->loss(ids, targets).value().item();
      *x = orig - eps;
      double lm = model->loss(ids, targets).value().item();
      *x = orig;
      double numeric = (lp - lm) / (2 * eps), analytic = p.var.grad().to_f64_vector()[i];
      worst = std::max(worst, std::abs(numeric - analytic) / std::max(1e-6, std::abs(numeric)));
    }
  }
  CHECK(worst < 1e-5);
}

namespace {

// Central-difference check of a few entries of every parameter of a float64 model.
double model_gradcheck_worst(TrainableModel& model, const Tensor& ids, const Tensor& targets, int per_param) {
  for (auto& p : model.parameters()) p.var.zero_grad();
  model.loss(ids, targets).backward();
  double worst = 0;
  for (auto& p : model.parameters()) {
    Tensor& w = p.var.mutable_value();
    Tensor grad = p.var.grad().defined() ? p.var.grad() : Tensor::zeros(w.shape(), DType::F64);
    std::vector<double> analytic = grad.to_f64_vector();
    for (int64_t n = 0; n < std::min<int64_t>(w.numel(), per_param); n++) {
      int64_t i = (n * 7919) % w.numel();  // spread the probes over the tensor
      double* x = w.data<double>() + i;
      double orig = *x, eps = 1e-6;
      NoGradGuard ng;
      *x = orig + eps;
      double lp = model.loss(ids, targets).value().item();
      *x = orig - eps;
      double lm = model.loss(ids, targets).value().item();
      *x = orig;
      double numeric = (lp - lm) / (2 * eps);
      double err = std::abs(numeric - analytic[i]) / std::max(1e-4, std::abs(numeric));
      if (err > worst) MESSAGE(p.name, "[", i, "] numeric ", numeric, " analytic ", analytic[i]);
      worst = std::max(worst, err);
    }
  }
  return worst;
}

ModelConfig mixer_config(const std::string& type) {
  ModelConfig c = tiny_config(type, "pure");
  c.hidden_size = 16;
  c.num_heads = 2;
  c.head_dim = 4;
  c.state_size = 4;
  c.chunk_size = 4;
  c.num_hidden_layers = 2;
  return c;  // Mamba-2: d_inner 16 = 4 heads of 4
}

}  // namespace

TEST_CASE("every mixer's model has correct gradients (float64, central differences)") {
  for (const MixerSpec& m : mixer_table()) {
    CAPTURE(m.model_type);
    ModelConfig c = mixer_config(m.model_type);
    auto model = make_model(c, 5, Device::CPU, DType::F64);
    Tensor ids = tokens(2, 6, c.vocab_size, 1), targets = tokens(2, 6, c.vocab_size, 2);
    CHECK(model_gradcheck_worst(*model, ids, targets, 2) < 1e-5);
  }
}

TEST_CASE("a 3:1 hybrid with GQA attention layers has correct gradients") {
  ModelConfig c = mixer_config("gated_deltanet");
  c.num_hidden_layers = 3;
  c.num_v_heads = 4;  // grouped value heads
  c.attn.num_heads = 4;
  c.attn.num_kv_heads = 2;
  c.set_hybrid("3:1");
  CHECK(c.pattern() == "LLA");
  auto model = make_model(c, 5, Device::CPU, DType::F64);
  Tensor ids = tokens(2, 5, c.vocab_size, 3), targets = tokens(2, 5, c.vocab_size, 4);
  CHECK(model_gradcheck_worst(*model, ids, targets, 2) < 1e-5);
}

TEST_CASE("routing starts exactly at the no-routing model (zero init), for every mixer that serves it") {
  Tensor ids = tokens(2, 7, 11, 5), targets = tokens(2, 7, 11, 6);
  int served = 0;
  for (const MixerSpec& m : mixer_table())
    for (Routing routing : {Routing::Clvr, Routing::Cler, Routing::ClerH}) {
    if (!m.serves(routing)) continue;
    served++;
    CAPTURE(m.model_type);
    CAPTURE(routing_name(routing));
    ModelConfig base = mixer_config(m.model_type);
    base.num_hidden_layers = 3;
    base.set_hybrid("3:1");
    ModelConfig routed = base;
    routed.routing = routing;
    double l0 = make_model(base, 9)->loss(ids, targets).value().item();
    auto model = make_model(routed, 9);
    Var loss = model->loss(ids, targets);
    CHECK(loss.value().item() == l0);  // bit-identical at step 0
    loss.backward();
    // The routing parameters get a nonzero gradient, so training moves them off zero.
    double route_grad = 0;
    for (auto& p : model->parameters())
      if ((p.name.find("route_proj") != std::string::npos || p.name.find("cler_gamma") != std::string::npos) &&
          p.var.grad().defined())
        route_grad += sq_norm(p.var.grad());
    CHECK(route_grad > 0);
  }
  CHECK(served == 10 + 4 + 4);  // CLVR: every linear mixer; CLER, CLER-H: the four delta-rule mixers
}

TEST_CASE("fla parameter names of the linear mixers") {
  auto names_of = [](const std::string& type) {
    std::vector<std::string> names;
    for (const auto& p : make_model(mixer_config(type), 1)->parameters()) names.push_back(p.name);
    return names;
  };
  auto has = [](const std::vector<std::string>& names, const std::string& n) {
    return std::find(names.begin(), names.end(), n) != names.end();
  };
  auto gdn = names_of("gated_deltanet");
  for (const char* n : {"model.layers.0.attn.A_log", "model.layers.0.attn.dt_bias", "model.layers.0.attn.a_proj.weight",
                        "model.layers.0.attn.q_conv1d.weight", "model.layers.1.attn.o_norm.weight"})
    CHECK(has(gdn, n));
  auto mamba = names_of("mamba2");
  for (const char* n : {"backbone.embeddings.weight", "backbone.layers.0.norm.weight", "backbone.layers.0.mixer.in_proj.weight",
                        "backbone.layers.1.mixer.conv1d.bias", "backbone.norm_f.weight", "lm_head.weight"})
    CHECK(has(mamba, n));
  auto rwkv = names_of("rwkv6");
  for (const char* n : {"model.layers.0.pre_norm.bias", "model.layers.1.attn.bonus", "model.layers.1.ffn.key.mu",
                        "model.layers.0.attn.x_proj.0.linear.weight", "model.norm.bias"})
    CHECK(has(rwkv, n));
  auto hgrn = names_of("hgrn");
  CHECK(has(hgrn, "model.lower_bounds"));
}

TEST_CASE("loss falls on a fixed batch for every mixer (plain SGD, 40 steps)") {
  for (const MixerSpec& m : mixer_table()) {
    const std::string type = m.model_type;
    CAPTURE(type);
    ModelConfig c = mixer_config(type);
    auto model = make_model(c, 7);
    Tensor ids = tokens(4, 12, c.vocab_size, 7);
    Tensor targets = ids;  // learn to copy the input: a task every mixer can fit
    double first = 0, last = 0;
    for (int step = 0; step < 40; step++) {
      for (auto& p : model->parameters()) p.var.zero_grad();
      Var loss = model->loss(ids, targets);
      loss.backward();
      if (step == 0) first = loss.value().item();
      last = loss.value().item();
      NoGradGuard ng;
      for (auto& p : model->parameters())
        if (p.var.grad().defined()) axpy_(p.var.mutable_value(), -0.5, p.var.grad());
    }
    MESSAGE(type, ": loss ", first, " -> ", last);
    CHECK(last < first - 0.5);
  }
}
