// linear_cross_entropy (nn/ops/linear_cross_entropy.h) against the unfused path
// cross_entropy(linear(h, W), targets): the loss and both gradients agree in fp32 within 1e-6
// relative for chunk sizes from 1 to past V (uneven last chunks, ignored rows), and the model's
// loss() (which uses it) gives the loss and every parameter gradient of cross_entropy(logits())
// (float64: 1e-12; fp32: 1e-6 on the loss, 2e-6 relative RMS on the gradients, see the case).
// On a GPU: the same agreement, and the fused loss's peak memory stays below the size of the
// full logits while the unfused path's does not (cuda::peak_bytes); without one those cases
// say SKIPPED loudly and pass. dW summed into the weight's gradient past a widening cast (an
// F64 master's F32 compute copy used by two losses and an embedding, two backward calls) equals
// cast-then-add (1e-14).
#include <doctest/doctest.h>

#include "nn/check/modes.h"
#include "nn/model.h"
#include "nn/ops/arith.h"
#include "nn/ops/cast.h"
#include "nn/ops/cross_entropy.h"
#include "nn/ops/embedding.h"
#include "nn/ops/linear.h"
#include "nn/ops/linear_cross_entropy.h"
#include "tensor/math.h"
#include "tensor/random.h"
#include "tests/test_util.h"
#ifdef HLA_CUDA
#include "cuda/runtime.h"
#endif

using namespace hla;
using namespace hla::testing;

namespace {

// Targets in [0, V) with about one row in six ignored.
Tensor targets_for(int64_t N, int64_t V, uint64_t seed) {
  std::vector<int32_t> c(N);
  Rng rng(seed);
  for (auto& x : c) x = rng.below(6) == 0 ? kIgnoreIndex : static_cast<int32_t>(rng.below(V));
  return Tensor::from_i32(c, {N});
}

struct LossAndGrads {
  Tensor loss, dh, dw;
};

// The loss of (h, w) and its gradients, fused (chunk > 0) or unfused (chunk == 0).
LossAndGrads run(const Tensor& h, const Tensor& w, const Tensor& targets, int64_t chunk) {
  Var hv(h.clone(), true), wv(w.clone(), true);
  Var loss = chunk > 0 ? linear_cross_entropy(hv, wv, targets, chunk) : cross_entropy(linear(hv, wv), targets);
  loss.backward();
  return {loss.value().to(Device::CPU), hv.grad().to(Device::CPU), wv.grad().to(Device::CPU)};
}

void check_equal(const LossAndGrads& fused, const LossAndGrads& ref, double tol) {
  CHECK(max_rel_err(fused.loss, ref.loss) <= tol);
  CHECK(max_rel_err(fused.dh, ref.dh) <= tol);
  CHECK(max_rel_err(fused.dw, ref.dw) <= tol);
}

}  // namespace

TEST_CASE("linear_cross_entropy equals cross_entropy(linear) in fp32 for every chunk size") {
  const int64_t B = 3, T = 11, D = 24, V = 517;
  Tensor h = Tensor::randn({B, T, D}, 1, 1.0);
  Tensor w = Tensor::randn({V, D}, 2, 0.5);
  Tensor targets = targets_for(B * T, V, 3).reshape({B, T});
  LossAndGrads ref = run(h, w, targets, 0);
  for (int64_t chunk : {1, 7, 128, 516, 517, 4096}) {
    CAPTURE(chunk);
    check_equal(run(h, w, targets, chunk), ref, 1e-6);
  }
}

