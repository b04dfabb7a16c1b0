// The CUDA backend against the CPU references: the check registry's gpu mode
// (nn/check/modes.h) must pass on every case. Without a GPU (CI) that test says SKIPPED loudly
// and passes; the row counting and the comparison itself are checked everywhere. Beside it, GPU
// cases of their own (SKIPPED without a GPU): cast, and linear's fp32 dW and rmsnorm's fused
// gradient sums against cast-then-add, and the delta rule's chunked backward on an unaligned d_o.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "nn/check/modes.h"
#include "nn/ops/attention.h"
#include "nn/ops/cast.h"
#include "nn/ops/arith.h"
#include "nn/ops/linear.h"
#include "nn/ops/rmsnorm.h"
#include "tensor/math.h"
#include "tensor/tensor.h"
#ifdef HLA_CUDA
#include "cuda/attention.h"
#include "cuda/delta_rule.h"
#endif

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

TEST_CASE("linear's dW from a bf16 compute copy lands in the fp32 master's gradient: cast-then-add within "
          "bf16 rounding, and at least as exact") {
  if (!cuda_available()) {
    MESSAGE("SKIPPED: no CUDA GPU here; linear's fp32 dW (bf16 x bf16 -> fp32 GEMM, beta 1) was not checked");
    return;
  }
  // One compute copy used by two linears, two backward calls: the GEMMs sum four dW terms in fp32
  // (beta 0, then 1). Cast-then-add rounds each term to bf16 first (relative RMS about 2^-9 / sqrt(3)
  // a term): the fused sum stays within 2^-8 of it and within 1e-5 of the float64 truth (fp32
  // accumulation of bf16 products over K = 300), never further from the truth than cast-then-add.
  const Device gpu = Device::CUDA;
  Var master(Tensor::randn({48, 64}, 1, 0.1, DType::F32, gpu), true);
  Tensor cast_then_add = Tensor::zeros({48, 64}, DType::F32, gpu);
  Tensor truth = Tensor::zeros({48, 64}, DType::F64);
  for (uint64_t call = 0; call < 2; call++) {
    Var copy = cast(master, DType::BF16);
    Var x1(Tensor::randn({300, 64}, 10 + call, 1.0, DType::BF16, gpu));
    Var x2(Tensor::randn({300, 64}, 20 + call, 1.0, DType::BF16, gpu));
    Tensor dy1 = Tensor::randn({300, 48}, 30 + call, 1.0, DType::BF16, gpu);
    Tensor dy2 = Tensor::randn({300, 48}, 40 + call, 1.0, DType::BF16, gpu);
    run_backward({linear(x1, copy), linear(x2, copy)}, {dy1, dy2});
    for (auto [dy, x] : {std::pair{dy1, x1.value()}, std::pair{dy2, x2.value()}}) {
      cast_then_add = add(cast_then_add, matmul(dy, x, true, false).to(DType::F32));  // a bf16 dW, cast, added
      auto f64 = [](const Tensor& t) { return t.to(Device::CPU).to(DType::F64); };
      truth = add(truth, matmul(f64(dy), f64(x), true, false));
    }
  }
  REQUIRE(master.grad().dtype() == DType::F32);
  const double fused_err = check::rel_rms_error(master.grad(), truth);
  CHECK(check::rel_rms_error(master.grad(), cast_then_add) <= 1.0 / 256);
  CHECK(fused_err <= 1e-5);
  CHECK(fused_err <= check::rel_rms_error(cast_then_add, truth));
}

