// Softmax attention, RoPE and the HGRN recurrence against references written here: a naive
// attention that materialises the T x T score matrix (and its backward by matrix calculus),
// hand-computed rotations, and a direct HGRN loop. Gradients themselves are finite-difference
// checked by the gradcheck registry; these tests pin the math to independent formulas (and
// HGRN's CPU result to be the same for every thread count).
#include <doctest/doctest.h>

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "nn/ops/attention.h"
#include "nn/ops/hgrn.h"
#include "nn/ops/parallel.h"
#include "nn/ops/rope.h"
#include "tests/test_util.h"

using namespace hla;
using hla::testing::max_rel_err;

namespace {

using Mat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Head h of batch b of a (B, T, heads, width) buffer, as a T x width matrix.
Mat head_matrix(const std::vector<double>& x, int64_t b, int64_t h, int64_t T, int64_t heads, int64_t width) {
  Mat m(T, width);
  for (int64_t t = 0; t < T; t++)
    for (int64_t c = 0; c < width; c++) m(t, c) = x[((b * T + t) * heads + h) * width + c];
  return m;
}
void add_head_matrix(std::vector<double>& x, const Mat& m, int64_t b, int64_t h, int64_t heads) {
  const int64_t T = m.rows(), width = m.cols();
  for (int64_t t = 0; t < T; t++)
    for (int64_t c = 0; c < width; c++) x[((b * T + t) * heads + h) * width + c] += m(t, c);
}

struct AttentionCase {
  int64_t B, T, H, Hkv, D, Dv;
  double scale;
  int64_t window;
};

struct AttentionResult {
  std::vector<double> o, lse, dq, dk, dv;
};

// The textbook form: S = scale Q K^T masked, P = softmax(S), O = P V; backward
// dP = dO V^T, dS = P * (dP - rowsum(P * dP)), dQ = scale dS K, dK = scale dS^T Q, dV = P^T dO.
AttentionResult naive_attention(const AttentionCase& c, const std::vector<double>& q, const std::vector<double>& k,
                                const std::vector<double>& v, const std::vector<double>& dout) {
  const int64_t B = c.B, T = c.T, H = c.H, Hkv = c.Hkv;
  AttentionResult r;
  r.o.assign(B * T * H * c.Dv, 0.0);
  r.lse.assign(B * H * T, 0.0);
  r.dq.assign(q.size(), 0.0);
  r.dk.assign(k.size(), 0.0);
  r.dv.assign(v.size(), 0.0);
  for (int64_t b = 0; b < B; b++)
    for (int64_t h = 0; h < H; h++) {
      const int64_t m = h / (H / Hkv);
      Mat Q = head_matrix(q, b, h, T, H, c.D), K = head_matrix(k, b, m, T, Hkv, c.D);
      Mat V = head_matrix(v, b, m, T, Hkv, c.Dv), dO = head_matrix(dout, b, h, T, H, c.Dv);
      Mat S = c.scale * Q * K.transpose();  // S: (T, T)
      Mat P = Mat::Zero(T, T);
      for (int64_t t = 0; t < T; t++) {
        double total = 0;
        for (int64_t tau = 0; tau <= t; tau++)
          if (c.window == 0 || t - tau < c.window) total += std::exp(S(t, tau));
        r.lse[(b * H + h) * T + t] = std::log(total);
        for (int64_t tau = 0; tau <= t; tau++)
          if (c.window == 0 || t - tau < c.window) P(t, tau) = std::exp(S(t, tau)) / total;
      }
      Mat dP = dO * V.transpose();
      Eigen::VectorXd row_dot = P.cwiseProduct(dP).rowwise().sum();
      Mat dS = P.cwiseProduct(dP.colwise() - row_dot);
      add_head_matrix(r.o, P * V, b, h, H);
      add_head_matrix(r.dq, c.scale * dS * K, b, h, H);
      add_head_matrix(r.dk, c.scale * dS.transpose() * Q, b, m, Hkv);
      add_head_matrix(r.dv, P.transpose() * dO, b, m, Hkv);
    }
  return r;
}

struct AttentionInputs {
  Tensor q, k, v, dout;  // F64
};
AttentionInputs attention_inputs(const AttentionCase& c, uint64_t seed) {
  return {Tensor::randn({c.B, c.T, c.H, c.D}, seed, 1.0, DType::F64),
          Tensor::randn({c.B, c.T, c.Hkv, c.D}, seed + 1, 1.0, DType::F64),
          Tensor::randn({c.B, c.T, c.Hkv, c.Dv}, seed + 2, 1.0, DType::F64),
          Tensor::randn({c.B, c.T, c.H, c.Dv}, seed + 3, 1.0, DType::F64)};
}

// Output and input gradients of the Var op for the given inputs (in their dtype) and dout.
struct AttentionRun {
  Tensor o, dq, dk, dv;
};
AttentionRun run_attention(const AttentionCase& c, const AttentionInputs& in, DType dtype) {
  Var q(in.q.to(dtype), true), k(in.k.to(dtype), true), v(in.v.to(dtype), true);
  Var o = attention(q, k, v, c.scale, c.window);
  o.backward(in.dout.to(dtype));
  return {o.value(), q.grad(), k.grad(), v.grad()};
}

}  // namespace

