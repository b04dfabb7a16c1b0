// The small mixer ops (l2norm, short conv, token shift + lerps, gated RMSNorm, GroupNorm /
// LayerNorm, gate parameterisations, concat0 for stacked projections): values on hand-worked inputs, chunked == whole-sequence
// for the stateful ops (short conv, token shift), equivalence with compositions of existing
// ops, and float32 against float64 within 1e-5 relative. Gradients are checked by the
// registered gradchecks (tests/test_gradcheck.cpp).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>

#include "nn/ops/activation.h"
#include "nn/ops/arith.h"
#include "nn/ops/gated_norm.h"
#include "nn/ops/gates.h"
#include "nn/ops/group_norm.h"
#include "nn/ops/l2norm.h"
#include "nn/ops/linear.h"
#include "nn/ops/rmsnorm.h"
#include "nn/ops/short_conv.h"
#include "nn/ops/token_shift.h"
#include "tensor/math.h"
#include "tests/test_util.h"

using namespace hla;
using hla::testing::max_rel_err;

namespace {

Tensor f64(const std::vector<double>& v, const Shape& shape) { return Tensor::from_f64(v, shape, DType::F64); }
double sigmoid_d(double v) { return 1.0 / (1.0 + std::exp(-v)); }
double silu_d(double v) { return v * sigmoid_d(v); }


double max_abs_gap(const Tensor& a, const Tensor& b) { return max_abs(sub(a, b)); }

// Tokens [t0, t1) of a (B, L, C) tensor.
Tensor time_slice(const Tensor& x, int64_t t0, int64_t t1) {
  int64_t B = x.size(0), L = x.size(1), C = x.size(2);
  auto v = x.to_f64_vector();
  std::vector<double> out;
  for (int64_t b = 0; b < B; b++)
    for (int64_t t = t0; t < t1; t++)
      for (int64_t c = 0; c < C; c++) out.push_back(v[(b * L + t) * C + c]);
  return Tensor::from_f64(out, {B, t1 - t0, C}, x.dtype());
}

// Joins (B, L_i, C) pieces along time.
Tensor time_concat(const std::vector<Tensor>& parts) {
  int64_t B = parts[0].size(0), C = parts[0].size(2), L = 0;
  for (const Tensor& p : parts) L += p.size(1);
  std::vector<double> out(B * L * C);
  int64_t t0 = 0;
  for (const Tensor& p : parts) {
    auto v = p.to_f64_vector();
    for (int64_t b = 0; b < B; b++)
      for (int64_t t = 0; t < p.size(1); t++)
        for (int64_t c = 0; c < C; c++) out[(b * L + t0 + t) * C + c] = v[(b * p.size(1) + t) * C + c];
    t0 += p.size(1);
  }
  return Tensor::from_f64(out, {B, L, C}, parts[0].dtype());
}

using OpFn = std::function<std::vector<Var>(const std::vector<Var>&)>;

// Runs fn on F64 inputs and on the same inputs rounded to F32, backward from every output
// with the same random seeds, and returns the worst rel_gap over outputs and input gradients.
double f32_vs_f64(const OpFn& fn, const std::vector<Tensor>& inputs64) {
  auto run = [&](DType dt, std::vector<Tensor>& outs, std::vector<Tensor>& grads) {
    std::vector<Var> vars;
    for (const Tensor& t : inputs64) vars.emplace_back(t.to(DType::F32).to(dt), true);  // same F32-exact values
    std::vector<Var> ys = fn(vars);
    std::vector<Tensor> seeds;
    for (size_t k = 0; k < ys.size(); k++) seeds.push_back(Tensor::randn(ys[k].shape(), 900 + k, 1.0, dt));
    run_backward(ys, seeds);
    for (const Var& y : ys) outs.push_back(y.value());
    for (const Var& v : vars) grads.push_back(v.grad());
  };
  std::vector<Tensor> o32, g32, o64, g64;
  run(DType::F32, o32, g32);
  run(DType::F64, o64, g64);
  double worst = 0;
  for (size_t k = 0; k < o64.size(); k++) worst = std::max(worst, max_rel_err(o32[k], o64[k]));
  for (size_t k = 0; k < g64.size(); k++) worst = std::max(worst, max_rel_err(g32[k], g64[k]));
  return worst;
}

}  // namespace

