// Gate parameterisations on the GPU (mixers.md 2.11), forward and backward: one kernel family
// templated on GateKind, each kind's line the CPU reference's line (nn/ops/gates.cpp), in fp32.
//
// Forward and the backward without parameter gradients are elementwise. With dt_bias / lb /
// A_log gradients, the backward runs one thread per channel f over a fixed chunk of rows and
// writes fp32 partial sums; cuda/reduce.cuh sums the chunks into dparam (per channel) and dA_log
// (per head of F / H consecutive channels), deterministic, without atomics.
#include <type_traits>

#include "cuda/gates.h"
#include "cuda/reduce.cuh"

namespace hla::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kColumnThreads = 128;  // channels per block of the backward with parameter gradients

// softplus with PyTorch's / fla's threshold: u for u > 20
__device__ __forceinline__ float softplus_of(float v) { return v > 20.0f ? v : log1pf(expf(v)); }
__device__ __forceinline__ float softplus_grad(float v) { return v > 20.0f ? 1.0f : sigmoid_of(v); }
__device__ __forceinline__ float logsigmoid_of(float v) { return -softplus_of(-v); }
// log(e^a + e^b) with a = -inf allowed
__device__ __forceinline__ float logaddexp(float a, float b) {
  const float hi = fmaxf(a, b), lo = fminf(a, b);
  if (lo == -INFINITY) return hi;
  return hi + log1pf(expf(lo - hi));
}
// HGRN in the log domain: log(lb + (1 - lb) sigma(z)) = logaddexp(log lb, log1p(-lb) + logsigmoid(z))
__device__ __forceinline__ float hgrn_data_term(float z, float lb) { return log1pf(-lb) + logsigmoid_of(z); }
__device__ __forceinline__ float hgrn_of(float z, float lb) { return logaddexp(logf(lb), hgrn_data_term(z, lb)); }

// The per-channel operands: A = exp(A_log[f / per_head]) (1 without A_log), p = param[f] (0 without).
template <class T>
struct GateParams {
  const T* a_log;  // a_log: (H) or null
  const T* param;  // param: (F) or null
  int64_t F, per_head;
  float constant;
  __device__ float A(int64_t f) const { return a_log ? expf(to_float(a_log[f / per_head])) : 1.0f; }
  __device__ float p(int64_t f) const { return param ? to_float(param[f]) : 0.0f; }
};

template <GateKind kind>
__device__ float gate_value(float z, float A, float p, float c) {
  if constexpr (kind == GateKind::GLA) return logsigmoid_of(z) / c;            // logsigmoid(z) / norm
  else if constexpr (kind == GateKind::HGRN) return hgrn_of(z, p);             // log(lb + (1 - lb) sigma(z))
  else if constexpr (kind == GateKind::SSM) return -A * softplus_of(z + p);    // -exp(A_log) softplus(z + dt_bias)
  else if constexpr (kind == GateKind::LowerBound) return c * sigmoid_of(A * (z + p));  // lb sigma(A (z + dt_bias))
  else return -expf(z);                                                         // RWKV: -exp(z)
}

struct GateGrad {
  float dz = 0, dparam = 0, da_log = 0;
};

template <GateKind kind>
__device__ GateGrad gate_grad(float dg, float z, float A, float p, float c) {
  GateGrad r;
  if constexpr (kind == GateKind::GLA) {  // g = logsigmoid(z) / norm  =>  dz = dg (1 - sigma(z)) / norm
    r.dz = dg * sigmoid_of(-z) / c;
  } else if constexpr (kind == GateKind::HGRN) {
    // g = log(lam), lam = lb + (1 - lb) s  =>  dz = dg share (1 - s), dlb = dg (1 - s) / lam
    const float one_minus_s = sigmoid_of(-z), g = hgrn_of(z, p);
    const float share = expf(hgrn_data_term(z, p) - g);  // (1 - lb) s / lam, the data term's share
    r.dz = dg * share * one_minus_s;
    r.dparam = dg * one_minus_s * expf(-g);
  } else if constexpr (kind == GateKind::SSM) {
    // g = -A softplus(u), u = z + dt_bias  =>  du = -dg A softplus'(u), dA_log = dg g
    r.dz = -dg * A * softplus_grad(z + p);
    r.dparam = r.dz;
    r.da_log = dg * (-A * softplus_of(z + p));
  } else if constexpr (kind == GateKind::LowerBound) {
    // g = lb s, s = sigma(u), u = A (z + dt_bias)  =>  du = dg lb s (1 - s)
    const float u = A * (z + p), s = sigmoid_of(u), du = dg * c * s * (1.0f - s);
    r.dz = du * A;  // dz = du A, ddt_bias = sum dz
    r.dparam = r.dz;
    r.da_log = du * u;  // dA/dA_log = A  =>  dA_log = sum du (z + dt_bias) A = sum du u
  } else {  // g = -exp(z)  =>  dz = dg g
    r.dz = -dg * expf(z);
  }
  return r;
}

// g, z: (n) = (N, F)
template <GateKind kind, class T>
__global__ void gate_forward_kernel(T* g, const T* z, GateParams<T> prm, int64_t n) {
  HLA_GRID_STRIDE(i, n) {
    const int64_t f = i % prm.F;
    g[i] = from_float<T>(gate_value<kind>(to_float(z[i]), prm.A(f), prm.p(f), prm.constant));
  }
}

