// The training tests' fixtures: a tiny bigram model (embedding -> linear -> RMSNorm -> lm_head)
// that stands in for a real one, so these tests do not depend on the mixers, a deterministic
// batch source, small trainer options, comparisons of tensors bit for bit, and the settings of a
// tiny real hybrid run (tiny_mqar_run) for the tests that go through run_training.
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "nn/ops/arith.h"
#include "nn/ops/cross_entropy.h"
#include "nn/ops/embedding.h"
#include "nn/ops/linear.h"
#include "nn/ops/rmsnorm.h"
#include "tensor/json.h"
#include "tests/test_util.h"
#include "train/trainer.h"

namespace hla::testing {

// ids -> embedding (V, D) -> proj (D, D) -> RMSNorm -> lm_head (V, D) -> logits.
class TinyLM : public TrainableModel {
 public:
  TinyLM(int64_t vocab, int64_t dim, uint64_t seed, DType dtype = DType::F32) {
    add("model.embeddings.weight", Tensor::randn({vocab, dim}, seed, 0.5, dtype));
    add("model.layers.0.proj.weight", Tensor::randn({dim, dim}, seed + 1, 0.3, dtype));
    add("model.norm.weight", Tensor::full({dim}, 1.0, dtype));
    add("lm_head.weight", Tensor::randn({vocab, dim}, seed + 2, 0.3, dtype));
  }
  Var logits(const Tensor& ids) override {
    Var x = embedding(ids, params_[0].var);
    Var h = rmsnorm(linear(x, params_[1].var), params_[2].var, 1e-6);
    return linear(h, params_[3].var);
  }
  Var loss(const Tensor& ids, const Tensor& targets) override {
    return cross_entropy(logits(ids), targets);
  }
  ParameterList parameters() override { return params_; }
  Device device() const override { return Device::CPU; }

 private:
  void add(const std::string& name, Tensor t) { params_.push_back({name, Var(t, true)}); }
  ParameterList params_;
};

// A fixed batch source: the sequence t -> (3 t + 1) mod V, a different start per example.
class CycleSource : public BatchSource {
 public:
  CycleSource(int64_t vocab, int64_t B, int64_t T) : V_(vocab), B_(B), T_(T) {}
  TrainBatch next() override {
    std::vector<int32_t> ids(B_ * T_), targets(B_ * T_);
    for (int64_t b = 0; b < B_; b++) {
      int64_t tok = (next_ * 7 + b * 5) % V_;
      for (int64_t t = 0; t < T_; t++) {
        ids[b * T_ + t] = int32_t(tok);
        tok = (3 * tok + 1) % V_;
        targets[b * T_ + t] = int32_t(tok);
      }
    }
    next_++;
    TrainBatch batch{Tensor::from_i32(ids, {B_, T_}), Tensor::from_i32(targets, {B_, T_}), 0};
    batch.valid = count_valid_targets(batch.targets);
    return batch;
  }
  nlohmann::json position() const override { return {{"next", next_}}; }
  void set_position(const nlohmann::json& p) override { next_ = p.at("next").get<int64_t>(); }

 private:
  int64_t V_, B_, T_, next_ = 0;
};

// A 2-layer Gated DeltaNet hybrid (LA) on a small MQAR task: a few ms per step.
inline RunConfig tiny_mqar_run(const std::string& out_dir) {
  RunConfig c;
  ModelConfig& m = c.model.fields;
  m.model_type = "gated_deltanet";
  m.hidden_size = 32;
  m.num_hidden_layers = 2;
  m.num_heads = 2;
  m.intermediate_size = 64;
  c.model.hybrid = "2:1";
  c.data.source = "mqar";
  c.data.batch_size = 4;
  c.data.seq_len = 32;
  c.data.mqar_vocab = 64;
  c.data.mqar_kv_pairs = 4;
  c.optim.optim.name = "muon";
  c.optim.optim.lr = 0.02;
  c.optim.schedule.warmup_steps = 2;
  c.train.steps = 10;
  c.train.grad_accum = 2;
  c.train.val_batches = 2;
  c.train.out_dir = out_dir;
  return c;
}

// The step losses `hla train` wrote to out_dir/metrics.jsonl.
inline std::vector<double> logged_losses(const std::string& out_dir) {
  std::ifstream in(out_dir + "/metrics.jsonl");
  std::vector<double> losses;
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = parse_json(line, "metrics.jsonl");
    if (j.contains("loss")) losses.push_back(j["loss"].get<double>());
  }
  return losses;
}

inline std::string temp_dir(const std::string& name) {
  std::string dir = (std::filesystem::temp_directory_path() / ("hla_test_train_" + name)).string();
  std::filesystem::remove_all(dir);
  return dir;
}

inline bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() &&
         std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

inline bool params_bit_equal(TrainableModel& a, TrainableModel& b) {
  ParameterList pa = a.parameters(), pb = b.parameters();
  if (pa.size() != pb.size()) return false;
  for (size_t i = 0; i < pa.size(); i++)
    if (pa[i].name != pb[i].name || !bit_equal(pa[i].var.value(), pb[i].var.value())) return false;
  return true;
}

inline void set_grad(Var v, const std::vector<double>& g) {
  v.mutable_grad() = Tensor::from_f64(g, v.shape(), v.dtype());
}

inline TrainerOptions small_options(const std::string& optimizer) {
  TrainerOptions o;
  o.optim.name = optimizer;
  o.optim.lr = 0.02;
  o.optim.adam_lr = 0.01;
  o.schedule.kind = "cosine";
  o.schedule.total_steps = 10;
  o.schedule.warmup_steps = 2;
  o.clip = 0.5;
  o.grad_accum = 2;
  o.model_config = {{"model_type", "tiny"}};
  return o;
}

// TinyLM whose loss, from the `from_call`-th call on, sends a NaN gradient into parameter
// `index` while the loss itself stays finite.
class PoisonedGradientLM : public TinyLM {
 public:
  PoisonedGradientLM(size_t index, int from_call) : TinyLM(16, 8, 5), index_(index), from_call_(from_call) {}
  Var loss(const Tensor& ids, const Tensor& targets) override {
    Var loss = TinyLM::loss(ids, targets);
    if (++calls_ < from_call_) return loss;
    Var p = parameters()[index_].var;
    Var zero = record_op1(Tensor::zeros({}, loss.dtype()), {p}, [shape = p.shape(), dtype = p.dtype()](const auto&) {
      return std::vector<Tensor>{Tensor::full(shape, std::nan(""), dtype)};
    }, "poison");
    return hla::add(loss, zero);
  }

 private:
  size_t index_;
  int from_call_, calls_ = 0;
};

}  // namespace hla::testing