TEST_CASE("rmsnorm adds dx into the residual stream's bf16 sum and dw into the fp32 master's gradient: "
          "cast-then-add within bf16 rounding, and at least as exact") {
  if (!cuda_available()) {
    MESSAGE("SKIPPED: no CUDA GPU here; rmsnorm's fused gradient sums (dx + the sum so far, fp32 dw) were not checked");
    return;
  }
  // r = x + rmsnorm(x, copy) and a second rmsnorm of x2 with the same bf16 copy of an fp32 master,
  // two backward calls. Cast-then-add rounds each dw term to bf16 (and adds dx to the residual's
  // gradient in a second bf16 rounding): the fused sums stay within 2^-8 relative RMS of it and
  // never further from the float64 truth; dw within 1e-5 of it (fp32 sums over 300 rows).
  const Device gpu = Device::CUDA;
  const int64_t C = 1024;
  auto f64 = [](const Tensor& t) { return t.to(Device::CPU).to(DType::F64); };
  // A lone rmsnorm's {dx, dw} for dy in the inputs' dtype (bf16 terms on the GPU, float64 on the CPU).
  auto terms = [](const Tensor& xv, const Tensor& w, const Tensor& dy) {
    Var xa(xv, true), wa(w, true);
    run_backward({rmsnorm(xa, wa, 1e-6)}, {dy});
    return std::pair{xa.grad(), wa.grad()};
  };
  Var master(Tensor::randn({C}, 1, 0.3, DType::F32, gpu), true);
  Tensor dw_cast_then_add = Tensor::zeros({C}, DType::F32, gpu), dw_truth = Tensor::zeros({C}, DType::F64);
  for (uint64_t call = 0; call < 2; call++) {
    Var copy = cast(master, DType::BF16);
    Var x0(Tensor::randn({300, C}, 10 + call, 1.0, DType::BF16, gpu), true);
    Var x = scale(x0, 1.0), x2(Tensor::randn({300, C}, 20 + call, 1.0, DType::BF16, gpu));
    Tensor dr = Tensor::randn({300, C}, 30 + call, 1.0, DType::BF16, gpu);
    Tensor dy2 = Tensor::randn({300, C}, 40 + call, 1.0, DType::BF16, gpu);
    run_backward({add(x, rmsnorm(x, copy, 1e-6)), rmsnorm(x2, copy, 1e-6)}, {dr, dy2});
    auto [dx, dw] = terms(x.value(), copy.value(), dr);
    auto [dx_truth, dw_f64] = terms(f64(x.value()), f64(copy.value()), f64(dr));
    const Tensor dx_cast_then_add = add(dr, dx);  // bf16 dx, added in a second rounding
    const Tensor dx_sum_truth = add(f64(dr), dx_truth);
    CAPTURE(call);
    REQUIRE(x0.grad().dtype() == DType::BF16);
    CHECK(check::rel_rms_error(x0.grad(), dx_cast_then_add) <= 1.0 / 256);
    CHECK(check::rel_rms_error(x0.grad(), dx_sum_truth) <= check::rel_rms_error(dx_cast_then_add, dx_sum_truth));
    auto [dx2, dw2] = terms(x2.value(), copy.value(), dy2);
    auto [dx2_truth, dw2_f64] = terms(f64(x2.value()), f64(copy.value()), f64(dy2));
    dw_cast_then_add = add(dw_cast_then_add, add(dw.to(DType::F32), dw2.to(DType::F32)));
    dw_truth = add(dw_truth, add(dw_f64, dw2_f64));
  }
  REQUIRE(master.grad().dtype() == DType::F32);
  const double fused_err = check::rel_rms_error(master.grad(), dw_truth);
  CHECK(check::rel_rms_error(master.grad(), dw_cast_then_add) <= 1.0 / 256);
  CHECK(fused_err <= 1e-5);
  CHECK(fused_err <= check::rel_rms_error(dw_cast_then_add, dw_truth));
}