TEST_CASE("linear_cross_entropy and embedding sum dW into the weight's gradient past a widening cast, as "
          "cast-then-add") {
  // An F64 master, its F32 compute copy used by two losses (the chunks' GEMMs sum dW past the cast:
  // beta 0, then 1) and, tied, by an embedding (its rows added last), two backward calls. The
  // reference: the F32 dW of lone uses (each weight used once: written), widened exactly and added
  // in F64 in another order (1e-14 relative).
  const int64_t N = 10, D = 8, V = 37, chunk = 16;
  Var master(Tensor::randn({V, D}, 30, 0.5, DType::F64), true);
  Tensor want = Tensor::zeros({V, D}, DType::F64);
  for (uint64_t call = 0; call < 2; call++) {
    Var copy = cast(master, DType::F32);
    Tensor h1 = Tensor::randn({N, D}, 31 + call, 1.0), h2 = Tensor::randn({N, D}, 41 + call, 1.0);
    Tensor t1 = targets_for(N, V, 51 + call), t2 = targets_for(N, V, 61 + call);
    Tensor ids = Tensor::from_i32({3, 0, 36, 3, 7}, {5}), dy = Tensor::randn({5, D}, 71 + call, 1.0);
    Var loss = add(linear_cross_entropy(Var(h1), copy, t1, chunk), linear_cross_entropy(Var(h2), copy, t2, chunk));
    run_backward({loss, embedding(ids, copy)}, {Tensor::full({}, 1.0, DType::F32), dy});
    Var lone(copy.value().clone(), true);
    run_backward({embedding(ids, lone)}, {dy});
    want = add(want, add(add(run(h1, copy.value(), t1, chunk).dw.to(DType::F64),
                             run(h2, copy.value(), t2, chunk).dw.to(DType::F64)),
                         lone.grad().to(DType::F64)));
    CAPTURE(call);
    REQUIRE(master.grad().dtype() == DType::F64);
    CHECK(max_rel_err(master.grad(), want) <= 1e-14);
  }
}

TEST_CASE("linear_cross_entropy: all rows ignored give loss 0 and zero gradients; bad input is named") {
  Tensor h = Tensor::randn({4, 8}, 4, 1.0), w = Tensor::randn({10, 8}, 5, 1.0);
  LossAndGrads all_ignored = run(h, w, Tensor::from_i32(std::vector<int32_t>(4, kIgnoreIndex), {4}), 3);
  CHECK(all_ignored.loss.item() == 0.0);
  CHECK(max_abs(all_ignored.dh) == 0.0);
  CHECK(max_abs(all_ignored.dw) == 0.0);
  Var hv(h, true), wv(w, true);
  CHECK(error_of([&] { linear_cross_entropy(hv, wv, Tensor::from_i32({0, 1, 10, 2}, {4}), 3); })
            .find("target 10 at row 2 outside [0, 10)") != std::string::npos);
  CHECK(error_of([&] { linear_cross_entropy(hv, wv, Tensor::from_i32({0, 1, 2}, {3}), 3); })
            .find("4 rows of hidden states") != std::string::npos);
  CHECK(error_of([&] { linear_cross_entropy(hv, wv, Tensor::from_i32({0, 1, 2, 3}, {4}), 0); })
            .find("chunk must be >= 1, got 0") != std::string::npos);
  Var narrow(Tensor::randn({4, 7}, 6, 1.0));
  CHECK(error_of([&] { linear_cross_entropy(narrow, wv, Tensor::from_i32({0, 1, 2, 3}, {4}), 3); })
            .find("do not end in the weight's width 8") != std::string::npos);
}