TEST_CASE("l2norm of known vectors, eps added to the sum of squares") {
  Var x(f64({3, 4, 0, 0, 1, 1}, {3, 2}));
  auto y = l2norm(x, 1e-6).value().to_f64_vector();
  double r = 1.0 / std::sqrt(25.0 + 1e-6);
  CHECK(y[0] == doctest::Approx(3 * r).epsilon(1e-15));
  CHECK(y[1] == doctest::Approx(4 * r).epsilon(1e-15));
  CHECK(y[2] == 0.0);  // a zero row stays zero (rstd = 1/sqrt(eps), finite)
  CHECK(y[4] == doctest::Approx(1.0 / std::sqrt(2.0 + 1e-6)).epsilon(1e-15));
}

TEST_CASE("short_conv of a known sequence: taps, bias, initial state, SiLU, final state") {
  // C = 2 channels, K = 3: channel 0 weights (1, 2, 3) (3 on the current token), channel 1 (0, 0, -1).
  Var x(f64({1, 5, 2, 6, 3, 7, 4, 8}, {1, 4, 2}));  // channel 0: 1 2 3 4, channel 1: 5 6 7 8
  Var w(f64({1, 2, 3, 0, 0, -1}, {2, 1, 3}));
  ShortConvOut plain = short_conv(x, w, Var(), Var(), ConvAct::Identity);
  CHECK(plain.y.value().to_f64_vector() == std::vector<double>{3, -5, 8, -6, 14, -7, 20, -8});
  CHECK(plain.final_state.value().to_f64_vector() == std::vector<double>{3, 4, 7, 8});  // (B, C, K-1)

  Var bias(f64({0.5, 1}, {2}));
  Var state(f64({10, 20, -1, -2}, {1, 2, 2}));  // channel 0 saw 10, 20; channel 1 saw -1, -2
  auto y = short_conv(x, w, bias, state, ConvAct::Identity).y.value().to_f64_vector();
  CHECK(y[0] == 1 * 10 + 2 * 20 + 3 * 1 + 0.5);  // 53.5
  CHECK(y[2] == 1 * 20 + 2 * 1 + 3 * 2 + 0.5);   // 28.5
  CHECK(y[1] == -5 + 1.0);
  auto ys = short_conv(x, w, bias, state, ConvAct::SiLU).y.value().to_f64_vector();
  CHECK(ys[2] == doctest::Approx(silu_d(28.5)).epsilon(1e-15));
  CHECK(ys[1] == doctest::Approx(silu_d(-4.0)).epsilon(1e-15));
}

TEST_CASE("short_conv: continuing from the final state equals running the whole sequence") {
  const int64_t B = 2, L = 10, C = 3, K = 4;
  Tensor x = Tensor::randn({B, L, C}, 101, 1.0, DType::F64);
  Tensor w = Tensor::randn({C, 1, K}, 102, 0.5, DType::F64);
  Tensor bias = Tensor::randn({C}, 103, 0.3, DType::F64);
  Tensor dy = Tensor::randn({B, L, C}, 104, 1.0, DType::F64);
  Var wv(w, true), bv(bias, true), xv(x, true);
  ShortConvOut full = short_conv(xv, wv, bv, Var(), ConvAct::SiLU);
  full.y.backward(dy);
  // chunk lengths 5+5 (L > K-1), 2+2+... (L < K-1: the state mixes old state and new tokens), 1 (decoding)
  for (int64_t piece : {5, 2, 1}) {
    CAPTURE(piece);
    Var wc(w, true), bc(bias, true);
    std::vector<Var> xs, ys;
    std::vector<Tensor> dys;
    Var state;
    for (int64_t t0 = 0; t0 < L; t0 += piece) {
      int64_t t1 = std::min(L, t0 + piece);
      xs.emplace_back(time_slice(x, t0, t1), true);
      ShortConvOut o = short_conv(xs.back(), wc, bc, state, ConvAct::SiLU);
      ys.push_back(o.y);
      dys.push_back(time_slice(dy, t0, t1));
      state = o.final_state;  // not detached: gradients reach earlier chunks through it
    }
    std::vector<Tensor> y_values, dxs;
    for (const Var& y : ys) y_values.push_back(y.value());
    CHECK(max_abs_gap(time_concat(y_values), full.y.value()) == 0.0);
    CHECK(max_abs_gap(state.value(), full.final_state.value()) == 0.0);
    run_backward(ys, dys);
    for (const Var& xc : xs) dxs.push_back(xc.grad());
    CHECK(max_abs_gap(time_concat(dxs), xv.grad()) <= 1e-13);
    CHECK(max_abs_gap(wc.grad(), wv.grad()) <= 1e-12);
    CHECK(max_abs_gap(bc.grad(), bv.grad()) <= 1e-12);
  }
}