TEST_CASE("add_rmsnorm on the GPU equals add then rmsnorm bit for bit, fp32 and bf16, forward and backward") {
  if (!cuda_available()) {
    MESSAGE("SKIPPED: no CUDA GPU here; the fused residual add + RMSNorm kernel was not compared with the two ops");
    return;
  }
  // The fused forward rounds x + h to the dtype as the add kernel does and normalises that; its
  // backward adds the norm's dx to d sum in the kernel that adds it into the sum otherwise. Widths
  // 1024 (16-byte vectors) and 333 (single elements).
  const Device gpu = Device::CUDA;
  auto same = [](const Tensor& a, const Tensor& b) {
    const Tensor ca = a.to(Device::CPU), cb = b.to(Device::CPU);
    return ca.shape() == cb.shape() && ca.dtype() == cb.dtype() && std::memcmp(ca.raw(), cb.raw(), ca.nbytes()) == 0;
  };
  for (DType dtype : {DType::F32, DType::BF16})
    for (int64_t C : {1024, 333}) {
      CAPTURE(dtype_name(dtype));
      CAPTURE(C);
      const Shape shape{3, 37, C};
      Tensor x = Tensor::randn(shape, 51, 1.0, dtype, gpu), h = Tensor::randn(shape, 52, 1.0, dtype, gpu);
      Tensor w = Tensor::randn({C}, 53, 0.3, dtype, gpu), d_sum = Tensor::randn(shape, 54, 1.0, dtype, gpu);
      Tensor dy = Tensor::randn(shape, 55, 1.0, dtype, gpu);
      Var xa(x, true), ha(h, true), wa(w, true), xb(x, true), hb(h, true), wb(w, true);
      const ResidualNorm fused = add_rmsnorm(xa, ha, wa, 1e-6);
      Var sum = add(xb, hb);
      Var normed = rmsnorm(sum, wb, 1e-6);
      run_backward({fused.sum, fused.normed}, {d_sum, dy});
      run_backward({sum, normed}, {d_sum, dy});
      CHECK(same(fused.sum.value(), sum.value()));
      CHECK(same(fused.normed.value(), normed.value()));
      CHECK(same(xa.grad(), xb.grad()));
      CHECK(same(ha.grad(), hb.grad()));
      CHECK(same(wa.grad(), wb.grad()));
    }
}

// Whether this machine and build run the wgmma attention backward; where not, says why and what
// (`not_run`) goes unchecked, and the test returns.
static bool wgmma_backward_runs_here(const char* not_run) {
  if (!cuda_available()) {
    MESSAGE("SKIPPED: no CUDA GPU here; not run: " << std::string(not_run));
    return false;
  }
#ifdef HLA_CUDA
  if (std::string(cuda::attention_kernel(128, 128, DType::BF16)).rfind("wgmma fwd+bwd", 0) == 0) return true;
#endif
  MESSAGE("SKIPPED: this build has no wgmma attention backward");
  return false;
}

#ifdef HLA_CUDA
// While alive, the attention backward runs under `setting` (cuda::set_attention_fused_backward).
class FusedBackwardSetting {
 public:
  explicit FusedBackwardSetting(cuda::FusedSetting setting) : was_(cuda::set_attention_fused_backward(setting)) {}
  ~FusedBackwardSetting() { cuda::set_attention_fused_backward(was_); }
  FusedBackwardSetting(const FusedBackwardSetting&) = delete;
  FusedBackwardSetting& operator=(const FusedBackwardSetting&) = delete;

 private:
  cuda::FusedSetting was_;
};
#endif

