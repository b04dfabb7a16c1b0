// The CUDA backend against the CPU references: every registered gpu-check case
// (autograd/gpucheck.h) must pass. Without a GPU (CI) the test says SKIPPED loudly and passes.
#include <doctest/doctest.h>

#include <random>

#include "autograd/gpucheck.h"
#include "nn/ops/cast.h"
#include "tensor/tensor.h"

using namespace hla;

TEST_CASE("every registered gpu-check case passes on the GPU") {
  REQUIRE(gpucheck_registry().size() >= 5);
  if (!cuda_available()) {
    MESSAGE("SKIPPED: no CUDA GPU here; the CUDA kernels were compiled but not checked (run make gpu-check on a GPU)");
    return;
  }
  const uint64_t seed = std::random_device{}() | 1;  // fresh inputs each run, printed on failure
  for (const auto& c : gpucheck_registry()) {
    for (const auto& r : c.run(seed)) {
      INFO(r.op, " ", r.dtype, " ", r.kernel, " ", r.tensor, ": rel err ", r.rel_err, " > tol ", r.tol, " (seed ",
           seed, ")");
      CHECK(r.pass);
    }
  }
}

TEST_CASE("rel_rms_error is the relative RMS error and NaN fails a comparison") {
  Tensor ref = Tensor::from_f64({3, 4}, {2}, DType::F64);
  Tensor got = Tensor::from_f64({3, 4.5}, {2}, DType::F32);
  CHECK(rel_rms_error(got, ref) == doctest::Approx(0.5 / 5.0).epsilon(1e-12));
  Tensor nan = Tensor::from_f64({3, NAN}, {2}, DType::F32);
  CHECK_FALSE(compare("x", DType::F32, "k", "out", nan, ref, 1e-5).pass);
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