TEST_CASE("token_shift: known delta, state, last token, and chunked == whole") {
  Var x(f64({1, 2, 3, 4, 5, 6}, {1, 3, 2}));
  TokenShiftOut o = token_shift(x);
  CHECK(o.delta.value().to_f64_vector() == std::vector<double>{-1, -2, -2, -2, -2, -2});  // x_{t-1} - x_t, x_0 = 0
  CHECK(o.last_token.value().to_f64_vector() == std::vector<double>{5, 6});
  TokenShiftOut s = token_shift(x, Var(f64({10, 20}, {1, 2})));
  CHECK(s.delta.value().to_f64_vector() == std::vector<double>{9, 18, -2, -2, -2, -2});

  Tensor xr = Tensor::randn({2, 7, 3}, 121, 1.0, DType::F64);
  TokenShiftOut full = token_shift(Var(xr));
  TokenShiftOut first = token_shift(Var(time_slice(xr, 0, 4)));
  TokenShiftOut second = token_shift(Var(time_slice(xr, 4, 7)), first.last_token);
  CHECK(max_abs_gap(time_concat({first.delta.value(), second.delta.value()}), full.delta.value()) == 0.0);
  CHECK(max_abs_gap(second.last_token.value(), full.last_token.value()) == 0.0);
}

TEST_CASE("lerp and ddlerp on known values") {
  Var x(f64({1}, {1, 1, 1})), delta(f64({2}, {1, 1, 1}));
  CHECK(lerp(x, delta, Var(f64({0.25}, {1}))).value().item() == 1.5);  // x + mu * delta
  // N = 2 mixes, R = 1, D = 1: m^0 = 2 tanh(zz_0) + 0.1 = 1.1, m^1 = 4 tanh(zz_1) + 0.2 = -0.8
  Var zz(f64({std::atanh(0.5), std::atanh(-0.25)}, {1, 1, 2}));
  Var w2(f64({2, 4}, {1, 2})), bias(f64({0.1, 0.2}, {2, 1}));
  std::vector<Var> xi = ddlerp(x, delta, zz, w2, bias);
  REQUIRE(xi.size() == 2);
  CHECK(xi[0].value().item() == doctest::Approx(1 + 1.1 * 2).epsilon(1e-14));
  CHECK(xi[1].value().item() == doctest::Approx(1 - 0.8 * 2).epsilon(1e-14));
}

TEST_CASE("gated_rmsnorm on known inputs, both orders and a group size") {
  Var x(f64({1, 2}, {1, 2})), z(f64({0, 1}, {1, 2})), w(f64({1, 0.5}, {2}));
  double eps = 1e-6, r = 1 / std::sqrt(2.5 + eps);  // mean(x^2) = 2.5
  auto swish = gated_rmsnorm(x, z, w, eps, GateAct::Swish).value().to_f64_vector();
  CHECK(swish[0] == 0.0);  // silu(0) = 0
  CHECK(swish[1] == doctest::Approx(2 * r * 0.5 * silu_d(1)).epsilon(1e-15));
  auto sig = gated_rmsnorm(x, z, w, eps, GateAct::Sigmoid).value().to_f64_vector();
  CHECK(sig[0] == doctest::Approx(r * 0.5).epsilon(1e-15));
  CHECK(sig[1] == doctest::Approx(2 * r * 0.5 * sigmoid_d(1)).epsilon(1e-15));
  // gate first: x' = (0, 2 silu(1)), rstd over x'
  auto before = gated_rmsnorm(x, z, w, eps, GateAct::Swish, GateOrder::GateThenNorm).value().to_f64_vector();
  double xg = 2 * silu_d(1), rg = 1 / std::sqrt(xg * xg / 2 + eps);
  CHECK(before[0] == 0.0);
  CHECK(before[1] == doctest::Approx(xg * rg * 0.5).epsilon(1e-15));
  // groups of 2 over 4 channels: each pair normalised on its own
  Var x4(f64({1, 2, 3, -1}, {1, 4})), z4(f64({5, 5, 5, 5}, {1, 4})), w4(f64({1, 1, 1, 1}, {4}));
  auto grouped = gated_rmsnorm(x4, z4, w4, eps, GateAct::Swish, GateOrder::GateThenNorm, 2).value().to_f64_vector();
  double s = silu_d(5);  // a common gate cancels inside each group up to eps
  CHECK(grouped[0] == doctest::Approx(1 * s / std::sqrt(2.5 * s * s + eps)).epsilon(1e-14));
  CHECK(grouped[2] == doctest::Approx(3 * s / std::sqrt(5.0 * s * s + eps)).epsilon(1e-14));
}