TEST_CASE("attention's fused backward: the same bits from run to run, and within bf16 rounding of the two kernels") {
  if (!wgmma_backward_runs_here("the fused backward's ordered dQ shares (cuda/attention.cu)")) return;
#ifdef HLA_CUDA
  using cuda::FusedSetting;
  const FusedBackwardSetting restored_at_exit(FusedSetting::off);
  // B2 T2000 H8 Hkv4: 32 query tiles a head (the last one partial), each with shares from up to 16
  // key blocks, whose blocks run side by side and wait for their turns; with a window of 700,
  // tiles whose last share is not key block 0's. D = 128 (the consumers' shares are dQ's column
  // halves) and 64 (each consumer's share covers its keys; the writer adds the two).
  const Device gpu = Device::CUDA;
  for (int64_t D : {128, 64}) {
    Var q(Tensor::randn({2, 2000, 8, D}, 1, 1.0, DType::BF16, gpu), true);
    Var k(Tensor::randn({2, 2000, 4, D}, 2, 1.0, DType::BF16, gpu), true);
    Var v(Tensor::randn({2, 2000, 4, D}, 3, 1.0, DType::BF16, gpu), true);
    const Tensor dout = Tensor::randn({2, 2000, 8, D}, 4, 1.0, DType::BF16, gpu);
    for (int64_t window : {0, 700}) {
      CAPTURE(D);
      CAPTURE(window);
      const auto grads_of = [&](bool fused) {
        cuda::set_attention_fused_backward(fused ? FusedSetting::on : FusedSetting::off);
        q.zero_grad(), k.zero_grad(), v.zero_grad();
        run_backward({attention(q, k, v, 1 / std::sqrt(double(D)), window)}, {dout});
        std::vector<Tensor> grads;
        for (Var* x : {&q, &k, &v}) grads.push_back(x->grad().to(Device::CPU).to(DType::F64));
        return grads;
      };
      const std::vector<Tensor> first = grads_of(true), second = grads_of(true), two_kernels = grads_of(false);
      for (int i = 0; i < 3; i++) {
        CAPTURE(i);  // dq, dk, dv
        CHECK(first[i].to_f64_vector() == second[i].to_f64_vector());
        CHECK(check::rel_rms_error(first[i], two_kernels[i]) <= 1.0 / 256);
      }
    }
  }
#endif
}

TEST_CASE("attention's fused backward by default: at D = 128 on rows of 4096 keys, not on shorter rows or documents") {
  if (!wgmma_backward_runs_here("the fused backward's default (cuda::FusedSetting::where_faster)")) return;
#ifdef HLA_CUDA
  using cuda::FusedSetting;
  const FusedBackwardSetting restored_at_exit(FusedSetting::where_faster);
  REQUIRE(std::string(cuda::attention_kernel(128, 128, DType::BF16)) == "wgmma fwd+bwd, fused on long rows");
  // The default's gradients against each kernel's, bit for bit: the fused kernel and the two
  // kernels sum dQ in different orders, so their bits differ (checked) and tell which one ran.
  const Device gpu = Device::CUDA;
  const auto grads_of = [&](int64_t T, const Tensor& doc_start, FusedSetting setting) {
    cuda::set_attention_fused_backward(setting);
    Var q(Tensor::randn({1, T, 2, 128}, 1, 1.0, DType::BF16, gpu), true);
    Var k(Tensor::randn({1, T, 1, 128}, 2, 1.0, DType::BF16, gpu), true);
    Var v(Tensor::randn({1, T, 1, 128}, 3, 1.0, DType::BF16, gpu), true);
    run_backward({attention(q, k, v, 1 / std::sqrt(128.0), 0, doc_start)},
                 {Tensor::randn({1, T, 2, 128}, 4, 1.0, DType::BF16, gpu)});
    return q.grad().to(Device::CPU).to(DType::F64).to_f64_vector();
  };
  struct Row {
    int64_t T;
    Tensor doc_start;
    bool fused;  // whether the default runs the fused kernel
  };
  for (const Row& row : {Row{4096, Tensor(), true}, Row{2048, Tensor(), false},
                         Row{4096, document_starts({0, 2500, 4096}, 1, 4096).to(gpu), false}}) {
    CAPTURE(row.T);
    CAPTURE(row.doc_start.defined());
    const std::vector<double> by_default = grads_of(row.T, row.doc_start, FusedSetting::where_faster);
    const std::vector<double> fused = grads_of(row.T, row.doc_start, FusedSetting::on);
    const std::vector<double> two_kernels = grads_of(row.T, row.doc_start, FusedSetting::off);
    REQUIRE(fused != two_kernels);
    CHECK(by_default == (row.fused ? fused : two_kernels));
  }
#endif
}

