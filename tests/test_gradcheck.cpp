// The check registry's grad mode (nn/check/modes.h): every registered case passes its float64
// gradcheck, the engine catches a wrong derivative, and the NaN poisoning of new CPU tensors
// catches a backward that leaves part of a gradient unwritten.
#include <doctest/doctest.h>

#include <cmath>

#include "nn/check/modes.h"

using namespace hla;

TEST_CASE("every registered case passes its float64 gradcheck") {
  const auto cases = check::cases(check::kGrad);
  REQUIRE(cases.size() >= 50);
  int rows = 0;
  for (const check::Case* c : cases) {
    for (const auto& r : check::run_grad(*c)) {
      INFO(r.op, " input ", r.input, ": max abs ", r.max_abs_err, " max rel ", r.max_rel_err);
      CHECK(r.pass);
      CHECK(r.max_rel_err <= c->tol.grad);
      rows++;
    }
  }
  CHECK(rows >= 152);  // the rows of `hla gradcheck` when the registry was built
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
  auto r = gradcheck("wrong_square", wrong, {{"x", check::randn64({4}, 1)}});
  REQUIRE(r.size() == 1);
  CHECK_FALSE(r[0].pass);
  CHECK(r[0].max_rel_err > 0.3);
}

TEST_CASE("poisoned allocations: empty() is NaN, zeros() and full() are not") {
  set_poison_allocations(Device::CPU, true);
  Tensor e64 = Tensor::empty({5}, DType::F64), e32 = Tensor::empty({3, 2}, DType::F32);
  Tensor z = Tensor::zeros({5}, DType::F64), f = Tensor::full({2}, 1.5, DType::F32);
  set_poison_allocations(Device::CPU, false);
  for (double x : e64.to_f64_vector()) CHECK(std::isnan(x));
  for (double x : e32.to_f64_vector()) CHECK(std::isnan(x));
  CHECK(z.to_f64_vector() == std::vector<double>(5, 0.0));
  CHECK(f.to_f64_vector() == std::vector<double>{1.5, 1.5});
}

namespace {

// y = 2x whose backward writes every element of an empty() gradient but the first when
// `forget_one` is set: right where it writes, so only the poisoning can catch it.
check::Case doubling_case(bool forget_one) {
  return check::grad_case("test", forget_one ? "doubling, forgets dx[0]" : "doubling", 0,
                          [](uint64_t seed) { return check::Inputs{{"x", check::randn64({6}, seed + 1)}}; },
                          [forget_one](const std::vector<Var>& v) {
                            Tensor y = v[0].value().clone();
                            for (int64_t i = 0; i < y.numel(); i++) y.data<double>()[i] *= 2;
                            return std::vector<Var>{record_op1(y, {v[0]}, [forget_one](const std::vector<Tensor>& g) {
                              Tensor d = Tensor::empty(g[0].shape(), DType::F64);
                              for (int64_t i = forget_one ? 1 : 0; i < d.numel(); i++)
                                d.data<double>()[i] = 2 * g[0].data<double>()[i];
                              return std::vector<Tensor>{d};
                            }, "doubling")};
                          });
}

}  // namespace

TEST_CASE("grad mode fails a backward that leaves a gradient element unwritten") {
  const auto good = check::run_grad(doubling_case(false));
  REQUIRE(good.size() == 1);
  CHECK(good[0].pass);
  const auto bad = check::run_grad(doubling_case(true));
  REQUIRE(bad.size() == 1);
  CHECK_FALSE(bad[0].pass);
}

TEST_CASE("registry: a mode's cases come sorted by group; patterns match names and groups") {
  const auto grad = check::cases(check::kGrad);
  for (size_t i = 1; i < grad.size(); i++) CHECK(grad[i - 1]->group <= grad[i]->group);
  const auto delta = check::cases(check::kGrad, {"delta_rule"});  // the group
  CHECK(delta.size() == 9);  // 6 of whole rows, 3 of packed documents
  for (const check::Case* c : delta) CHECK(c->group == "delta_rule");
  const auto named = check::cases(check::kGrad, {"rwkv6 chunked", "swiglu"});  // a name, a group
  REQUIRE(named.size() == 2);
  CHECK(named[0]->name == "rwkv6 chunked");
  CHECK(named[1]->group == "swiglu");
  CHECK(check::cases(check::kGrad, {"no such op"}).empty());
}
