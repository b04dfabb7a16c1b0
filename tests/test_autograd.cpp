// The backward engine: hand-derived gradients of a composed graph, accumulation when a Var
// is used twice and across backward calls, no_grad, detach, and GEMMs and RMSNorm summing into
// the gradient themselves (gradient_sum) as cast-then-add would.
#include <doctest/doctest.h>

#include <cmath>
#include <map>

#include "autograd/var.h"
#include "nn/ops/activation.h"
#include "nn/ops/arith.h"
#include "nn/ops/cast.h"
#include "nn/ops/linear.h"
#include "nn/ops/rmsnorm.h"
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

// max |a - b| / max |b|, both widened to F64.
static double max_rel_diff(const Tensor& a, const Tensor& b) {
  return max_abs(sub(a.to(DType::F64), b.to(DType::F64))) / max_abs(b.to(DType::F64));
}

TEST_CASE("gemm_ widens its output as cast-then-add does: F64 from F32 operands on the CPU") {
  Tensor a = Tensor::randn({5, 3}, 1, 1.0), b = Tensor::randn({5, 4}, 2, 1.0);  // F32
  Tensor c0 = Tensor::randn({3, 4}, 3, 1.0, DType::F64);
  Tensor c = c0.clone();
  gemm_(c, a, b, true, false, 1.0, 1.0);  // c += a^T b, the F32 product widened
  Tensor want = add(c0, matmul(a, b, true, false).to(DType::F64));
  CHECK(max_abs(sub(c, want)) == 0.0);  // the same F32 product, widened exactly, the same F64 add
  Tensor narrow = Tensor::zeros({3, 4}, DType::F32);
  CHECK_THROWS_WITH_AS(gemm_(narrow, a.to(DType::F64), b.to(DType::F64), true, false),
                       doctest::Contains("F64 for F32 on the CPU"), Error);
}

TEST_CASE("linear sums its gradients in its GEMMs: past a widening cast, over uses and backward calls") {
  // The model's path on the CPU in miniature: an F64 master weight, its F32 compute copies (one
  // cast used by two linears, another used by a plain consumer, so that cast still runs), x1
  // feeding two linears. The fused path must equal the engine's cast-then-add: the same F32 GEMM
  // products, widened exactly; only the order of the F64 additions of three terms may differ
  // (1e-14 relative). x1's gradient is two F32 terms, whose sum does not depend on the order: exact.
  Var master(Tensor::randn({3, 4}, 10, 1.0, DType::F64), true);
  Var u(Tensor::randn({2, 4}, 11, 1.0), true);
  Var x1(Tensor::randn({2, 5, 4}, 12, 1.0), true), x2(Tensor::randn({2, 5, 4}, 13, 1.0), true);
  std::map<const VarImpl*, int> ready;  // how often on_leaf_ready heard each leaf
  Tensor want_master = Tensor::zeros({3, 4}, DType::F64);
  for (uint64_t call = 0; call < 2; call++) {  // two backward calls accumulate
    Var copy = cast(master, DType::F32), other_copy = cast(master, DType::F32);
    Var y1 = linear(x1, copy), y2 = linear(x2, copy), y3 = linear(x1, u);
    Tensor dy1 = Tensor::randn({2, 5, 3}, 20 + call, 1.0), dy2 = Tensor::randn({2, 5, 3}, 30 + call, 1.0);
    Tensor dy3 = Tensor::randn({2, 5, 2}, 40 + call, 1.0), dcopy = Tensor::randn({3, 4}, 50 + call, 1.0);
    run_backward({y1, y2, y3, other_copy}, {dy1, dy2, dy3, dcopy},
                 [&](const Var& leaf) { ready[leaf.impl()]++; });
    auto dw = [](const Tensor& dy, const Var& x) {  // dW = dy^T x in F32, widened: cast-then-add's term
      return matmul(dy.reshape({10, -1}), x.value().reshape({10, 4}), true, false).to(DType::F64);
    };
    want_master = add(want_master, add(add(dw(dy1, x1), dw(dy2, x2)), dcopy.to(DType::F64)));
    CAPTURE(call);
    CHECK(master.grad().dtype() == DType::F64);
    CHECK(max_rel_diff(master.grad(), want_master) <= 1e-14);
    if (call == 0) {
      Tensor want_x1 = add(matmul(dy1.reshape({10, 3}), copy.value()), matmul(dy3.reshape({10, 2}), u.value()));
      CHECK(max_abs(sub(x1.grad().reshape({10, 4}), want_x1)) == 0.0);
      CHECK(max_abs(sub(u.grad(), matmul(dy3.reshape({10, 2}), x1.value().reshape({10, 4}), true, false))) == 0.0);
    }
  }
  for (const Var* leaf : {&master, &u, &x1, &x2}) CHECK(ready[leaf->impl()] == 2);  // once per backward
}

