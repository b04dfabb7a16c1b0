// Training: AdamW and Muon against hand-computed steps, Newton-Schulz orthogonality, schedules,
// clipping, gradient accumulation, checkpoint round trips and failed writes, bit-exact resume,
// and a loss that falls, on the tiny model of test_train_util.h. Crashes, damaged checkpoints
// and full disks: test_checkpoint_faults.cpp.
#include <doctest/doctest.h>

#include <Eigen/Dense>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "nn/layers/params.h"
#include "nn/ops/grad_norm.h"
#include "nn/weights.h"
#include "tensor/math.h"
#include "tests/test_train_util.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

using namespace hla;
using namespace hla::testing;
namespace fs = std::filesystem;

namespace {

// The quintic's polynomial on one singular value, `steps` times.
double quintic(double s, int steps) {
  for (int i = 0; i < steps; i++) s = 3.4445 * s - 4.7750 * s * s * s + 2.0315 * std::pow(s, 5);
  return s;
}

}  // namespace

// ---------------------------------------------------------------- optimizers

TEST_CASE("AdamW matches a hand-computed step, with decay on matrices only") {
  Var matrix(Tensor::from_f64({1.0, -2.0, 0.5}, {1, 3}, DType::F64), true);
  Var vec(Tensor::from_f64({1.0, -2.0, 0.5}, {3}, DType::F64), true);
  OptimConfig c;
  c.lr = 0.1;
  c.beta1 = 0.9;
  c.beta2 = 0.999;
  c.eps = 1e-8;
  c.weight_decay = 0.1;
  Optimizer opt({{"layer.weight", matrix}, {"layer.bias", vec}}, c);
  CHECK(opt.plan()[0].weight_decay == 0.1);
  CHECK(opt.plan()[1].weight_decay == 0.0);
  std::vector<double> p0 = {1.0, -2.0, 0.5}, g1 = {0.1, -0.2, 0.3}, g2 = {-0.4, 0.1, 0.3};
  set_grad(matrix, g1);
  set_grad(vec, g1);
  opt.step(1.0);
  // Step 1: m / bc1 = g and v / bc2 = g^2, so the update is lr * g / (|g| + eps).
  for (int i = 0; i < 3; i++) {
    double sign = g1[i] / (std::abs(g1[i]) + 1e-8);
    CHECK(matrix.value().to_f64_vector()[i] == doctest::Approx(p0[i] * 0.99 - 0.1 * sign).epsilon(1e-14));
    CHECK(vec.value().to_f64_vector()[i] == doctest::Approx(p0[i] - 0.1 * sign).epsilon(1e-14));
  }
  // Step 2 at half the lr, written out from the definition.
  std::vector<double> before = matrix.value().to_f64_vector();
  set_grad(matrix, g2);
  vec.zero_grad();  // no gradient: the 1-D parameter must not move
  std::vector<double> vec_before = vec.value().to_f64_vector();
  opt.step(0.5);
  for (int i = 0; i < 3; i++) {
    double m = 0.9 * (0.1 * g1[i]) + 0.1 * g2[i];
    double v = 0.999 * (0.001 * g1[i] * g1[i]) + 0.001 * g2[i] * g2[i];
    double mhat = m / (1 - 0.81), vhat = v / (1 - 0.999 * 0.999);
    double expected = before[i] * (1 - 0.05 * 0.1) - 0.05 * mhat / (std::sqrt(vhat) + 1e-8);
    CHECK(matrix.value().to_f64_vector()[i] == doctest::Approx(expected).epsilon(1e-13));
  }
  CHECK(vec.value().to_f64_vector() == vec_before);
  CHECK(opt.steps_taken() == 2);
}

