// Gate parameterisations (mixers.md 2.11): one forward and one backward kernel, one switch
// case per kind, each backward case the derivative of the forward case above it.
//
// HGRN is evaluated in the log domain as fla does, g = logaddexp(log lb, log1p(-lb) + logsigmoid(z)),
// so it stays finite for very negative z; its derivatives use p = (1 - lb) sigma(z) / (lb + (1 - lb) sigma(z))
// = exp(log1p(-lb) + logsigmoid(z) - g), the share of the data term in the gate.
#include "nn/ops/gates.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "nn/ops/check.h"
#include "nn/ops/pointwise.h"
#include "tensor/dispatch.h"
#ifdef HLA_CUDA
#include "cuda/gates.h"
#endif

namespace hla {
namespace cpu {

namespace {
// softplus'(v), with the same threshold
template <class T> T softplus_grad(T v) { return v > T(20) ? T(1) : sigmoid_of(v); }
template <class T> T logsigmoid_of(T v) { return -softplus_of(-v); }
// log(e^a + e^b) with a = -inf allowed
template <class T> T logaddexp(T a, T b) {
  T hi = std::max(a, b), lo = std::min(a, b);
  if (lo == -std::numeric_limits<T>::infinity()) return hi;
  return hi + std::log1p(std::exp(lo - hi));
}
// log(lb + (1 - lb) sigma(z)): the HGRN gate, and its data term log1p(-lb) + logsigmoid(z)
template <class T> T hgrn_data_term(T z, T lb) { return std::log1p(-lb) + logsigmoid_of(z); }
template <class T> T hgrn_of(T z, T lb) { return logaddexp(std::log(lb), hgrn_data_term(z, lb)); }
}  // namespace

template <class T>
void gate_forward(T* g, const T* z, const T* a_log, const T* param, const GateDims& d) {
  const int64_t N = d.N, F = d.F, per_head = F / d.H;  // channels per A_log entry
  const T constant = static_cast<T>(d.constant);
  for (int64_t n = 0; n < N; n++)
    for (int64_t f = 0; f < F; f++) {
      int64_t i = n * F + f;
      T A = a_log ? std::exp(a_log[f / per_head]) : T(1);  // exp(A_log)
      switch (d.kind) {
        case GateKind::GLA: g[i] = logsigmoid_of(z[i]) / constant; break;    // logsigmoid(z) / norm
        case GateKind::HGRN: g[i] = hgrn_of(z[i], param[f]); break;          // log(lb + (1 - lb) sigma(z))
        case GateKind::SSM: g[i] = -A * softplus_of(z[i] + param[f]); break;  // -exp(A_log) softplus(z + dt_bias)
        case GateKind::LowerBound:                                             // lb sigma(exp(A_log) (z + dt_bias))
          g[i] = constant * sigmoid_of(A * (z[i] + param[f]));
          break;
        case GateKind::RWKV: g[i] = -std::exp(z[i]); break;  // -exp(z)
      }
    }
}

template <class T>
void gate_backward(T* dz, T* da_log, T* dparam, const T* dg, const T* g, const T* z, const T* a_log, const T* param,
                   const GateDims& d) {
  const int64_t N = d.N, F = d.F, per_head = F / d.H;
  const T constant = static_cast<T>(d.constant);
  if (da_log) std::fill(da_log, da_log + d.H, T(0));
  if (dparam) std::fill(dparam, dparam + F, T(0));
  for (int64_t n = 0; n < N; n++)
    for (int64_t f = 0; f < F; f++) {
      int64_t i = n * F + f, h = f / per_head;
      T A = a_log ? std::exp(a_log[h]) : T(1);
      switch (d.kind) {
        case GateKind::GLA:  // g = logsigmoid(z) / norm  =>  dz = dg (1 - sigma(z)) / norm
          dz[i] = dg[i] * sigmoid_of(-z[i]) / constant;
          break;
        case GateKind::HGRN: {  // g = log(lam), lam = lb + (1 - lb) s  =>  dz = dg p (1 - s), dlb = dg (1 - s) / lam
          T lb = param[f], one_minus_s = sigmoid_of(-z[i]);
          T p = std::exp(hgrn_data_term(z[i], lb) - g[i]);  // (1 - lb) s / lam
          dz[i] = dg[i] * p * one_minus_s;
          if (dparam) dparam[f] += dg[i] * one_minus_s * std::exp(-g[i]);
          break;
        }
        case GateKind::SSM: {  // g = -A softplus(u), u = z + dt_bias  =>  du = -dg A softplus'(u), dA_log = dg g
          dz[i] = -dg[i] * A * softplus_grad(z[i] + param[f]);
          if (dparam) dparam[f] += dz[i];
          if (da_log) da_log[h] += dg[i] * g[i];
          break;
        }
        case GateKind::LowerBound: {  // g = lb s, s = sigma(u), u = A (z + dt_bias)  =>  du = dg lb s (1 - s)
          T u = A * (z[i] + param[f]), s = sigmoid_of(u);
          T du = dg[i] * constant * s * (T(1) - s);
          dz[i] = du * A;  // u = A z + ...      =>  dz = du A, ddt_bias = sum dz
          if (dparam) dparam[f] += dz[i];
          if (da_log) da_log[h] += du * u;  // dA/dA_log = A  =>  dA_log = sum du (z + dt_bias) A = sum du u
          break;
        }
        case GateKind::RWKV: dz[i] = dg[i] * g[i]; break;  // g = -exp(z)  =>  dz = dg g
      }
    }
}

template void gate_forward<float>(float*, const float*, const float*, const float*, const GateDims&);
template void gate_forward<double>(double*, const double*, const double*, const double*, const GateDims&);
template void gate_backward<float>(float*, float*, float*, const float*, const float*, const float*, const float*,
                                   const float*, const GateDims&);
template void gate_backward<double>(double*, double*, double*, const double*, const double*, const double*,
                                    const double*, const double*, const GateDims&);

}  // namespace cpu

namespace {

const char* gate_name(GateKind kind) {
  switch (kind) {
    case GateKind::GLA: return "gla_gate";
    case GateKind::HGRN: return "hgrn_gate";
    case GateKind::SSM: return "ssm_gate";
    case GateKind::LowerBound: return "lower_bound_gate";
    case GateKind::RWKV: return "rwkv_gate";
  }
  return "?";
}

// F = the product of z's trailing dims that equals the per-channel parameter's length.
int64_t channel_width(const Var& z, const Var& param, const char* op, const char* param_name) {
  HLA_CHECK(param.dim() == 1, op, ": ", param_name, " must be 1-D, got ", param.value().str());
  int64_t F = param.size(0), width = 1;
  for (int d = z.dim() - 1; d >= 0 && width < F; d--) width *= z.size(d);
  HLA_CHECK(width == F, op, ": ", param_name, " ", param.value().str(), " does not match trailing dims of z ",
            z.value().str());
  return F;
}

// One forward for both devices: cpu::gate_forward<T> or cuda::gate_forward.
// z, g: (N, F); a_log: (H) or undefined; param: (F) or undefined
void gate_forward(Tensor& g, const Tensor& z, const Tensor& a_log, const Tensor& param, const GateDims& d) {
  if (z.is_cuda()) {
    HLA_CUDA_ONLY(cuda::gate_forward(g.raw(), z.raw(), raw_or_null(a_log), raw_or_null(param), d, z.dtype()));
    return;
  }
  dispatch_float(z.dtype(), gate_name(d.kind), [&](auto tag) {
    using T = decltype(tag);
    cpu::gate_forward(g.data<T>(), z.data<T>(), data_or_null<T>(a_log), data_or_null<T>(param), d);
  });
}

// One backward for both devices; dz: (N, F), da_log: (H), dparam: (F) written (either of the last
// two may be undefined). g: the forward's output, read by the CPU only: the GPU recomputes it from
// z in fp32 (a stored bf16 g would cost precision), so there g may be undefined.
void gate_backward(Tensor& dz, Tensor& da_log, Tensor& dparam, const Tensor& dg, const Tensor& g, const Tensor& z,
                   const Tensor& a_log, const Tensor& param, const GateDims& d) {
  if (z.is_cuda()) {
    HLA_CUDA_ONLY(cuda::gate_backward(dz.raw(), raw_or_null(da_log), raw_or_null(dparam), dg.raw(), z.raw(),
                                      raw_or_null(a_log), raw_or_null(param), d, z.dtype()));
    return;
  }
  dispatch_float(z.dtype(), gate_name(d.kind), [&](auto tag) {
    using T = decltype(tag);
    cpu::gate_backward(dz.data<T>(), data_or_null<T>(da_log), data_or_null<T>(dparam), dg.data<T>(), g.data<T>(),
                       z.data<T>(), data_or_null<T>(a_log), data_or_null<T>(param), d);
  });
}

// The shared Var wrapper: z (N, F) with optional A_log (H) and per-channel param (F).
Var gate_op(GateKind kind, const Var& z, const Var& a_log, const Var& param, int64_t F, double constant) {
  const char* name = gate_name(kind);
  int64_t N = z.numel() / F, H = 1;
  if (a_log.defined()) {
    HLA_CHECK(a_log.dim() == 1 && a_log.size(0) > 0 && F % a_log.size(0) == 0, name, ": A_log ",
              a_log.value().str(), " must be (H) with H dividing the ", F, " channels");
    H = a_log.size(0);
  }
  Tensor zv = z.value();
  Tensor av = a_log.defined() ? a_log.value() : Tensor();
  Tensor pv = param.defined() ? param.value() : Tensor();
  check_operand(av, zv, name, "A_log");
  check_operand(pv, zv, name, "param");
  const GateDims d{N, F, H, kind, constant};
  Tensor g = Tensor::empty(zv.shape(), zv.dtype(), zv.device());  // g: z's shape, viewed as (N, F)
  gate_forward(g, zv, av, pv, d);
  Tensor g_saved = zv.is_cuda() ? Tensor() : g;  // the GPU backward recomputes g
  return record_op1(g, {z, a_log, param}, [=](const std::vector<Tensor>& grads) {
    Tensor dz = Tensor::empty(zv.shape(), zv.dtype(), zv.device());
    Tensor da = av.defined() ? Tensor::empty(av.shape(), zv.dtype(), zv.device()) : Tensor();
    Tensor dp = pv.defined() ? Tensor::empty(pv.shape(), zv.dtype(), zv.device()) : Tensor();
    gate_backward(dz, da, dp, grads[0], g_saved, zv, av, pv, d);
    return std::vector<Tensor>{dz, da, dp};
  }, name);
}

}  // namespace

Var gla_gate(const Var& z, double normalizer) {
  HLA_CHECK(normalizer > 0, "gla_gate: normalizer must be > 0, got ", normalizer);
  return gate_op(GateKind::GLA, z, Var(), Var(), 1, normalizer);
}

Var hgrn_gate(const Var& z, const Var& lower_bound) {
  int64_t F = channel_width(z, lower_bound, "hgrn_gate", "lower_bound");
  return gate_op(GateKind::HGRN, z, Var(), lower_bound, F, 0.0);
}

Var ssm_gate(const Var& z, const Var& a_log, const Var& dt_bias) {
  HLA_CHECK(a_log.defined(), "ssm_gate: A_log is required");
  int64_t F = channel_width(z, dt_bias, "ssm_gate", "dt_bias");
  return gate_op(GateKind::SSM, z, a_log, dt_bias, F, 0.0);
}

Var lower_bound_gate(const Var& z, const Var& a_log, const Var& dt_bias, double lower_bound) {
  HLA_CHECK(lower_bound < 0, "lower_bound_gate: lower_bound must be negative (fla: in [-5, 0)), got ", lower_bound);
  int64_t F = channel_width(z, dt_bias, "lower_bound_gate", "dt_bias");
  return gate_op(GateKind::LowerBound, z, a_log, dt_bias, F, lower_bound);
}

Var rwkv_gate(const Var& z) { return gate_op(GateKind::RWKV, z, Var(), Var(), 1, 0.0); }

Tensor retnet_gate(int64_t H, DType dtype) {
  std::vector<double> g(H);
  for (int64_t h = 0; h < H; h++) g[h] = std::log1p(-std::exp2(-5.0 - static_cast<double>(h)));  // ln(1 - 2^(-5-h))
  return Tensor::from_f64(g, {H}, dtype);
}

}  // namespace hla