TEST_CASE("attention equals a naive materialised softmax, forward, lse and gradients") {
  const AttentionCase cases[] = {
      {2, 9, 4, 2, 5, 3, 1.0 / std::sqrt(5.0), 0},  // GQA 4 -> 2, full causal
      {2, 9, 4, 2, 5, 3, 0.6, 4},                   // GQA with a sliding window
      {1, 11, 3, 1, 4, 6, 0.5, 1},                  // window 1: each query sees only itself
      {2, 7, 2, 2, 6, 2, 0.3, 3},                   // plain multi-head, window
  };
  for (const AttentionCase& c : cases) {
    CAPTURE(c.H);
    CAPTURE(c.Hkv);
    CAPTURE(c.window);
    AttentionInputs in = attention_inputs(c, 100 + c.window);
    AttentionResult ref = naive_attention(c, in.q.to_f64_vector(), in.k.to_f64_vector(), in.v.to_f64_vector(),
                                          in.dout.to_f64_vector());
    AttentionRun got = run_attention(c, in, DType::F64);
    CHECK(max_rel_err(got.o, ref.o) < 1e-13);
    CHECK(max_rel_err(got.dq, ref.dq) < 1e-13);
    CHECK(max_rel_err(got.dk, ref.dk) < 1e-13);
    CHECK(max_rel_err(got.dv, ref.dv) < 1e-13);

    std::vector<double> o(ref.o.size()), lse(ref.lse.size());
    cpu::attention_forward(o.data(), lse.data(), in.q.data<double>(), in.k.data<double>(), in.v.data<double>(),
                           AttentionDims{c.B, c.T, c.H, c.Hkv, c.D, c.Dv, c.scale, c.window, DType::F64});
    CHECK(max_rel_err(lse, ref.lse) < 1e-13);
  }
}

TEST_CASE("attention window 1 returns v, and a window of T or more is full causal") {
  const AttentionCase own{2, 6, 4, 2, 3, 3, 0.5, 1};
  AttentionInputs in = attention_inputs(own, 7);
  Tensor o = attention(Var(in.q), Var(in.k), Var(in.v), own.scale, own.window).value();  // (B, T, H, Dv)
  const std::vector<double> ov = o.to_f64_vector(), vv = in.v.to_f64_vector();
  for (int64_t bt = 0; bt < own.B * own.T; bt++)
    for (int64_t h = 0; h < own.H; h++)
      for (int64_t c = 0; c < own.Dv; c++) CHECK(ov[(bt * own.H + h) * own.Dv + c] == vv[(bt * own.Hkv + h / 2) * own.Dv + c]);

  AttentionCase full{2, 6, 4, 2, 3, 3, 0.5, 0}, wide = full;
  wide.window = 6;
  AttentionRun a = run_attention(full, in, DType::F64), b = run_attention(wide, in, DType::F64);
  CHECK(max_rel_err(b.o, a.o) == 0.0);
  CHECK(max_rel_err(b.dk, a.dk) == 0.0);
}