TEST_CASE("Muon matches a hand-computed step on wide and tall matrices") {
  // g = [[3, 0, 0], [0, 4, 0]]: singular values 3 and 4, Frobenius norm 5, so Newton-Schulz
  // maps it to [[q(0.6), 0, 0], [0, q(0.8), 0]] with q the quintic iterated 5 times.
  for (bool tall : {false, true}) {
    CAPTURE(tall);
    Shape shape = tall ? Shape{3, 2} : Shape{2, 3};
    std::vector<double> g = tall ? std::vector<double>{3, 0, 0, 4, 0, 0}
                                 : std::vector<double>{3, 0, 0, 0, 4, 0};
    std::vector<double> w0 = {0.5, -0.25, 1.0, 2.0, -1.0, 0.125};
    Var w(Tensor::from_f64(w0, shape, DType::F64), true);
    OptimConfig c;
    c.name = "muon";
    c.lr = 0.1;
    c.weight_decay = 0.2;
    Optimizer opt({{"model.layers.0.mlp.up_proj.weight", w}}, c);
    REQUIRE(opt.plan()[0].rule == UpdateRule::Muon);
    set_grad(w, g);
    opt.step(1.0);
    // buf = g, Nesterov update = g + 0.95 g: same direction, so the same orthogonal factor.
    double norm = 1.95 * 5;  // ||g + 0.95 g||_F
    double s0 = 0.6 * norm / (norm + 1e-7), s1 = 0.8 * norm / (norm + 1e-7);
    std::vector<double> o(6, 0.0);
    if (tall) o[0] = quintic(s0, 5), o[3] = quintic(s1, 5);
    else o[0] = quintic(s0, 5), o[4] = quintic(s1, 5);
    double scale = 0.2 * std::sqrt(3.0);
    std::vector<double> got = w.value().to_f64_vector();
    for (int i = 0; i < 6; i++)
      CHECK(got[i] == doctest::Approx(w0[i] * (1 - 0.1 * 0.2) - 0.1 * scale * o[i]).epsilon(1e-12));
  }
  CHECK(muon_update_scale("shape", 8, 2) == doctest::Approx(2.0));
  CHECK(muon_update_scale("shape", 2, 8) == 1.0);
  CHECK(muon_update_scale("rms", 2, 16) == doctest::Approx(0.8));
}

TEST_CASE("a bf16 compute copy is its master's cast, bit for bit: made, after AdamW and Muon steps, after a load") {
  std::vector<Device> devices = {Device::CPU};
  if (cuda_available()) devices.push_back(Device::CUDA);
  const std::string dir = temp_dir("compute_copy");
  fs::create_directories(dir);
  for (Device device : devices)
    for (const char* name : {"adamw", "muon"}) {
      CAPTURE(device_name(device));
      CAPTURE(name);
      // A Muon matrix, a norm and an embedding (AdamW in both optimizers).
      auto make = [device](ParamStore& store) {
        return std::vector<Var>{store.normal("model.layers.0.proj.weight", {48, 80}),
                                store.normal("model.layers.0.norm.weight", {48}),
                                store.normal("model.embeddings.weight", {16, 48})};
      };
      ParamStore store(7, 0.5, device, DType::BF16);
      const std::vector<Var> vars = make(store);
      auto copies_are_casts = [](const ParamStore& s, const std::vector<Var>& vs) {
        for (const Var& v : vs) {
          const Var used = s.use(v);
          CHECK(used.dtype() == DType::BF16);
          CHECK(bit_equal(used.value().to(Device::CPU), v.value().to(DType::BF16).to(Device::CPU)));
        }
      };
      copies_are_casts(store, vars);
      OptimConfig c;
      c.name = name;
      c.lr = 0.01;
      Optimizer opt(store.parameters(), c);
      for (int step = 0; step < 3; step++) {
        for (size_t i = 0; i < vars.size(); i++) {
          Var v = vars[i];
          v.mutable_grad() = Tensor::randn(v.shape(), 10 + step * 7 + i, 1.0).to(device);
        }
        opt.step(1.0);
        copies_are_casts(store, vars);
      }
      save_model_weights(dir, store.parameters());
      ParamStore loaded(8, 0.5, device, DType::BF16);  // other initial values, then the saved ones
      const std::vector<Var> loaded_vars = make(loaded);
      load_model_weights(dir, loaded.parameters());
      copies_are_casts(loaded, loaded_vars);
      for (size_t i = 0; i < vars.size(); i++)
        CHECK(bit_equal(loaded.use(loaded_vars[i]).value().to(Device::CPU),
                        store.use(vars[i]).value().to(Device::CPU)));
      // the gradient of the copy reaches the fp32 master as cast's does
      Var w = vars[1];
      w.zero_grad();
      store.use(w).backward(Tensor::full(w.shape(), 0.5, DType::BF16, device));
      CHECK(w.grad().dtype() == DType::F32);
      CHECK(w.grad().to(Device::CPU).to_f64_vector() == std::vector<double>(48, 0.5));
    }
  fs::remove_all(dir);
}