TEST_CASE("the delta rule's chunked backward takes a d_o that is not 16-byte aligned: the bits of an aligned one") {
  if (!cuda_available()) {
    MESSAGE("SKIPPED: no CUDA GPU here; the chunked delta-rule backward was not given an unaligned d_o");
    return;
  }
#ifdef HLA_CUDA
  // GDN, bf16, B2 T130 H2 dk dv 64 (a partial last chunk): the chunked kernels copy d_o 16 bytes at
  // a time, so a d_o 2 bytes off goes through an aligned copy first (cuda::delta_rule_backward).
  const Device gpu = Device::CUDA;
  DeltaRuleDims d{2, 130, 2, 2, 64, 64, DeltaGate::Scalar, false, false, 0.125, 0};
  REQUIRE(std::string(cuda::delta_rule_kernel(d, DType::BF16)).rfind("chunked", 0) == 0);
  const Shape qk{d.B, d.T, d.H, d.dk}, vo{d.B, d.T, d.HV, d.dv}, gates{d.B, d.T, d.HV};
  const int64_t outputs = d.B * d.T * d.HV * d.dv;
  Tensor q = Tensor::randn(qk, 61, 0.12, DType::BF16, gpu), k = Tensor::randn(qk, 62, 0.12, DType::BF16, gpu);
  Tensor v = Tensor::randn(vo, 63, 1.0, DType::BF16, gpu);
  Tensor g = Tensor::uniform(gates, 64, -0.3, -0.01, DType::BF16, gpu);
  Tensor b = Tensor::uniform(gates, 65, 0.1, 0.9, DType::BF16, gpu);
  Tensor o = Tensor::empty(vo, DType::BF16, gpu), residual = Tensor::empty(vo, DType::BF16, gpu);
  Tensor state = Tensor::empty({d.B, d.HV, d.dk, d.dv}, DType::F32, gpu);
  cuda::delta_rule_forward(o.raw(), state.data<float>(), residual.raw(), q.raw(), k.raw(), v.raw(), g.raw(), b.raw(),
                           b.raw(), nullptr, d, nullptr, nullptr, DType::BF16);
  Tensor d_o_room = Tensor::randn({outputs + 8}, 66, 1.0, DType::BF16, gpu);
  const void* unaligned = static_cast<const char*>(d_o_room.raw()) + 2;
  Tensor d_o = d_o_room.slice0(1, outputs + 1).to(Device::CPU).to(gpu);  // the same values, aligned
  REQUIRE(reinterpret_cast<uintptr_t>(unaligned) % 16 != 0);
  auto grads = [&](const void* d_o_ptr) {
    std::vector<Tensor> g_out{Tensor::empty(qk, DType::BF16, gpu), Tensor::empty(qk, DType::BF16, gpu),
                              Tensor::empty(vo, DType::BF16, gpu), Tensor::empty(gates, DType::BF16, gpu),
                              Tensor::empty(gates, DType::BF16, gpu), Tensor::empty(gates, DType::BF16, gpu)};
    cuda::delta_rule_backward(g_out[0].raw(), g_out[1].raw(), g_out[2].raw(), g_out[3].raw(), g_out[4].raw(),
                              g_out[5].raw(), nullptr, d_o_ptr, nullptr, nullptr, q.raw(), k.raw(), v.raw(), g.raw(),
                              b.raw(), b.raw(), nullptr, d, residual.raw(), nullptr, nullptr, DType::BF16);
    return g_out;
  };
  const std::vector<Tensor> from_aligned = grads(d_o.raw()), from_unaligned = grads(unaligned);
  for (size_t i = 0; i < from_aligned.size(); i++) {
    CAPTURE(i);
    const Tensor a = from_aligned[i].to(Device::CPU), u = from_unaligned[i].to(Device::CPU);
    CHECK(std::memcmp(a.raw(), u.raw(), a.nbytes()) == 0);
  }
#endif
}
