// The general delta rule (nn/ops/delta_rule): the chunked WY form equals the token recurrence
// (forward and every gradient), the mixers reduce to each other as mixers.md says, a direct GDN
// recurrence written here agrees, float32 tracks float64, and a sequence split in two with the
// final state carried over gives the same result as the whole.
#include <doctest/doctest.h>

#include <Eigen/Dense>
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "autograd/var.h"
#include "nn/check/registry.h"
#include "nn/ops/delta_rule.h"
#include "nn/ops/parallel.h"
#include "nn/ops/solve_tril.h"
#include "tensor/math.h"

using namespace hla;

namespace {

struct Variant {
  const char* name;
  DeltaGate gate;
  bool erase_vector, write_vector, tied;  // tied: w = b = a scalar beta
};
const Variant kDeltaNet{"DeltaNet", DeltaGate::None, false, false, true};
const Variant kGDN{"GDN", DeltaGate::Scalar, false, false, true};
const Variant kKDA{"KDA", DeltaGate::Vector, false, false, true};
const Variant kGDN2{"GDN-2", DeltaGate::Vector, true, true, false};
const Variant kAllVariants[] = {kDeltaNet, kGDN, kKDA, kGDN2};

struct Dims {
  int64_t B = 2, T = 100, H = 2, HV = 4, dk = 12, dv = 10;
};

// The op's inputs, F64; g and w undefined when the variant has none.
struct Inputs {
  Tensor q, k, v, g, b, w, h0;
};

Inputs make_inputs(const Variant& var, const Dims& d, uint64_t seed) {
  Inputs x;
  x.q = check::unit_rows(check::randn64({d.B, d.T, d.H, d.dk}, seed + 1));
  x.k = check::unit_rows(check::randn64({d.B, d.T, d.H, d.dk}, seed + 2));
  x.v = check::randn64({d.B, d.T, d.HV, d.dv}, seed + 3);
  // log gates logsigmoid(N(2, 1)): mostly in [-1, 0), as fla's tests draw them
  if (var.gate == DeltaGate::Scalar)
    x.g = check::log_gate({d.B, d.T, d.HV}, seed + 4, 2.0);
  if (var.gate == DeltaGate::Vector)
    x.g = check::log_gate({d.B, d.T, d.HV, d.dk}, seed + 4, 2.0);
  Shape bs = var.erase_vector ? Shape{d.B, d.T, d.HV, d.dk} : Shape{d.B, d.T, d.HV};
  x.b = check::map64(check::randn64(bs, seed + 5), check::sigmoid);
  if (!var.tied) {
    Shape ws = var.write_vector ? Shape{d.B, d.T, d.HV, d.dv} : Shape{d.B, d.T, d.HV};
    x.w = check::map64(check::randn64(ws, seed + 6), check::sigmoid);
  }
  x.h0 = check::randn64({d.B, d.HV, d.dk, d.dv}, seed + 7, 0.5);
  return x;
}

// Outputs (o, final state, residual) and input gradients (q, k, v, g, b, w, h0; undefined where
// the input is absent) of one forward + backward with fixed random output gradients.
struct Result {
  std::vector<Tensor> outs, grads;
};
const char* const kOutNames[] = {"o", "final_state", "residual"};
const char* const kGradNames[] = {"dq", "dk", "dv", "dg", "db", "dw", "dh0"};

Result run(const Inputs& x, int64_t chunk_size, DType dtype = DType::F64, Device device = Device::CPU,
           bool keep_states = true) {
  auto leaf = [&](const Tensor& t) { return t.defined() ? Var(t.to(device).to(dtype), true) : Var(); };
  std::vector<Var> in = {leaf(x.q), leaf(x.k), leaf(x.v), leaf(x.g), leaf(x.b), leaf(x.w), leaf(x.h0)};
  DeltaRuleOutputs r = delta_rule(in[0], in[1], in[2], in[3], in[4], in[5], in[6], {0, chunk_size, keep_states});
  std::vector<Var> outs = {r.o, r.final_state, r.residual};
  std::vector<Tensor> seeds;
  for (size_t i = 0; i < outs.size(); i++)
    seeds.push_back(Tensor::randn(outs[i].shape(), 900 + i, 1.0, DType::F64).to(device).to(outs[i].dtype()));
  run_backward(outs, seeds);
  Result res;
  for (const Var& o : outs) res.outs.push_back(o.value().to(DType::F64));
  for (const Var& v : in) res.grads.push_back(v.defined() ? v.grad().to(DType::F64) : Tensor());
  return res;
}

// max |a - b| / max |b|: the gradcheck metric, relative to the tensor's scale.
double rel_err(const Tensor& a, const Tensor& b) { return max_abs(sub(a, b)) / max_abs(b); }

// Compares every output and every defined gradient; returns the worst relative error.
double worst_rel_err(const Result& a, const Result& b, double tol, const std::string& what) {
  double worst = 0;
  for (size_t i = 0; i < a.outs.size(); i++) {
    double e = rel_err(a.outs[i], b.outs[i]);
    INFO(what, " ", kOutNames[i], ": rel err ", e);
    CHECK(e <= tol);
    worst = std::max(worst, e);
  }
  for (size_t i = 0; i < a.grads.size(); i++) {
    REQUIRE(a.grads[i].defined() == b.grads[i].defined());
    if (!a.grads[i].defined()) continue;
    double e = rel_err(a.grads[i], b.grads[i]);
    INFO(what, " ", kGradNames[i], ": rel err ", e);
    CHECK(e <= tol);
    worst = std::max(worst, e);
  }
  return worst;
}

// A sum over the last dimension: (..., n) -> (...).
Tensor sum_last(const Tensor& x) {
  int64_t n = x.size(-1);
  Shape s(x.shape().begin(), x.shape().end() - 1);
  std::vector<double> v = x.to_f64_vector(), out(v.size() / n, 0.0);
  for (size_t i = 0; i < v.size(); i++) out[i / n] += v[i];
  return Tensor::from_f64(out, s, DType::F64);
}

// (B, T, HV) -> (B, T, HV, n), the value repeated n times.
Tensor repeat_last(const Tensor& x, int64_t n) {
  Shape s = x.shape();
  s.push_back(n);
  std::vector<double> v = x.to_f64_vector(), out;
  for (double a : v) out.insert(out.end(), n, a);
  return Tensor::from_f64(out, s, DType::F64);
}

// Tokens [t0, t1) of a (B, T, ...) tensor (a copy: dimension 1 is not a view).
Tensor slice_time(const Tensor& x, int64_t t0, int64_t t1) {
  const int64_t B = x.size(0), T = x.size(1), inner = x.numel() / (B * T);
  Shape s = x.shape();
  s[1] = t1 - t0;
  std::vector<double> v = x.to_f64_vector(), out;
  for (int64_t b = 0; b < B; b++)
    out.insert(out.end(), v.begin() + (b * T + t0) * inner, v.begin() + (b * T + t1) * inner);
  return Tensor::from_f64(out, s, DType::F64);
}

// A direct GDN recurrence (mixers.md 13), plain loops over doubles, GVA by j / (HV / H):
//   S'_t = exp(g_t) S_{t-1};  u_t = beta_t (v_t - S'_t^T k_t);  S_t = S'_t + k_t u_t^T;
//   o_t = scale S_t^T q_t.     No gate (g undefined) is DeltaNet.
struct DirectResult {
  std::vector<double> o, S, u;
};
DirectResult direct_gdn(const Inputs& x, const Dims& d) {
  const std::vector<double> q = x.q.to_f64_vector(), k = x.k.to_f64_vector(), v = x.v.to_f64_vector();
  const std::vector<double> beta = x.b.to_f64_vector(), h0 = x.h0.to_f64_vector();
  const std::vector<double> g = x.g.defined() ? x.g.to_f64_vector() : std::vector<double>(beta.size(), 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(d.dk));
  DirectResult r{std::vector<double>(d.B * d.T * d.HV * d.dv), h0, std::vector<double>(d.B * d.T * d.HV * d.dv)};
  for (int64_t b = 0; b < d.B; b++)
    for (int64_t j = 0; j < d.HV; j++) {
      const int64_t h = j / (d.HV / d.H);
      double* S = &r.S[(b * d.HV + j) * d.dk * d.dv];  // (dk, dv)
      for (int64_t t = 0; t < d.T; t++) {
        const double* qt = &q[((b * d.T + t) * d.H + h) * d.dk];
        const double* kt = &k[((b * d.T + t) * d.H + h) * d.dk];
        const double* vt = &v[((b * d.T + t) * d.HV + j) * d.dv];
        const int64_t bt = (b * d.T + t) * d.HV + j;
        for (int64_t i = 0; i < d.dk * d.dv; i++) S[i] *= std::exp(g[bt]);
        for (int64_t c = 0; c < d.dv; c++) {
          double r_c = 0;
          for (int64_t i = 0; i < d.dk; i++) r_c += S[i * d.dv + c] * kt[i];
          r.u[bt * d.dv + c] = beta[bt] * (vt[c] - r_c);
        }
        for (int64_t i = 0; i < d.dk; i++)
          for (int64_t c = 0; c < d.dv; c++) S[i * d.dv + c] += kt[i] * r.u[bt * d.dv + c];
        for (int64_t c = 0; c < d.dv; c++) {
          double o_c = 0;
          for (int64_t i = 0; i < d.dk; i++) o_c += S[i * d.dv + c] * qt[i];
          r.o[bt * d.dv + c] = scale * o_c;
        }
      }
    }
  return r;
}

double rel_err(const Tensor& a, const std::vector<double>& b) {
  return rel_err(a, Tensor::from_f64(b, a.shape(), DType::F64));
}

}  // namespace