TEST_CASE("attention float32 agrees with float64 to 1e-5 relative") {
  for (int64_t window : {0, 8}) {
    CAPTURE(window);
    const AttentionCase c{2, 33, 4, 2, 16, 8, 0.25, window};
    AttentionInputs in = attention_inputs(c, 300);
    // Both runs see the same (float-representable) inputs.
    in = {in.q.to(DType::F32).to(DType::F64), in.k.to(DType::F32).to(DType::F64), in.v.to(DType::F32).to(DType::F64),
          in.dout.to(DType::F32).to(DType::F64)};
    AttentionRun f64 = run_attention(c, in, DType::F64), f32 = run_attention(c, in, DType::F32);
    CHECK(max_rel_err(f32.o, f64.o) <= 1e-5);
    CHECK(max_rel_err(f32.dq, f64.dq) <= 1e-5);
    CHECK(max_rel_err(f32.dk, f64.dk) <= 1e-5);
    CHECK(max_rel_err(f32.dv, f64.dv) <= 1e-5);
  }
}

TEST_CASE("attention rejects mismatched heads, shapes and windows") {
  Var q(Tensor::zeros({1, 4, 3, 2}, DType::F64)), k(Tensor::zeros({1, 4, 2, 2}, DType::F64));
  Var v(Tensor::zeros({1, 4, 2, 2}, DType::F64));
  CHECK_THROWS_AS(attention(q, k, v, 1.0), Error);  // 3 query heads on 2 kv heads
  Var q4(Tensor::zeros({1, 4, 4, 2}, DType::F64)), k_short(Tensor::zeros({1, 3, 2, 2}, DType::F64));
  CHECK_THROWS_AS(attention(q4, k_short, v, 1.0), Error);
  CHECK_THROWS_AS(attention(q4, k, v, 1.0, -1), Error);
  CHECK_NOTHROW(attention(q4, k, v, 1.0, 2));
}

namespace {

// Rows [from, to) of the flattened tokens of x (B, T, heads, width), as a batch of one.
Tensor token_rows(const Tensor& x, int64_t from, int64_t to) {
  return x.reshape({x.size(0) * x.size(1), x.size(2), x.size(3)}).slice0(from, to).clone().reshape(
      {1, to - from, x.size(2), x.size(3)});
}

}  // namespace

TEST_CASE("attention over packed documents equals each document run alone, values and gradients") {
  // Row 0 holds documents of 1, 5 and 7 tokens, row 1 an empty document (the repeated 13) and one
  // of 13 tokens; GQA 4 -> 2; full causal and a window of 3.
  const std::vector<int64_t> cu_seqlens = {0, 1, 6, 13, 13, 26};
  for (int64_t window : {0, 3}) {
    CAPTURE(window);
    const AttentionCase c{2, 13, 4, 2, 5, 3, 0.4, window};
    AttentionInputs in = attention_inputs(c, 500 + window);
    Var q(in.q, true), k(in.k, true), v(in.v, true);
    Var o = attention(q, k, v, c.scale, c.window, document_starts(cu_seqlens, c.B, c.T));
    o.backward(in.dout);
    for (size_t i = 0; i + 1 < cu_seqlens.size(); i++) {
      const int64_t from = cu_seqlens[i], to = cu_seqlens[i + 1];
      if (from == to) continue;
      CAPTURE(from);
      Var qd(token_rows(in.q, from, to), true), kd(token_rows(in.k, from, to), true);
      Var vd(token_rows(in.v, from, to), true);
      Var od = attention(qd, kd, vd, c.scale, c.window);
      od.backward(token_rows(in.dout, from, to));
      // the same products in the same order: equal, not merely close
      CHECK(max_rel_err(token_rows(o.value(), from, to), od.value()) == 0.0);
      CHECK(max_rel_err(token_rows(q.grad(), from, to), qd.grad()) == 0.0);
      CHECK(max_rel_err(token_rows(k.grad(), from, to), kd.grad()) == 0.0);
      CHECK(max_rel_err(token_rows(v.grad(), from, to), vd.grad()) == 0.0);
    }
  }
}

