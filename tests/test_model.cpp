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
  CHECK_THROWS_WITH_AS(ModelConfig::from_json(with("routing", "sideways"), "c.json"),
                       doctest::Contains("c.json: routing must be one of none, clvr, cler, cler_h, got 'sideways'"), Error);
  CHECK_THROWS_WITH_AS(ModelConfig::from_json(with("routing", 2), "c.json"),
                       doctest::Contains("c.json: routing must be a string, got 2"), Error);
  CHECK_THROWS_WITH_AS(ModelConfig::from_json(with("attn", {{"layers", {1}}, {"heads", 2}}), "c.json"),
                       doctest::Contains("c.json: unknown field 'attn.heads'"), Error);
}

TEST_CASE("routing names parse to the enum and back, and nothing else parses") {
  for (Routing r : {Routing::None, Routing::Clvr, Routing::Cler, Routing::ClerH})
    CHECK(parse_routing(routing_name(r), "test") == r);
  CHECK(std::string(routing_name(Routing::ClerH)) == "cler_h");
  CHECK_THROWS_WITH_AS(parse_routing("CLVR", "--model.routing"),
                       doctest::Contains("--model.routing must be one of none, clvr, cler, cler_h, got 'CLVR'"), Error);
  CHECK_THROWS_WITH_AS(parse_routing("", "run.toml: [model] routing"), doctest::Contains("run.toml: [model] routing must be one of none, clvr, cler, cler_h, got ''"), Error);
}

namespace {

// A different value of the same type, whatever the field (so a new field needs no test edit).
template <class T>
T another(const T& v) {
  if constexpr (std::is_same_v<T, bool>) return !v;
  else if constexpr (std::is_same_v<T, int>) return v + 3;
  else if constexpr (std::is_same_v<T, double>) return v * 2 + 0.25;
  else if constexpr (std::is_same_v<T, std::string>) return v + "_other";
  else if constexpr (std::is_same_v<T, Routing>) return v == Routing::Cler ? Routing::Clvr : Routing::Cler;
  else return T{{7, 1}};  // attn.layers
}

// A 2:1 gated_deltanet hybrid, so every field (the attn block too) is in its config.json.
ModelConfig hybrid_config() {
  ModelConfig c;
  c.hidden_size = 64;
  c.num_heads = 2;
  c.set_hybrid("2:1");
  return c;
}

}  // namespace

// config.json is fla's format (nn/fla_config.h): a field is written where the mixer uses it.
// Every field of the list is written by some mixer and read back; tests/test_fla_interop.cpp
// has the exact files.
TEST_CASE("every listed field is written to config.json by some mixer and read back") {
  int fields = 0;
  ModelConfig::visit_fields([&](const ModelField&) { fields++; });
  for (int i = 1; i < fields; i++) {  // 0 is model_type: every mixer's config reads back as its own, below
    std::string path;
    bool round_trips = false;
    for (const MixerSpec& m : mixer_table()) {
      ModelConfig changed = hybrid_config();
      changed.model_type = m.model_type;
      const ModelConfig base = changed;
      int k = 0;
      ModelConfig::visit_fields(
          [&](const ModelField& f, auto& member) {
            if (k++ == i) member = another(member), path = f.path();
          },
          changed);
      ModelConfig back;
      try {
        back = ModelConfig::parse_json(changed.to_json(), "changed.json", ModelConfig());
      } catch (const Error&) {
        continue;  // a value this mixer's fields cannot express (hgrn2's expand_ratio of 67 / 2)
      }
      k = 0;
      ModelConfig::visit_fields(
          [&](const ModelField&, const auto& got, const auto& want, const auto& before) {
            if (k++ == i && !(want == before) && got == want) round_trips = true;
          },
          back, changed, base);
    }
    CAPTURE(path);
    CHECK(round_trips);
  }
  for (const MixerSpec& m : mixer_table()) {
    ModelConfig c = hybrid_config();
    c.model_type = m.model_type;
    CAPTURE(m.model_type);
    const nlohmann::json written = c.to_json();
    CHECK(written.at("model_type") == m.model_type);
    CHECK(ModelConfig::from_json(written, "w.json").to_json() == written);
  }
}

