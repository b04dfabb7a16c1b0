// Every registered gradcheck case passes at max relative error <= 1e-6 (float64).
// One doctest subcase per op, so a failure names the op and input.
#include <doctest/doctest.h>

#include "autograd/gradcheck.h"

using namespace hla;

TEST_CASE("every registered op passes its float64 gradcheck") {
  REQUIRE(gradcheck_registry().size() >= 7);
  for (const auto& c : gradcheck_registry()) {
    for (const auto& r : c.run()) {
      INFO(r.op, " input ", r.input, ": max abs ", r.max_abs_err, " max rel ", r.max_rel_err);
      CHECK(r.pass);
      CHECK(r.max_rel_err <= 1e-6);
    }
  }
}

TEST_CASE("gradcheck catches a wrong derivative") {
  // y = x^2 whose backward claims 3x: the check must fail.
  auto wrong = [](const std::vector<Var>& v) {
    Tensor x = v[0].value();
    Tensor y = x.clone();
    for (int64_t i = 0; i < y.numel(); i++) y.data<double>()[i] *= x.data<double>()[i];
    return std::vector<Var>{record_op1(y, {v[0]}, [x](const std::vector<Tensor>& g) {
      Tensor d = g[0].clone();
      for (int64_t i = 0; i < d.numel(); i++) d.data<double>()[i] *= 3 * x.data<double>()[i];
      return std::vector<Tensor>{d};
    }, "wrong_square")};
  };
  auto r = gradcheck("wrong_square", wrong, {{"x", gc_randn({4}, 1)}});
  REQUIRE(r.size() == 1);
  CHECK_FALSE(r[0].pass);
  CHECK(r[0].max_rel_err > 0.3);
}
