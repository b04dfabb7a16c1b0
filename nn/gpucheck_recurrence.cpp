// CUDA-vs-CPU cases of the recurrence ops (hgrn, decay_attention, rwkv6, delta_rule) for
// `hla gpu-check` (autograd/gpucheck.h). Every case runs both dtypes and checks the outputs,
// the final state and every input's gradient, initial state included. Shapes cover B > 1,
// several heads, grouped value heads, lengths that are not a multiple of the 16-token tiles or
// the 64-token checkpoints, widths that do not fill a block of state columns, every key-width
// class (dk <= 64, 128, 256), and one long sequence (T = 4096) per op.
// Inputs in realistic ranges: log gates = logsigmoid(N(shift, 1)) (decay per step in (0, 1)),
// beta and the GDN-2 gates = sigmoid(N(0, 1)), delta-rule keys and queries of norm 1.
#include <cmath>
#include <string>

#include "autograd/gpucheck.h"
#include "nn/ops/decay_attention.h"
#include "nn/ops/delta_rule.h"
#include "nn/ops/hgrn.h"
#include "nn/ops/rwkv6.h"
#ifdef HLA_CUDA
#include "cuda/decay_attention.h"
#include "cuda/delta_rule.h"
#endif

namespace hla {
namespace {

double logsigmoid(double x) { return -std::log1p(std::exp(-x)); }
double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// Log decay gates in (-inf, 0): logsigmoid of N(shift, 1).
Tensor log_gate(const Shape& shape, uint64_t seed, double shift) { return map64(randn64(shape, seed, 1.0, shift), logsigmoid); }

// Rows of the last dimension scaled to norm 1 (delta-rule keys and queries are l2-normalised).
Tensor unit_rows(Tensor t) {
  const int64_t w = t.size(-1);
  double* p = t.data<double>();
  for (int64_t r = 0; r < t.numel() / w; r++) {
    double ss = 0;
    for (int64_t i = 0; i < w; i++) ss += p[r * w + i] * p[r * w + i];
    for (int64_t i = 0; i < w; i++) p[r * w + i] /= std::sqrt(ss);
  }
  return t;
}

KernelName recurrent() {
  return [](DType) { return std::string("recurrent"); };
}

std::string dims(int64_t B, int64_t T, int64_t H, int64_t HV, int64_t dk, int64_t dv) {
  return " B" + std::to_string(B) + " T" + std::to_string(T) + " H" + std::to_string(H) + "/" + std::to_string(HV) +
         " dk" + std::to_string(dk) + " dv" + std::to_string(dv);
}

// ---- hgrn ----

std::vector<GpucheckResult> check_hgrn(int64_t B, int64_t T, int64_t D, uint64_t seed) {
  auto fn = [](const std::vector<Var>& x) {
    HgrnOutput out = hgrn(x[0], x[1], x[2]);
    return std::vector<Var>{out.o, out.final_state};
  };
  const std::string op = "hgrn B" + std::to_string(B) + " T" + std::to_string(T) + " D" + std::to_string(D);
  return gpucheck(op, recurrent(), fn,
                  {{"x", randn64({B, T, D}, seed + 1)},
                   {"g", log_gate({B, T, D}, seed + 2, 2.0)},
                   {"initial_state", randn64({B, D}, seed + 3)}},
                  seed);
}

// ---- decay_attention ----

struct DecayCase {
  int64_t B, T, H, HV, dk, dv;
  bool vector_gate, initial_state;
  double gate_shift;
};

std::vector<GpucheckResult> check_decay(const DecayCase& c, uint64_t seed) {
  const double scale = 1.0 / std::sqrt(double(c.dk));
  const bool has_h0 = c.initial_state;
  auto fn = [scale, has_h0](const std::vector<Var>& x) {
    DecayAttentionOutput out = decay_attention(x[0], x[1], x[2], x[3], has_h0 ? x[4] : Var(), scale, 0);
    return std::vector<Var>{out.o, out.final_state};
  };
  std::vector<GpucheckInput> in = {
      {"q", randn64({c.B, c.T, c.H, c.dk}, seed + 1)},
      {"k", randn64({c.B, c.T, c.H, c.dk}, seed + 2, 1.0 / std::sqrt(double(c.dk)))},
      {"v", randn64({c.B, c.T, c.HV, c.dv}, seed + 3)},
      {"g", log_gate(c.vector_gate ? Shape{c.B, c.T, c.HV, c.dk} : Shape{c.B, c.T, c.HV}, seed + 4, c.gate_shift)}};
  if (has_h0) in.push_back({"initial_state", randn64({c.B, c.HV, c.dk, c.dv}, seed + 5, 0.5)});
  const std::string op = std::string("decay_attention ") + (c.vector_gate ? "vector" : "scalar") +
                         dims(c.B, c.T, c.H, c.HV, c.dk, c.dv);
#ifdef HLA_CUDA
  KernelName kernel = [c](DType dtype) {
    return std::string(cuda::decay_attention_kernel(c.dk, c.dv, c.vector_gate, dtype));
  };
#else
  KernelName kernel = recurrent();
#endif
  return gpucheck(op, kernel, fn, in, seed);
}

// ---- rwkv6 ----

std::vector<GpucheckResult> check_rwkv6(int64_t B, int64_t T, int64_t H, int64_t dk, int64_t dv, double gate_shift,
                                        uint64_t seed) {
  auto fn = [](const std::vector<Var>& x) {
    Rwkv6Output out = rwkv6(x[0], x[1], x[2], x[3], x[4], x[5], 1.0, 0);
    return std::vector<Var>{out.o, out.final_state};
  };
  const double unit = 1.0 / std::sqrt(double(dk));
  return gpucheck("rwkv6" + dims(B, T, H, H, dk, dv), recurrent(), fn,
                  {{"r", randn64({B, T, H, dk}, seed + 1, unit)},
                   {"k", randn64({B, T, H, dk}, seed + 2, unit)},
                   {"v", randn64({B, T, H, dv}, seed + 3)},
                   {"w", log_gate({B, T, H, dk}, seed + 4, gate_shift)},
                   {"u", randn64({H, dk}, seed + 5)},
                   {"initial_state", randn64({B, H, dk, dv}, seed + 6, 0.5)}},
                  seed);
}

// ---- delta_rule ----

struct DeltaCase {
  const char* mixer;
  int64_t B, T, H, HV, dk, dv;
  cpu::DeltaGate gate;
  bool erase_vector, write_vector, tied, initial_state;
  double gate_shift;
};

// The kernels cuda::delta_rule_forward/backward pick for a case (chunked in bf16 where supported).
KernelName delta_kernel(const DeltaCase& c) {
#ifdef HLA_CUDA
  return [c](DType dtype) {
    using G = cpu::DeltaGate;
    const cuda::DeltaGate gate = c.gate == G::None     ? cuda::DeltaGate::None
                                 : c.gate == G::Scalar ? cuda::DeltaGate::Scalar
                                                       : cuda::DeltaGate::Vector;
    const cuda::DeltaRuleDims d{c.B, c.T, c.H, c.HV, c.dk, c.dv, gate, c.erase_vector, c.write_vector, 1.0, 0};
    return std::string(cuda::delta_rule_kernel(d, dtype));
  };
#else
  (void)c;
  return recurrent();
#endif
}

std::vector<GpucheckResult> check_delta(const DeltaCase& c, uint64_t seed) {
  std::vector<GpucheckInput> in = {{"q", unit_rows(randn64({c.B, c.T, c.H, c.dk}, seed + 1))},
                                   {"k", unit_rows(randn64({c.B, c.T, c.H, c.dk}, seed + 2))},
                                   {"v", randn64({c.B, c.T, c.HV, c.dv}, seed + 3)}};
  auto add = [&in](const char* name, Tensor t) {
    in.push_back({name, std::move(t)});
    return static_cast<int>(in.size()) - 1;
  };
  int ig = -1, iw = -1, ih = -1;
  if (c.gate != cpu::DeltaGate::None)
    ig = add("g", log_gate(c.gate == cpu::DeltaGate::Vector ? Shape{c.B, c.T, c.HV, c.dk} : Shape{c.B, c.T, c.HV},
                           seed + 4, c.gate_shift));
  const int ib = add(c.tied ? "beta" : "b",
                     map64(randn64(c.erase_vector ? Shape{c.B, c.T, c.HV, c.dk} : Shape{c.B, c.T, c.HV}, seed + 5),
                           sigmoid));
  if (!c.tied)
    iw = add("w", map64(randn64(c.write_vector ? Shape{c.B, c.T, c.HV, c.dv} : Shape{c.B, c.T, c.HV}, seed + 6),
                        sigmoid));
  if (c.initial_state) ih = add("initial_state", randn64({c.B, c.HV, c.dk, c.dv}, seed + 7, 0.5));
  auto fn = [=](const std::vector<Var>& x) {
    auto pick = [&x](int i) { return i < 0 ? Var() : x[i]; };
    DeltaRuleOutputs r = delta_rule(x[0], x[1], x[2], pick(ig), x[ib], pick(iw), pick(ih), {0, 0});
    return std::vector<Var>{r.o, r.final_state, r.residual};
  };
  return gpucheck(std::string("delta_rule ") + c.mixer + dims(c.B, c.T, c.H, c.HV, c.dk, c.dv), delta_kernel(c), fn, in,
                  seed);
}

}  // namespace

HLA_GPUCHECK("hgrn", seed) {
  std::vector<GpucheckResult> all;
  append(all, check_hgrn(2, 300, 200, seed));
  append(all, check_hgrn(1, 4096, 256, seed));
  return all;
}

HLA_GPUCHECK("decay_attention", seed) {
  std::vector<GpucheckResult> all;
  append(all, check_decay({2, 150, 2, 4, 64, 48, false, true, 0.0}, seed));   // grouped value heads
  append(all, check_decay({2, 100, 3, 3, 40, 200, true, false, 0.0}, seed));  // dv over two column blocks, no h0
  append(all, check_decay({2, 70, 1, 2, 128, 64, true, true, 1.0}, seed));
  append(all, check_decay({1, 4096, 1, 1, 64, 64, false, true, 3.0}, seed));  // long
  return all;
}

HLA_GPUCHECK("rwkv6", seed) {
  std::vector<GpucheckResult> all;
  append(all, check_rwkv6(2, 130, 3, 64, 64, 0.0, seed));
  append(all, check_rwkv6(2, 50, 2, 96, 40, 1.0, seed));
  append(all, check_rwkv6(1, 4096, 1, 64, 64, 3.0, seed));  // long
  return all;
}

HLA_GPUCHECK("delta_rule", seed) {
  using G = cpu::DeltaGate;
  std::vector<GpucheckResult> all;
  for (const DeltaCase& c : {
           DeltaCase{"deltanet", 2, 100, 2, 2, 64, 64, G::None, false, false, true, false, 0.0},
           DeltaCase{"gdn", 2, 150, 2, 4, 128, 96, G::Scalar, false, false, true, true, 0.0},  // grouped value heads
           DeltaCase{"kda", 2, 90, 2, 2, 64, 64, G::Vector, false, false, true, true, 1.0},
           DeltaCase{"gdn2", 2, 70, 1, 2, 48, 80, G::Vector, true, true, false, true, 1.0},
           DeltaCase{"b,w scalar", 2, 40, 2, 2, 32, 32, G::None, false, false, false, true, 0.0},
           DeltaCase{"gdn dk256", 1, 80, 1, 2, 256, 256, G::Scalar, false, false, true, true, 2.0},
           DeltaCase{"gdn long", 1, 4096, 1, 1, 128, 128, G::Scalar, false, false, true, true, 3.0},
       })
    append(all, check_delta(c, seed));
  return all;
}

// Cases that take the chunked tensor-core forward and backward (cuda/delta_rule_chunk.cu) in
// bf16: DeltaNet and GDN, grouped and ungrouped value heads, every (dk, dv) template, partial
// last chunks with and without an initial state, untied beta and w, and two long sequences
// (64 chunks).
HLA_GPUCHECK("delta_rule chunked", seed) {
  using G = cpu::DeltaGate;
  std::vector<GpucheckResult> all;
  for (const DeltaCase& c : {
           DeltaCase{"chunk deltanet", 2, 100, 2, 4, 64, 64, G::None, false, false, true, true, 0.0},
           DeltaCase{"chunk deltanet", 2, 100, 2, 4, 128, 128, G::None, false, false, true, true, 0.0},
           DeltaCase{"chunk gdn", 2, 100, 2, 4, 64, 64, G::Scalar, false, false, true, true, 0.0},
           DeltaCase{"chunk gdn", 2, 100, 2, 4, 128, 128, G::Scalar, false, false, true, true, 0.0},
           DeltaCase{"chunk gdn", 2, 100, 2, 4, 64, 128, G::Scalar, false, false, true, true, 1.0},
           DeltaCase{"chunk gdn", 2, 130, 2, 4, 128, 64, G::Scalar, false, false, true, false, 1.0},
           DeltaCase{"chunk gdn b,w", 2, 200, 3, 3, 64, 64, G::Scalar, false, false, false, true, 2.0},
           DeltaCase{"chunk gdn long", 2, 4096, 2, 4, 128, 128, G::Scalar, false, false, true, true, 3.0},
           DeltaCase{"chunk deltanet long", 2, 4096, 2, 4, 64, 64, G::None, false, false, true, true, 0.0},
       })
    append(all, check_delta(c, seed));
  return all;
}

}  // namespace hla