TEST_CASE("solve_tril inverts I + L for full and partial chunk sizes") {
  using Mat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  for (Eigen::Index C : {1, 5, 16, 37, 64}) {
    std::vector<double> r = Tensor::randn({C, C}, 40 + C, 0.3, DType::F64).to_f64_vector();
    Mat L = Eigen::Map<Mat>(r.data(), C, C).triangularView<Eigen::StrictlyLower>();
    Mat A = solve_tril(L);
    Mat I = Mat::Identity(C, C);
    INFO("C = ", C);
    CHECK(((I + L) * A - I).cwiseAbs().maxCoeff() <= 1e-12);
    CHECK((A - Mat(A.triangularView<Eigen::UnitLower>())).cwiseAbs().maxCoeff() == 0.0);
  }
}

TEST_CASE("delta_rule: chunked equals recurrent in float64, forward and every gradient") {
  // T = 100: the last chunk is partial for both chunk sizes (100 = 6*16 + 4 = 64 + 36).
  Dims d;
  for (const Variant& var : kAllVariants) {
    Inputs x = make_inputs(var, d, 100);
    Result recurrent = run(x, 0);
    for (int64_t C : {16, 64})
      worst_rel_err(run(x, C), recurrent, 1e-10, std::string(var.name) + " C=" + std::to_string(C));
  }
}