TEST_CASE("gated_rmsnorm equals rmsnorm composed with the gate, forward and backward") {
  Tensor x = Tensor::randn({2, 3, 2, 8}, 131, 1.0, DType::F64), z = Tensor::randn({2, 3, 2, 8}, 132, 1.5, DType::F64);
  Tensor w = Tensor::randn({8}, 133, 0.3, DType::F64), dy = Tensor::randn({2, 3, 2, 8}, 134, 1.0, DType::F64);
  for (GateOrder order : {GateOrder::NormThenGate, GateOrder::GateThenNorm}) {
    Var xa(x, true), za(z, true), wa(w, true), xb(x, true), zb(z, true), wb(w, true);
    Var fused = gated_rmsnorm(xa, za, wa, 1e-6, GateAct::Sigmoid, order);
    Var composed = order == GateOrder::NormThenGate ? mul(rmsnorm(xb, wb, 1e-6), sigmoid(zb))
                                                    : rmsnorm(mul(xb, sigmoid(zb)), wb, 1e-6);
    fused.backward(dy);
    composed.backward(dy);
    CHECK(max_abs_gap(fused.value(), composed.value()) <= 1e-14);
    CHECK(max_abs_gap(xa.grad(), xb.grad()) <= 1e-13);
    CHECK(max_abs_gap(za.grad(), zb.grad()) <= 1e-13);
    CHECK(max_abs_gap(wa.grad(), wb.grad()) <= 1e-13);
  }
}

TEST_CASE("concat0 stacks rows; each piece's gradient is its rows, summed where a piece is stacked twice") {
  Var a(f64({1, 2, 3, 4, 5, 6}, {2, 3}), true), b(f64({7, 8, 9}, {1, 3}), true);
  Var y = concat0({a, b, a});  // y: (5, 3)
  CHECK(y.shape() == Shape{5, 3});
  CHECK(y.value().to_f64_vector() == std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2, 3, 4, 5, 6});
  std::vector<double> dy(15);
  for (int i = 0; i < 15; i++) dy[i] = 0.5 * i;
  y.backward(f64(dy, {5, 3}));
  CHECK(a.grad().to_f64_vector() == std::vector<double>{0 + 4.5, 0.5 + 5, 1 + 5.5, 1.5 + 6, 2 + 6.5, 2.5 + 7});
  CHECK(b.grad().to_f64_vector() == std::vector<double>{3, 3.5, 4});
  CHECK_THROWS_WITH_AS(concat0({a, Var(f64({1, 2}, {1, 2}))}), doctest::Contains("concat0: piece (1, 2)"), Error);
  CHECK_THROWS_WITH_AS(concat0({}), doctest::Contains("concat0: no pieces"), Error);
}

TEST_CASE("projections stacked into one product equal the separate ones, forward and backward") {
  // GDN's a_proj and b_proj (N = 2 heads each) on x: (2, 5, 8), as nn/layers/common.h's project_stacked
  Tensor x = Tensor::randn({2, 5, 8}, 141, 1.0, DType::F64), dy_a = Tensor::randn({2, 5, 2}, 142, 1.0, DType::F64);
  Tensor wa = Tensor::randn({2, 8}, 143, 0.3, DType::F64), wb = Tensor::randn({2, 8}, 144, 0.3, DType::F64);
  Tensor dy_b = Tensor::randn({2, 5, 2}, 145, 1.0, DType::F64);
  Var x1(x, true), wa1(wa, true), wb1(wb, true), x2(x, true), wa2(wa, true), wb2(wb, true);
  const std::vector<Var> stacked = split_last(linear(x1, concat0({wa1, wb1})), {2, 2});
  const std::vector<Var> separate = {linear(x2, wa2), linear(x2, wb2)};
  run_backward(stacked, {dy_a, dy_b});
  run_backward(separate, {dy_a, dy_b});
  for (int i = 0; i < 2; i++) CHECK(max_abs_gap(stacked[i].value(), separate[i].value()) <= 1e-14);
  CHECK(max_abs_gap(x1.grad(), x2.grad()) <= 1e-14);
  CHECK(max_abs_gap(wa1.grad(), wa2.grad()) <= 1e-14);
  CHECK(max_abs_gap(wb1.grad(), wb2.grad()) <= 1e-14);
}

