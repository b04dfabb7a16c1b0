// The CUDA backend against the CPU references: the check registry's gpu mode
// (nn/check/modes.h) must pass on every case. Without a GPU (CI) that test says SKIPPED loudly
// and passes; the row counting and the comparison itself are checked everywhere.
#include <doctest/doctest.h>

#include <random>

#include "nn/check/modes.h"
#include "nn/ops/cast.h"
#include "tensor/tensor.h"

using namespace hla;

TEST_CASE("every registered gpu-check case passes on the GPU") {
  const auto cases = check::cases(check::kGpu);
  REQUIRE(cases.size() >= 100);
  if (!cuda_available()) {
    MESSAGE("SKIPPED: no CUDA GPU here; the CUDA kernels were compiled but not checked (run make gpu-check on a GPU)");
    return;
  }
  const uint64_t seed = std::random_device{}() | 1;  // fresh inputs each run, printed on failure
  for (const check::Case* c : cases) {
    for (const auto& r : check::run_gpu(*c, seed)) {
      INFO(r.op, " ", r.dtype, " ", r.kernel, " ", r.tensor, ": rel err ", r.rel_err, " > tol ", r.tol, " (seed ",
           seed, ")");
      CHECK(r.pass);
    }
  }
}

TEST_CASE("gpu rows are (outputs + differentiable inputs) per dtype") {
  int checked = 0;
  for (const check::Case* c : check::cases(check::kGpu)) {
    if (c->group != "short_conv" && c->group != "optim") continue;
    int differentiable = 0;
    for (const auto& in : c->inputs(1)) differentiable += in.differentiable;
    const int outputs = c->group == "optim" ? static_cast<int>(c->outputs.size()) : 2;  // short_conv: y, final_state
    CAPTURE(c->name);
    CHECK(check::gpu_row_count(*c) == (outputs + differentiable) * static_cast<int>(c->gpu_dtypes.size()));
    checked++;
  }
  CHECK(checked >= 10);
}

TEST_CASE("rel_rms_error is the relative RMS error and NaN fails a comparison") {
  Tensor ref = Tensor::from_f64({3, 4}, {2}, DType::F64);
  Tensor got = Tensor::from_f64({3, 4.5}, {2}, DType::F32);
  CHECK(check::rel_rms_error(got, ref) == doctest::Approx(0.5 / 5.0).epsilon(1e-12));
  Tensor nan = Tensor::from_f64({3, NAN}, {2}, DType::F32);
  CHECK_FALSE(check::compare("x", DType::F32, "k", "out", false, nan, ref, 1e-5).pass);
}

TEST_CASE("cast rounds forward and casts the gradient back to the input dtype") {
  Var x(Tensor::from_f64({1.0 + 1.0 / 1024, -2.0}, {2}, DType::F32), true);
  Var y = cast(x, DType::BF16);
  CHECK(y.dtype() == DType::BF16);
  CHECK(y.value().to_f64_vector()[0] == 1.0);  // 1 + 2^-10 rounds to 1 in bf16 (8 significant bits)
  y.backward(Tensor::from_f64({0.5, 3.0}, {2}, DType::BF16));
  REQUIRE(x.grad().defined());
  CHECK(x.grad().dtype() == DType::F32);
  CHECK(x.grad().to_f64_vector() == std::vector<double>{0.5, 3.0});
}
