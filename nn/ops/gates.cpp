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
#include <utility>

#include "tensor/dispatch.h"
#ifdef HLA_CUDA
#include "cuda/gates.h"
#endif

namespace hla {
namespace cpu {

namespace {
template <class T> T sigmoid_of(T v) { return T(1) / (T(1) + std::exp(-v)); }
// softplus with PyTorch's / fla's threshold: u for u > 20
template <class T> T softplus_of(T v) { return v > T(20) ? v : std::log1p(std::exp(v)); }
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
void gate_forward(T* g, const T* z, const T* a_log, const T* param, int64_t N, int64_t F, int64_t H, GateKind kind,
                  double constant) {
  int64_t per_head = F / H;  // channels per A_log entry
  for (int64_t n = 0; n < N; n++)
    for (int64_t f = 0; f < F; f++) {
      int64_t i = n * F + f;
      T A = a_log ? std::exp(a_log[f / per_head]) : T(1);  // exp(A_log)
      switch (kind) {
        case GateKind::GLA: g[i] = logsigmoid_of(z[i]) / static_cast<T>(constant); break;  // logsigmoid(z) / norm
        case GateKind::HGRN: g[i] = hgrn_of(z[i], param[f]); break;          // log(lb + (1 - lb) sigma(z))
        case GateKind::SSM: g[i] = -A * softplus_of(z[i] + param[f]); break;  // -exp(A_log) softplus(z + dt_bias)
        case GateKind::LowerBound:                                             // lb sigma(exp(A_log) (z + dt_bias))
          g[i] = static_cast<T>(constant) * sigmoid_of(A * (z[i] + param[f]));
          break;
        case GateKind::RWKV: g[i] = -std::exp(z[i]); break;  // -exp(z)
      }
    }
}

template <class T>
void gate_backward(T* dz, T* da_log, T* dparam, const T* dg, const T* g, const T* z, const T* a_log, const T* param,
                   int64_t N, int64_t F, int64_t H, GateKind kind, double constant) {
  int64_t per_head = F / H;
  for (int64_t n = 0; n < N; n++)
    for (int64_t f = 0; f < F; f++) {
      int64_t i = n * F + f, h = f / per_head;
      T A = a_log ? std::exp(a_log[h]) : T(1);
      switch (kind) {
        case GateKind::GLA:  // g = logsigmoid(z) / norm  =>  dz = dg (1 - sigma(z)) / norm
          dz[i] = dg[i] * sigmoid_of(-z[i]) / static_cast<T>(constant);
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
          T du = dg[i] * static_cast<T>(constant) * s * (T(1) - s);
          dz[i] = du * A;  // u = A z + ...      =>  dz = du A, ddt_bias = sum dz
          if (dparam) dparam[f] += dz[i];
          if (da_log) da_log[h] += du * u;  // dA/dA_log = A  =>  dA_log = sum du (z + dt_bias) A = sum du u
          break;
        }
        case GateKind::RWKV: dz[i] = dg[i] * g[i]; break;  // g = -exp(z)  =>  dz = dg g
      }
    }
}

template void gate_forward<float>(float*, const float*, const float*, const float*, int64_t, int64_t, int64_t,
                                  GateKind, double);
template void gate_forward<double>(double*, const double*, const double*, const double*, int64_t, int64_t, int64_t,
                                   GateKind, double);
template void gate_backward<float>(float*, float*, float*, const float*, const float*, const float*, const float*,
                                   const float*, int64_t, int64_t, int64_t, GateKind, double);
template void gate_backward<double>(double*, double*, double*, const double*, const double*, const double*,
                                    const double*, const double*, int64_t, int64_t, int64_t, GateKind, double);

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

#ifdef HLA_CUDA
// The same op on the GPU (cuda/gates.cu); A_log and param in z's dtype, on the GPU. The backward
// recomputes g from z in fp32, so it does not keep g.
Var gate_op_cuda(GateKind kind, const Var& z, const Var& a_log, const Var& param, int64_t N, int64_t F, int64_t H,
                 double constant) {
  const char* name = gate_name(kind);
  Tensor zv = z.value();
  Tensor av = a_log.defined() ? a_log.value() : Tensor();
  Tensor pv = param.defined() ? param.value() : Tensor();
  const DType dt = zv.dtype();
  const std::pair<const Tensor*, const char*> operands[] = {{&av, "A_log"}, {&pv, "param"}};
  for (const auto& [t, operand] : operands) {
    if (!t->defined()) continue;
    check_dtype(*t, dt, name, operand);
    HLA_CHECK(t->is_cuda(), name, ": z is on cuda but ", operand, " is on the cpu");
  }
  auto raw_or_null = [](const Tensor& t) { return t.defined() ? t.raw() : nullptr; };
  Tensor g = Tensor::empty(zv.shape(), dt, Device::CUDA);  // g: z's shape, viewed as (N, F)
  cuda::gate_forward(g.raw(), zv.raw(), raw_or_null(av), raw_or_null(pv), N, F, H, kind, constant, dt);
  return record_op1(g, {z, a_log, param}, [=](const std::vector<Tensor>& grads) {
    Tensor dz = Tensor::empty(zv.shape(), dt, Device::CUDA);
    Tensor da = av.defined() ? Tensor::zeros(av.shape(), dt, Device::CUDA) : Tensor();
    Tensor dp = pv.defined() ? Tensor::zeros(pv.shape(), dt, Device::CUDA) : Tensor();
    cuda::gate_backward(dz.raw(), da.defined() ? da.raw() : nullptr, dp.defined() ? dp.raw() : nullptr,
                        grads[0].raw(), zv.raw(), raw_or_null(av), raw_or_null(pv), N, F, H, kind, constant, dt);
    return std::vector<Tensor>{dz, da, dp};
  }, name);
}
#endif

// The shared Var wrapper: z (N, F) with optional A_log (H) and per-channel param (F).
Var gate_op(GateKind kind, const Var& z, const Var& a_log, const Var& param, int64_t F, double constant) {
  const char* name = gate_name(kind);
  int64_t N = z.numel() / F, H = 1;
  if (a_log.defined()) {
    HLA_CHECK(a_log.dim() == 1 && a_log.size(0) > 0 && F % a_log.size(0) == 0, name, ": A_log ",
              a_log.value().str(), " must be (H) with H dividing the ", F, " channels");
    H = a_log.size(0);
  }
#ifdef HLA_CUDA
  if (z.value().is_cuda()) return gate_op_cuda(kind, z, a_log, param, N, F, H, constant);
#endif
  Tensor zv = z.value();
  Tensor av = a_log.defined() ? a_log.value() : Tensor();
  Tensor pv = param.defined() ? param.value() : Tensor();
  Tensor g = Tensor::empty(zv.shape(), zv.dtype());  // g: z's shape, viewed as (N, F)
  dispatch_float(zv.dtype(), name, [&](auto tag) {
    using T = decltype(tag);
    cpu::gate_forward(g.data<T>(), zv.data<T>(), data_or_null<T>(av), data_or_null<T>(pv), N, F, H, kind, constant);
  });
  return record_op1(g, {z, a_log, param}, [=](const std::vector<Tensor>& grads) {
    Tensor dz = Tensor::empty(zv.shape(), zv.dtype());
    Tensor da = av.defined() ? Tensor::zeros(av.shape(), zv.dtype()) : Tensor();
    Tensor dp = pv.defined() ? Tensor::zeros(pv.shape(), zv.dtype()) : Tensor();
    dispatch_float(zv.dtype(), name, [&](auto tag) {
      using T = decltype(tag);
      cpu::gate_backward(dz.data<T>(), da.defined() ? da.data<T>() : nullptr, dp.defined() ? dp.data<T>() : nullptr,
                         grads[0].data<T>(), g.data<T>(), zv.data<T>(), data_or_null<T>(av), data_or_null<T>(pv), N,
                         F, H, kind, constant);
    });
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