TEST_CASE("short_conv with norm_width equals short_conv then l2norm per head bit for bit, forward and backward") {
  // Both outputs carry a gradient, and there are a bias and an initial state: every gradient of the
  // fused norm's path (dx, dw, dbias, dstate) against the composition's.
  const int64_t B = 2, L = 7, C = 12, K = 4, width = 4;
  for (DType dtype : {DType::F32, DType::F64}) {
    CAPTURE(dtype_name(dtype));
    Tensor x = Tensor::randn({B, L, C}, 151, 1.0, dtype), w = Tensor::randn({C, 1, K}, 152, 0.5, dtype);
    Tensor bias = Tensor::randn({C}, 153, 0.3, dtype), state = Tensor::randn({B, C, K - 1}, 154, 1.0, dtype);
    Tensor dy = Tensor::randn({B, L, C}, 155, 1.0, dtype), dfinal = Tensor::randn({B, C, K - 1}, 156, 1.0, dtype);
    Var xa(x, true), wa(w, true), ba(bias, true), sa(state, true);
    Var xb(x, true), wb(w, true), bb(bias, true), sb(state, true);
    const ShortConvOut fused = short_conv(xa, wa, ba, sa, ConvAct::SiLU, Tensor(), width);
    const ShortConvOut conv = short_conv(xb, wb, bb, sb, ConvAct::SiLU);
    const Var normed = reshape(l2norm(reshape(conv.y, {B, L, C / width, width})), {B, L, C});
    run_backward({fused.y, fused.final_state}, {dy, dfinal});
    run_backward({normed, conv.final_state}, {dy, dfinal});
    CHECK(max_abs_gap(fused.y.value(), normed.value()) == 0.0);
    CHECK(max_abs_gap(fused.final_state.value(), conv.final_state.value()) == 0.0);
    CHECK(max_abs_gap(xa.grad(), xb.grad()) == 0.0);
    CHECK(max_abs_gap(wa.grad(), wb.grad()) == 0.0);
    CHECK(max_abs_gap(ba.grad(), bb.grad()) == 0.0);
    CHECK(max_abs_gap(sa.grad(), sb.grad()) == 0.0);
  }
}

TEST_CASE("short_conv names a norm_width that is not a positive divisor of C") {
  Var x(Tensor::zeros({1, 4, 12}, DType::F64)), w(Tensor::zeros({12, 1, 4}, DType::F64));
  for (int64_t width : {5, -4, 24})
    CHECK_THROWS_WITH_AS(short_conv(x, w, Var(), Var(), ConvAct::SiLU, Tensor(), width),
                         doctest::Contains(("short_conv: norm_width must be 0 (no norm) or a positive divisor of "
                                            "C = 12, got " + std::to_string(width)).c_str()),
                         Error);
}