TEST_CASE("delta_rule: keep_states changes no bit (CPU: ignored; GPU: the backward reads the kept chunk states)") {
  // On the GPU in bf16 (dk 128, dv 64: the chunked kernels), T = 150: a partial last chunk.
  auto same = [](const Result& a, const Result& b) {
    for (size_t i = 0; i < a.outs.size(); i++) CHECK(a.outs[i].to_f64_vector() == b.outs[i].to_f64_vector());
    for (size_t i = 0; i < a.grads.size(); i++)
      if (a.grads[i].defined()) CHECK(a.grads[i].to_f64_vector() == b.grads[i].to_f64_vector());
  };
  for (const Variant& var : {kGDN, kDeltaNet}) {
    INFO(var.name);
    Inputs x = make_inputs(var, Dims{}, 150);
    same(run(x, 16, DType::F64, Device::CPU, true), run(x, 16, DType::F64, Device::CPU, false));
    if (!cuda_available()) continue;
    Inputs wide = make_inputs(var, Dims{2, 150, 2, 4, 128, 64}, 160);
    same(run(wide, 0, DType::BF16, Device::CUDA, true), run(wide, 0, DType::BF16, Device::CUDA, false));
  }
}

TEST_CASE("delta_rule: GDN and DeltaNet equal a direct recurrence, residual = beta (v - S'^T k)") {
  Dims d;
  d.T = 37;
  for (const Variant& var : {kGDN, kDeltaNet}) {
    Inputs x = make_inputs(var, d, 200);
    DirectResult ref = direct_gdn(x, d);
    for (int64_t C : {0, 16}) {
      Result r = run(x, C);
      INFO(var.name, " chunk ", C);
      CHECK(rel_err(r.outs[0], ref.o) <= 1e-12);
      CHECK(rel_err(r.outs[1], ref.S) <= 1e-12);
      CHECK(rel_err(r.outs[2], ref.u) <= 1e-12);
    }
  }
}

