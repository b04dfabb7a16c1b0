// Activation recompute: the checkpoint primitive (autograd/checkpoint.h) and [train] recompute.
// Recompute must change nothing but memory: losses and every gradient bit-identical to keeping
// the activations (fp32, CPU), gradient accumulation included, one choice for every block or one
// per layer kind; the leaf-ready hook fires once per parameter with its complete gradient; the
// bytes held at the end of the forward shrink.
#include <doctest/doctest.h>

#include <map>
#include <sstream>

#include "autograd/checkpoint.h"
#include "nn/model.h"
#include "nn/ops/activation.h"
#include "nn/ops/arith.h"
#include "nn/ops/linear.h"
#include "tensor/math.h"
#include "tensor/random.h"
#include "tests/test_eval_util.h"
#include "tests/test_train_util.h"

using namespace hla;
using namespace hla::testing;

namespace {

Tensor random_tokens(int64_t B, int64_t T, int64_t V, uint64_t seed) {
  Rng rng(seed);
  std::vector<int32_t> ids(B * T);
  for (auto& id : ids) id = static_cast<int32_t>(rng.below(V));
  return Tensor::from_i32(ids, {B, T});
}

ModelConfig small_config(const std::string& type, int layers, const std::string& hybrid, Routing routing) {
  ModelConfig c = eval::testing::small_model_config(type, 16, layers, 11, hybrid);
  c.routing = routing;
  return c;
}

// A model whose routing weights (zero-initialised) are set nonzero, so routed tensors matter.
std::unique_ptr<TrainableModel> routed_model(const ModelConfig& c, RecomputePlan recompute) {
  auto model = make_model(c, 7, Device::CPU, DType::F32, recompute);
  uint64_t seed = 100;
  for (auto& p : model->parameters())
    if (p.name.find("route_proj") != std::string::npos || p.name.find("cler_gamma") != std::string::npos)
      p.var.mutable_value() = Tensor::randn(p.var.shape(), seed++, 0.5);
  return model;
}

// Two micro-batches' losses, and the accumulated gradients after both backwards.
struct Trace {
  std::vector<double> losses;
  std::vector<Tensor> grads;
};

Trace trace(TrainableModel& model, const LeafReadyFn& on_leaf_ready = {}) {
  Trace t;
  for (uint64_t micro = 0; micro < 2; micro++) {
    Var loss = model.loss(random_tokens(2, 9, 11, 10 + micro), random_tokens(2, 9, 11, 20 + micro));
    t.losses.push_back(loss.value().item());
    loss.backward(Tensor::full(loss.shape(), 1.0, loss.dtype()), on_leaf_ready);
  }
  for (auto& p : model.parameters()) t.grads.push_back(p.var.grad().defined() ? p.var.grad().clone() : Tensor());
  return t;
}

int64_t count_mismatched_grads(const Trace& a, const Trace& b) {
  int64_t mismatched = 0;
  for (size_t i = 0; i < a.grads.size(); i++)
    if (a.grads[i].defined() != b.grads[i].defined() || (a.grads[i].defined() && !bit_equal(a.grads[i], b.grads[i])))
      mismatched++;
  return mismatched;
}

// Bytes of CPU tensors alive at the end of the forward that were not alive before it: what the
// graph holds for the backward (and the loss).
int64_t forward_bytes(const ModelConfig& c, RecomputePlan recompute) {
  auto model = make_model(c, 3, Device::CPU, DType::F32, recompute);
  const Tensor ids = random_tokens(2, 32, c.vocab_size, 1), targets = random_tokens(2, 32, c.vocab_size, 2);
  const int64_t before = host_bytes_live();
  Var loss = model->loss(ids, targets);
  return host_bytes_live() - before;
}

const std::vector<std::pair<std::string, Recompute>> kChoices = {
    {"mixer", Recompute::Mixer}, {"mlp", Recompute::Mlp}, {"layer", Recompute::Layer}};

}  // namespace