TEST_CASE("every numeric field's range is checked, naming the file, the field and the value") {
  int checked = 0;
  ModelConfig::visit_fields([&](const ModelField& field) {
    if (std::isinf(field.min)) return;  // no range: strings, flags, lists
    CAPTURE(field.path());
    // A mixer where the range applies (conv_size needs short convolutions, state_size mamba2).
    ModelConfig c = hybrid_config();
    // ... and whose config.json writes the field (chunk_size and routing go in the hla block).
    const bool in_hla_block = field.path() == "routing" || field.path() == "chunk_size";
    for (const MixerSpec& m : mixer_table()) {
      c.model_type = m.model_type;
      const nlohmann::json j = c.to_json();
      const bool written = field.in_attn ? j.contains("attn") : in_hla_block || j.contains(field.name);
      if (written && (!field.applies || (c.*field.applies)()) && !(in_hla_block && c.model_type == "mamba2")) break;
    }
    REQUIRE((!field.applies || (c.*field.applies)()));
    nlohmann::json j = c.to_json();
    nlohmann::json& block = field.in_attn ? j["attn"] : in_hla_block ? j["hla"] : j;
    const double bad = field.min_exclusive ? field.min : field.min - 1;
    block[field.name] = bad;
    if (block[field.name].get<double>() == std::floor(bad)) block[field.name] = static_cast<int>(bad);
    std::ostringstream expected;
    expected << "bad.json: " << field.path() << " must be " << (field.min_exclusive ? "> " : ">= ") << field.min;
    CHECK_THROWS_WITH_AS(ModelConfig::from_json(j, "bad.json"), doctest::Contains(expected.str().c_str()), Error);
    std::ostringstream got;
    got << ", got " << bad;
    CHECK_THROWS_WITH_AS(ModelConfig::from_json(j, "bad.json"), doctest::Contains(got.str().c_str()), Error);
    checked++;
  });
  CHECK(checked >= 19);  // every numeric field has a range
  // The conditional ranges name their condition, and do not apply elsewhere.
  ModelConfig gdn = hybrid_config();
  gdn.conv_size = 0;
  CHECK_THROWS_WITH_AS(gdn.validate("g.json"),
                       doctest::Contains("g.json: conv_size must be >= 1 with short convolutions (model_type gated_deltanet), got 0"),
                       Error);
  gdn.use_short_conv = false;
  CHECK_NOTHROW(gdn.validate("g.json"));
  ModelConfig mamba = hybrid_config();
  mamba.model_type = "mamba2";
  mamba.state_size = 0;
  CHECK_THROWS_WITH_AS(mamba.validate("m.json"), doctest::Contains("m.json: state_size must be >= 1 for mamba2"), Error);
  mamba.model_type = "gla";
  CHECK_NOTHROW(mamba.validate("m.json"));
}