TEST_CASE("delta_rule: an absent gate is a zero gate (DeltaNet)") {
  Dims d;
  d.T = 40;
  Inputs absent = make_inputs(kDeltaNet, d, 300);
  Inputs zero = absent;
  zero.g = Tensor::zeros({d.B, d.T, d.HV}, DType::F64);
  for (int64_t C : {0, 16}) {
    Result a = run(absent, C), z = run(zero, C);
    z.grads[3] = Tensor();  // the zero gate's own gradient has no counterpart
    INFO("chunk ", C);
    worst_rel_err(a, z, 1e-14, "g absent vs g = 0");
  }
}

TEST_CASE("delta_rule: KDA equals GDN-2 with b = w = beta, GDN equals KDA with an equal-channel gate") {
  Dims d;
  d.T = 50;
  Inputs kda = make_inputs(kKDA, d, 400);
  Inputs gdn2 = kda;
  gdn2.b = repeat_last(kda.b, d.dk);
  gdn2.w = repeat_last(kda.b, d.dv);
  Inputs gdn = make_inputs(kGDN, d, 500);
  Inputs kda_from_gdn = gdn;
  kda_from_gdn.g = repeat_last(gdn.g, d.dk);
  for (int64_t C : {0, 16}) {
    INFO("chunk ", C);
    Result a = run(kda, C), b = run(gdn2, C);
    // dbeta = sum over the erase channels of db + sum over the write channels of dw
    b.grads[4] = add(sum_last(b.grads[4]), sum_last(b.grads[5]));
    b.grads[5] = Tensor();
    worst_rel_err(a, b, 1e-13, "KDA vs GDN-2");
    Result s = run(gdn, C), vct = run(kda_from_gdn, C);
    vct.grads[3] = sum_last(vct.grads[3]);  // a scalar gate's gradient sums over its channels
    worst_rel_err(s, vct, 1e-13, "GDN vs KDA");
  }
}

TEST_CASE("delta_rule: float32 agrees with float64") {
  Dims d;
  d.T = 64;
  for (const Variant& var : kAllVariants) {
    Inputs x = make_inputs(var, d, 600);
    for (int64_t C : {0, 16})
      worst_rel_err(run(x, C, DType::F32), run(x, C), 1e-5, std::string(var.name) + " f32 C=" + std::to_string(C));
  }
}

TEST_CASE("delta_rule: strong decay in float32 does not overflow the chunked form") {
  // g = -3 on every step: over a chunk of 64, exp(G_t - G_s) for s > t would be exp(189), far
  // past float32's range; the chunked form only exponentiates masked, non-positive differences.
  Dims d;
  d.T = 70;
  Inputs x = make_inputs(kKDA, d, 650);
  x.g.fill_(-3.0);
  worst_rel_err(run(x, 64, DType::F32), run(x, 0), 1e-5, "KDA g = -3, f32 C=64");
}

TEST_CASE("delta_rule: a sequence split in two, with the final state carried, equals the whole") {
  Dims d;
  d.T = 45;
  const int64_t split = 19;
  for (const Variant& var : {kGDN, kGDN2}) {
    Inputs x = make_inputs(var, d, 700);
    auto part = [&](int64_t t0, int64_t t1, const Tensor& h0) {
      Inputs p = x;
      for (Tensor* t : {&p.q, &p.k, &p.v, &p.g, &p.b, &p.w})
        if (t->defined()) *t = slice_time(*t, t0, t1);
      p.h0 = h0;
      return p;
    };
    for (int64_t C : {0, 16}) {
      INFO(var.name, " chunk ", C);
      Result whole = run(x, C);
      Result first = run(part(0, split, x.h0), C);
      Result second = run(part(split, d.T, first.outs[1]), C);
      CHECK(rel_err(second.outs[1], whole.outs[1]) <= 1e-12);
      CHECK(rel_err(first.outs[0], slice_time(whole.outs[0], 0, split)) <= 1e-12);
      CHECK(rel_err(second.outs[0], slice_time(whole.outs[0], split, d.T)) <= 1e-12);
      CHECK(rel_err(second.outs[2], slice_time(whole.outs[2], split, d.T)) <= 1e-12);
    }
  }
}

