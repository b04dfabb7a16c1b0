// CUDA-vs-CPU cases (autograd/gpucheck.h) of the small sequence ops around the mixers:
// short_conv, token_shift, lerp, ddlerp, the gate parameterisations, the broadcasts and
// split_last. Every case checks both dtypes, every output and every input's gradient.
// Shapes: the ones nn/layers/*.cpp build at 340M and tiny sizes (DeltaNet / GDN q/k/v convs,
// Mamba-2's xBC conv with bias and its splits and broadcasts, RWKV-6's token shift and lerps),
// plus B > 1, odd widths, lengths that are not a multiple of any tile, conv states, and L < K-1.
// Inputs in realistic ranges: gates from their layers' pre-activation spreads, lower bounds in
// [0, 1) (0 for a first HGRN layer), A_log = ln U(1, 16), dt_bias = inverse softplus of a small dt.
#include <cmath>
#include <string>
#include <tuple>

#include "autograd/gpucheck.h"
#include "nn/ops/arith.h"
#include "nn/ops/gates.h"
#include "nn/ops/short_conv.h"
#include "nn/ops/token_shift.h"

namespace hla {
namespace {

Tensor uniform64(const Shape& shape, uint64_t seed, double lo, double hi) {
  return Tensor::uniform(shape, seed, lo, hi, DType::F64);
}

double log_of(double x) { return std::log(x); }
double inverse_softplus(double x) { return std::log(std::expm1(x)); }

// ---- short_conv ----

struct ConvCase {
  const char* what;
  int64_t B, L, C, K;
  bool bias, state;
  ConvAct act;
};

std::vector<GpucheckResult> check_short_conv(const ConvCase& c, uint64_t seed) {
  const bool has_bias = c.bias, has_state = c.state;
  const ConvAct act = c.act;
  auto fn = [has_bias, has_state, act](const std::vector<Var>& x) {
    size_t next = 2;
    Var bias = has_bias ? x[next++] : Var();
    Var state = has_state ? x[next++] : Var();
    ShortConvOut o = short_conv(x[0], x[1], bias, state, act);
    return std::vector<Var>{o.y, o.final_state};
  };
  std::vector<GpucheckInput> in = {{"x", randn64({c.B, c.L, c.C}, seed + 1)},
                                   {"weight", randn64({c.C, 1, c.K}, seed + 2, 0.5)}};
  if (has_bias) in.push_back({"bias", randn64({c.C}, seed + 3, 0.3)});
  if (has_state) in.push_back({"initial_state", randn64({c.B, c.C, c.K - 1}, seed + 4)});
  const std::string op = std::string("short_conv ") + c.what + " B" + std::to_string(c.B) + " L" +
                         std::to_string(c.L) + " C" + std::to_string(c.C) + " K" + std::to_string(c.K);
  return gpucheck(op, named_kernel("short_conv"), fn, in, seed);
}

}  // namespace

HLA_GPUCHECK("short_conv", seed) {
  std::vector<GpucheckResult> all;
  const ConvCase cases[] = {
      {"gdn-340m q/k conv", 2, 77, 1024, 4, false, false, ConvAct::SiLU},    // H*dk = 4*256
      {"deltanet-tiny v conv", 3, 50, 64, 4, false, false, ConvAct::SiLU},    // HV*dv = 2*32
      {"mamba2-340m xBC conv", 2, 37, 2304, 4, true, false, ConvAct::SiLU},  // inner + 2N = 2048 + 256
      {"mamba2-tiny xBC conv", 2, 65, 160, 4, true, false, ConvAct::SiLU},   // 128 + 2*16
      {"chunk with state", 2, 45, 67, 4, true, true, ConvAct::SiLU},
      {"identity with state K=3", 3, 33, 129, 3, false, true, ConvAct::Identity},
      {"decode L < K-1", 2, 2, 33, 4, true, true, ConvAct::SiLU},
  };
  for (const ConvCase& c : cases) append(all, check_short_conv(c, seed));
  return all;
}

HLA_GPUCHECK("token_shift", seed) {
  std::vector<GpucheckResult> all;
  auto shift = [](const std::vector<Var>& x) {
    TokenShiftOut o = token_shift(x[0], x.size() > 1 ? x[1] : Var());
    return std::vector<Var>{o.delta, o.last_token};
  };
  // RWKV-6 340M time mix / channel mix (no state), then a continued chunk with an odd width.
  append(all, gpucheck("token_shift B2 L77 D1024", named_kernel("token_shift"), shift,
                       {{"x", randn64({2, 77, 1024}, seed + 1)}}, seed));
  append(all, gpucheck("token_shift state B3 L37 D67", named_kernel("token_shift"), shift,
                       {{"x", randn64({3, 37, 67}, seed + 2)}, {"state", randn64({3, 67}, seed + 3)}}, seed));
  append(all, gpucheck("token_shift state B2 L1 D33", named_kernel("token_shift"), shift,
                       {{"x", randn64({2, 1, 33}, seed + 4)}, {"state", randn64({2, 33}, seed + 5)}}, seed));
  return all;
}

HLA_GPUCHECK("lerp", seed) {
  std::vector<GpucheckResult> all;
  auto static_lerp = [](const std::vector<Var>& x) { return std::vector<Var>{lerp(x[0], x[1], x[2])}; };
  for (auto [B, L, D] : {std::tuple<int64_t, int64_t, int64_t>{2, 77, 1024}, {3, 37, 67}, {2, 5, 64}}) {
    const std::string op = "lerp " + shape_str({B, L, D});
    append(all, gpucheck(op, named_kernel("lerp"), static_lerp,
                         {{"x", randn64({B, L, D}, seed + 1)},
                          {"delta", randn64({B, L, D}, seed + 2)},
                          {"mu", uniform64({D}, seed + 3, 0.0, 1.0)}},
                         seed));
  }
  return all;
}

HLA_GPUCHECK("ddlerp", seed) {
  std::vector<GpucheckResult> all;
  auto data_dependent = [](const std::vector<Var>& x) { return ddlerp(x[0], x[1], x[2], x[3], x[4]); };
  // N = 5 maps (r, w, k, v, g); RWKV-6 340M (D 1024, R 32), tiny (D 64), and an odd width and rank.
  for (auto [B, L, D, R] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{2, 37, 1024, 32}, {2, 45, 64, 32},
                            {3, 9, 67, 3}}) {
    const int64_t N = 5;
    const std::string op = "ddlerp B" + std::to_string(B) + " L" + std::to_string(L) + " D" + std::to_string(D) +
                           " R" + std::to_string(R);
    append(all, gpucheck(op, named_kernel("ddlerp cublas"), data_dependent,
                         {{"x", randn64({B, L, D}, seed + 1)},
                          {"delta", randn64({B, L, D}, seed + 2)},
                          {"zz", randn64({B, L, N * R}, seed + 3)},
                          {"w2", randn64({D, N * R}, seed + 4, 0.1)},
                          {"bias", randn64({N, D}, seed + 5, 0.3, 0.5)}},
                         seed));
  }
  return all;
}