TEST_CASE("add_rmsnorm equals add then rmsnorm bit for bit, forward and backward") {
  // Both outputs carry a gradient (the sum feeds the next add, the norm the next layer), and the
  // weight is used once more by a plain rmsnorm, so dw is added into a sum, as in the model.
  for (DType dtype : {DType::F32, DType::F64}) {
    CAPTURE(dtype_name(dtype));
    const Shape shape{2, 5, 24};
    Tensor x = Tensor::randn(shape, 141, 1.0, dtype), h = Tensor::randn(shape, 142, 1.0, dtype);
    Tensor w = Tensor::randn({24}, 143, 0.3, dtype), d_sum = Tensor::randn(shape, 144, 1.0, dtype);
    Tensor dy = Tensor::randn(shape, 145, 1.0, dtype), dz = Tensor::randn(shape, 146, 1.0, dtype);
    Var xa(x, true), ha(h, true), wa(w, true), xb(x, true), hb(h, true), wb(w, true);
    const ResidualNorm fused = add_rmsnorm(xa, ha, wa, 1e-6);
    Var sum = add(xb, hb);
    Var normed = rmsnorm(sum, wb, 1e-6);
    run_backward({fused.sum, fused.normed, rmsnorm(fused.sum, wa, 1e-6)}, {d_sum, dy, dz});
    run_backward({sum, normed, rmsnorm(sum, wb, 1e-6)}, {d_sum, dy, dz});
    CHECK(max_abs_gap(fused.sum.value(), sum.value()) == 0.0);
    CHECK(max_abs_gap(fused.normed.value(), normed.value()) == 0.0);
    CHECK(max_abs_gap(xa.grad(), xb.grad()) == 0.0);
    CHECK(max_abs_gap(ha.grad(), hb.grad()) == 0.0);
    CHECK(max_abs_gap(wa.grad(), wb.grad()) <= 1e-14 * max_abs(wb.grad()));  // the two dw terms' order
  }
}

TEST_CASE("add_rmsnorm names the operand that does not fit") {
  Var x(Tensor::zeros({2, 3, 8}, DType::F64)), w(Tensor::zeros({8}, DType::F64));
  CHECK_THROWS_WITH_AS(add_rmsnorm(x, Var(Tensor::zeros({2, 3, 4}, DType::F64)), w, 1e-6),
                       doctest::Contains("add_rmsnorm: h"), Error);
  CHECK_THROWS_WITH_AS(add_rmsnorm(x, x, Var(Tensor::zeros({4}, DType::F64)), 1e-6),
                       doctest::Contains("add_rmsnorm: weight"), Error);
}

TEST_CASE("group_norm and layer_norm on known inputs") {
  Var x(f64({1, 2, 3, 5}, {1, 4})), w(f64({1, 2, 3, 4}, {4})), b(f64({0, 0.5, 0, -1}, {4}));
  double eps = 1e-5;
  auto g = group_norm(x, w, b, 2, eps).value().to_f64_vector();
  double r0 = 1 / std::sqrt(0.25 + eps), r1 = 1 / std::sqrt(1.0 + eps);  // groups (1,2) and (3,5)
  CHECK(g[0] == doctest::Approx(-0.5 * r0 * 1).epsilon(1e-14));
  CHECK(g[1] == doctest::Approx(0.5 * r0 * 2 + 0.5).epsilon(1e-14));
  CHECK(g[2] == doctest::Approx(-1 * r1 * 3).epsilon(1e-14));
  CHECK(g[3] == doctest::Approx(1 * r1 * 4 - 1).epsilon(1e-14));
  auto l = layer_norm(x, w, b, eps).value().to_f64_vector();  // mean 2.75, var 2.1875
  double r = 1 / std::sqrt(2.1875 + eps);
  CHECK(l[0] == doctest::Approx(-1.75 * r).epsilon(1e-14));
  CHECK(l[3] == doctest::Approx(2.25 * r * 4 - 1).epsilon(1e-14));
  // GroupNorm(H) over H*dv without affine == LayerNorm over each head's dv channels
  Tensor xr = Tensor::randn({2, 3, 12}, 141, 1.0, DType::F64);
  Tensor per_head = group_norm(Var(xr), Var(Tensor::full({12}, 1.0, DType::F64)), Var(), 3, eps).value();
  Tensor by_head = layer_norm(Var(xr.reshape({2, 3, 3, 4})), Var(Tensor::full({4}, 1.0, DType::F64)),
                              Var(Tensor::zeros({4}, DType::F64)), eps).value();
  CHECK(max_abs_gap(per_head, by_head.reshape({2, 3, 12})) <= 1e-15);
}