TEST_CASE("rmsnorm sums its gradients in its kernel: dx into the residual stream's sum, dw past a widening cast") {
  // The model's block on the CPU in miniature: r = x + rmsnorm(x, copy) with x = 2 x0 an interior
  // value (the residual add delivers x's first gradient, rmsnorm's kernel adds dx into it), a
  // second rmsnorm of x2 with the same F32 compute copy of an F64 master (dw summed past the
  // cast: beta 0, then 1), two backward calls.
  // The reference is cast-then-add of the terms of lone rmsnorms (each input used once, written):
  // dx is the same F32 sum of two F32 terms (exact); dw the same F32 terms widened exactly, added
  // in F64 in another order (1e-14 relative).
  const int64_t C = 6;
  Var master(Tensor::randn({C}, 60, 0.3, DType::F64), true);
  Var x0(Tensor::randn({2, 5, C}, 61, 1.0), true), x2(Tensor::randn({3, C}, 62, 1.0), true);
  // A lone rmsnorm's gradients {dx, dw} for dy: nothing to add into, so both are written.
  auto terms = [](const Tensor& xv, const Tensor& w, const Tensor& dy) {
    Var xa(xv, true), wa(w, true);
    run_backward({rmsnorm(xa, wa, 1e-6)}, {dy});
    return std::pair{xa.grad(), wa.grad()};
  };
  Tensor want_master = Tensor::zeros({C}, DType::F64);
  for (uint64_t call = 0; call < 2; call++) {
    Var copy = cast(master, DType::F32), x = scale(x0, 2.0);
    Var r = add(x, rmsnorm(x, copy, 1e-6)), y2 = rmsnorm(x2, copy, 1e-6);
    Tensor dr = Tensor::randn({2, 5, C}, 70 + call, 1.0), dy2 = Tensor::randn({3, C}, 80 + call, 1.0);
    x0.zero_grad();
    run_backward({r, y2}, {dr, dy2});
    auto [dx, dw] = terms(x.value(), copy.value(), dr);
    auto [dx2, dw2] = terms(x2.value(), copy.value(), dy2);
    want_master = add(want_master, add(dw.to(DType::F64), dw2.to(DType::F64)));
    CAPTURE(call);
    CHECK(max_abs(sub(x0.grad(), scale(add(dr, dx), 2.0))) == 0.0);
    CHECK(master.grad().dtype() == DType::F64);
    CHECK(max_rel_diff(master.grad(), want_master) <= 1e-14);
    if (call == 0) CHECK(max_abs(sub(x2.grad(), dx2)) == 0.0);
  }
}

TEST_CASE("a gradient's last holder passes its storage to the sum uncloned; an earlier holder's is cloned") {
  // An add-like node returns its one output gradient (scale's fresh tensor) for both inputs: a's sum
  // is a clone, b's the gradient itself (no copy). A second backward adds into both sums in place:
  // neither sees the other's.
  Var a(Tensor::from_f64({1.0, 2.0}, {2}, DType::F64), true), b(Tensor::from_f64({3.0, 4.0}, {2}, DType::F64), true);
  for (int call = 1; call <= 2; call++) {
    const void* output_gradient = nullptr;
    Var y = record_op1(add(a.value(), b.value()), {a, b}, [&output_gradient](const std::vector<Tensor>& g) {
      output_gradient = g[0].raw();
      return std::vector<Tensor>{g[0], g[0]};
    }, "add");
    run_backward({scale(y, 2.0)}, {Tensor::from_f64({0.25, -0.5}, {2}, DType::F64)});
    CAPTURE(call);
    if (call == 1) {
      CHECK(b.grad().raw() == output_gradient);
      CHECK(a.grad().raw() != output_gradient);
    }
    CHECK(a.grad().to_f64_vector() == std::vector<double>{0.5 * call, -1.0 * call});
    CHECK(b.grad().to_f64_vector() == std::vector<double>{0.5 * call, -1.0 * call});
  }
}

TEST_CASE("gradient_sum outside a backward closure is an error") {
  CHECK_THROWS_WITH_AS(gradient_sum(0), doctest::Contains("outside a backward closure"), Error);
}