HLA_GPUCHECK("gates", seed) {
  std::vector<GpucheckResult> all;
  auto check_gate = [&all, seed](const std::string& op, const GpucheckFn& fn, const std::vector<GpucheckInput>& in) {
    append(all, gpucheck(op, named_kernel("gates"), fn, in, seed));
  };
  auto gla = [](const std::vector<Var>& x) { return std::vector<Var>{gla_gate(x[0], 16.0)}; };
  auto rwkv = [](const std::vector<Var>& x) { return std::vector<Var>{rwkv_gate(x[0])}; };
  auto hgrn = [](const std::vector<Var>& x) { return std::vector<Var>{hgrn_gate(x[0], x[1])}; };
  auto ssm = [](const std::vector<Var>& x) { return std::vector<Var>{ssm_gate(x[0], x[1], x[2])}; };
  auto lower = [](const std::vector<Var>& x) { return std::vector<Var>{lower_bound_gate(x[0], x[1], x[2], -5.0)}; };
  auto lower_no_a = [](const std::vector<Var>& x) {
    return std::vector<Var>{lower_bound_gate(x[0], Var(), x[1], -5.0)};
  };
  // GLA: gk (B, T, H*dk) of the 340M layer; RWKV-6: the w LoRA output, -exp of it in (-e^3, 0).
  check_gate("gla_gate B2 T77 F1024", gla, {{"z", randn64({2, 77, 1024}, seed + 1, 2.0)}});
  check_gate("rwkv_gate B2 T37 F1024", rwkv, {{"z", randn64({2, 37, 1024}, seed + 2, 1.0, -0.5)}});
  // HGRN: a first layer (lb = 0: logsigmoid) and a deeper one (lb in (0.05, 0.9)), odd width.
  check_gate("hgrn_gate lb=0 B2 T37 F67", hgrn,
             {{"z", randn64({2, 37, 67}, seed + 3, 3.0)}, {"lower_bound", Tensor::zeros({67}, DType::F64)}});
  check_gate("hgrn_gate B3 T45 F1024", hgrn,
             {{"z", randn64({3, 45, 1024}, seed + 4, 3.0)},
              {"lower_bound", uniform64({1024}, seed + 5, 0.05, 0.9)}});
  // SSM scalar per head (GDN / Mamba-2 340M: 32 heads) and per head x channel (KDA 340M: 4 x 256).
  check_gate("ssm_gate scalar B2 T77 H32", ssm,
             {{"z", randn64({2, 77, 32}, seed + 6)},
              {"A_log", map64(uniform64({32}, seed + 7, 1.0, 16.0), log_of)},
              {"dt_bias", map64(uniform64({32}, seed + 8, 1e-3, 0.1), inverse_softplus)}});
  check_gate("ssm_gate vector B2 T37 H4x256", ssm,
             {{"z", randn64({2, 37, 4, 256}, seed + 9)},
              {"A_log", map64(uniform64({4}, seed + 10, 1.0, 16.0), log_of)},
              {"dt_bias", map64(uniform64({1024}, seed + 11, 1e-3, 0.1), inverse_softplus)}});
  check_gate("ssm_gate vector B2 T19 H3x5", ssm,
             {{"z", randn64({2, 19, 3, 5}, seed + 12, 2.0)},
              {"A_log", map64(uniform64({3}, seed + 13, 1.0, 16.0), log_of)},
              {"dt_bias", map64(uniform64({15}, seed + 14, 1e-3, 0.1), inverse_softplus)}});
  // LowerBound (KDA / GDN-2 option, lb = -5) with and without A_log.
  check_gate("lower_bound_gate B2 T37 H4x64", lower,
             {{"z", randn64({2, 37, 4, 64}, seed + 15)},
              {"A_log", randn64({4}, seed + 16, 0.3)},
              {"dt_bias", randn64({256}, seed + 17, 0.5)}});
  check_gate("lower_bound_gate no A_log B3 T21 F67", lower_no_a,
             {{"z", randn64({3, 21, 67}, seed + 18)}, {"dt_bias", randn64({67}, seed + 19, 0.5)}});
  return all;
}