TEST_CASE("delta_rule: the CPU result is bit for bit the same for 1 to 3 threads") {
  // parallel_for splits (batch, head) tasks; B * H = 4 does not divide by 3 (ranges of 1 and 2).
  Dims d;
  d.T = 40;
  const int threads_before = cpu_threads();
  for (const Variant& var : kAllVariants)
    for (int64_t chunk : {0, 16}) {
      Inputs x = make_inputs(var, d, 750);
      std::vector<Result> runs;
      for (int threads : {1, 2, 3}) {
        set_cpu_threads(threads);
        runs.push_back(run(x, chunk, DType::F32));
      }
      for (size_t r = 1; r < runs.size(); r++) {
        for (size_t i = 0; i < runs[0].outs.size(); i++) {
          INFO(var.name, " chunk ", chunk, " run ", r, " ", kOutNames[i]);
          CHECK(max_abs(sub(runs[r].outs[i], runs[0].outs[i])) == 0.0);
        }
        for (size_t i = 0; i < runs[0].grads.size(); i++) {
          if (!runs[0].grads[i].defined()) continue;
          INFO(var.name, " chunk ", chunk, " run ", r, " ", kGradNames[i]);
          CHECK(max_abs(sub(runs[r].grads[i], runs[0].grads[i])) == 0.0);
        }
      }
    }
  set_cpu_threads(threads_before);
}

TEST_CASE("delta_rule: bad inputs name the field and the shape") {
  Dims d;
  d.T = 3;
  Inputs x = make_inputs(kGDN2, d, 800);
  auto call = [](const Inputs& in) {
    auto var = [](const Tensor& t) { return t.defined() ? Var(t) : Var(); };
    delta_rule(var(in.q), var(in.k), var(in.v), var(in.g), var(in.b), var(in.w), var(in.h0));
  };
  Inputs no_w = x;
  no_w.w = Tensor();  // w = b needs a scalar beta, but b is a vector
  CHECK_THROWS_WITH_AS(call(no_w), doctest::Contains("needs a scalar beta"), Error);
  Inputs bad_g = x;
  bad_g.g = Tensor::zeros({d.B, d.T, d.HV, d.dk + 1}, DType::F64);
  CHECK_THROWS_WITH_AS(call(bad_g), doctest::Contains("g must be (B, T, HV)"), Error);
  Inputs bad_heads = x;
  bad_heads.q = Tensor::zeros({d.B, d.T, 3, d.dk}, DType::F64);
  bad_heads.k = bad_heads.q;
  CHECK_THROWS_WITH_AS(call(bad_heads), doctest::Contains("multiple of query/key heads"), Error);
}

TEST_CASE("delta_rule: cpu::delta_rule_backward writes every gradient element, and a null d_final_state is zero") {
  Dims dims;
  dims.T = 9;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (const Variant& var : kAllVariants)
    for (int64_t C : {0, 4}) {
      INFO(var.name, " chunk ", C);
      const Inputs x = make_inputs(var, dims, 900);
      const Tensor w = var.tied ? x.b : x.w;
      const DeltaRuleDims d{dims.B, dims.T, dims.H, dims.HV, dims.dk, dims.dv, var.gate,
                            var.erase_vector, var.write_vector, 0.5, C, DType::F64};
      const Tensor d_o = Tensor::randn({dims.B, dims.T, dims.HV, dims.dv}, 901, 1.0, DType::F64);
      const Tensor d_res = Tensor::randn(d_o.shape(), 902, 1.0, DType::F64);
      const Tensor d_state = Tensor::zeros(x.h0.shape(), DType::F64);
      // Gradients (q, k, v, g, b, w, h0) into buffers that start as `fill`.
      auto grads = [&](double fill, const double* d_final_state) {
        auto buffer = [fill](const Tensor& like) {
          return like.defined() ? Tensor::full(like.shape(), fill, DType::F64) : Tensor();
        };
        std::vector<Tensor> g = {buffer(x.q), buffer(x.k), buffer(x.v), buffer(x.g),
                                 buffer(x.b), buffer(w),   buffer(x.h0)};
        cpu::delta_rule_backward(g[0].data<double>(), g[1].data<double>(), g[2].data<double>(),
                                 data_or_null<double>(g[3]), g[4].data<double>(), g[5].data<double>(),
                                 g[6].data<double>(), d_o.data<double>(), d_final_state, d_res.data<double>(),
                                 x.q.data<double>(), x.k.data<double>(), x.v.data<double>(), data_or_null<double>(x.g),
                                 x.b.data<double>(), w.data<double>(), x.h0.data<double>(), d);
        return g;
      };
      const std::vector<Tensor> from_nan = grads(nan, d_state.data<double>()), from_zero = grads(0.0, nullptr);
      for (size_t i = 0; i < from_nan.size(); i++) {
        if (!from_nan[i].defined()) continue;
        INFO(kGradNames[i]);
        // a NaN left unwritten never compares equal
        CHECK(from_nan[i].to_f64_vector() == from_zero[i].to_f64_vector());
      }
    }
}