TEST_CASE("an update reading each gradient times the clip factor equals scaling the gradients first, bit for bit") {
  for (const char* name : {"adamw", "muon"})
    for (double factor : {0.37, 0.0, 1.0}) {
      CAPTURE(name);
      CAPTURE(factor);
      auto make = [] {  // a Muon matrix and an AdamW vector
        return ParameterList{{"model.layers.0.proj.weight", Var(Tensor::randn({48, 80}, 1, 0.1), true)},
                             {"model.layers.0.norm.weight", Var(Tensor::randn({48}, 3, 0.1), true)}};
      };
      ParameterList fused = make(), scaled = make();
      OptimConfig c;
      c.name = name;
      c.lr = 0.01;
      Optimizer fused_opt(fused, c), scaled_opt(scaled, c);
      const Tensor clip = Tensor::full({1}, factor, DType::F64);
      for (int step = 0; step < 3; step++) {
        for (size_t i = 0; i < fused.size(); i++) {
          Tensor g = Tensor::randn(fused[i].var.shape(), 10 + step * 7 + i, 5.0);
          if (factor == 0.0) g.data<float>()[1] = NAN;  // a non-finite step: dropped
          fused[i].var.mutable_grad() = g;
          scaled[i].var.mutable_grad() = g.clone();
        }
        fused_opt.stage(1.0);
        fused_opt.apply(clip);
        multi_scale_(gradients(scaled), clip);
        scaled_opt.step(1.0);
      }
      for (size_t i = 0; i < fused.size(); i++) CHECK(bit_equal(fused[i].var.value(), scaled[i].var.value()));
    }
}

TEST_CASE("Newton-Schulz output is near-orthogonal on random matrices") {
  // Keller Jordan's coefficients trade exact convergence for speed: five quintic steps leave the
  // singular values in the polynomial's band of about [0.68, 1.13] rather than at 1 (measured
  // here: [0.682, 1.134]); a small one grows from its normalised start by up to 3.4445^5.
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{32, 64}, {64, 32}, {16, 128}, {96, 40}};
  double lo = 10, hi = 0;
  for (auto [rows, cols] : shapes) {
    Tensor g = Tensor::randn({rows, cols}, 100 + rows, 1.0, DType::F32);
    Tensor out = Tensor::empty({rows, cols}, DType::F32);
    cpu::newton_schulz<float>(out.data<float>(), g.data<float>(), 1, rows, cols, 5);
    Eigen::Map<const Eigen::Matrix<float, -1, -1, Eigen::RowMajor>> O(out.data<float>(), rows, cols);
    Eigen::VectorXf sv = O.jacobiSvd().singularValues();
    lo = std::min(lo, double(sv.minCoeff()));
    hi = std::max(hi, double(sv.maxCoeff()));
  }
  CAPTURE(lo);
  CAPTURE(hi);
  CHECK(lo >= 0.6);  // measured 0.682
  CHECK(hi <= 1.2);  // measured 1.134
}

TEST_CASE("a group's update equals updating its parameters one at a time, bit for bit") {
  // Three matrices of one shape form one Muon group (one batched Newton-Schulz) and the norms
  // one AdamW group; each must end exactly where an optimizer holding it alone puts it.
  auto make = [](int k) {
    if (k == 3) return NamedParameter{"model.layers.0.norm.weight", Var(Tensor::randn({12}, 40, 0.1), true)};
    return NamedParameter{"model.layers." + std::to_string(k) + ".proj.weight",
                          Var(Tensor::randn({12, 20}, 30 + k, 0.1), true)};
  };
  for (const char* name : {"adamw", "muon"}) {
    CAPTURE(name);
    OptimConfig c;
    c.name = name;
    c.lr = 0.01;
    ParameterList together;
    std::vector<ParameterList> alone(4);
    for (int k = 0; k < 4; k++) {
      together.push_back(make(k));
      alone[k].push_back(make(k));
    }
    Optimizer opt(together, c);
    std::vector<std::unique_ptr<Optimizer>> single;
    for (int k = 0; k < 4; k++) single.push_back(std::make_unique<Optimizer>(alone[k], c));
    for (int step = 0; step < 3; step++) {
      for (int k = 0; k < 4; k++) {
        Tensor g = Tensor::randn(together[k].var.shape(), 50 + 4 * step + k, 1.0);
        together[k].var.mutable_grad() = g;
        alone[k][0].var.mutable_grad() = g.clone();
        single[k]->step(1.0);
      }
      opt.step(1.0);
    }
    for (int k = 0; k < 4; k++) {
      CAPTURE(k);
      CHECK(max_abs(sub(together[k].var.value(), alone[k][0].var.value())) == 0.0);
    }
  }
}

