// Check cases (nn/check/registry.h) of the gate parameterisations (nn/ops/gates.h) and HGRN's
// lower bounds. Inputs in realistic ranges: z from the layers' pre-activation spreads, lower
// bounds in [0, 1) (0 for a first HGRN layer), A_log = ln U(1, 16), dt_bias = inverse softplus
// of a small dt. gpu runs the 340M layers' widths and odd ones.
#include <cmath>

#include "nn/check/registry.h"
#include "nn/ops/gates.h"
#include "nn/ops/lower_bounds.h"

namespace hla::check {
namespace {

using Vars = std::vector<Var>;

double log_of(double x) { return std::log(x); }
double inverse_softplus(double x) { return std::log(std::expm1(x)); }

// A_log = ln U(1, 16) per head and dt_bias = inverse softplus of U(1e-3, 0.1), as the layers
// initialise them.
Tensor a_log(int64_t heads, uint64_t seed) { return map64(uniform64({heads}, seed, 1.0, 16.0), log_of); }
Tensor dt_bias(int64_t width, uint64_t seed) { return map64(uniform64({width}, seed, 1e-3, 0.1), inverse_softplus); }

const bool registered = [] {
  auto gla = [](const Vars& x) { return Vars{gla_gate(x[0], 16.0)}; };
  auto rwkv = [](const Vars& x) { return Vars{rwkv_gate(x[0])}; };
  auto hgrn = [](const Vars& x) { return Vars{hgrn_gate(x[0], x[1])}; };
  auto ssm = [](const Vars& x) { return Vars{ssm_gate(x[0], x[1], x[2])}; };
  auto lower = [](const Vars& x) { return Vars{lower_bound_gate(x[0], x[1], x[2], -5.0)}; };
  auto lower_no_a = [](const Vars& x) { return Vars{lower_bound_gate(x[0], Var(), x[1], -5.0)}; };
  auto grad = [](const char* name, uint64_t seed, MakeInputs in, OpFn op) {
    add_case(grad_case("gates", name, seed, std::move(in), std::move(op)));
  };
  auto gpu = [](const char* name, MakeInputs in, OpFn op) {
    add_case(gpu_case("gates", name, named_kernel("gates"), std::move(in), std::move(op)));
  };

  // ---- grad ----
  // GLA / RWKV: z in a realistic spread.
  grad("gla_gate", 70, [](uint64_t s) { return Inputs{{"z", randn64({2, 3, 4}, s + 1, 2.0)}}; }, gla);
  grad("rwkv_gate", 71, [](uint64_t s) { return Inputs{{"z", randn64({2, 3, 4}, s + 1, 1.0, -0.5)}}; }, rwkv);
  // HGRN: lower bounds in (0.05, 0.9) per channel, z wide enough to reach both ends of the gate.
  grad("hgrn_gate", 72, [](uint64_t s) {
    return Inputs{{"z", randn64({2, 3, 4}, s + 1, 3.0)}, {"lower_bound", uniform64({4}, s + 2, 0.05, 0.9)}};
  }, hgrn);
  // SSM scalar per head (GDN / Mamba-2): z (B, T, HV=2); A_log ~ ln U(1,16) scale; dt_bias ~
  // inverse softplus of small dt.
  grad("ssm_gate scalar (GDN)", 74, [](uint64_t s) {
    return Inputs{{"z", randn64({2, 3, 2}, s + 1)}, {"A_log", randn64({2}, s + 2, 0.5, 1.0)},
                  {"dt_bias", randn64({2}, s + 3, 1.0, -3.0)}};
  }, ssm);
  // SSM per head x channel (KDA): z (B, T, HV=2, dk=3), A_log (HV), dt_bias (HV*dk).
  grad("ssm_gate vector (KDA)", 77, [](uint64_t s) {
    return Inputs{{"z", randn64({2, 2, 2, 3}, s + 1, 2.0)}, {"A_log", randn64({2}, s + 2, 0.5, 1.0)},
                  {"dt_bias", randn64({6}, s + 3, 1.0, -2.0)}};
  }, ssm);
  // LowerBound with and without A_log, lb = -5 (fla's safe_gate range).
  grad("lower_bound_gate", 80, [](uint64_t s) {
    return Inputs{{"z", randn64({2, 2, 2, 3}, s + 1)}, {"A_log", randn64({2}, s + 2, 0.3)},
                  {"dt_bias", randn64({6}, s + 3, 0.5)}};
  }, lower);
  grad("lower_bound_gate no A_log", 83, [](uint64_t s) {
    return Inputs{{"z", randn64({2, 3, 4}, s + 1)}, {"dt_bias", randn64({4}, s + 2, 0.5)}};
  }, lower_no_a);

  // ---- gpu ----
  // GLA: gk (B, T, H*dk) of the 340M layer; RWKV-6: the w LoRA output, -exp of it in (-e^3, 0).
  gpu("gla_gate B2 T77 F1024", [](uint64_t s) { return Inputs{{"z", randn64({2, 77, 1024}, s + 1, 2.0)}}; }, gla);
  gpu("rwkv_gate B2 T37 F1024", [](uint64_t s) { return Inputs{{"z", randn64({2, 37, 1024}, s + 2, 1.0, -0.5)}}; },
      rwkv);
  // HGRN: a first layer (lb = 0: logsigmoid) and a deeper one (lb in (0.05, 0.9)), odd width.
  gpu("hgrn_gate lb=0 B2 T37 F67", [](uint64_t s) {
    return Inputs{{"z", randn64({2, 37, 67}, s + 3, 3.0)}, {"lower_bound", Tensor::zeros({67}, DType::F64)}};
  }, hgrn);
  gpu("hgrn_gate B3 T45 F1024", [](uint64_t s) {
    return Inputs{{"z", randn64({3, 45, 1024}, s + 4, 3.0)}, {"lower_bound", uniform64({1024}, s + 5, 0.05, 0.9)}};
  }, hgrn);
  // SSM scalar per head (GDN / Mamba-2 340M: 32 heads) and per head x channel (KDA 340M: 4 x 256).
  gpu("ssm_gate scalar B2 T77 H32", [](uint64_t s) {
    return Inputs{{"z", randn64({2, 77, 32}, s + 6)}, {"A_log", a_log(32, s + 7)}, {"dt_bias", dt_bias(32, s + 8)}};
  }, ssm);
  gpu("ssm_gate vector B2 T37 H4x256", [](uint64_t s) {
    return Inputs{{"z", randn64({2, 37, 4, 256}, s + 9)}, {"A_log", a_log(4, s + 10)},
                  {"dt_bias", dt_bias(1024, s + 11)}};
  }, ssm);
  gpu("ssm_gate vector B2 T19 H3x5", [](uint64_t s) {
    return Inputs{{"z", randn64({2, 19, 3, 5}, s + 12, 2.0)}, {"A_log", a_log(3, s + 13)},
                  {"dt_bias", dt_bias(15, s + 14)}};
  }, ssm);
  // LowerBound (KDA / GDN-2 option, lb = -5) with and without A_log.
  gpu("lower_bound_gate B2 T37 H4x64", [](uint64_t s) {
    return Inputs{{"z", randn64({2, 37, 4, 64}, s + 15)}, {"A_log", randn64({4}, s + 16, 0.3)},
                  {"dt_bias", randn64({256}, s + 17, 0.5)}};
  }, lower);
  gpu("lower_bound_gate no A_log B3 T21 F67", [](uint64_t s) {
    return Inputs{{"z", randn64({3, 21, 67}, s + 18)}, {"dt_bias", randn64({67}, s + 19, 0.5)}};
  }, lower_no_a);

  // HGRN's per-layer lower bounds: cumulative sums of a softmax over the layer axis of (L, D).
  auto bounds = [](const Vars& v) { return lower_bounds(v[0]); };
  add_case(grad_case("lower_bounds", "lower_bounds", 10,
                     [](uint64_t s) { return Inputs{{"lower_bounds", randn64({4, 3}, s + 1)}}; }, bounds));
  // The 340M HGRN's depth and width, and odd ones (one layer: lb_0 = 0 only).
  for (auto [L, D] : {std::pair<int64_t, int64_t>{24, 1024}, {5, 67}, {1, 33}})
    add_case(gpu_case("lower_bounds", "lower_bounds " + dims_label({{"L", L}, {"D", D}}), named_kernel("lower_bounds"),
                      [L = L, D = D](uint64_t s) { return Inputs{{"lower_bounds", randn64({L, D}, s + 20, 0.5)}}; },
                      bounds));
  return true;
}();

}  // namespace
}  // namespace hla::check