TEST_CASE("gate parameterisations on known values") {
  auto one = [](double v) { return Var(f64({v}, {1})); };
  CHECK(gla_gate(one(0), 16).value().item() == doctest::Approx(std::log(0.5) / 16).epsilon(1e-15));
  CHECK(rwkv_gate(one(std::log(2.0))).value().item() == doctest::Approx(-2.0).epsilon(1e-15));
  CHECK(hgrn_gate(one(0), one(0.5)).value().item() == doctest::Approx(std::log(0.75)).epsilon(1e-15));
  CHECK(hgrn_gate(one(-3), one(0)).value().item() == doctest::Approx(-std::log1p(std::exp(3.0))).epsilon(1e-15));
  // far in the tail the bound holds the gate at log(lb); lb = 0 leaves logsigmoid, also in float32
  Var far(Tensor::from_f64({-100}, {1}, DType::F32));
  CHECK(hgrn_gate(far, Var(Tensor::from_f64({0.1}, {1}, DType::F32))).value().item() ==
        doctest::Approx(std::log(0.1)).epsilon(1e-6));
  CHECK(hgrn_gate(far, Var(Tensor::from_f64({0}, {1}, DType::F32))).value().item() == doctest::Approx(-100.0));
  CHECK(ssm_gate(one(1), one(std::log(2.0)), one(-1)).value().item() == doctest::Approx(-2 * std::log(2.0)).epsilon(1e-15));
  CHECK(lower_bound_gate(one(0.5), one(0), one(-0.5), -5).value().item() == -2.5);
  CHECK(lower_bound_gate(one(1), Var(), one(1), -5).value().item() == doctest::Approx(-5 * sigmoid_d(2)).epsilon(1e-15));
  // KDA layout: z (1, 1, HV=2, dk=2), A_log (HV) = (0, ln 2): channel f uses head f / dk
  Var z(Tensor::zeros({1, 1, 2, 2}, DType::F64)), a_log(f64({0, std::log(2.0)}, {2}));
  auto g = ssm_gate(z, a_log, Var(Tensor::zeros({4}, DType::F64))).value().to_f64_vector();
  double ln2 = std::log(2.0);
  CHECK(g[0] == doctest::Approx(-ln2).epsilon(1e-15));
  CHECK(g[1] == doctest::Approx(-ln2).epsilon(1e-15));
  CHECK(g[2] == doctest::Approx(-2 * ln2).epsilon(1e-15));
  CHECK(g[3] == doctest::Approx(-2 * ln2).epsilon(1e-15));
  auto retnet = retnet_gate(3, DType::F64).to_f64_vector();
  CHECK(retnet[0] == doctest::Approx(std::log(1 - 1.0 / 32)).epsilon(1e-15));
  CHECK(retnet[2] == doctest::Approx(std::log(1 - 1.0 / 128)).epsilon(1e-15));
}