TEST_CASE("optimizer grouping: Muon for hidden matrices, AdamW for the rest") {
  TinyLM model(16, 8, 1);
  OptimConfig c;
  c.name = "muon";
  c.lr = 0.02;
  c.adam_lr = 0.004;
  c.weight_decay = 0.1;
  c.adam_weight_decay = 0.01;
  Optimizer opt(model.parameters(), c);
  const auto& plan = opt.plan();
  CHECK(plan[0].rule == UpdateRule::AdamW);  // embeddings
  CHECK(plan[0].lr_scale == doctest::Approx(0.2));
  CHECK(plan[0].weight_decay == 0.01);
  CHECK(plan[1].rule == UpdateRule::Muon);  // proj
  CHECK(plan[1].lr_scale == 1.0);
  CHECK(plan[1].weight_decay == 0.1);
  CHECK(plan[2].rule == UpdateRule::AdamW);  // norm: no decay
  CHECK(plan[2].weight_decay == 0.0);
  CHECK(plan[3].rule == UpdateRule::AdamW);  // lm_head
  CHECK(opt.describe().find("muon  lr 0.02  wd 0.1  (1 tensors, 64 params): model.layers.*.proj.weight") !=
        std::string::npos);

  CHECK(no_weight_decay("model.layers.3.attn.A_log", {4}));
  CHECK(no_weight_decay("model.layers.3.attn.dt_bias", {4}));
  CHECK(no_weight_decay("model.layers.3.attn_norm.weight", {64}));
  CHECK(no_weight_decay("model.layers.3.attn.o_proj.bias", {64}));
  CHECK(no_weight_decay("model.layers.3.attn.x_bias", {5, 64}));     // RWKV-6 ddlerp bias
  CHECK(no_weight_decay("model.lower_bounds", {2, 64}));              // HGRN
  CHECK(no_weight_decay("model.layers.3.attn.g_norm.weight", {2, 64}));
  CHECK_FALSE(no_weight_decay("model.layers.3.attn.q_conv1d.weight", {64, 1, 4}));
  CHECK_FALSE(no_weight_decay("model.layers.3.attn.q_proj.weight", {64, 64}));
  CHECK(is_embedding_or_head("model.embeddings.weight"));
  CHECK(is_embedding_or_head("lm_head.weight"));

  OptimConfig bad;
  bad.name = "sgd";
  CHECK(error_of([&] { bad.validate(); }).find("[optim] name: 'sgd'") != std::string::npos);
}

// ---------------------------------------------------------------- schedules and clipping

TEST_CASE("schedules at known steps") {
  ScheduleConfig s;
  s.total_steps = 10;
  s.warmup_steps = 2;
  s.min_lr_ratio = 0.1;
  s.kind = "cosine";
  CHECK(lr_factor(s, 0) == doctest::Approx(0.5));
  CHECK(lr_factor(s, 1) == doctest::Approx(1.0));
  CHECK(lr_factor(s, 2) == doctest::Approx(0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI / 8))));
  CHECK(lr_factor(s, 5) == doctest::Approx(0.55));  // p = 1/2
  CHECK(lr_factor(s, 9) == doctest::Approx(0.1));
  s.kind = "wsd";
  s.warmup_steps = 1;
  s.decay_fraction = 0.2;  // the last 2 of 10 updates
  CHECK(lr_factor(s, 0) == doctest::Approx(1.0));
  CHECK(lr_factor(s, 7) == doctest::Approx(1.0));
  CHECK(lr_factor(s, 8) == doctest::Approx(0.55));
  CHECK(lr_factor(s, 9) == doctest::Approx(0.1));
  s.decay_shape = "minus_sqrt";
  CHECK(lr_factor(s, 8) == doctest::Approx(0.1 + 0.9 * (1 - std::sqrt(0.5))));
  CHECK(lr_factor(s, 9) == doctest::Approx(0.1));
  s.kind = "constant";
  s.warmup_steps = 4;
  CHECK(lr_factor(s, 1) == doctest::Approx(0.5));
  CHECK(lr_factor(s, 9) == 1.0);
  s.kind = "linear";
  CHECK(error_of([&] { s.validate(); }).find("[optim] schedule: 'linear'") != std::string::npos);
}