HLA_GPUCHECK("broadcast", seed) {
  std::vector<GpucheckResult> all;
  struct BroadcastCase {
    const char* what;
    Shape x_shape;
    int64_t S, inner;
    bool multiply;
  };
  // Mamba-2 340M (B 2, T 37, H 32, P 64): xs * Delta per (b, t, h), y + D x per head, dt + dt_bias;
  // a per-channel weight with an odd width; a learned scalar (S = 1); an odd inner width.
  const BroadcastCase cases[] = {
      {"mul per-token head scalar", {2 * 37 * 32, 64}, 2 * 37 * 32, 64, true},
      {"mul per-head D", {2, 37, 32, 64}, 32, 64, true},
      {"add_rows dt_bias", {2, 37, 32}, 32, 1, false},
      {"mul_rows", {3, 37, 333}, 333, 1, true},
      {"scale_by", {3, 1001}, 1, 3003, true},
      {"add inner 13", {5, 7, 13}, 7, 13, false},
  };
  for (const BroadcastCase& c : cases) {
    const int64_t inner = c.inner;
    const bool multiply = c.multiply;
    auto fn = [inner, multiply](const std::vector<Var>& x) {
      return std::vector<Var>{multiply ? mul_broadcast(x[0], x[1], inner) : add_broadcast(x[0], x[1], inner)};
    };
    const std::string op = std::string(multiply ? "mul_broadcast " : "add_broadcast ") + c.what + " " +
                           shape_str(c.x_shape) + " S" + std::to_string(c.S) + " inner" + std::to_string(inner);
    append(all, gpucheck(op, named_kernel("broadcast"), fn,
                         {{"x", randn64(c.x_shape, seed + 1)}, {"s", randn64({c.S}, seed + 2, 0.5, 0.5)}}, seed));
  }
  return all;
}

HLA_GPUCHECK("split_last", seed) {
  std::vector<GpucheckResult> all;
  struct SplitCase {
    Shape x_shape;
    std::vector<int64_t> widths;
  };
  // Mamba-2 tiny's in_proj split [z | xBC | dt] and xBC split [x | B | C]; odd widths.
  const SplitCase cases[] = {{{2, 37, 128 + 160 + 4}, {128, 160, 4}}, {{2, 37, 160}, {128, 16, 16}},
                             {{3, 7, 26}, {5, 1, 17, 3}}};
  for (const SplitCase& c : cases) {
    const std::vector<int64_t> widths = c.widths;
    auto fn = [widths](const std::vector<Var>& x) { return split_last(x[0], widths); };
    append(all, gpucheck("split_last " + shape_str(c.x_shape) + " into " + std::to_string(widths.size()),
                         named_kernel("memcpy2d"), fn, {{"x", randn64(c.x_shape, seed + 1)}}, seed));
  }
  return all;
}

}  // namespace hla