TEST_CASE("checkpoint: outputs and gradients equal the plain graph's, outside Vars included") {
  // y = sum(silu(x W^T) * u + 0.3 x W^T) with W a leaf and u = 2 v read from outside the part.
  Var x(Tensor::randn({3, 4}, 1), true);
  Var w(Tensor::randn({5, 4}, 2), true);
  Var v(Tensor::randn({3, 5}, 3), true);
  auto run = [&](bool recompute) {
    x.zero_grad();
    w.zero_grad();
    v.zero_grad();
    for (int micro = 0; micro < 2; micro++) {  // twice: gradients accumulate
      Var u = scale(v, 2.0);
      auto part = [&](const std::vector<Var>& in) {  // W twice: its two contributions sum in the backward
        return std::vector<Var>{add(mul(silu(linear(in[0], w)), u), scale(linear(in[0], w), 0.3))};
      };
      Var h = recompute ? checkpoint(part, {x}, "test part")[0] : part({x})[0];
      sum(h).backward();
    }
    return std::vector<Tensor>{x.grad().clone(), w.grad().clone(), v.grad().clone()};
  };
  const std::vector<Tensor> plain = run(false), recomputed = run(true);
  for (size_t i = 0; i < plain.size(); i++) CHECK(bit_equal(plain[i], recomputed[i]));
  CHECK(sq_norm(recomputed[1]) > 0);
}

TEST_CASE("checkpoint: without grad mode it is the function; nested checkpoints are refused") {
  Var x(Tensor::randn({2, 3}, 4), true);
  {
    NoGradGuard no_grad;
    Var y = checkpoint([](const std::vector<Var>& in) { return std::vector<Var>{scale(in[0], 3.0)}; }, {x}, "outer")[0];
    CHECK(!y.requires_grad());
  }
  auto inner = [](const std::vector<Var>& in) { return std::vector<Var>{scale(in[0], 3.0)}; };
  auto outer = [&](const std::vector<Var>& in) { return checkpoint(inner, in, "inner"); };
  CHECK(error_of([&] { checkpoint(outer, {x}, "outer"); }).find(
            "'inner' inside 'outer': nested checkpoints are not supported (recompute one level only)") !=
        std::string::npos);
}

TEST_CASE("recompute: losses and every gradient bit-identical to none, linear, hybrid, routed and lower-bound models") {
  const std::vector<ModelConfig> configs = {
      small_config("gated_deltanet", 2, "pure", Routing::None),
      small_config("gated_deltanet", 3, "3:1", Routing::None),  // L L A
      small_config("gated_deltanet", 3, "3:1", Routing::Clvr),
      small_config("gated_deltanet", 3, "3:1", Routing::Cler),  // layer 1 takes layer 0's error
      small_config("gated_deltanet", 3, "3:1", Routing::ClerH),
      small_config("hgrn", 2, "pure", Routing::None),   // lower bounds: Vars from outside every block
      small_config("rwkv6", 2, "pure", Routing::None),  // pre_norm on layer 0, the channel-mix FFN
      small_config("mamba2", 2, "pure", Routing::None),  // no MLP: "mlp" recomputes nothing
  };
  for (const ModelConfig& c : configs) {
    auto reference = routed_model(c, Recompute::None);
    const Trace expected = trace(*reference);
    for (const auto& choice : kChoices) {
      CAPTURE(c.model_type);
      CAPTURE(c.pattern());
      CAPTURE(routing_name(c.routing));
      CAPTURE(choice.first);
      auto model = routed_model(c, choice.second);
      const Trace got = trace(*model);
      CHECK(got.losses == expected.losses);
      CHECK(count_mismatched_grads(got, expected) == 0);
    }
  }
}

TEST_CASE("recompute: a choice per layer kind keeps losses and every gradient of none, and holds between") {
  // L L A: the linear kind twice, the attention kind once; CLER routes an error across them
  const ModelConfig c = small_config("gated_deltanet", 3, "3:1", Routing::Cler);
  auto reference = routed_model(c, Recompute::None);
  const Trace expected = trace(*reference);
  for (const char* text :
       {"linear=mixer,attention=layer", "linear=layer", "attention=mlp", "attention=none,linear=mlp"}) {
    CAPTURE(text);
    auto model = routed_model(c, parse_recompute(text, "test"));
    const Trace got = trace(*model);
    CHECK(got.losses == expected.losses);
    CHECK(count_mismatched_grads(got, expected) == 0);
  }
  const ModelConfig hybrid = small_config("gated_deltanet", 4, "3:1", Routing::None);  // L L L A
  const int64_t none = forward_bytes(hybrid, Recompute::None), every = forward_bytes(hybrid, Recompute::Layer);
  const int64_t linear = forward_bytes(hybrid, parse_recompute("linear=layer", "test"));
  const int64_t attention = forward_bytes(hybrid, parse_recompute("attention=layer", "test"));
  MESSAGE("bytes held at the end of the forward: none " << none << ", linear=layer " << linear << ", attention=layer "
                                                        << attention << ", layer " << every);
  CHECK(every < linear);
  CHECK(linear < attention);  // three linear blocks recomputed against one attention block
  CHECK(attention < none);
}