TEST_CASE("global-norm clipping") {
  Var a(Tensor::zeros({2}, DType::F64), true), b(Tensor::zeros({1}, DType::F64), true);
  Var unused(Tensor::zeros({3}, DType::F64), true);
  ParameterList params = {{"a", a}, {"b", b}, {"unused", unused}};
  set_grad(a, {3, 4});
  set_grad(b, {12});
  CHECK(clip_grad_norm(params, 20.0) == doctest::Approx(13.0));  // under the limit: unchanged
  CHECK(a.grad().to_f64_vector()[1] == 4.0);
  CHECK(clip_grad_norm(params, 1.3) == doctest::Approx(13.0));
  CHECK(grad_norm(params) == doctest::Approx(1.3).epsilon(1e-6));
  CHECK(b.grad().to_f64_vector()[0] == doctest::Approx(1.2).epsilon(1e-6));
}

TEST_CASE("gradient accumulation over 2 micro-batches equals one batch of twice the size") {
  for (DType dtype : {DType::F32, DType::F64}) {
    CAPTURE(dtype_name(dtype));
    // Targets with different numbers of ignored positions per micro-batch, so the weighting by
    // valid targets matters.
    std::vector<int32_t> ids(4 * 6), targets(4 * 6);
    for (int i = 0; i < 24; i++) {
      ids[i] = (i * 5 + 3) % 16;
      targets[i] = (i % 7 == 0 || (i < 12 && i % 3 == 0)) ? kIgnoreIndex : (i * 11 + 1) % 16;
    }
    auto batch = [&](int64_t first, int64_t rows) {
      std::vector<int32_t> x(ids.begin() + first * 6, ids.begin() + (first + rows) * 6);
      std::vector<int32_t> y(targets.begin() + first * 6, targets.begin() + (first + rows) * 6);
      TrainBatch b{Tensor::from_i32(x, {rows, 6}), Tensor::from_i32(y, {rows, 6}), 0};
      b.valid = count_valid_targets(b.targets);
      return b;
    };
    TinyLM whole(16, 8, 7, dtype), split(16, 8, 7, dtype);
    auto mean_loss = [](TinyLM& model, const std::vector<TrainBatch>& micro) {
      Tensor records = Tensor::zeros({1, kStepRecordSize}, DType::F64);  // records: (1, 2)
      accumulate_gradients(model, micro, records, 0);
      return records.to_f64_vector()[0];
    };
    double loss_whole = mean_loss(whole, {batch(0, 4)});
    double loss_split = mean_loss(split, {batch(0, 2), batch(2, 2)});
    REQUIRE(batch(0, 2).valid != batch(2, 2).valid);
    double tol = dtype == DType::F32 ? 1e-6 : 1e-13;
    CHECK(std::abs(loss_whole - loss_split) <= tol * std::abs(loss_whole));
    ParameterList pw = whole.parameters(), ps = split.parameters();
    for (size_t i = 0; i < pw.size(); i++) {
      CAPTURE(pw[i].name);
      Tensor diff = sub(pw[i].var.grad(), ps[i].var.grad());
      CHECK(max_abs(diff) <= tol * max_abs(pw[i].var.grad()));
    }
  }
}

// ---------------------------------------------------------------- checkpoints