TEST_CASE("document_starts: each token's document start; bad cu_seqlens and doc_start fail naming the entry") {
  const Tensor starts = document_starts({0, 2, 3, 3, 4, 8}, 2, 4);  // an empty document at 3
  const std::vector<double> want = {0, 0, 2, 3, 0, 0, 0, 0};
  CHECK(starts.to_f64_vector() == want);
  CHECK(document_starts({0, 6}, 1, 6).to_f64_vector() == std::vector<double>(6, 0.0));
  auto message = [](auto&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(message([] { document_starts({0, 8}, 2, 4); }).find("row 1 starts at token 4") != std::string::npos);
  CHECK(message([] { document_starts({0, 3, 2, 4}, 1, 4); }).find("cu_seqlens[2] = 2") != std::string::npos);
  CHECK(message([] { document_starts({0, 2}, 1, 4); }).find("from 0 to 2") != std::string::npos);
  CHECK(message([] { document_starts({}, 1, 4); }).find("got 0 entries") != std::string::npos);
  Var x(Tensor::zeros({1, 4, 2, 2}, DType::F64));
  const Tensor bad = Tensor::from_i32({0, 0, 1, 2}, {1, 4});  // token 2 starts at 1
  CHECK(message([&] { attention(x, x, x, 1.0, 0, bad); }).find("doc_start[0, 2] = 1") != std::string::npos);
  CHECK(message([&] { attention(x, x, x, 1.0, 0, Tensor::from_i32({0, 0}, {1, 2})); }).find("(B, T) = (1, 4)") !=
        std::string::npos);
}

TEST_CASE("rope rotates channel pairs by position * theta^(-2i/D)") {
  // D = 4, theta = 100: inv_freq = (1, 0.1). Token 0 at position 1, token 1 at position 2.
  // y_0 = x_0 cos(p) - x_2 sin(p), y_2 = x_0 sin(p) + x_2 cos(p), pair (1, 3) with angle 0.1 p.
  Tensor x = Tensor::from_f64({1, 2, 3, 4, 1, 2, 3, 4}, {1, 2, 1, 4}, DType::F64);
  const std::vector<double> expected = {-1.9841106485555495, 1.590674663968739,  2.4623779024123156,  4.17968349440576,
                                        -3.1440391170241875, 1.1654558325022384, -0.33914308281574557, 4.317604972955089};
  std::vector<double> y = rope(Var(x), 100.0, 1).value().to_f64_vector();
  for (size_t i = 0; i < y.size(); i++) CHECK(y[i] == doctest::Approx(expected[i]).epsilon(1e-15));
  // Position 0 is the identity.
  CHECK(rope(Var(x), 100.0, 0).value().to_f64_vector()[2] == 3.0);
  CHECK_THROWS_AS(rope(Var(Tensor::zeros({1, 2, 1, 3}, DType::F64)), 100.0), Error);  // odd D
}

TEST_CASE("rope with per-token positions rotates each token as a sequence starting at its position") {
  const Tensor x = Tensor::randn({2, 3, 2, 4}, 41, 1.0, DType::F64);  // (B, T, H, D)
  const std::vector<int32_t> positions = {0, 1, 0, 7, 8, 9};         // (B, T)
  Var xv(x, true);
  Var y = rope(xv, 50.0, Tensor::from_i32(positions, {2, 3}));
  y.backward(Tensor::full({2, 3, 2, 4}, 1.0, DType::F64));
  for (int64_t bt = 0; bt < 6; bt++) {
    CAPTURE(bt);
    Var token(token_rows(x, bt, bt + 1), true);
    Var want = rope(token, 50.0, int64_t(positions[bt]));
    want.backward(Tensor::full({1, 1, 2, 4}, 1.0, DType::F64));
    CHECK(max_rel_err(token_rows(y.value(), bt, bt + 1), want.value()) == 0.0);
    CHECK(max_rel_err(token_rows(xv.grad(), bt, bt + 1), token.grad()) == 0.0);
  }
  CHECK_THROWS_AS(rope(xv, 50.0, Tensor::from_i32({0, 1, 2}, {1, 3})), Error);  // not (B, T)
}

TEST_CASE("rope backward is the inverse rotation and attention scores depend only on distance") {
  const int64_t B = 2, T = 5, H = 3, D = 8;
  Tensor x = Tensor::randn({B, T, H, D}, 41, 1.0, DType::F64);
  Tensor y = rope(Var(x), 10000.0, 7).value();
  Tensor back = Tensor::empty(x.shape(), DType::F64);
  cpu::rope_backward(back.data<double>(), y.data<double>(), B, T, H, D, 10000.0, 7);  // rotate by -phi
  CHECK(max_rel_err(back, x) < 1e-15);
  // Through autograd: the gradient of <rope(x), y> with respect to x is rope^T y = x.
  Var xv(x, true);
  rope(xv, 10000.0, 7).backward(y);
  CHECK(max_rel_err(xv.grad(), x) < 1e-15);

  // q_t . k_s after RoPE depends on t - s only: shifting every position by 20 keeps it.
  Tensor q = Tensor::randn({1, T, 1, D}, 42, 1.0, DType::F64), k = Tensor::randn({1, T, 1, D}, 43, 1.0, DType::F64);
  auto score = [&](int64_t offset, int64_t t, int64_t s) {
    std::vector<double> qr = rope(Var(q), 10000.0, offset).value().to_f64_vector();
    std::vector<double> kr = rope(Var(k), 10000.0, offset).value().to_f64_vector();
    double dot = 0;
    for (int64_t i = 0; i < D; i++) dot += qr[t * D + i] * kr[s * D + i];
    return dot;
  };
  CHECK(score(20, 4, 1) == doctest::Approx(score(0, 4, 1)).epsilon(1e-13));
  CHECK(score(20, 3, 3) == doctest::Approx(score(0, 3, 3)).epsilon(1e-13));
}

namespace {

// HGRN written as the textbook loop over (b, t, d): h = exp(g) h + x.
void direct_hgrn(std::vector<double>& o, std::vector<double>& ht, const std::vector<double>& x,
                 const std::vector<double>& g, const std::vector<double>& h0, int64_t B, int64_t T, int64_t D) {
  o.assign(B * T * D, 0.0);
  ht = h0;
  for (int64_t b = 0; b < B; b++)
    for (int64_t t = 0; t < T; t++)
      for (int64_t d = 0; d < D; d++) {
        double& h = ht[b * D + d];
        h = std::exp(g[(b * T + t) * D + d]) * h + x[(b * T + t) * D + d];
        o[(b * T + t) * D + d] = h;
      }
}

// Gates in log space: logsigmoid of N(0, 1), about [-3, 0).
Tensor hgrn_gates(const Shape& shape, uint64_t seed) {
  Tensor g = Tensor::randn(shape, seed, 1.0, DType::F64);
  for (int64_t i = 0; i < g.numel(); i++) g.data<double>()[i] = -std::log1p(std::exp(-g.data<double>()[i]));
  return g;
}

// (B, T1, D) and (B, T2, D) joined along time.
Tensor concat_time(const Tensor& a, const Tensor& b) {
  const int64_t B = a.size(0), T1 = a.size(1), T2 = b.size(1), D = a.size(2);
  Tensor out = Tensor::empty({B, T1 + T2, D}, DType::F64);
  for (int64_t bb = 0; bb < B; bb++) {
    std::copy_n(a.data<double>() + bb * T1 * D, T1 * D, out.data<double>() + bb * (T1 + T2) * D);
    std::copy_n(b.data<double>() + bb * T2 * D, T2 * D, out.data<double>() + (bb * (T1 + T2) + T1) * D);
  }
  return out;
}

}  // namespace

TEST_CASE("hgrn equals a direct loop, with and without an initial state") {
  const int64_t B = 3, T = 10, D = 4;
  Tensor x = Tensor::randn({B, T, D}, 51, 1.0, DType::F64), g = hgrn_gates({B, T, D}, 52);
  Tensor h0 = Tensor::randn({B, D}, 53, 1.0, DType::F64);
  std::vector<double> o_ref, ht_ref;
  direct_hgrn(o_ref, ht_ref, x.to_f64_vector(), g.to_f64_vector(), h0.to_f64_vector(), B, T, D);
  HgrnOutput out = hgrn(Var(x), Var(g), Var(h0));
  CHECK(max_rel_err(out.o.value(), o_ref) < 1e-15);
  CHECK(max_rel_err(out.final_state.value(), ht_ref) < 1e-15);

  direct_hgrn(o_ref, ht_ref, x.to_f64_vector(), g.to_f64_vector(), std::vector<double>(B * D, 0.0), B, T, D);
  HgrnOutput no_state = hgrn(Var(x), Var(g));
  CHECK(max_rel_err(no_state.o.value(), o_ref) < 1e-15);
  CHECK(max_rel_err(no_state.final_state.value(), ht_ref) < 1e-15);
  CHECK_THROWS_AS(hgrn(Var(x), Var(h0)), Error);  // g of the wrong shape
}

TEST_CASE("hgrn: T steps then T more from the final state equals 2T steps, values and gradients") {
  const int64_t B = 2, T = 6, D = 3;
  Tensor x1 = Tensor::randn({B, T, D}, 61, 1.0, DType::F64), x2 = Tensor::randn({B, T, D}, 62, 1.0, DType::F64);
  Tensor g1 = hgrn_gates({B, T, D}, 63), g2 = hgrn_gates({B, T, D}, 64);
  Tensor h0 = Tensor::randn({B, D}, 65, 1.0, DType::F64);
  Tensor do1 = Tensor::randn({B, T, D}, 66, 1.0, DType::F64), do2 = Tensor::randn({B, T, D}, 67, 1.0, DType::F64);
  Tensor dht = Tensor::randn({B, D}, 68, 1.0, DType::F64);

  Var xa(x1, true), xb(x2, true), ga(g1, true), gb(g2, true), h0_split(h0, true);
  HgrnOutput first = hgrn(xa, ga, h0_split);
  HgrnOutput second = hgrn(xb, gb, first.final_state);
  run_backward({first.o, second.o, second.final_state}, {do1, do2, dht});

  Var x(concat_time(x1, x2), true), g(concat_time(g1, g2), true), h0_full(h0, true);
  HgrnOutput full = hgrn(x, g, h0_full);
  run_backward({full.o, full.final_state}, {concat_time(do1, do2), dht});

  CHECK(max_rel_err(concat_time(first.o.value(), second.o.value()), full.o.value()) < 1e-15);
  CHECK(max_rel_err(second.final_state.value(), full.final_state.value()) < 1e-15);
  CHECK(max_rel_err(concat_time(xa.grad(), xb.grad()), x.grad()) < 1e-14);
  CHECK(max_rel_err(concat_time(ga.grad(), gb.grad()), g.grad()) < 1e-14);
  CHECK(max_rel_err(h0_split.grad(), h0_full.grad()) < 1e-14);
}

TEST_CASE("hgrn: the CPU result is bit for bit the same for 1 to 3 threads") {
  // parallel_for splits (batch, channel) tasks; B * D = 10 does not divide by 3 (ranges of 3 and 4).
  const int64_t B = 2, T = 12, D = 5;
  const Tensor x = Tensor::randn({B, T, D}, 71, 1.0, DType::F32), g = hgrn_gates({B, T, D}, 72).to(DType::F32);
  const Tensor h0 = Tensor::randn({B, D}, 73, 1.0, DType::F32), d_o = Tensor::randn({B, T, D}, 74, 1.0, DType::F32);
  const Tensor dht = Tensor::randn({B, D}, 75, 1.0, DType::F32);
  const char* names[] = {"o", "final_state", "dx", "dg", "dh0"};
  const int threads_before = cpu_threads();
  std::vector<std::vector<std::vector<double>>> runs;
  for (int threads : {1, 2, 3}) {
    set_cpu_threads(threads);
    Var xv(x, true), gv(g, true), h0v(h0, true);
    HgrnOutput out = hgrn(xv, gv, h0v);
    run_backward({out.o, out.final_state}, {d_o, dht});
    runs.push_back({out.o.value().to_f64_vector(), out.final_state.value().to_f64_vector(), xv.grad().to_f64_vector(),
                    gv.grad().to_f64_vector(), h0v.grad().to_f64_vector()});
  }
  for (size_t r = 1; r < runs.size(); r++)
    for (size_t i = 0; i < runs[0].size(); i++) {
      INFO("run ", r, " ", names[i]);
      CHECK(runs[r][i] == runs[0][i]);
    }
  set_cpu_threads(threads_before);
}