TEST_CASE("the rules between fields name the fields and values, per the mixer's head shape") {
  auto config = [](const std::string& type) {
    ModelConfig c = hybrid_config();
    c.model_type = type;
    return c;
  };
  auto fails_with = [](const ModelConfig& c, const std::string& message) {
    CHECK_THROWS_WITH_AS(c.validate("c.json"), doctest::Contains(message.c_str()), Error);
  };
  ModelConfig c = config("gated_deltanet");
  c.num_heads = 3;  // 64 / 3 heads of head_dim 0
  fails_with(c, "c.json: num_heads 3 does not divide hidden_size 64 (or set head_dim)");
  c.head_dim = 16;
  c.attn.num_heads = 4;
  CHECK_NOTHROW(c.validate("c.json"));
  c.expand_v = 0.3;
  fails_with(c, "c.json: head_dim 16 * expand_v 0.3 = 4.8 is not a whole number");
  c = config("gated_deltanet");
  c.num_v_heads = 3;
  fails_with(c, "c.json: num_v_heads 3 is not a multiple of num_heads 2");
  c = config("delta_net");
  c.num_v_heads = 4;
  fails_with(c, "c.json: num_v_heads 4 != num_heads 2: grouped value heads are not supported by delta_net (they are by "
                "gated_deltanet kda)");
  c = config("gla");
  c.expand_k = 0.5;
  c.num_heads = 64;  // 32 key channels over 64 heads
  c.attn.num_heads = 2;
  fails_with(c, "c.json: num_heads 64 does not divide hidden_size * expand_k 32");
  c = config("hgrn");
  c.num_heads = 3;  // HGRN has no heads
  c.attn.num_heads = 2;
  CHECK_NOTHROW(c.validate("c.json"));
  c = config("hgrn2");
  c.num_heads = 3;
  c.attn.num_heads = 2;
  fails_with(c, "c.json: num_heads 3 does not divide hidden_size 64");
  c = config("mamba2");
  c.head_dim = 24;
  fails_with(c, "c.json: head_dim 24 does not divide d_inner = hidden_size * expand_v 64");
  c.head_dim = 16;  // 4 heads
  c.n_groups = 3;
  fails_with(c, "c.json: n_groups 3 does not divide the heads, d_inner / head_dim = 4");
  c = config("transformer");
  c.attn.num_heads = 3;
  fails_with(c, "c.json: attn.num_heads 3 does not divide hidden_size 64");
  c.attn.num_heads = 4;
  c.attn.num_kv_heads = 3;
  fails_with(c, "c.json: attn.num_heads 4 is not a multiple of attn.num_kv_heads 3");
  c = config("gla");
  c.routing = Routing::Cler;
  fails_with(c, "c.json: routing 'cler' needs the delta-rule write residual of a linear mixer, which model_type 'gla' "
                "does not give (mixers that do: delta_net gated_deltanet kda gdn2)");
  c = config("transformer");
  c.routing = Routing::Clvr;
  fails_with(c, "routing 'clvr' needs the values of a linear mixer, which model_type 'transformer' does not give");
  c = config("lstm");
  fails_with(c, "c.json: model_type 'lstm' is not a mixer hla knows; one of: transformer hgrn retnet gla hgrn2 mamba2 "
                "rwkv6 delta_net gated_deltanet kda gdn2");
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

// Central-difference check of `per_param` entries of every parameter of a float64 model, entries
// `stride` apart (modulo the size); the error is relative to max(floor, |numeric|).
double model_gradcheck_worst(TrainableModel& model, const Tensor& ids, const Tensor& targets, int per_param,
                             int64_t stride = 7919, double floor = 1e-4) {
  for (auto& p : model.parameters()) p.var.zero_grad();
  model.loss(ids, targets).backward();
  double worst = 0;
  for (auto& p : model.parameters()) {
    Tensor& w = p.var.mutable_value();
    Tensor grad = p.var.grad().defined() ? p.var.grad() : Tensor::zeros(w.shape(), DType::F64);
    std::vector<double> analytic = grad.to_f64_vector();
    for (int64_t n = 0; n < std::min<int64_t>(w.numel(), per_param); n++) {
      int64_t i = (n * stride) % w.numel();
      double* x = w.data<double>() + i;
      double orig = *x, eps = 1e-6;
      NoGradGuard ng;
      *x = orig + eps;
      double lp = model.loss(ids, targets).value().item();
      *x = orig - eps;
      double lm = model.loss(ids, targets).value().item();
      *x = orig;
      double numeric = (lp - lm) / (2 * eps);
      double err = std::abs(numeric - analytic[i]) / std::max(floor, std::abs(numeric));
      if (err > worst) MESSAGE(p.name, "[", i, "] numeric ", numeric, " analytic ", analytic[i]);
      worst = std::max(worst, err);
    }
  }
  return worst;
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
  // the first 3 entries of each parameter
  CHECK(model_gradcheck_worst(*model, ids, targets, 3, 1, 1e-6) < 1e-5);
}

namespace {

ModelConfig mixer_config(const std::string& type) {
  ModelConfig c = tiny_config(type, "pure");  // hidden 16, 2 heads, 2 layers
  c.head_dim = 4;
  c.state_size = 4;
  c.chunk_size = 4;
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
  for (const MixerSpec& m : mixer_table()) {
    for (Routing routing : {Routing::Clvr, Routing::Cler, Routing::ClerH}) {
      if (!m.serves(routing)) continue;
      served++;
      CAPTURE(m.model_type);
      CAPTURE(routing_name(routing));
      ModelConfig base = mixer_config(m.model_type);
      base.num_hidden_layers = 3;
      base.set_hybrid("3:1");  // L L A: layer 1 takes layer 0's error (CLER)
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
  }
  CHECK(served == 10 + 4 + 4);  // CLVR: every linear mixer; CLER, CLER-H: the four delta-rule mixers
}

TEST_CASE("the mixer table agrees with the layers it builds") {
  auto param_count = [](const ModelConfig& c) { return count_parameters(make_model(c, 1)->parameters()); };
  auto has_param = [](const ModelConfig& c, const std::string& part) {
    for (const auto& p : make_model(c, 1)->parameters())
      if (p.name.find(part) != std::string::npos) return true;
    return false;
  };
  std::vector<std::string> names;
  for (const MixerSpec& m : mixer_table()) {
    CAPTURE(m.model_type);
    names.push_back(m.model_type);
    ModelConfig c = mixer_config(m.model_type);
    // Routing columns: what the layer exposes.
    ParamStore store(1, 0.02, Device::CPU, DType::F32);
    std::unique_ptr<Mixer> mixer = m.make(c, store);
    MixerIO io;
    io.want_values = io.want_error = true;
    if (m.lower_bounds) io.lower_bound = Var(Tensor::zeros({c.hidden_size}, DType::F32));
    Var x(Tensor::randn({1, 5, c.hidden_size}, 3, 1.0, DType::F32));
    CHECK(mixer->forward(x, io).shape() == x.shape());
    CHECK(io.values.defined() == m.routes_values);
    CHECK(io.error.defined() == m.routes_error);
    CHECK((mixer->value_width() > 0) == m.routes_values);
    if (m.routes_values) CHECK(io.values.size(2) == mixer->value_width());
    // Block style and lower bounds: the parameters the model creates.
    CHECK(has_param(c, "model.lower_bounds") == m.lower_bounds);
    CHECK(has_param(c, "backbone.norm_f.weight") == (m.block == BlockStyle::Mamba2));
    CHECK(has_param(c, "layers.0.pre_norm.bias") == (m.block == BlockStyle::Rwkv6));
    CHECK(has_param(c, "layers.1.mlp.gate_proj.weight") == (m.block == BlockStyle::Standard));
    // Short convolutions and state size: the fields change the model exactly where the table says.
    ModelConfig wider_conv = c;
    wider_conv.conv_size = c.conv_size + 1;
    CHECK((param_count(wider_conv) != param_count(c)) == (m.short_conv != ShortConv::None));
    ModelConfig no_conv = c;
    no_conv.use_short_conv = false;
    CHECK(has_param(no_conv, "conv1d") == (m.short_conv == ShortConv::Always));
    ModelConfig wider_state = c;
    wider_state.state_size = c.state_size + 2;
    CHECK((param_count(wider_state) != param_count(c)) == m.state_size);
    ModelConfig grouped = c;
    grouped.num_v_heads = 2 * c.num_heads;
    if (m.value_heads == ValueHeads::SameAsHeads) CHECK_THROWS_AS(grouped.validate("g.json"), Error);
    else CHECK((param_count(grouped) != param_count(c)) == (m.value_heads == ValueHeads::Grouped));
    CHECK(c.is_attention_layer(0) == (m.family == MixerFamily::Attention));
  }
  CHECK(names == std::vector<std::string>{"transformer", "hgrn", "retnet", "gla", "hgrn2", "mamba2", "rwkv6",
                                          "delta_net", "gated_deltanet", "kda", "gdn2"});
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
