// The backward engine: hand-derived gradients of a composed graph, accumulation when a Var
// is used twice and across backward calls, no_grad, detach.
#include <doctest/doctest.h>

#include <cmath>

#include "autograd/var.h"
#include "nn/ops/activation.h"
#include "nn/ops/arith.h"
#include "nn/ops/linear.h"
#include "tensor/math.h"

using namespace hla;

TEST_CASE("composed graph equals hand-derived gradients") {
  // L = sum( sigmoid(x W^T) * x2 ) with one output unit: dL/dx = s(1-s) * w * ... by hand.
  Var x(Tensor::from_f64({0.5, -1.0}, {1, 2}, DType::F64), true);
  Var w(Tensor::from_f64({2.0, 3.0}, {1, 2}, DType::F64), true);
  Var c(Tensor::from_f64({4.0}, {1, 1}, DType::F64), true);
  Var z = linear(x, w);              // z = 0.5*2 - 1*3 = -2
  Var s = sigmoid(z);                // s = sigmoid(-2)
  Var L = sum(mul(s, c));            // L = 4 s
  L.backward();
  double sv = 1.0 / (1.0 + std::exp(2.0));
  double dz = 4.0 * sv * (1 - sv);
  CHECK(L.value().item() == doctest::Approx(4 * sv).epsilon(1e-14));
  CHECK(x.grad().to_f64_vector()[0] == doctest::Approx(dz * 2.0).epsilon(1e-14));
  CHECK(x.grad().to_f64_vector()[1] == doctest::Approx(dz * 3.0).epsilon(1e-14));
  CHECK(w.grad().to_f64_vector()[0] == doctest::Approx(dz * 0.5).epsilon(1e-14));
  CHECK(w.grad().to_f64_vector()[1] == doctest::Approx(dz * -1.0).epsilon(1e-14));
  CHECK(c.grad().item() == doctest::Approx(sv).epsilon(1e-14));
}

TEST_CASE("a Var used twice gets the sum of both gradients") {
  Var a(Tensor::from_f64({3.0}, {1}, DType::F64), true);
  Var y = sum(add(mul(a, a), a));  // y = a^2 + a, dy/da = 2a + 1 = 7
  y.backward();
  CHECK(a.grad().item() == 7.0);
}

TEST_CASE("leaf gradients accumulate across backward calls until zero_grad") {
  Var a(Tensor::from_f64({2.0}, {1}, DType::F64), true);
  sum(scale(a, 3.0)).backward();
  sum(scale(a, 3.0)).backward();
  CHECK(a.grad().item() == 6.0);
  a.zero_grad();
  sum(scale(a, 5.0)).backward();
  CHECK(a.grad().item() == 5.0);
}

TEST_CASE("no_grad records nothing and detach cuts the graph") {
  Var a(Tensor::from_f64({1.0, 2.0}, {2}, DType::F64), true);
  {
    NoGradGuard guard;
    Var y = mul(a, a);
    CHECK_FALSE(y.requires_grad());
    CHECK(y.is_leaf());
  }
  Var d = a.detach();
  CHECK_FALSE(d.requires_grad());
  Var y = sum(mul(d, a));  // only the second factor carries gradient: dy/da = d
  y.backward();
  CHECK(a.grad().to_f64_vector() == std::vector<double>{1.0, 2.0});
}

TEST_CASE("multi-output node: an unused output contributes zero gradient") {
  Var a(Tensor::from_f64({1.0, 2.0}, {2}, DType::F64), true);
  std::vector<Var> outs = record_op({scale(a.value(), 2.0), scale(a.value(), 10.0)}, {a},
                                    [](const std::vector<Tensor>& g) {
                                      return std::vector<Tensor>{add(scale(g[0], 2.0), scale(g[1], 10.0))};
                                    }, "two_outputs");
  sum(outs[0]).backward();
  CHECK(a.grad().to_f64_vector() == std::vector<double>{2.0, 2.0});
}