TEST_CASE("recompute: the leaf-ready hook fires once per parameter, with its complete gradient") {
  const ModelConfig c = small_config("gated_deltanet", 3, "3:1", Routing::Cler);
  std::vector<std::pair<std::string, Recompute>> choices = kChoices;
  choices.emplace_back("none", Recompute::None);
  for (const auto& choice : choices) {
    CAPTURE(choice.first);
    auto model = routed_model(c, choice.second);
    std::map<VarImpl*, int> fired;
    std::map<VarImpl*, Tensor> grad_when_ready;
    const Trace got = trace(*model, [&](const Var& leaf) {
      fired[leaf.impl()]++;
      grad_when_ready[leaf.impl()] = leaf.grad().clone();
    });
    int64_t wrong_count = 0, incomplete = 0;
    ParameterList params = model->parameters();
    for (size_t i = 0; i < params.size(); i++) {
      VarImpl* p = params[i].var.impl();
      if (!got.grads[i].defined()) {  // layer 0's cler_gamma: no lower layer routes an error to it
        if (fired[p] != 0) wrong_count++;
        continue;
      }
      if (fired[p] != 2) wrong_count++;  // once in each of the two backwards
      if (!bit_equal(grad_when_ready[p], got.grads[i])) incomplete++;  // the second one's report
    }
    CHECK(wrong_count == 0);
    CHECK(incomplete == 0);
  }
}

TEST_CASE("recompute: a 4-layer model holds less at the end of the forward") {
  const ModelConfig c = small_config("gated_deltanet", 4, "pure", Routing::None);
  const int64_t none = forward_bytes(c, Recompute::None);
  std::map<std::string, int64_t> held;
  for (const auto& choice : kChoices) held[choice.first] = forward_bytes(c, choice.second);
  MESSAGE("bytes held at the end of the forward: none " << none << ", mixer " << held["mixer"] << ", mlp "
                                                        << held["mlp"] << ", layer " << held["layer"]);
  CHECK(held["mixer"] < none);
  CHECK(held["mlp"] < none);
  CHECK(held["layer"] < none / 4);
}

TEST_CASE("recompute: hla train with recompute = layer logs the losses of none") {
  auto losses = [](const std::string& recompute) {
    RunConfig c = tiny_mqar_run(temp_dir("recompute_" + recompute));
    c.model.fields.routing = Routing::Cler;
    c.train.steps = 5;
    c.train.val_batches = 0;
    c.train.recompute = recompute;
    std::ostringstream out;
    run_training(c, "", out);
    return logged_losses(c.train.out_dir);
  };
  const std::vector<double> none = losses("none");
  CHECK(none.size() == 5);
  CHECK(losses("layer") == none);
}

TEST_CASE("recompute: a value outside none | mixer | mlp | layer is an error naming the field") {
  RunConfig c = tiny_mqar_run(temp_dir("recompute_bad"));
  c.train.recompute = "attention";
  CHECK(error_of([&] { c.validate(); }) ==
        "[train] recompute: 'attention' is not a recompute choice (none | mixer | mlp | layer)");
  CHECK(error_of([&] { parse_recompute("Layer", "--train.recompute"); }) ==
        "--train.recompute: 'Layer' is not a recompute choice (none | mixer | mlp | layer)");
}

TEST_CASE("recompute: a plan per layer kind names the part that broke it") {
  const RecomputePlan plan = parse_recompute("attention=layer", "f");
  CHECK(plan.linear == Recompute::None);
  CHECK(plan.attention == Recompute::Layer);
  CHECK(parse_recompute("mlp", "f").linear == Recompute::Mlp);
  CHECK(parse_recompute("mlp", "f").attention == Recompute::Mlp);
  CHECK(error_of([&] { parse_recompute("linear=fast", "[train] recompute"); }) ==
        "[train] recompute (linear): 'fast' is not a recompute choice (none | mixer | mlp | layer)");
  CHECK(error_of([&] { parse_recompute("mixer,attention=none", "f"); }) ==
        "f: 'mixer' in 'mixer,attention=none' is not KIND=CHOICE (KIND linear | attention; CHOICE none | mixer | mlp "
        "| layer)");
  CHECK(error_of([&] { parse_recompute("linear=mixer,", "f"); }).find("'' in 'linear=mixer,' is not KIND=CHOICE") !=
        std::string::npos);
  CHECK(error_of([&] { parse_recompute("gdn=mixer", "f"); }) ==
        "f: 'gdn' in 'gdn=mixer' is not a layer kind (linear | attention)");
  CHECK(error_of([&] { parse_recompute("linear=mixer,linear=none", "f"); }) ==
        "f: 'linear=mixer,linear=none' names linear twice");
}