TEST_CASE("the model's loss() equals cross_entropy(logits()) with every parameter gradient") {
  // A vocabulary of 5000 spans two of the model's 4096-row chunks; tied and untied heads. In
  // float64 the two paths are the same math (1e-12). In fp32 the loss agrees within 1e-6; the
  // gradients differ by rounding (the dh of two chunk GEMMs vs one), about 4e-7 relative RMS at
  // the head and amplified to at most 1.04e-6 (A_log) by two layers' backward: bound 2e-6.
  for (DType dtype : {DType::F64, DType::F32}) {
    for (bool tied : {false, true}) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(tied);
      ModelConfig c;
      c.model_type = "gated_deltanet";
      c.hidden_size = 16;
      c.num_hidden_layers = 2;
      c.num_heads = 2;
      c.vocab_size = 5000;
      c.tie_word_embeddings = tied;
      c.set_hybrid("2:1");
      c.validate("test config");
      std::unique_ptr<TrainableModel> model = make_model(c, 11, Device::CPU, dtype);
      std::vector<int32_t> id_values(2 * 9);
      Rng rng(12);
      for (auto& x : id_values) x = static_cast<int32_t>(rng.below(c.vocab_size));
      Tensor ids = Tensor::from_i32(id_values, {2, 9});
      Tensor targets = targets_for(2 * 9, c.vocab_size, 13).reshape({2, 9});
      ParameterList params = model->parameters();
      auto loss_and_grads = [&](bool fused) {
        for (NamedParameter& p : params) p.var.zero_grad();
        Var loss = fused ? model->loss(ids, targets) : cross_entropy(model->logits(ids), targets);
        loss.backward();
        std::vector<Tensor> out{loss.value().clone()};
        for (NamedParameter& p : params) out.push_back(p.var.grad().clone());
        return out;
      };
      std::vector<Tensor> fused = loss_and_grads(true), ref = loss_and_grads(false);
      const bool f64 = dtype == DType::F64;
      CHECK(max_rel_err(fused[0], ref[0]) <= (f64 ? 1e-12 : 1e-6));
      for (size_t i = 0; i < params.size(); i++) {
        CAPTURE(params[i].name);
        if (f64) CHECK(max_rel_err(fused[i + 1], ref[i + 1]) <= 1e-12);
        else CHECK(check::rel_rms_error(fused[i + 1], ref[i + 1]) <= 2e-6);
      }
    }
  }
}

TEST_CASE("GPU linear_cross_entropy equals the unfused path and stays below the full logits in memory") {
  if (!cuda_available()) {
    MESSAGE("SKIPPED: no CUDA GPU here; linear_cross_entropy's CUDA path and its peak memory not checked");
    return;
  }
#ifdef HLA_CUDA
  // N = 2048 rows over V = 32000: the fp32 logits are 262 MB. The fused loss holds one
  // (2048, 4096) block (33.6 MB) beside the clone of W, dW and its accumulation (8.2 MB each)
  // and dh (0.5 MB): about 60 MB, under half the logits.
  const int64_t N = 2048, D = 64, V = 32000, chunk = 4096;
  Tensor h = Tensor::randn({N, D}, 21, 1.0).to(Device::CUDA);
  Tensor w = Tensor::randn({V, D}, 22, 0.3).to(Device::CUDA);
  Tensor targets = targets_for(N, V, 23).to(Device::CUDA);
  const double logits_bytes = double(N) * V * sizeof(float);
  auto peak_above_start = [&](int64_t c, LossAndGrads* out) {
    cuda::synchronize();
    const double start = double(cuda::allocated_bytes());
    cuda::reset_peak_bytes();
    *out = run(h, w, targets, c);
    cuda::synchronize();
    return double(cuda::peak_bytes()) - start;
  };
  LossAndGrads fused, ref;
  const double fused_peak = peak_above_start(chunk, &fused);
  const double unfused_peak = peak_above_start(0, &ref);
  CAPTURE(fused_peak);
  CAPTURE(unfused_peak);
  CHECK(unfused_peak >= logits_bytes);       // the unfused path holds the logits (and their gradient)
  CHECK(fused_peak < 0.5 * logits_bytes);
  // cuBLAS sums in another order than the CPU; fp32 GEMMs over D = 64 and V = 32000 terms, and
  // the fused dh adds 8 chunk products: 1.35e-5 relative was measured for dh on the H200.
  check_equal(fused, ref, 3e-5);
  check_equal(fused, run(h.to(Device::CPU), w.to(Device::CPU), targets.to(Device::CPU), 0), 3e-5);
#endif
}