TEST_CASE("every small op agrees in float32 and float64 within 1e-5 relative") {
  auto randn = [](const Shape& s, uint64_t seed, double std = 1.0, double shift = 0.0) {
    Tensor t = Tensor::randn(s, seed, std, DType::F64);
    return shift == 0.0 ? t : add(t, Tensor::full(s, shift, DType::F64));
  };
  struct Case {
    const char* name;
    OpFn fn;
    std::vector<Tensor> inputs;
  };
  const Shape x_shape{2, 16, 8};
  std::vector<Case> cases = {
      {"l2norm", [](const std::vector<Var>& v) { return std::vector<Var>{l2norm(v[0])}; }, {randn(x_shape, 1)}},
      {"short_conv", [](const std::vector<Var>& v) {
         ShortConvOut o = short_conv(v[0], v[1], v[2], v[3]);
         return std::vector<Var>{o.y, o.final_state};
       }, {randn(x_shape, 2), randn({8, 1, 4}, 3, 0.5), randn({8}, 4, 0.3), randn({2, 8, 3}, 5)}},
      {"short_conv l2norm", [](const std::vector<Var>& v) {
         ShortConvOut o = short_conv(v[0], v[1], v[2], v[3], ConvAct::SiLU, Tensor(), 4);
         return std::vector<Var>{o.y, o.final_state};
       }, {randn(x_shape, 38), randn({8, 1, 4}, 39, 0.5), randn({8}, 40, 0.3), randn({2, 8, 3}, 41)}},
      {"token_shift", [](const std::vector<Var>& v) {
         TokenShiftOut o = token_shift(v[0], v[1]);
         return std::vector<Var>{o.delta, o.last_token};
       }, {randn(x_shape, 6), randn({2, 8}, 7)}},
      {"lerp", [](const std::vector<Var>& v) { return std::vector<Var>{lerp(v[0], v[1], v[2])}; },
       {randn(x_shape, 8), randn(x_shape, 9), randn({8}, 10, 0.3, 0.5)}},
      {"ddlerp", [](const std::vector<Var>& v) { return ddlerp(v[0], v[1], v[2], v[3], v[4]); },
       {randn(x_shape, 11), randn(x_shape, 12), randn({2, 16, 10}, 13), randn({8, 10}, 14, 0.5), randn({5, 8}, 15)}},
      {"gated_rmsnorm swish", [](const std::vector<Var>& v) {
         return std::vector<Var>{gated_rmsnorm(v[0], v[1], v[2], 1e-6, GateAct::Swish)};
       }, {randn(x_shape, 16), randn(x_shape, 17, 1.5), randn({8}, 18, 0.3, 1.0)}},
      {"gated_rmsnorm sigmoid", [](const std::vector<Var>& v) {
         return std::vector<Var>{gated_rmsnorm(v[0], v[1], v[2], 1e-6, GateAct::Sigmoid)};
       }, {randn(x_shape, 19), randn(x_shape, 20, 1.5), randn({8}, 21, 0.3, 1.0)}},
      {"gated_rmsnorm gate-then-norm", [](const std::vector<Var>& v) {
         return std::vector<Var>{gated_rmsnorm(v[0], v[1], v[2], 1e-5, GateAct::Swish, GateOrder::GateThenNorm, 4)};
       }, {randn(x_shape, 22), randn(x_shape, 23, 1.5), randn({8}, 24, 0.3, 1.0)}},
      {"group_norm", [](const std::vector<Var>& v) { return std::vector<Var>{group_norm(v[0], v[1], v[2], 2, 1e-5)}; },
       {randn(x_shape, 25, 1.0, 0.5), randn({8}, 26, 0.3, 1.0), randn({8}, 27, 0.3)}},
      {"gla_gate", [](const std::vector<Var>& v) { return std::vector<Var>{gla_gate(v[0])}; }, {randn(x_shape, 28, 2.0)}},
      {"rwkv_gate", [](const std::vector<Var>& v) { return std::vector<Var>{rwkv_gate(v[0])}; }, {randn(x_shape, 29)}},
      {"hgrn_gate", [](const std::vector<Var>& v) { return std::vector<Var>{hgrn_gate(v[0], v[1])}; },
       {randn(x_shape, 30, 3.0), Tensor::uniform({8}, 31, 0.05, 0.9, DType::F64)}},
      {"ssm_gate", [](const std::vector<Var>& v) { return std::vector<Var>{ssm_gate(v[0], v[1], v[2])}; },
       {randn(x_shape, 32), randn({2}, 33, 0.5, 1.0), randn({8}, 34, 1.0, -3.0)}},
      {"lower_bound_gate", [](const std::vector<Var>& v) {
         return std::vector<Var>{lower_bound_gate(v[0], v[1], v[2], -5.0)};
       }, {randn(x_shape, 35), randn({2}, 36, 0.3), randn({8}, 37, 0.5)}},
  };
  for (const Case& c : cases) {
    double gap = f32_vs_f64(c.fn, c.inputs);
    INFO(c.name, ": float32 vs float64 relative gap ", gap);
    CHECK(gap <= 1e-5);
  }
}

TEST_CASE("small ops reject bad shapes with the op and field named") {
  Var x(Tensor::zeros({1, 4, 3}, DType::F64));
  CHECK_THROWS_WITH_AS(short_conv(x, Var(Tensor::zeros({3, 4}, DType::F64))), doctest::Contains("(C, 1, K)"), Error);
  CHECK_THROWS_WITH_AS(short_conv(x, Var(Tensor::zeros({3, 1, 4}, DType::F64)), Var(),
                                  Var(Tensor::zeros({1, 3, 4}, DType::F64))),
                       doctest::Contains("initial_state"), Error);
  CHECK_THROWS_WITH_AS(gated_rmsnorm(x, x, Var(Tensor::zeros({3}, DType::F64)), 1e-6, GateAct::Swish,
                                     GateOrder::GateThenNorm, 2),
                       doctest::Contains("group_size"), Error);
  CHECK_THROWS_WITH_AS(ssm_gate(x, Var(Tensor::zeros({2}, DType::F64)), Var(Tensor::zeros({3}, DType::F64))),
                       doctest::Contains("A_log"), Error);
  CHECK_THROWS_WITH_AS(hgrn_gate(x, Var(Tensor::zeros({5}, DType::F64))), doctest::Contains("lower_bound"), Error);
}