// dz only: dz, dg, z: (n) = (N, F)
template <GateKind kind, class T>
__global__ void gate_backward_kernel(T* dz, const T* dg, const T* z, GateParams<T> prm, int64_t n) {
  HLA_GRID_STRIDE(i, n) {
    const int64_t f = i % prm.F;
    dz[i] = from_float<T>(gate_grad<kind>(to_float(dg[i]), to_float(z[i]), prm.A(f), prm.p(f), prm.constant).dz);
  }
}

// dz for the rows of one chunk, and the chunk's partial sums partial_param, partial_alog:
// (chunks, F) (either may be null). grid (chunks, ceil(F / kColumnThreads)), one thread per channel.
template <GateKind kind, class T>
__global__ void gate_backward_partial_kernel(T* dz, float* partial_param, float* partial_alog, const T* dg,
                                             const T* z, GateParams<T> prm, int64_t N, int64_t per_chunk) {
  const int64_t f = blockIdx.y * (int64_t)blockDim.x + threadIdx.x;
  if (f >= prm.F) return;
  const float A = prm.A(f), p = prm.p(f);
  const int64_t r0 = blockIdx.x * per_chunk, r1 = std::min(N, r0 + per_chunk);
  float sum_param = 0, sum_alog = 0;
  for (int64_t r = r0; r < r1; r++) {
    const int64_t i = r * prm.F + f;
    const GateGrad gr = gate_grad<kind>(to_float(dg[i]), to_float(z[i]), A, p, prm.constant);
    dz[i] = from_float<T>(gr.dz);
    sum_param += gr.dparam;
    sum_alog += gr.da_log;
  }
  if (partial_param) partial_param[blockIdx.x * prm.F + f] = sum_param;
  if (partial_alog) partial_alog[blockIdx.x * prm.F + f] = sum_alog;
}

// Calls fn(std::integral_constant<GateKind, kind>{}) so kernels are instantiated per kind.
template <class Fn>
void dispatch_kind(GateKind kind, Fn&& fn) {
  switch (kind) {
    case GateKind::GLA: fn(std::integral_constant<GateKind, GateKind::GLA>{}); break;
    case GateKind::HGRN: fn(std::integral_constant<GateKind, GateKind::HGRN>{}); break;
    case GateKind::SSM: fn(std::integral_constant<GateKind, GateKind::SSM>{}); break;
    case GateKind::LowerBound: fn(std::integral_constant<GateKind, GateKind::LowerBound>{}); break;
    case GateKind::RWKV: fn(std::integral_constant<GateKind, GateKind::RWKV>{}); break;
  }
}

}  // namespace

void gate_forward(void* g, const void* z, const void* a_log, const void* param, const GateDims& d, DType dtype) {
  const int64_t N = d.N, F = d.F, H = d.H, n = N * F;
  if (n == 0) return;
  dispatch_storage(dtype, "gate_forward", [&](auto tag) {
    using T = decltype(tag);
    const GateParams<T> prm{static_cast<const T*>(a_log), static_cast<const T*>(param), F, F / H,
                            static_cast<float>(d.constant)};
    dispatch_kind(d.kind, [&](auto k) {
      gate_forward_kernel<decltype(k)::value, T>
          <<<grid_1d(n), kThreads>>>(static_cast<T*>(g), static_cast<const T*>(z), prm, n);
    });
  });
  CUDA_CHECK_LAUNCH();
}

void gate_backward(void* dz, void* da_log, void* dparam, const void* dg, const void* z, const void* a_log,
                   const void* param, const GateDims& d, DType dtype) {
  const int64_t N = d.N, F = d.F, H = d.H, n = N * F;
  if (n == 0) {  // nothing to sum: da_log = dparam = 0
    write_zeros(da_log, H, dtype);
    write_zeros(dparam, F, dtype);
    return;
  }
  const bool reduce = dparam || da_log;
  const RowChunks chunks = split_rows(N);
  FloatScratch partial_param(dparam ? chunks.count * F : 0);  // partial_param: (chunks, F)
  FloatScratch partial_alog(da_log ? chunks.count * F : 0);   // partial_alog: (chunks, F)
  dispatch_storage(dtype, "gate_backward", [&](auto tag) {
    using T = decltype(tag);
    const GateParams<T> prm{static_cast<const T*>(a_log), static_cast<const T*>(param), F, F / H,
                            static_cast<float>(d.constant)};
    T* dzt = static_cast<T*>(dz);
    const T *dgt = static_cast<const T*>(dg), *zt = static_cast<const T*>(z);
    dispatch_kind(d.kind, [&](auto k) {
      constexpr GateKind K = decltype(k)::value;
      if (!reduce) {
        gate_backward_kernel<K, T><<<grid_1d(n), kThreads>>>(dzt, dgt, zt, prm, n);
        return;
      }
      const dim3 grid(chunks.count, static_cast<unsigned>((F + kColumnThreads - 1) / kColumnThreads));
      gate_backward_partial_kernel<K, T><<<grid, kColumnThreads>>>(dzt, dparam ? partial_param.get() : nullptr,
                                                                   da_log ? partial_alog.get() : nullptr, dgt, zt,
                                                                   prm, N, chunks.per_chunk);
    });
    CUDA_CHECK_LAUNCH();
    if (dparam) write_column_sums(static_cast<T*>(dparam), partial_param.get(), chunks.count, F);
    if (da_log) write_group_sums(static_cast<T*>(da_log), partial_alog.get(), chunks.count, H, F / H);
  });
}

}  // namespace hla::cuda