TEST_CASE("checkpoint round trip is bit-exact, and loading checks names and shapes") {
  std::string dir = temp_dir("roundtrip");
  TinyLM model(16, 8, 3);
  CycleSource source(16, 4, 8);
  Trainer trainer(small_options("muon"), model, source, nullptr, std::cout);
  for (int i = 0; i < 3; i++) trainer.train_step();
  trainer.save(dir);
  for (const char* f : {"model.safetensors", "config.json", "optimizer.safetensors", "trainer_state.json"})
    CHECK(fs::exists(dir + "/" + f));
  CHECK(read_json_file(dir + "/trainer_state.json")["step"] == 3);
  CHECK(read_json_file(dir + "/config.json")["model_type"] == "tiny");

  TinyLM restored(16, 8, 99);
  CycleSource restored_source(16, 4, 8);
  Trainer resumed(small_options("muon"), restored, restored_source, nullptr, std::cout);
  resumed.resume(dir);
  CHECK(params_bit_equal(model, restored));
  NamedTensors a = trainer.optimizer().state(), b = resumed.optimizer().state();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); i++) CHECK((a[i].first == b[i].first && bit_equal(a[i].second, b[i].second)));
  CHECK(resumed.step() == 3);

  TinyLM wider(16, 12, 3);
  std::string err = error_of([&] { load_model_weights(dir, wider.parameters()); });
  CHECK(err.find("model.safetensors: tensor 'model.embeddings.weight' has shape (16, 8)") != std::string::npos);
  ParameterList fewer = model.parameters();
  fewer.pop_back();
  err = error_of([&] { load_model_weights(dir, fewer); });
  CHECK(err.find("tensor 'lm_head.weight' is not a parameter of this model") != std::string::npos);
  ParameterList renamed = model.parameters();
  renamed[2].name = "model.final_norm.weight";
  err = error_of([&] { load_model_weights(dir, renamed); });
  CHECK(err.find("model.final_norm.weight") != std::string::npos);
  TinyLM adamw_model(16, 8, 3);
  Optimizer adamw(adamw_model.parameters(), small_options("adamw").optim);
  err = error_of([&] { load_optimizer_state(dir, adamw); });
  CHECK(err.find("optimizer 'muon' but this run uses 'adamw'") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("a failed checkpoint write keeps the previous checkpoint") {
  std::string dir = temp_dir("failed_write");
  TinyLM model(16, 8, 5);
  CycleSource source(16, 4, 8);
  Trainer trainer(small_options("adamw"), model, source, nullptr, std::cout);
  trainer.train_step();
  trainer.save(dir);
  std::string saved_weights;
  {
    std::ifstream f(dir + "/model.safetensors", std::ios::binary);
    saved_weights.assign(std::istreambuf_iterator<char>(f), {});
  }
  trainer.train_step();
  CheckpointData data;
  ParameterList params = model.parameters();
  data.params = &params;
  data.optimizer = &trainer.optimizer();
  data.trainer_state = {{"step", 2}};
  std::string tmp_seen;
  std::string err = error_of([&] {
    save_checkpoint(dir, data, [&](CommitPoint, const std::string& tmp) {
      tmp_seen = tmp;
      CHECK(fs::exists(tmp + "/model.safetensors"));  // the new files were complete ...
      throw std::runtime_error("simulated crash before the rename");
    });
  });
  CHECK(err.find("not written (any previous checkpoint there is kept): simulated crash") != std::string::npos);
  CHECK_FALSE(fs::exists(tmp_seen));  // ... and are cleaned away
  CHECK(read_json_file(dir + "/trainer_state.json")["step"] == 1);
  std::ifstream f(dir + "/model.safetensors", std::ios::binary);
  CHECK(std::string(std::istreambuf_iterator<char>(f), {}) == saved_weights);
  // A complete write replaces it, and leaves nothing else behind.
  trainer.save(dir);
  CHECK(read_json_file(dir + "/trainer_state.json")["step"] == 2);
  int entries = 0;
  for (const auto& e : fs::directory_iterator(fs::path(dir).parent_path()))
    entries += e.path().filename().string().rfind("hla_test_train_failed_write", 0) == 0;
  CHECK(entries == 1);
  // A directory that is not a checkpoint is never replaced.
  std::string other = temp_dir("not_a_checkpoint");
  fs::create_directories(other);
  std::ofstream(other + "/notes.txt") << "keep me";
  err = error_of([&] { save_checkpoint(other, data); });
  CHECK(err.find("refusing to replace") != std::string::npos);
  CHECK(fs::exists(other + "/notes.txt"));
  fs::remove_all(other);
  fs::remove_all(dir);
}

// ---------------------------------------------------------------- resume and learning

TEST_CASE("resume is bit-exact: 10 steps equal 5 + save + resume + 5") {
  for (const char* optimizer : {"adamw", "muon"}) {
    CAPTURE(optimizer);
    std::string dir = temp_dir(std::string("resume_") + optimizer);
    TinyLM straight_model(16, 8, 11);
    CycleSource straight_source(16, 4, 8);
    Trainer straight(small_options(optimizer), straight_model, straight_source, nullptr, std::cout);
    std::vector<double> straight_losses;
    for (int i = 0; i < 10; i++) straight_losses.push_back(straight.train_step().loss);

    std::vector<double> split_losses;
    {
      TinyLM model(16, 8, 11);
      CycleSource source(16, 4, 8);
      Trainer first(small_options(optimizer), model, source, nullptr, std::cout);
      for (int i = 0; i < 5; i++) split_losses.push_back(first.train_step().loss);
      first.save(dir);
    }
    TinyLM model(16, 8, 12345);  // different init: everything must come from the checkpoint
    CycleSource source(16, 4, 8);
    Trainer second(small_options(optimizer), model, source, nullptr, std::cout);
    second.resume(dir);
    for (int i = 0; i < 5; i++) split_losses.push_back(second.train_step().loss);
    REQUIRE(split_losses.size() == straight_losses.size());
    CHECK(std::memcmp(split_losses.data(), straight_losses.data(), 10 * sizeof(double)) == 0);
    CHECK(params_bit_equal(model, straight_model));
    fs::remove_all(dir);
  }
}

TEST_CASE("a tiny model learns a deterministic sequence") {
  // t -> (3t + 1) mod 16 is a bigram rule the tiny model can represent exactly: the loss falls
  // from about ln 16 = 2.77 to below 0.1 within 60 AdamW steps.
  TinyLM model(16, 16, 21);
  CycleSource source(16, 8, 16);
  TrainerOptions o = small_options("adamw");
  o.optim.lr = 0.05;
  o.schedule.total_steps = 60;
  o.grad_accum = 1;
  Trainer trainer(o, model, source, nullptr, std::cout);
  double first = trainer.train_step().loss, last = first;
  for (int i = 1; i < 60; i++) last = trainer.train_step().loss;
  CAPTURE(first);
  CHECK(first > 2.0);
  CHECK(last < 0.1);
}

TEST_CASE("optimizer updates on CUDA match the CPU reference") {
  if (!cuda_available()) {
    MESSAGE("SKIPPED: no CUDA GPU here; AdamW/Muon CUDA kernels not compared (run on a GPU)");
    return;
  }
  for (const char* name : {"adamw", "muon"}) {
    CAPTURE(name);
    auto make = [](Device d) {
      // Two matrices of one shape (a Newton-Schulz batch of 2) around a tall one and a norm.
      return ParameterList{{"model.layers.0.proj.weight", Var(Tensor::randn({48, 80}, 1, 0.1).to(d), true)},
                           {"model.layers.0.tall.weight", Var(Tensor::randn({96, 32}, 2, 0.1).to(d), true)},
                           {"model.layers.0.norm.weight", Var(Tensor::randn({48}, 3, 0.1).to(d), true)},
                           {"model.layers.1.proj.weight", Var(Tensor::randn({48, 80}, 4, 0.1).to(d), true)}};
    };
    ParameterList cpu = make(Device::CPU), gpu = make(Device::CUDA);
    OptimConfig c;
    c.name = name;
    c.lr = 0.01;
    Optimizer cpu_opt(cpu, c), gpu_opt(gpu, c);
    for (int step = 0; step < 3; step++) {
      for (size_t i = 0; i < cpu.size(); i++) {
        Tensor g = Tensor::randn(cpu[i].var.shape(), 10 + step * 7 + i, 1.0);
        cpu[i].var.mutable_grad() = g;
        gpu[i].var.mutable_grad() = g.to(Device::CUDA);
      }
      cpu_opt.step(1.0);
      gpu_opt.step(1.0);
    }
    for (size_t i = 0; i < cpu.size(); i++) {
      CAPTURE(cpu[i].name);
      Tensor moved = sub(cpu[i].var.value(), Tensor::randn(cpu[i].var.shape(), 1 + i, 0.1));
      Tensor diff = sub(cpu[i].var.value(), gpu[i].var.value().to(Device::CPU));
      CHECK(max_abs(diff) <= 1e-4 * max_abs(moved));  // relative to how far the update moved it
    }
  }
}
